"""Tests for the Philly trace source: the real file, the fill-in rules, windows, determinism, errors."""

from __future__ import annotations

import collections
import csv
import datetime as dt
import math
import pathlib
import pickle
import tomllib

import msgspec
import pytest

from simulator.sources import SourceOutput
from simulator.sources.philly import (
    HIGH,
    LOW,
    NORMAL,
    Config,
    PhillyTraceError,
    load,
    mean_busy_gpus,
    shape,
)
from simulator.spec import WorkloadSpec

REPO = pathlib.Path(__file__).resolve().parent.parent
SCENARIO = REPO / "scenarios" / "philly.toml"
TRACE = (REPO / "scenarios" / "../../shared/traces/philly.csv").resolve()
REAL_ROWS = 82_247

needs_trace = pytest.mark.skipif(not TRACE.exists(), reason=f"{TRACE} not present")

HEADER = "timestamp,duration,num_gpus,gpu_time,cluster\n"

# Hand-written rows: (comment) what each one must become.
TINY = HEADER + "\n".join([
    "2017-10-01 00:00:00,600.0,1,600.0,aaa",         # 0: debug, min 600
    "2017-10-01 00:00:10,100.0,8,800.0,aaa",         # 1: debug on a full host, min 100
    "2017-10-01 00:00:20,0.0,1,0.0,bbb",             # 2: zero duration -> 1 s, debug, min 1
    "2017-10-01 00:01:00,901.0,8,7208.0,bbb",        # 3: just over debug: training/eval, min 900
    "2017-10-01 00:02:00,100.0,12,1200.0,aaa",       # 4: gang 2 x 6, min floor 900
    "2017-10-01 00:03:00,400000.0,24,9600000.0,bbb", # 5: gang 3 x 8, min capped at 8 h
    "2017-10-01 00:04:00,7200.0,16,115200.0,aaa",    # 6: gang 2 x 8, min 7200/4
    "2017-10-01 00:05:00,900.0,9,8100.0,aaa",        # 7: 9 GPUs -> gang 2 x 5 = 10
    "2017-10-01 00:06:00,900.0,4,3600.0,bbb",        # 8: debug boundary is inclusive
    "2017-10-01 00:07:00,40000.0,2,80000.0,bbb",     # 9: long single-host: training/eval
]) + "\n"


def _write(tmp_path: pathlib.Path, text: str, name: str = "trace.csv") -> pathlib.Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _load_tiny(tmp_path: pathlib.Path, seed: int = 1, **knobs: object) -> dict[str, WorkloadSpec]:
    _write(tmp_path, TINY)
    out = load(Config(path="trace.csv", **knobs), seed=seed, base_dir=tmp_path)  # type: ignore[arg-type]
    return {w.workload: w for w in out.workloads}


@pytest.fixture(scope="module")
def real() -> SourceOutput:
    return load(Config(path=str(TRACE)), seed=1, base_dir=REPO)


@pytest.fixture(scope="module")
def raw_rows() -> list[dict[str, str]]:
    with TRACE.open(newline="") as handle:
        return list(csv.DictReader(handle))


# ---------------------------------------------------------------- the real trace


@needs_trace
def test_real_file_loads_all_jobs_with_unique_sorted_ids() -> None:
    """The whole trace loads every row once, with unique ids and sorted non-negative submits.

    (How fast it loads is a benchmark's question, not a test's: the Philly runs of
    benchmarks/bench_native.py include the load. A timed assertion here failed on
    a busy 2-core machine, 5.3 s against 2 s, without anything being wrong.)
    """
    out = load(Config(path="../../shared/traces/philly.csv"), seed=1, base_dir=REPO / "scenarios")
    assert len(out.workloads) == REAL_ROWS
    ids = [w.workload for w in out.workloads]
    assert len(set(ids)) == REAL_ROWS
    keys = [(w.submit_at, w.workload) for w in out.workloads]
    assert keys == sorted(keys)
    assert out.workloads[0].submit_at == 0
    assert all(w.submit_at >= 0 for w in out.workloads)


