"""No tracebacks: every bad input to the command line is one line on stderr and a non-zero exit.

Each case runs through ``allot.cli.main`` in-process (a couple also through a
subprocess, as a user runs it). Values that only look wrong (a workload id
with rich markup in it) must print as they are.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from allot.cli import main
from events import write_log
from events.factory import Inputs

REPO = Path(__file__).resolve().parent.parent

SCENARIO = """\
name = "tiny"
horizon_days = 0.05
tick_s = 300

[cluster]
id = "tiny"
hosts = 2

[budget]
root = "lab"
managers = ["admin"]

[[budget.nodes]]
path = "lab/a"

[[sources]]
type = "list"

[[sources.workloads]]
workload = "w1"
submit_at = 0
budget = "lab/a"
user = "u"
gpus = 2
duration_s = 600
"""

DUPLICATE_SOURCE = """
[[sources]]
type = "list"

[[sources.workloads]]
workload = "w1"
submit_at = 60
budget = "lab/a"
user = "u"
gpus = 1
duration_s = 60
"""

DEEP_LINE = (b'{"type":"clock.ticked","id":"t","at":1,"x":' + b"[" * 5_000 + b"]" * 5_000
             + b"}\n")
TYPE_OBJECT_LINE = b'{"type":{},"id":"t","at":1}\n'


def _scenario(tmp: Path, text: str = SCENARIO) -> str:
    path = tmp / "scenario.toml"
    path.write_text(text)
    return str(path)


def _edit(tmp: Path, *pairs: str) -> str:
    """The tiny scenario with each (old, new) pair of lines replaced."""
    text = SCENARIO
    for old, new in zip(pairs[::2], pairs[1::2], strict=True):
        assert old in text, old
        text = text.replace(old, new, 1)
    return _scenario(tmp, text)


def _raw(tmp: Path, name: str, data: bytes) -> str:
    path = tmp / name
    path.write_bytes(data)
    return str(path)


def _log(tmp: Path, *lines: bytes) -> str:
    """A valid head (policy, root, host), then ``lines``."""
    mk = Inputs(cluster="c", prefix="l")
    path = tmp / "events.jsonl"
    write_log(path, [mk.policy(), mk.node("lab", managers=("admin",)), mk.host("h1")])
    with path.open("ab") as fh:
        fh.write(b"".join(lines))
    return str(path)


def _file(tmp: Path) -> str:
    path = tmp / "a-file"
    path.write_text("x")
    return str(path)


Args = Callable[[Path], list[str]]

# (argv builder, a fragment the one line must contain)
CASES: list = [
    # allot simulate: unreadable scenario files
    pytest.param(lambda t: ["simulate", _raw(t, "bad.toml", b"\xff\xfe name = 'x'\n")],
                 "not UTF-8", id="simulate-not-utf8"),
    pytest.param(lambda t: ["simulate", str(t)], "is a directory", id="simulate-a-directory"),
    pytest.param(lambda t: ["simulate", str(t / "missing.toml")], "no such scenario file",
                 id="simulate-missing-file"),
    pytest.param(lambda t: ["simulate", _raw(t, "x.toml", b"name = [\n")], "not valid TOML",
                 id="simulate-not-toml"),
    # values the scenario refuses
    pytest.param(lambda t: ["simulate", _edit(t, "horizon_days = 0.05", "horizon_days = nan")],
                 "horizon_days", id="horizon-nan"),
    pytest.param(lambda t: ["simulate", _edit(t, "horizon_days = 0.05", "horizon_days = inf")],
                 "horizon_days", id="horizon-inf"),
    pytest.param(lambda t: ["simulate", _edit(t, "horizon_days = 0.05", "horizon_days = 1e9")],
                 "horizon_days", id="horizon-absurd"),
    pytest.param(lambda t: ["simulate", _edit(t, "tick_s = 300", "tick_s = 1",
                                              "horizon_days = 0.05", "horizon_days = 3000")],
                 "periodic ticks", id="too-many-ticks"),
    pytest.param(lambda t: ["simulate", _edit(t, "hosts = 2", "hosts = 100000000")],
                 "$.cluster.hosts", id="absurd-host-count"),
    pytest.param(lambda t: ["simulate", _edit(t, "hosts = 2", "hosts = 0")],
                 "$.cluster.hosts", id="no-hosts"),
    pytest.param(lambda t: ["simulate", _edit(t, "hosts = 2", "hosts = 2\ngpus_per_host = 1000000000")],
                 "$.cluster.gpus_per_host", id="absurd-gpus-per-host"),
    pytest.param(lambda t: ["simulate", _edit(t, "hosts = 2", "hosts = 2\nhosts_per_rack = 0")],
                 "$.cluster.hosts_per_rack", id="zero-hosts-per-rack"),
    pytest.param(lambda t: ["simulate", _edit(t, 'id = "tiny"', 'id = "a b"')],
                 "$.cluster.id", id="bad-cluster-id"),
    pytest.param(lambda t: ["simulate", _edit(t, "tick_s = 300", 'tick_s = 300\nstart = "soon"')],
                 "$.start", id="bad-start"),
    pytest.param(lambda t: ["simulate", _scenario(
        t, SCENARIO + "\n[faults]\nhost_fault_rate_per_day = -1.0\n")],
                 "host_fault_rate_per_day", id="negative-fault-rate"),
    pytest.param(lambda t: ["simulate", _scenario(
        t, SCENARIO + "\n[faults]\nhost_fault_rate_per_day = inf\n")],
                 "host_fault_rate_per_day", id="infinite-fault-rate"),
    pytest.param(lambda t: ["simulate", _scenario(t, SCENARIO + "\n[faults]\nfailed_fraction = 2.0\n")],
                 "failed_fraction", id="fraction-over-one"),
    pytest.param(lambda t: ["simulate", _scenario(t, SCENARIO + "\n[faults]\nrepair_s = -5\n")],
                 "repair_s", id="negative-repair"),
    pytest.param(lambda t: ["simulate", _scenario(
        t, SCENARIO + '\n[[faults.scheduled]]\nhost = "h0007"\nat = 60\n')],
                 "unknown host 'h0007'", id="fault-for-unknown-host"),
    pytest.param(lambda t: ["simulate", _scenario(
        t, SCENARIO + '\n[[faults.scheduled]]\nhost = "h0000"\nat = -60\n')],
                 "$.faults.scheduled[0].at", id="fault-before-start"),
    pytest.param(lambda t: ["simulate", _edit(t, "gpus = 2", "gpus = 100000000000000000000")],
                 "$.sources[0].workloads[0].gpus", id="workload-gpus-over-int64"),
    pytest.param(lambda t: ["simulate", _edit(t, 'workload = "w1"', f'workload = "{"w" * 5000}"')],
                 "$.sources[0].workloads[0].workload", id="workload-id-too-long"),
    pytest.param(lambda t: ["simulate", _scenario(t, SCENARIO + DUPLICATE_SOURCE)],
                 "workload id 'w1' is not unique", id="duplicate-workload-ids"),
    pytest.param(lambda t: ["simulate", _scenario(t, SCENARIO + '\n[policy]\nwindow = 5\n')],
                 "unknown policy knob", id="unknown-knob"),
    # what-if options the file could not hold
    pytest.param(lambda t: ["simulate", _scenario(t), "--horizon-days", "-1"], "--horizon-days",
                 id="horizon-days-negative"),
    pytest.param(lambda t: ["simulate", _scenario(t), "--horizon-days", "nan"], "--horizon-days",
                 id="horizon-days-nan"),
    pytest.param(lambda t: ["simulate", _scenario(t), "--set", "window_s=1e400"], "window_s",
                 id="set-knob-float"),
    pytest.param(lambda t: ["simulate", _scenario(t), "--set", "window_s=9223372036854775808"],
                 "window_s", id="set-knob-over-int64"),
    pytest.param(lambda t: ["simulate", _scenario(t), "--out", _file(t)],
                 "is not a directory", id="out-is-a-file"),
    pytest.param(lambda t: ["simulate", _scenario(t), "--out", str(Path(_file(t)) / "sub")],
                 "--out", id="out-under-a-file"),
    # generated sources
    pytest.param(lambda t: ["simulate", _generated(t, "load = nan")], "load", id="generator-nan-load"),
    pytest.param(lambda t: ["simulate", _generated(t, "load = 0.5\nmin_runtime_s = [600, 60]")],
                 "min_runtime_s", id="generator-inverted-range"),
    pytest.param(lambda t: ["simulate", _generated(t, "load = 0.5\nduration_sigma = 100.0")],
                 "duration_sigma", id="generator-huge-sigma"),
    pytest.param(lambda t: ["simulate", _generated(t, "load = 900.0\ngpus = [1]\n"
                                                      "duration_median_s = 1")],
                 "over the limit", id="generator-absurd-count"),
    pytest.param(lambda t: ["simulate", _philly(t, b"\xff\xfe\n")], "not UTF-8", id="philly-not-utf8"),
    pytest.param(lambda t: ["simulate", _philly(t, None)], "cannot open trace file",
                 id="philly-trace-is-a-directory"),
    # logs that are not logs
    pytest.param(lambda t: ["explain", _log(t, DEEP_LINE), "w"], "line 4: JSON nested deeper",
                 id="explain-deep-json"),
    pytest.param(lambda t: ["explain", _log(t, TYPE_OBJECT_LINE), "w"], "line 4: Expected `str`",
                 id="explain-type-object"),
    pytest.param(lambda t: ["explain", _log(t, b"\xff\n"), "w"], "line 4", id="explain-not-utf8"),
    pytest.param(lambda t: ["explain", _log(t), "nobody"], "no workload 'nobody'",
                 id="explain-unknown-workload"),
    pytest.param(lambda t: ["explain", str(t), "w"], "is a directory", id="explain-a-directory"),
    pytest.param(lambda t: ["explain", str(t / "nope.jsonl"), "w"], "no such file",
                 id="explain-missing-file"),
    pytest.param(lambda t: ["audit", "replay", _log(t, DEEP_LINE)], "line 4: JSON nested deeper",
                 id="replay-deep-json"),
    pytest.param(lambda t: ["audit", "replay", _log(t, TYPE_OBJECT_LINE)], "line 4: Expected `str`",
                 id="replay-type-object"),
    pytest.param(lambda t: ["audit", "replay", str(t)], "is a directory", id="replay-a-directory"),
]


def _generated(tmp: Path, class_keys: str) -> str:
    """A scenario with one generator source whose one class has ``class_keys``."""
    keys = dict(line.split(" = ", 1) for line in class_keys.splitlines())
    base = {"kind": '"train"', "load": "0.5", "gpus": "[1, 2]", "duration_median_s": "600"}
    base.update(keys)
    text = SCENARIO.split("[[sources]]")[0] + (
        '[[sources]]\ntype = "generator"\n\n[[sources.teams]]\npath = "lab/a"\nresearchers = 2\n\n'
        "[[sources.classes]]\n" + "".join(f"{k} = {v}\n" for k, v in base.items()))
    return _scenario(tmp, text)


def _philly(tmp: Path, trace: bytes | None) -> str:
    """A scenario replaying a trace file holding ``trace`` (None: the trace path is a directory)."""
    if trace is None:
        (tmp / "trace.csv").mkdir()
    else:
        (tmp / "trace.csv").write_bytes(trace)
    text = SCENARIO.split("[[sources]]")[0].replace('root = "lab"', 'root = "philly"').replace(
        'path = "lab/a"', 'path = "philly/x"') + '[[sources]]\ntype = "philly"\npath = "trace.csv"\n'
    return _scenario(tmp, text)


def _one_error_line(err: str, out: str) -> str:
    assert "Traceback" not in err + out
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("allot: ")
    return lines[0]


@pytest.mark.parametrize("argv, fragment", CASES)
def test_bad_input_is_one_line_and_a_non_zero_exit(
    argv: Args, fragment: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)  # nothing lands in the repository (default --out)
    work = tmp_path / "in"
    work.mkdir()
    code = main(argv(work))
    captured = capsys.readouterr()
    line = _one_error_line(captured.err, captured.out)
    assert code != 0
    assert fragment in line, line


@pytest.mark.parametrize("argv, fragment", [
    pytest.param(lambda t: ["simulate", _raw(t, "bad.toml", b"\xff\xfe name = 'x'\n")], "not UTF-8",
                 id="simulate-not-utf8"),
    pytest.param(lambda t: ["explain", _log(t, DEEP_LINE), "w"], "JSON nested deeper",
                 id="explain-deep-json"),
])
def test_bad_input_through_a_real_process(argv: Args, fragment: str, tmp_path: Path) -> None:
    """As a user runs it: ``python -m allot ...``, status 2, one line, no traceback."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "allot", *argv(tmp_path)], capture_output=True,
                          text=True, cwd=tmp_path, env=env, timeout=120)
    line = _one_error_line(proc.stderr, proc.stdout)
    assert proc.returncode == 2
    assert fragment in line


# ---------------------------------------------------------------- markup is data, not markup

MARKUP_IDS = ["a[/]train", "[bold]x[/bold]", "[red", "x[/]y[/]"]


@pytest.mark.parametrize("workload", MARKUP_IDS)
def test_explain_prints_a_workload_id_with_markup_as_it_is(
    workload: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    mk = Inputs(cluster="c", prefix="m")
    path = tmp_path / "events.jsonl"
    write_log(path, [mk.policy(), mk.node("lab", managers=("admin",)), mk.node("lab/a"),
                     mk.host("h1"), mk.submit(workload, "lab/a", gpus=2, min_runtime_s=60, at=0)])
    code = main(["explain", str(path), workload])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "Traceback" not in captured.err
    assert workload in captured.out.replace("\n", "")


def test_simulate_prints_a_scenario_name_with_markup_as_it_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    path = _edit(tmp_path, 'name = "tiny"', 'name = "[/]x[bold]"')
    code = main(["simulate", path, "--no-plots", "--policy", "allot", "--out", str(tmp_path / "o")])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "[/]x[bold]" in captured.err
