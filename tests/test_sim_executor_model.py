"""The simulator's executor models what ``allot executor local`` does: a stop takes time, a run has a time limit."""

from __future__ import annotations

from pathlib import Path

import pytest
from sim_helpers import simulate

from events import WorkloadFinished, WorkloadPreempted, WorkloadStarted, WorkloadStopped

SCENARIO = """
name = "executor-model"
seed = 1
horizon_days = 0.1
tick_s = 3600
start = "2026-01-05T00:00:00+00:00"
[policy]
team_depth = 1
{policy}
[cluster]
id = "model"
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
workload = "victim"
submit_at = 0
budget = "lab/b"
user = "bob"
gpus = 8
resumable = true
duration_s = 7200
stop_s = {stop_s}
[[sources.workloads]]
workload = "preemptor"
submit_at = 600
budget = "lab/a"
user = "alice"
gpus = 8
min_runtime_s = 600
duration_s = 600
[[sources.workloads]]
workload = "limited"
submit_at = 1300
budget = "lab/a"
user = "alice"
gpus = 8
min_runtime_s = 60
duration_s = 3000
time_limit_s = 120
"""


def _log(tmp: Path, policy: str, stop_s: int) -> tuple[list, int]:
    path = tmp / "model.toml"
    path.write_text(SCENARIO.format(policy=policy, stop_s=stop_s))
    return simulate(path)


def _at(log: list, epoch: int, cls: type, workload: str) -> list[int]:
    return [e.at - epoch for e in log if type(e) is cls and e.workload == workload]


@pytest.mark.parametrize(("grace", "stop_s", "starts_at", "stopped_at"), [
    (0, 30, 600, []),            # no grace: the GPUs are free at the preemption
    (120, 30, 630, [630]),       # the victim stops after 30 s: reported, then the preemptor
    (120, 300, 720, []),         # it would take longer than the grace: the grace's end frees
    (120, 0, 601, [601]),        # stopping at once is reported a second later
])
def test_a_preempted_runs_gpus_are_held_until_it_stops_or_the_grace_ends(
        tmp_path: Path, grace: int, stop_s: int, starts_at: int, stopped_at: list[int]) -> None:
    log, epoch = _log(tmp_path, f"preemption_grace_s = {grace}" if grace else "", stop_s)
    assert _at(log, epoch, WorkloadPreempted, "victim")[0] == 600
    assert [t for t in _at(log, epoch, WorkloadStopped, "victim") if t < 1000] == stopped_at
    assert _at(log, epoch, WorkloadStarted, "preemptor") == [starts_at]


def test_a_run_past_its_time_limit_ends_failed(tmp_path: Path) -> None:
    log, epoch = _log(tmp_path, "", 0)
    [start] = _at(log, epoch, WorkloadStarted, "limited")
    [fin] = [e for e in log if type(e) is WorkloadFinished and e.workload == "limited"]
    assert (fin.outcome, fin.reason, fin.at - epoch - start) == ("failed", "time_limit", 120)