@needs_trace
def test_real_budget_tree_covers_every_leaf_with_positive_shares(real: SourceOutput) -> None:
    """All 15 VCs get a team node with shares > 0 and one leaf, and every workload's budget is one of them."""
    paths = {n.path for n in real.nodes}
    teams = [n for n in real.nodes if n.path.count("/") == 1]
    assert len(teams) == 15
    assert all(n.shares > 0 for n in real.nodes)
    assert {w.budget for w in real.workloads} <= paths
    assert all(f"{n.path}/jobs" in paths for n in teams)
    # Parents come before their children, so nodes can be defined in order.
    seen: set[str] = {"philly"}
    for node in real.nodes:
        assert node.path.rsplit("/", 1)[0] in seen
        seen.add(node.path)


@needs_trace
def test_real_gpu_totals_preserved(real: SourceOutput, raw_rows: list[dict[str, str]]) -> None:
    """GPUs per job follow the rounding rule (a no-op on this trace) and GPU-seconds equal the gpu_time column."""
    by_id = {w.workload: w for w in real.workloads}
    for row, raw in enumerate(raw_rows):
        w = by_id[f"philly-{row:06d}"]
        hosts, per_host = shape(int(raw["num_gpus"]))
        assert (w.hosts, w.gpus) == (hosts, hosts * per_host)
        assert w.gpus % w.hosts == 0
    assert sum(w.gpus for w in real.workloads) == sum(int(r["num_gpus"]) for r in raw_rows)
    gpu_seconds = sum(w.gpus * w.duration_s for w in real.workloads)
    assert gpu_seconds == round(sum(float(r["gpu_time"]) for r in raw_rows))
    assert round(gpu_seconds / 3600) == 978_078  # the README's figure


@needs_trace
def test_real_fill_in_mix_matches_the_configured_rates(real: SourceOutput) -> None:
    """Priorities come out near 70/20/10 and ~20% of single-host non-debug jobs are unallocated eval."""
    n = len(real.workloads)
    prio = collections.Counter(w.priority for w in real.workloads)
    assert abs(prio[HIGH] / n - 0.7) < 0.01
    assert abs(prio[NORMAL] / n - 0.2) < 0.01
    assert abs(prio[LOW] / n - 0.1) < 0.01
    single = [w for w in real.workloads if w.hosts == 1 and w.kind != "debug"]
    evals = sum(w.kind == "eval" for w in single)
    assert abs(evals / len(single) - 0.2) < 0.01
    # 37,748 jobs ran <= 15 min on <= 8 GPUs (measured independently on the file).
    assert sum(w.kind == "debug" for w in real.workloads) == 37_748
    assert all(w.min_runtime_s <= 8 * 3600 for w in real.workloads)


@needs_trace
def test_scenario_capacity_is_demand_over_two_and_a_half() -> None:
    """scenarios/philly.toml's hosts equal the loaded demand / 2.5 in whole 8-GPU hosts (>= 16), and its horizon covers the window."""
    scenario = tomllib.loads(SCENARIO.read_text())
    (source,) = scenario["sources"]
    config = msgspec.convert(source, Config)
    out = load(config, seed=scenario["seed"], base_dir=SCENARIO.parent)
    cluster = scenario["cluster"]
    demand = mean_busy_gpus(out.workloads)
    expected = max(16, round(demand / 2.5 / cluster["gpus_per_host"]))
    assert cluster["hosts"] == expected
    assert max(w.hosts for w in out.workloads) <= cluster["hosts"]
    assert scenario["policy"]["team_depth"] == 1
    span = max(w.submit_at + w.duration_s for w in out.workloads)
    assert scenario["horizon_days"] * 86_400 >= span


# ---------------------------------------------------------------- fill-in rules


def test_debug_jobs_are_short_small_and_not_resumable(tmp_path: pathlib.Path) -> None:
    """Jobs of <= 15 min on <= 8 GPUs are debug with min runtime min(duration, 600 s), boundary included."""
    w = _load_tiny(tmp_path)
    for wid, min_runtime in [("philly-000000", 600), ("philly-000001", 100),
                             ("philly-000002", 1), ("philly-000008", 600)]:
        assert w[wid].kind == "debug", wid
        assert w[wid].min_runtime_s == min_runtime, wid
        assert w[wid].resumable is False
        assert w[wid].hosts == 1


def test_zero_duration_becomes_one_second(tmp_path: pathlib.Path) -> None:
    """A 0-second job runs for 1 s so the executor has something to finish."""
    assert _load_tiny(tmp_path)["philly-000002"].duration_s == 1


