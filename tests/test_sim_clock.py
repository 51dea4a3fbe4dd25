"""The simulator as the trusted clock: cycles run when protections end, and inputs take effect when stamped."""

from __future__ import annotations

from pathlib import Path

from sim_helpers import decisions, simulate

from events import ClockTicked
from scheduler import Engine
from scheduler.replay import JournalFold

SCENARIO = """
name = "protection-end"
seed = 1
horizon_days = 0.25
tick_s = 3600
start = "2026-01-05T00:00:00+00:00"
[policy]
team_depth = 1
# Every funded start protected for its minimum runtime (a value at least the
# cap), and fair-share time slicing, so the newcomer's moment is the victim's
# protection end.
borrowed_protection_s = 28800
preemption_rule = "fair_share"
[cluster]
id = "clock"
hosts = 1
[budget]
root = "lab"
[[budget.nodes]]
path = "lab/a"
[[budget.nodes]]
path = "lab/b"
[[sources]]
type = "list"
[[sources.workloads]]
workload = "long"
submit_at = 0
budget = "lab/a"
user = "alice"
gpus = 8
min_runtime_s = 1234
resumable = true
duration_s = 14400
[[sources.workloads]]
workload = "newcomer"
submit_at = 600
budget = "lab/b"
user = "bob"
gpus = 8
min_runtime_s = 600
resumable = true
duration_s = 1800
"""


def _run(tmp_path: Path):
    path = tmp_path / "protection-end.toml"
    path.write_text(SCENARIO)
    return simulate(path)


def test_a_cycle_runs_when_a_protection_ends(tmp_path: Path) -> None:
    """The better-ranked newcomer preempts at the victim's protection end (t=1234), not the next periodic tick (3600)."""
    log, epoch = _run(tmp_path)
    assert [d for d in decisions(log, epoch) if d[2] == "newcomer"][:2] == [
        (600, "workload.submitted", "newcomer", ""),
        (1234, "workload.started", "newcomer", "h0000:8"),
    ]


def test_every_input_takes_effect_at_the_time_it_is_stamped(tmp_path: Path) -> None:
    """The simulator moves the clock before each moment's inputs: none is late, none from the future."""
    log, _ = _run(tmp_path)
    fold = JournalFold(Engine("clock"))
    checked = 0
    for e in log:
        if e.cause is None:
            fold.flush()  # the previous group is complete
            if type(e) is not ClockTicked:
                assert e.at == fold.engine.state.now, e
                checked += 1
        fold.add(e)
    fold.finish()
    assert checked > 5
    assert fold.refused == fold.orphans == 0
    assert not any(getattr(e, "reason", "") == "future_time" for e in log)
