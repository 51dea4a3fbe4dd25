"""Tests for the audit plots (audit.plots) and the self-contained HTML report (audit.html_report).

The pure helpers are tested exactly; the drawing functions are tested on a
small hand-made database that follows the audit views' contract (tables named
like the views), and, when the real loader and views exist, on a log the
engine produced.
"""

from __future__ import annotations

import random
import re
import struct
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from audit import html_report, plots, summary
from audit.plots import (
    BarSegments,
    OvercommittedHostError,
    SlotSpan,
    UnknownManagerError,
    UnknownRunError,
    assign_gpu_indices,
    contiguous_blocks,
    format_duration,
    host_down_intervals,
    managed_nodes,
    split_interruptible,
    team_colours,
    trailing_shares,
    wait_cdf,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
H = 3600


# -- fixture: the views' contract as plain tables -----------------------------------------


def _contract_db() -> duckdb.DuckDBPyConnection:
    """Two runs of a two-host, two-team scenario, as tables shaped like the audit views."""
    con = duckdb.connect()
    con.execute("""CREATE TABLE events (run VARCHAR, seq BIGINT, type VARCHAR, "at" BIGINT,
                   path VARCHAR, managers VARCHAR[], host VARCHAR, gpus BIGINT)""")
    for run in ("allot", "baseline"):
        rows = [
            ("policy.configured", 0, None, None, None, None),
            ("budget.node_defined", 0, "lab", ["admin"], None, None),
            ("budget.node_defined", 0, "lab/a", ["lead-a"], None, None),
            ("budget.node_defined", 0, "lab/b", [], None, None),
            ("host.added", 0, None, None, "h0", 8),
            ("host.added", 0, None, None, "h1", 8),
            ("host.faulted", 2 * H, None, None, "h1", None),
            ("host.repaired", 2 * H + 1800, None, None, "h1", None),
            ("clock.ticked", 3 * H, None, None, None, None),
        ]
        for seq, (typ, at, path, managers, host, gpus) in enumerate(rows, 1):
            con.execute("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        [run, seq, typ, at, path, managers, host, gpus])
    con.execute("""CREATE TABLE run_slots (run VARCHAR, workload VARCHAR, host VARCHAR,
                   gpus BIGINT, start_at BIGINT, stop_at BIGINT, allocated BOOLEAN, team VARCHAR,
                   budget VARCHAR, protected_until BIGINT, stop_reason VARCHAR)""")
    slots = [
        ("allot", "free", "h0", 8, 0, 60, False, "lab/b", "lab/b", 0, "preempted"),
        ("allot", "dbg", "h0", 2, 60, 700, True, "lab/a", "lab/a", 660, "succeeded"),
        ("allot", "train", "h1", 8, 0, 2 * H, True, "lab/a", "lab/a", H, "succeeded"),
        ("allot", "eval", "h0", 4, 800, 3 * H, False, "lab/b", "lab/b", 800, "open"),
        ("baseline", "free", "h0", 8, 0, 2 * H, False, "lab/b", "lab/b", 0, "succeeded"),
        ("baseline", "dbg", "h1", 2, 60, 700, True, "lab/a", "lab/a", None, "succeeded"),
    ]
    con.executemany("INSERT INTO run_slots VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", slots)
    con.execute("""CREATE TABLE runs AS SELECT run, workload, budget, team, 'x' AS kind, gpus,
                   allocated, protected_until, start_at, stop_at, stop_reason,
                   NULL AS preempt_reason, FALSE AS requeued,
                   [{'host': host, 'gpus': gpus}] AS placement FROM run_slots""")
    con.execute("""CREATE TABLE policy (run VARCHAR, team_depth BIGINT, window_s BIGINT)""")
    con.execute("INSERT INTO policy VALUES ('allot', 1, 7200), ('baseline', 1, 7200)")
    con.execute("""CREATE TABLE gpu_hours_by_node_hour (run VARCHAR, node VARCHAR, hour BIGINT,
                   allocated_gpu_h DOUBLE, unallocated_gpu_h DOUBLE)""")
    con.execute("""CREATE TABLE entitlement_by_hour (run VARCHAR, node VARCHAR, hour BIGINT,
                   fraction DOUBLE)""")
    con.execute("""CREATE TABLE capacity_by_hour (run VARCHAR, hour BIGINT, total_gpus BIGINT,
                   unavailable_gpu_h DOUBLE, allocated_gpu_h DOUBLE, unallocated_gpu_h DOUBLE,
                   idle_gpu_h DOUBLE)""")
    for run in ("allot", "baseline"):
        for i, hour in enumerate((0, H, 2 * H)):
            a, b = (9.0 - i, 4.0) if run == "allot" else (0.5, 8.0 - 2 * i)
            unavailable = 4.0 if i == 2 else 0.0
            con.execute("INSERT INTO capacity_by_hour VALUES (?, ?, 16, ?, ?, ?, ?)",
                        [run, hour, unavailable, a, b, 16 - a - b - unavailable])
            for node, share, alloc in (("lab", 1.0, a), ("lab/a", 0.7, a), ("lab/b", 0.3, 0.0)):
                con.execute("INSERT INTO gpu_hours_by_node_hour VALUES (?, ?, ?, ?, ?)",
                            [run, node, hour, alloc, b if node != "lab/a" else 0.0])
                con.execute("INSERT INTO entitlement_by_hour VALUES (?, ?, ?, ?)",
                            [run, node, hour, share])
    con.execute("""CREATE TABLE waits (run VARCHAR, workload VARCHAR, kind VARCHAR, gpus BIGINT,
                   hosts BIGINT, first_wait_s BIGINT, funded BOOLEAN)""")
    con.executemany("INSERT INTO waits VALUES (?, ?, ?, ?, 1, ?, ?)", [(*w, w[2] != "eval") for w in [
        ("allot", "free", "eval", 8, 0), ("allot", "dbg", "debug", 2, 0),
        ("allot", "train", "training", 8, 0), ("allot", "eval", "eval", 4, 800),
        ("allot", "late", "debug", 1, None),
        ("baseline", "free", "eval", 8, 0), ("baseline", "dbg", "debug", 2, 5),
        ("baseline", "train", "training", 8, None),
    ]])  # eval work is unallocated (not funded) in this scenario
    con.execute("""CREATE TABLE owed_received_by_team (run VARCHAR, team VARCHAR, ratio DOUBLE,
                   owed_gpu_h DOUBLE, received_gpu_h DOUBLE, received_capped DOUBLE)""")
    con.executemany("INSERT INTO owed_received_by_team VALUES (?, ?, ?, ?, ?, ?)", [
        ("allot", "lab/a", 1.0, 24.0, 30.0, 24.0), ("allot", "lab/b", 0.5, 2.0, 1.0, 1.0),
        ("baseline", "lab/a", 0.9, 2.0, 1.8, 1.8),
    ])
    return con


@pytest.fixture
def con() -> Iterator[duckdb.DuckDBPyConnection]:
    """A fresh contract-shaped database per test."""
    c = _contract_db()
    yield c
    c.close()


def _png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk (which must come first)."""
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


# -- GPU index assignment -----------------------------------------------------------------


def _random_slots(rng: random.Random, hosts: dict[str, int], n: int) -> list[SlotSpan]:
    """Slots that never overcommit a host, built by simulating a greedy placer."""
    slots: list[SlotSpan] = []
    busy: dict[str, list[tuple[int, int]]] = {h: [] for h in hosts}  # (stop, gpus)
    t = 0
    for i in range(n):
        t += rng.randint(0, 50)
        host = rng.choice(sorted(hosts))
        used = sum(g for stop, g in busy[host] if stop > t)
        free = hosts[host] - used
        if free == 0:
            continue
        g = rng.randint(1, free)
        stop = t + rng.randint(0, 400)
        busy[host].append((stop, g))
        slots.append(SlotSpan(f"w{i}", host, g, t, stop))
    return slots


def test_gpu_indices_never_overlap_and_stay_below_host_size() -> None:
    """Overlapping slots on one host never share a GPU index and indices are < the host's GPUs."""
    rng = random.Random(7)
    hosts = {"h0": 8, "h1": 8, "h2": 4}
    slots = _random_slots(rng, hosts, 600)
    assert len(slots) > 300
    indices = assign_gpu_indices(slots, hosts)
    for s, idx in zip(slots, indices, strict=True):
        assert len(idx) == s.gpus and len(set(idx)) == s.gpus
        assert all(0 <= g < hosts[s.host] for g in idx)
    for i, (a, ia) in enumerate(zip(slots, indices, strict=True)):
        for b, ib in zip(slots[i + 1:], indices[i + 1:], strict=True):
            if a.host == b.host and a.start < b.stop and b.start < a.stop:
                assert not set(ia) & set(ib), (a, b, ia, ib)


def test_gpu_indices_are_deterministic_whatever_the_input_order() -> None:
    """Shuffling the input gives every slot the same indices (the order is start, workload)."""
    rng = random.Random(11)
    hosts = {"h0": 8, "h1": 8}
    slots = _random_slots(rng, hosts, 300)
    first = dict(zip(slots, assign_gpu_indices(slots, hosts), strict=True))
    shuffled = slots[:]
    rng.shuffle(shuffled)
    second = dict(zip(shuffled, assign_gpu_indices(shuffled, hosts), strict=True))
    assert first == second


def test_gpu_indices_reuse_at_the_stop_second_and_prefer_contiguous_blocks() -> None:
    """A GPU freed at t is reused by a slot starting at t, and a multi-GPU slot gets a block."""
    slots = [
        SlotSpan("a", "h", 1, 0, 100),   # takes 0
        SlotSpan("b", "h", 2, 0, 50),    # takes 1, 2
        SlotSpan("c", "h", 1, 0, 100),   # takes 3
        SlotSpan("d", "h", 3, 50, 90),   # 1, 2 are free again but not 3 wide: 4, 5, 6
        SlotSpan("e", "h", 8, 100, 200),  # everything freed exactly at 100
    ]
    assert assign_gpu_indices(slots, {"h": 8}) == [
        (0,), (1, 2), (3,), (4, 5, 6), (0, 1, 2, 3, 4, 5, 6, 7)]


def test_gpu_indices_raise_on_an_overcommitted_host() -> None:
    """Slots that need more GPUs than the host has at once are an error, not a silent overlap."""
    slots = [SlotSpan("a", "h", 6, 0, 100), SlotSpan("b", "h", 4, 50, 150)]
    with pytest.raises(OvercommittedHostError, match="'h'"):
        assign_gpu_indices(slots, {"h": 8})


def test_contiguous_blocks_group_consecutive_indices() -> None:
    """Indices become (first, count) runs so a task draws as few rectangles as possible."""
    assert contiguous_blocks([5, 0, 1, 2, 7, 6]) == [(0, 3), (5, 3)]
    assert contiguous_blocks([]) == []


# -- interruptible segments ---------------------------------------------------------------


def test_allocated_run_splits_at_protected_until() -> None:
    """An allocated run is protected until protected_until and interruptible after it."""
    assert split_interruptible(100, 500, True, 300) == BarSegments((100, 300), (300, 500))


def test_unallocated_run_is_interruptible_throughout() -> None:
    """An unallocated run is interruptible over its whole bar, whatever protected_until says."""
    assert split_interruptible(100, 500, False, 100) == BarSegments(None, (100, 500))
    assert split_interruptible(100, 500, False, 400) == BarSegments(None, (100, 500))


def test_protection_edges() -> None:
    """No protection end (baseline opt-out) or one past the stop keeps the bar solid."""
    assert split_interruptible(100, 500, True, None) == BarSegments((100, 500), None)
    assert split_interruptible(100, 500, True, 900) == BarSegments((100, 500), None)
    assert split_interruptible(100, 500, True, 500) == BarSegments((100, 500), None)
    assert split_interruptible(100, 500, True, 100) == BarSegments(None, (100, 500))
    with pytest.raises(ValueError):
        split_interruptible(500, 100, True, 300)


# -- wait CDFs ----------------------------------------------------------------------------


def test_wait_cdf_points_are_exact_and_count_never_started() -> None:
    """The CDF steps at each distinct wait and never-started workloads stay in the denominator."""
    cdf = wait_cdf([10, 0, None, 100, 10])
    assert cdf.xs == (0.0, 10.0, 100.0)
    assert cdf.ys == (0.2, 0.6, 0.8)
    assert (cdf.started, cdf.never_started, cdf.total) == (4, 1, 5)


def test_wait_cdf_rejects_negative_waits() -> None:
    """A negative wait is a broken view, so it is refused rather than drawn."""
    with pytest.raises(ValueError, match="negative"):
        wait_cdf([5, -1])


def test_wait_cdf_of_nothing_is_empty() -> None:
    """No workloads give an empty curve and no quantile."""
    cdf = wait_cdf([])
    assert cdf.xs == () and cdf.ys == () and cdf.total == 0


# -- trailing-window shares ---------------------------------------------------------------


def test_trailing_shares_sum_over_the_window() -> None:
    """Each hour's share is the node's over the total summed across the trailing window."""
    node = [1.0, 1.0, 0.0, 0.0]
    total = [2.0, 2.0, 2.0, 0.0]
    assert trailing_shares(node, total, 2) == [0.5, 0.5, 0.25, 0.0]
    assert trailing_shares(node, total, 1) == [0.5, 0.5, 0.0, None]
    assert trailing_shares(node, total, 100) == [0.5, 0.5, 2 / 6, 2 / 6]


def test_trailing_shares_validate_inputs() -> None:
    """A zero-hour window or mismatched series are errors."""
    with pytest.raises(ValueError):
        trailing_shares([1.0], [1.0], 0)
    with pytest.raises(ValueError):
        trailing_shares([1.0], [1.0, 2.0], 1)


# -- other pure helpers -------------------------------------------------------------------


def test_host_down_intervals_pair_faults_with_repairs() -> None:
    """A fault opens an interval, a repair or removal closes it, and an open one ends at end."""
    changes = [("host.faulted", "h1", 10), ("host.faulted", "h1", 15),
               ("host.repaired", "h1", 20), ("host.faulted", "h2", 30),
               ("host.removed", "h2", 35), ("host.faulted", "h1", 40)]
    assert host_down_intervals(changes, 100) == {"h1": [(10, 20), (40, 100)], "h2": [(30, 35)]}


def test_team_colours_are_stable_and_distinct() -> None:
    """Colours depend only on the sorted set of teams, and no two teams share one."""
    a = team_colours(["b", "a", "c"])
    assert a == team_colours(["c", "a", "b", "a"])
    many = team_colours([f"t{i}" for i in range(30)])
    assert len(set(many.values())) == 30


def test_format_duration_is_human() -> None:
    """Seconds read as s, min, h and d with at most one decimal."""
    assert [format_duration(v) for v in (0, 45, 90, 3600, 5400, 86400 * 3, None)] == [
        "0 s", "45 s", "1.5 min", "1 h", "1.5 h", "3 d", "—"]


def test_managed_nodes_for_everyone_and_for_one_manager() -> None:
    """Without a manager every managed non-root node; with one, its nodes and their children."""
    managers = {"lab": ("admin",), "lab/a": ("lead-a",), "lab/a/x": (), "lab/a/y": (),
                "lab/b": ()}
    nodes, notes = managed_nodes(managers)
    assert nodes == ["lab/a"] and notes["lab/a"] == "managed by lead-a"
    assert managed_nodes(managers, "lead-a")[0] == ["lab/a", "lab/a/x", "lab/a/y"]
    assert managed_nodes(managers, "admin")[0] == ["lab/a", "lab/b"]
    with pytest.raises(UnknownManagerError, match="lead-a"):
        managed_nodes(managers, "nobody")


# -- drawing ------------------------------------------------------------------------------


def test_every_plot_writes_a_valid_png(con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    """Each plot function writes a real, non-trivial PNG at the path it returns."""
    written = [
        plots.gantt(con, "allot", tmp_path / "g.png"),
        plots.usage_vs_entitlement(con, "allot", tmp_path / "u.png"),
        plots.usage_vs_entitlement(con, "allot", tmp_path / "m.png", level="manager",
                                   manager="admin"),
        plots.wait_cdfs(con, ["allot", "baseline"], tmp_path / "w.png"),
        plots.occupancy(con, ["allot", "baseline"], tmp_path / "o.png"),
    ]
    for path in written:
        assert path.exists() and path.stat().st_size > 10_000, path
        width, height = _png_size(path)
        assert width >= 600 and height >= 300, (path, width, height)


def test_plots_are_byte_for_byte_deterministic(con: duckdb.DuckDBPyConnection,
                                               tmp_path: Path) -> None:
    """Drawing the same data twice gives the same bytes."""
    a = plots.gantt(con, "allot", tmp_path / "a.png").read_bytes()
    b = plots.gantt(con, "allot", tmp_path / "b.png").read_bytes()
    assert a == b
    a = plots.wait_cdfs(con, ["allot", "baseline"], tmp_path / "c.png").read_bytes()
    b = plots.wait_cdfs(con, ["allot", "baseline"], tmp_path / "d.png").read_bytes()
    assert a == b


def test_gantt_row_cap_shrinks_the_picture(con: duckdb.DuckDBPyConnection,
                                           tmp_path: Path) -> None:
    """max_gpus keeps whole hosts up to the cap, so eight GPUs draw a shorter figure than 160."""
    for h in range(2, 20):  # enough idle hosts that the figure outgrows its minimum height
        con.execute("INSERT INTO events VALUES ('allot', 100 + ?, 'host.added', 0, NULL, NULL, "
                    "?, 8)", [h, f"h{h}"])
    _, full = _png_size(plots.gantt(con, "allot", tmp_path / "full.png"))
    _, capped = _png_size(plots.gantt(con, "allot", tmp_path / "cap.png", max_gpus=8))
    assert capped < full


def test_gantt_window_must_be_positive(con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    """A zero-length window is refused with a ValueError."""
    with pytest.raises(ValueError, match="hours"):
        plots.gantt(con, "allot", tmp_path / "g.png", hours=0)


def test_unknown_run_names_the_runs_that_exist(con: duckdb.DuckDBPyConnection,
                                               tmp_path: Path) -> None:
    """Asking for a run the database lacks fails with the list of runs it has."""
    with pytest.raises(UnknownRunError, match="'allot', 'baseline'"):
        plots.gantt(con, "alot", tmp_path / "g.png")
    with pytest.raises(UnknownRunError, match="runs in this database"):
        plots.wait_cdfs(con, ["allot", "nope"], tmp_path / "w.png")


def test_missing_view_is_a_clear_error(tmp_path: Path) -> None:
    """A database without the audit views fails with MissingViewError, not a bare DuckDB error."""
    bare = duckdb.connect()
    bare.execute('CREATE TABLE events (run VARCHAR, type VARCHAR, "at" BIGINT)')
    bare.execute("INSERT INTO events VALUES ('allot', 'clock.ticked', 0)")
    with pytest.raises(plots.MissingViewError, match=r"audit\.load"):
        plots.occupancy(bare, ["allot"], tmp_path / "o.png")


# -- HTML ---------------------------------------------------------------------------------


def test_write_plots_writes_every_plot(con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    """write_plots gives occupancy, waits, and per run usage, managers and Gantt PNGs."""
    paths = html_report.write_plots(con, ["allot", "baseline"], tmp_path / "plots")
    names = sorted(p.name for p in paths)
    assert names == sorted([
        "occupancy.png", "wait_cdfs.png",
        "usage_teams_allot.png", "usage_managers_allot.png", "gantt_allot.png",
        "usage_teams_baseline.png", "usage_managers_baseline.png", "gantt_baseline.png",
    ])
    assert all(p.read_bytes()[:8] == PNG_MAGIC for p in paths)


def test_html_is_self_contained(con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    """The page embeds every plot as a base64 PNG and points at nothing outside itself."""
    out = html_report.write_html(con, ["allot", "baseline"], tmp_path / "r" / "audit.html",
                                 summaries={"allot": {}, "baseline": {}}, title="Tiny <audit>")
    text = out.read_text(encoding="utf-8")
    assert "http://" not in text and "https://" not in text
    refs = re.findall(r'(?:src|href)\s*=\s*"([^"]*)"', text)
    assert refs and all(r.startswith(("data:image/png;base64,", "#")) for r in refs), refs
    assert text.count('src="data:image/png;base64,') == 8
    assert "<link" not in text and "<script" not in text
    assert "Tiny &lt;audit&gt;" in text  # the title is escaped, not injected


def test_html_summary_formats_given_figures(con: duckdb.DuckDBPyConnection,
                                            tmp_path: Path) -> None:
    """Given summaries show fractions as %, seconds humanly, and missing keys as a dash."""
    summaries = {"allot": {"occupancy": 0.98, "owed_received": {"total": 0.981, "worst": 0.9,
                                                                "teams_at_least_95": 13,
                                                                "teams": 15},
                           "wait_s": {"debug": {"p50": 24, "p90": 5400, "p90_censored": True}},
                           "largest_gang_wait_s": 7200, "largest_gang_wait_censored": True},
                 "baseline": {"occupancy": 0.5}}
    text = html_report.write_html(con, ["allot", "baseline"], tmp_path / "a.html",
                                  summaries=summaries).read_text()
    assert "<td>98.0%</td>" in text and "<td>98.1%</td>" in text
    assert "<td>13 of 15</td>" in text
    assert "<td>24 s</td>" in text
    # A figure that rests on never-started work is a lower bound, and says so.
    assert "<td>≥ 1.5 h</td>" in text and "<td>≥ 2 h</td>" in text
    assert "censored" not in text.split("<h2 id=\"owed\"")[0].split("Summary</h2>")[1]
    assert '<td class="missing">—</td>' in text  # e.g. allot's fragmentation


def test_report_shaped_summaries_are_normalised() -> None:
    """audit.report's nested shape (preemptions by reason, ratios by team) flattens for the table."""
    flat = html_report.normalise_summary({
        "run": "allot", "occupancy": 0.5,
        "owed_received": {"total": 0.9, "by_team": {"lab/a": 0.9}},
        "wait_s": {"debug": {"p90": 30.0, "n": 4, "never_started": 1}},
        "preemptions": {"fair_share": 2, "host_drain": 1},
    })
    assert flat == {"occupancy": 0.5, "owed_received.total": 0.9, "wait_s.debug.p90": 30.0,
                    "wait_s.debug.n": 4, "wait_s.debug.never_started": 1,
                    "preemptions.fair_share": 2, "preemptions.host_drain": 1, "preemptions": 3}
    assert html_report.format_metric("wait_s.debug.never_started", 1) == "1"
    assert html_report.format_metric("wait_s.debug.p90", 30.0) == "30 s"
    assert html_report.format_metric("fragmentation", None) == "—"


# -- the real loader and views, once they exist --------------------------------------------


def _engine_log(path: Path) -> None:
    """The brief's small scenario, run through the engine and written as a log."""
    from events import encode_lines
    from events.factory import Inputs
    from scheduler import Engine

    inputs = Inputs()
    engine = Engine()
    log: list[object] = []

    def feed(e: object) -> None:
        out = engine.process(e)  # type: ignore[arg-type]
        if out is not None:
            log.append(e)
            log.extend(out)

    feed(inputs.policy(team_depth=1))
    feed(inputs.node("lab", managers=("admin",)))
    feed(inputs.node("lab/a", shares=7, managers=("lead-a",)))
    feed(inputs.node("lab/b", shares=3))
    for h in range(2):
        feed(inputs.host(f"h{h}"))
    feed(inputs.submit("free", "lab/b", 16, 0, at=0, kind="eval", hosts=2, gpus_per_host=8))
    feed(inputs.tick(0))
    feed(inputs.tick(60, cycle=False))  # only ticks move the scheduler's clock
    feed(inputs.submit("dbg", "lab/a", 2, 600, at=60, kind="debug"))
    feed(inputs.tick(60))
    feed(inputs.tick(700, cycle=False))
    feed(inputs.finish("dbg", at=700))
    feed(inputs.tick(700))
    feed(inputs.tick(2 * H))
    path.write_bytes(encode_lines(log))  # type: ignore[arg-type]


def test_plots_on_a_real_engine_log(tmp_path: Path) -> None:
    """With the real loader and views, every plot and the HTML page build from an engine log."""
    load = pytest.importorskip("audit.load")
    open_db = getattr(load, "open_db", None)
    if open_db is None or not hasattr(load, "load_log"):
        pytest.skip("audit.load has no open_db/load_log yet")
    log = tmp_path / "allot.jsonl"
    _engine_log(log)
    con = open_db(tmp_path / "audit.duckdb")
    load.load_log(con, log, run="allot")
    try:
        con.execute("SELECT * FROM run_slots LIMIT 1")
    except duckdb.CatalogException:
        pytest.skip("the audit views are not created by open_db yet")
    paths = html_report.write_plots(con, ["allot"], tmp_path / "plots")
    assert all(p.stat().st_size > 10_000 for p in paths)
    con.execute("SET VARIABLE allot_warmup_s = 0")
    # The debug job preempted the unallocated gang: one preemption, on both of its hosts.
    assert summary(con, "allot")["preemptions"] == {"reclaim_unallocated": 1}
    page = html_report.write_html(con, ["allot"], tmp_path / "audit.html").read_text()
    assert "data:image/png;base64," in page
    # Without a given summary the page shows audit.report.summary's figures, the one summary.
    s = summary(con, "allot")
    assert f"<td>{s['occupancy']:.1%}</td>" in page
    assert "<td>1</td>" in page  # the one preemption, in the Preemptions row


def test_the_page_and_the_report_share_one_occupancy_and_gang_wait(tmp_path: Path) -> None:
    """html_report.summary_from_views is gone: its occupancy (busy / (busy + idle)) and its
    gang wait (from `waits`) were the report's (busy / (total - unavailable), `workloads`)
    under other names, equal on the audit views since idle = total - busy - unavailable.
    The report's definitions are the ones kept; checked here on a log with a faulty host."""
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from test_audit_views import faulted_host, fresh_db

    from audit import load_log
    from events import encode_lines

    log = tmp_path / "r" / "events.jsonl"
    log.parent.mkdir()
    log.write_bytes(encode_lines(faulted_host().events))
    con = fresh_db()
    load_log(con, log)
    busy, idle = con.execute("SELECT sum(allocated_gpu_h + unallocated_gpu_h), sum(idle_gpu_h) "
                             "FROM capacity_by_hour").fetchone()
    s = summary(con, "r")
    assert s["occupancy"] == pytest.approx(busy / (busy + idle)) == pytest.approx(10 / 13)
    page = html_report.write_html(con, ["r"], tmp_path / "p.html").read_text()
    assert "<td>76.9%</td>" in page