def test_gangs_are_resumable_training_with_rounded_shapes(tmp_path: pathlib.Path) -> None:
    """Jobs over 8 GPUs are resumable training gangs shaped 12->2x6, 24->3x8, 16->2x8, 9->2x5, with clamped min runtimes."""
    w = _load_tiny(tmp_path, unallocated_fraction=1.0)  # gangs ignore the eval draw
    expected = {
        "philly-000004": (12, 2, 900),        # 100 s / 4 -> floor of 15 min
        "philly-000005": (24, 3, 8 * 3600),   # 400,000 s / 4 -> capped at 8 h
        "philly-000006": (16, 2, 1800),       # 7,200 s / 4
        "philly-000007": (10, 2, 900),        # 9 GPUs rounded up; 900 s is not debug at 9 GPUs
    }
    for wid, (gpus, hosts, min_runtime) in expected.items():
        assert (w[wid].gpus, w[wid].hosts, w[wid].min_runtime_s) == (gpus, hosts, min_runtime), wid
        assert w[wid].kind == "training" and w[wid].resumable is True, wid


def test_shape_rule() -> None:
    """Up to a host's worth stays single-host; larger requests spread evenly over ceil(gpus/8) hosts, rounded up."""
    assert [shape(g) for g in (1, 2, 4, 8)] == [(1, 1), (1, 2), (1, 4), (1, 8)]
    assert shape(12) == (2, 6)
    assert shape(24) == (3, 8)
    assert shape(20) == (3, 7)
    assert shape(128) == (16, 8)
    assert shape(12, gpus_per_host=4) == (3, 4)


def test_unallocated_fraction_splits_the_rest_into_eval_and_training(tmp_path: pathlib.Path) -> None:
    """With fraction 1 the non-debug single-host jobs are unallocated eval (min 0, resumable); with 0 they are training."""
    w = _load_tiny(tmp_path, unallocated_fraction=1.0)
    for wid in ("philly-000003", "philly-000009"):
        assert (w[wid].kind, w[wid].min_runtime_s, w[wid].resumable) == ("eval", 0, True)
    w = _load_tiny(tmp_path, unallocated_fraction=0.0, training_resumable_fraction=0.0)
    assert (w["philly-000003"].kind, w["philly-000003"].min_runtime_s) == ("training", 900)
    assert (w["philly-000009"].kind, w["philly-000009"].min_runtime_s) == ("training", 10_000)
    assert not w["philly-000003"].resumable and not w["philly-000009"].resumable
    w = _load_tiny(tmp_path, unallocated_fraction=0.0, training_resumable_fraction=1.0)
    assert w["philly-000003"].resumable and w["philly-000009"].resumable


def test_min_runtime_cap_is_configurable(tmp_path: pathlib.Path) -> None:
    """A lower policy cap bounds every minimum runtime, debug ones included."""
    w = _load_tiny(tmp_path, min_runtime_cap_s=300, unallocated_fraction=0.0)
    assert max(x.min_runtime_s for x in w.values()) == 300
    assert w["philly-000001"].min_runtime_s == 100


def test_priority_weights_are_honoured(tmp_path: pathlib.Path) -> None:
    """All-HIGH and all-LOW weights give every job that priority."""
    assert {x.priority for x in _load_tiny(tmp_path, priority_weights=(1.0, 0.0, 0.0)).values()} == {HIGH}
    assert {x.priority for x in _load_tiny(tmp_path, priority_weights=(0.0, 0.0, 2.0)).values()} == {LOW}


def test_team_shares_follow_window_gpu_hours_or_are_equal(tmp_path: pathlib.Path) -> None:
    """'demand' shares are each VC's GPU-hours (rounded up) in the window; 'equal' gives 1 each; users and leaves per VC."""
    _write(tmp_path, TINY)
    out = load(Config(path="trace.csv"), seed=1, base_dir=tmp_path)
    gpu_s = collections.Counter()
    for w in out.workloads:
        gpu_s[w.budget.split("/")[1]] += w.gpus * w.duration_s
        assert w.user == f"{w.budget.split('/')[1]}-user"
    shares = {n.path: n.shares for n in out.nodes}
    assert shares == {
        "philly/aaa": math.ceil(gpu_s["aaa"] / 3600), "philly/aaa/jobs": 1,
        "philly/bbb": math.ceil(gpu_s["bbb"] / 3600), "philly/bbb/jobs": 1,
    }
    equal = load(Config(path="trace.csv", team_shares="equal", root="lab"), seed=1, base_dir=tmp_path)
    assert {n.path: n.shares for n in equal.nodes} == {
        "lab/aaa": 1, "lab/aaa/jobs": 1, "lab/bbb": 1, "lab/bbb/jobs": 1}
    assert {w.budget for w in equal.workloads} == {"lab/aaa/jobs", "lab/bbb/jobs"}


