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


# -- sessions that can be restored (issue 26) ----------------------------------------------

# The victim as an interactive session (with a checkpoint hook or not), and its preemptor.
SESSION = SCENARIO.split('[[sources.workloads]]\nworkload = "limited"')[0].replace(
    "stop_s = {stop_s}", 'kind = "interactive"\n{hook}')


@pytest.mark.parametrize(("grace", "hook", "starts_at", "lost_s", "completed", "cut"), [
    (0, None, 600, 0, 0, 0),      # no hook: the old model (resumable, checkpoints continuously)
    (0, 60, 600, 600, 0, 1),      # a hook but no grace: it cannot run; the run's state is lost
    (120, 60, 660, 0, 1, 0),      # the hook fits its 90 s of the grace: nothing lost, stop after it
    (120, 100, 690, 600, 0, 1),   # it does not: cut at 90 s, SIGTERM, the state is lost
])
def test_a_sessions_checkpoint_hook_saves_its_state_only_within_the_grace(
        tmp_path: Path, grace: int, hook: int | None, starts_at: int, lost_s: int,
        completed: int, cut: int) -> None:
    from simulator.driver import Simulation
    from simulator.scenario import load_scenario

    path = tmp_path / "session.toml"
    path.write_text(SESSION.format(policy=f"preemption_grace_s = {grace}" if grace else "",
                                   hook="" if hook is None else f"checkpoint_hook_s = {hook}"))
    sc = load_scenario(path)
    result = Simulation(sc, "allot", tmp_path).run()
    assert _at(result.log, sc.epoch, WorkloadPreempted, "victim") == [600]
    assert _at(result.log, sc.epoch, WorkloadStarted, "preemptor") == [starts_at]
    assert result.lost_state_gpu_s.get("interactive", 0) == 8 * lost_s
    assert (result.hooks_completed, result.hooks_cut) == (completed, cut)


def test_a_restorable_class_keeps_its_other_draws() -> None:
    """Turning a class's sessions restorable changes their contract only, not what is drawn."""
    import msgspec

    from simulator.sources import generator

    base = generator.Config(
        teams=[generator.TeamConfig(path="lab/a", researchers=3)],
        classes=[generator.ClassConfig(kind="interactive", load=0.2, gpus=[1, 2],
                                       duration_median_s=3600, min_runtime_s=(3600, 3600),
                                       resubmit=0.5)],
        capacity_gpus=16, horizon_s=3 * 86400)
    restorable = msgspec.structs.replace(base, classes=[msgspec.structs.replace(
        base.classes[0], restorable=1.0, checkpoint_hook_s=90, restart_overhead_s=300)])
    a = generator.load(base, seed=7, base_dir=Path("."), tree=[]).workloads
    b = generator.load(restorable, seed=7, base_dir=Path("."), tree=[]).workloads
    assert len(a) == len(b) > 10
    for x, y in zip(a, b, strict=True):
        assert (x.workload, x.submit_at, x.gpus, x.duration_s, x.min_runtime_s) == \
            (y.workload, y.submit_at, y.gpus, y.duration_s, y.min_runtime_s)
        assert (y.resumable, y.checkpoint_hook_s, y.restart_overhead_s, y.resubmits) == \
            (True, 90, 300, 0)
        assert x.checkpoint_hook_s is None and not x.resumable
    assert any(x.resubmits for x in a)  # (the resubmit draws were made, and stay paired)
