"""The executor's cost of a preemption: checkpoints, restart overhead, resubmission.

One host; an unallocated eval job fills it at t=0 and a debug job of another
team reclaims it at t=1000, then runs 300 s. What the eval job loses depends on
its contract, and the simulated executor must charge exactly that.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from events import decode, encode
from scheduler.replay import fold_log
from scheduler.snapshot import restore_state, snapshot_state
from simulator.driver import RESUBMIT_DELAY_S, SimResult, Simulation
from simulator.scenario import load_scenario

HEAD = """
name = "preemption-cost"
seed = 1
horizon_days = 0.25
tick_s = 3600
start = "2026-01-05T00:00:00+00:00"
[policy]
team_depth = 1
[cluster]
id = "cost"
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
workload = "debug"
submit_at = 1000
budget = "lab/a"
user = "alice"
gpus = 8
min_runtime_s = 300
kind = "debug"
duration_s = 300
[[sources.workloads]]
workload = "eval"
submit_at = 0
budget = "lab/b"
user = "bob"
gpus = 8
min_runtime_s = 0
kind = "eval"
duration_s = 3600
"""


def run(tmp_path: Path, contract: str) -> tuple[SimResult, dict[str, list[tuple[int, str]]]]:
    path = tmp_path / "cost.toml"
    path.write_text(HEAD + contract)
    scenario = load_scenario(path)
    result = Simulation(scenario, "allot", tmp_path).run()
    seen: dict[str, list[tuple[int, str]]] = {}
    for e in result.log:
        tag = type(e).__struct_config__.tag
        if tag.startswith("workload.") and tag != "workload.reserved":
            seen.setdefault(e.workload, []).append((e.at - scenario.epoch, tag))  # type: ignore[attr-defined]
    return result, seen


def test_resumable_victim_loses_work_since_its_last_checkpoint_plus_the_restart(tmp_path: Path) -> None:
    """Preempted after 1,000 s with 600 s checkpoints: 400 s lost, plus 120 s to reload."""
    result, seen = run(tmp_path, "resumable = true\ncheckpoint_interval_s = 600\n"
                                 "restart_overhead_s = 120\n")
    # It restarts when the debug job ends (1,300 s) with 3,600 - 600 + 120 s to go.
    assert seen["eval"][-1] == (1300 + 3600 - 600 + 120, "workload.finished")
    assert result.lost_gpu_s == 8 * (400 + 120)


def test_resumable_victim_without_checkpoints_loses_only_the_restart(tmp_path: Path) -> None:
    result, seen = run(tmp_path, "resumable = true\nrestart_overhead_s = 120\n")
    assert seen["eval"][-1] == (1300 + 3600 - 1000 + 120, "workload.finished")
    assert result.lost_gpu_s == 8 * 120


def test_non_resumable_victim_loses_its_run_and_is_resubmitted(tmp_path: Path) -> None:
    """A new workload eval-r1, linked by resubmit_of, re-runs all 3,600 s from scratch."""
    result, seen = run(tmp_path, "resubmits = 1\n")
    assert ("workload.preempted" in [tag for _, tag in seen["eval"]]
            and seen["eval"][-1][1] == "workload.preempted")
    again = [e for e in result.log if type(e).__struct_config__.tag == "workload.submitted"
             and e.workload == "eval-r1"]  # type: ignore[attr-defined]
    assert len(again) == 1 and again[0].resubmit_of == "eval"  # type: ignore[attr-defined]
    assert seen["eval-r1"][0] == (1000 + RESUBMIT_DELAY_S, "workload.submitted")
    assert seen["eval-r1"][-1] == (1300 + 3600, "workload.finished")
    assert result.lost_gpu_s == 8 * 1000 and result.resubmitted == 1


def test_non_resumable_victim_without_resubmit_just_ends(tmp_path: Path) -> None:
    result, seen = run(tmp_path, "")
    assert "eval-r1" not in seen and result.resubmitted == 0
    assert result.lost_gpu_s == 8 * 1000


def test_resubmissions_of_resubmissions_count_from_the_first(tmp_path: Path) -> None:
    """eval is preempted at 1,000 s and eval-r1 at 2,000 s: the second one is eval-r2."""
    extra = """resubmits = 2