# ---------------------------------------------------------------- determinism


def test_same_seed_gives_identical_bytes(tmp_path: pathlib.Path) -> None:
    """Two loads with the same seed encode to the same bytes."""
    _write(tmp_path, TINY)
    a = load(Config(path="trace.csv"), seed=7, base_dir=tmp_path)
    b = load(Config(path="trace.csv"), seed=7, base_dir=tmp_path)
    assert msgspec.json.encode(a) == msgspec.json.encode(b)


@needs_trace
def test_same_seed_identical_and_other_seed_differs_on_real_file(real: SourceOutput) -> None:
    """The real file reloads to identical bytes with seed 1, while seed 2 draws different priorities."""
    again = load(Config(path=str(TRACE)), seed=1, base_dir=REPO)
    assert msgspec.json.encode(again) == msgspec.json.encode(real)
    other = load(Config(path=str(TRACE)), seed=2, base_dir=REPO)
    assert [w.priority for w in other.workloads] != [w.priority for w in real.workloads]
    # Only the draws change: arrivals and sizes are the trace's.
    assert [(w.workload, w.submit_at, w.gpus) for w in other.workloads] == [
        (w.workload, w.submit_at, w.gpus) for w in real.workloads]


# ---------------------------------------------------------------- windows


@needs_trace
def test_start_and_days_window(real: SourceOutput, raw_rows: list[dict[str, str]]) -> None:
    """start/days keep exactly the rows submitted in [start, start + days), timed from start, with unchanged fill-ins."""
    out = load(Config(path=str(TRACE), start="2017-10-01", days=7), seed=1, base_dir=REPO)
    lo, hi = dt.datetime(2017, 10, 1), dt.datetime(2017, 10, 8)
    expected = sum(lo <= dt.datetime.fromisoformat(r["timestamp"]) < hi for r in raw_rows)
    assert len(out.workloads) == expected > 0
    assert all(0 <= w.submit_at < 7 * 86_400 for w in out.workloads)
    by_id = {w.workload: w for w in real.workloads}
    offset = int((lo - dt.datetime(2017, 9, 4, 10, 30, 41)).total_seconds())
    for w in out.workloads:
        full = by_id[w.workload]
        assert msgspec.structs.replace(full, submit_at=full.submit_at - offset) == w
    # Shares follow the window's demand, so they differ from the whole trace's.
    assert {n.path: n.shares for n in out.nodes} != {n.path: n.shares for n in real.nodes}


@needs_trace
def test_days_without_start_counts_from_trace_start(raw_rows: list[dict[str, str]]) -> None:
    """days alone keeps the first days of the trace, timed from its first submission."""
    out = load(Config(path=str(TRACE), days=1.5), seed=1, base_dir=REPO)
    first = min(dt.datetime.fromisoformat(r["timestamp"]) for r in raw_rows)
    hi = first + dt.timedelta(days=1.5)
    assert len(out.workloads) == sum(dt.datetime.fromisoformat(r["timestamp"]) < hi for r in raw_rows)
    assert out.workloads[0].submit_at == 0


@needs_trace
def test_max_jobs_keeps_the_earliest(real: SourceOutput) -> None:
    """max_jobs keeps the first N submissions, and only their VCs get budget nodes."""
    out = load(Config(path=str(TRACE), max_jobs=100), seed=1, base_dir=REPO)
    assert out.workloads == real.workloads[:100]
    assert {n.path for n in out.nodes if n.path.endswith("/jobs")} == {w.budget for w in out.workloads}


def test_window_after_the_trace_is_empty(tmp_path: pathlib.Path) -> None:
    """A window past the last submission yields no workloads and no budget nodes."""
    _write(tmp_path, TINY)
    out = load(Config(path="trace.csv", start="2018-01-01", days=1), seed=1, base_dir=tmp_path)
    assert out.workloads == [] and out.nodes == []


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("row", "column", "message"),
    [
        ("2017-10-01 00:00:00,60.0,two,120.0,aaa", "num_gpus", "invalid literal"),
        ("2017-10-01 00:00:00,60.0,0,0.0,aaa", "num_gpus", "must be >= 1"),
        ("2017-13-01 00:00:00,60.0,1,60.0,aaa", "timestamp", "month"),
        ("2017-10-01 00:00:00,-5,1,-5,aaa", "duration", "finite number >= 0"),
        ("2017-10-01 00:00:00,nan,1,60.0,aaa", "duration", "finite number >= 0"),
        ("2017-10-01 00:00:00,60.0,1,60.0,a/b", "cluster", "budget path segment"),
        ("2017-10-01 00:00:00,60.0,2,60.0,aaa", "gpu_time", "duration x num_gpus"),
        ("2017-10-01 00:00:00,60.0,1", "gpu_time", "expected 5 fields, got 3"),
    ],
)
def test_malformed_row_names_line_and_column(
    tmp_path: pathlib.Path, row: str, column: str, message: str
) -> None:
    """A bad field raises PhillyTraceError naming the file, line, data row and column."""
    path = _write(tmp_path, HEADER + "2017-10-01 00:00:00,60.0,1,60.0,aaa\n" + row + "\n")
    with pytest.raises(PhillyTraceError) as info:
        load(Config(path="trace.csv"), seed=1, base_dir=tmp_path)
    err = info.value
    assert (err.path, err.line, err.column) == (path, 3, column)
    text = str(err)
    assert f"{path}:3: column {column!r}: row 1:" in text
    assert message in text


def test_missing_header_column_is_reported(tmp_path: pathlib.Path) -> None:
    """A header without a required column names that column on line 1."""
    _write(tmp_path, "timestamp,duration,gpu_time,cluster\n2017-10-01 00:00:00,60.0,60.0,aaa\n")
    with pytest.raises(PhillyTraceError, match=r":1: column 'num_gpus': missing column"):
        load(Config(path="trace.csv"), seed=1, base_dir=tmp_path)


def test_missing_file_is_reported(tmp_path: pathlib.Path) -> None:
    """A missing trace raises PhillyTraceError with the resolved path, not a bare OSError."""
    with pytest.raises(PhillyTraceError, match="trace file not found") as info:
        load(Config(path="nope/philly.csv"), seed=1, base_dir=tmp_path)
    assert info.value.path == tmp_path / "nope" / "philly.csv"
    assert str(tmp_path / "nope" / "philly.csv") in str(info.value)


def test_trace_errors_survive_a_process_boundary(tmp_path: pathlib.Path) -> None:
    """A worker process can report the error itself: it pickles with its path, line and column."""
    err = PhillyTraceError("bad number", path=tmp_path / "t.csv", line=7, column="num_gpus")
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is PhillyTraceError
    assert (str(back), back.path, back.line, back.column) == (str(err), err.path, 7, "num_gpus")


def test_bad_knobs_are_rejected_on_decode_and_in_load(tmp_path: pathlib.Path) -> None:
    """Out-of-range knobs fail when decoding a scenario table and when a Config built in code is loaded."""
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"type": "philly", "path": "x.csv", "unallocated_fraction": 1.5}, Config)
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"type": "other", "path": "x.csv"}, Config)
    _write(tmp_path, TINY)
    with pytest.raises(ValueError, match="unallocated_fraction"):
        load(Config(path="trace.csv", unallocated_fraction=1.5), seed=1, base_dir=tmp_path)
    with pytest.raises(ValueError, match="start"):
        load(Config(path="trace.csv", start="October"), seed=1, base_dir=tmp_path)


def test_mean_busy_gpus_over_default_and_given_span(tmp_path: pathlib.Path) -> None:
    """Demand is GPU-seconds over first-submit-to-last-end by default, or over the span given."""
    w = list(_load_tiny(tmp_path).values())
    gpu_seconds = sum(x.gpus * x.duration_s for x in w)
    span = max(x.submit_at + x.duration_s for x in w) - min(x.submit_at for x in w)
    assert mean_busy_gpus(w) == pytest.approx(gpu_seconds / span)
    assert mean_busy_gpus(w, span_s=86_400) == pytest.approx(gpu_seconds / 86_400)
    assert mean_busy_gpus([]) == 0.0