[[sources.workloads]]
workload = "debug2"
submit_at = 2000
budget = "lab/a"
user = "alice"
gpus = 8
min_runtime_s = 300
kind = "debug"
duration_s = 300
"""
    result, seen = run(tmp_path, extra)
    subs = {e.workload: e.resubmit_of for e in result.log  # type: ignore[attr-defined]
            if type(e).__struct_config__.tag == "workload.submitted"}
    assert subs["eval-r1"] == "eval" and subs["eval-r2"] == "eval-r1"
    assert seen["eval-r2"][-1] == (2300 + 3600, "workload.finished")


def test_an_owner_gives_up_after_the_resubmissions_allowed(tmp_path: Path) -> None:
    """With one resubmission allowed, eval-r1 preempted at 2,000 s is not resubmitted again."""
    extra = """resubmits = 1
[[sources.workloads]]
workload = "debug2"
submit_at = 2000
budget = "lab/a"
user = "alice"
gpus = 8
min_runtime_s = 300
kind = "debug"
duration_s = 300
"""
    result, seen = run(tmp_path, extra)
    assert "eval-r1" in seen and "eval-r2" not in seen and result.resubmitted == 1
    assert seen["eval-r1"][-1][1] == "workload.preempted"


def test_the_submission_carries_the_cost_and_the_fold_keeps_it(tmp_path: Path) -> None:
    """The victim cost reads the contract from the state, and a snapshot keeps it."""
    result, _ = run(tmp_path, "resumable = true\ncheckpoint_interval_s = 600\n"
                              "restart_overhead_s = 120\n")
    sub = next(e for e in result.log if type(e).__struct_config__.tag == "workload.submitted"
               and e.workload == "eval")  # type: ignore[attr-defined]
    assert decode(encode(sub)) == sub
    assert (sub.checkpoint_interval_s, sub.restart_overhead_s) == (600, 120)  # type: ignore[attr-defined]
    state = fold_log(result.log).state
    w = state.workloads.all["eval"]
    assert (w.checkpoint_interval_s, w.restart_overhead_s) == (600, 120)
    back = restore_state(snapshot_state(state)).workloads.all["eval"]
    assert (back.checkpoint_interval_s, back.restart_overhead_s) == (600, 120)


@pytest.mark.parametrize("field,value", [("checkpoint_interval_s", 0), ("restart_overhead_s", -1)])
def test_a_cost_out_of_range_decodes_and_is_rejected(field: str, value: int) -> None:
    """The wire takes any int64 duration (events.limits); the validator names the bad value."""
    from events import WorkloadSubmitted, decode, encode

    raw = {"type": "workload.submitted", "id": "x", "at": 0, "workload": "w", "budget": "lab/a",
           "user": "u", "gpus": 1, "min_runtime_s": 0, field: value}
    event = decode(encode(msgspec.convert(raw, WorkloadSubmitted)))
    assert getattr(event, field) == value


def test_a_version_1_snapshot_restores_with_no_costs(tmp_path: Path) -> None:
    """Snapshots written before the cost fields existed upcast to 'no cost known'."""
    import msgspec

    result, _ = run(tmp_path, "resumable = true\ncheckpoint_interval_s = 600\n")
    state = fold_log(result.log).state
    body = msgspec.msgpack.decode(snapshot_state(state))
    del body["costs"]
    body["v"] = 1
    old = restore_state(msgspec.msgpack.encode(body)).workloads.all["eval"]
    assert (old.checkpoint_interval_s, old.restart_overhead_s) == (None, 0)


@pytest.mark.parametrize(("contract", "key", "gpu_s"), [
    ("resumable = true\ncheckpoint_interval_s = 600\nrestart_overhead_s = 120\n",
     "eval.reclaim_unallocated.resumed", 8 * (400 + 120)),
    ("resumable = true\nrestart_overhead_s = 120\n", "eval.reclaim_unallocated.resumed", 8 * 120),
    ("", "eval.reclaim_unallocated.lost_run", 8 * 1000),
])
def test_the_log_breakdown_of_lost_work_matches_the_executors_charge(
        tmp_path: Path, contract: str, key: str, gpu_s: int) -> None:
    """lost_by_class reads the same charge from the log, under the victim's class and reason."""
    from simulator.preemption_cost import lost_by_class

    result, _ = run(tmp_path, contract)
    figures = lost_by_class(result.log, warmup_s=0)
    assert figures[key] == pytest.approx(gpu_s / 3600) and figures[f"{key}_n"] == 1
    assert figures["total"] == pytest.approx(result.lost_gpu_s / 3600)


def test_the_log_breakdown_leaves_out_preemptions_in_the_warm_up(tmp_path: Path) -> None:
    from simulator.preemption_cost import lost_by_class

    result, _ = run(tmp_path, "")
    assert lost_by_class(result.log, warmup_s=1001)["total"] == 0
