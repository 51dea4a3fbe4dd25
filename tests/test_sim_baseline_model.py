"""The old scheduler's people and rules, as the simulator models them.

Squatting (researchers hold idle jobs to debug on, under the baseline only),
eval run preemptible under the baseline as it is unallocated under allot, and
the calibrated scenario's priority inflation.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from simulator.driver import SimResult, Simulation, load_sources
from simulator.scenario import load_scenario

REPO = Path(__file__).resolve().parent.parent

SQUAT = """
name = "squat"
seed = 3
horizon_days = 2
tick_s = 600
start = "2026-01-05T00:00:00+00:00"
[policy]
team_depth = 1
[cluster]
id = "squat"
hosts = 4
[budget]
root = "lab"
[[sources]]
type = "generator"
[sources.squatting]
share = 0.5
gpus = [8]
hold_s = 21600
[[sources.teams]]
path = "lab/a"
researchers = 4
[[sources.classes]]
kind = "debug"
load = 0.05
gpus = [1, 2]
duration_median_s = 600
duration_sigma = 0.3
min_runtime_s = [300, 600]
"""


def squat_runs(tmp_path: Path) -> tuple[dict[str, SimResult], int, set[str]]:
    path = tmp_path / "squat.toml"
    path.write_text(SQUAT)
    scenario = load_scenario(path)
    sources = load_sources(scenario, tmp_path)
    results = {p: Simulation(scenario, p, tmp_path, sources).run() for p in ("allot", "baseline")}
    return results, scenario.epoch, {s.user for s in sources.squatters}


def subs(result: SimResult) -> list:
    return [e for e in result.log if type(e).__struct_config__.tag == "workload.submitted"]


def test_half_of_the_researchers_squat(tmp_path: Path) -> None:
    _, _, squatters = squat_runs(tmp_path)
    assert len(squatters) == 2


def test_squatters_hold_gpus_under_the_baseline_only(tmp_path: Path) -> None:
    """Under the baseline every squatter's hold starts and is renewed when it ends; under allot none exists."""
    results, _, squatters = squat_runs(tmp_path)
    assert not [e for e in subs(results["allot"]) if e.kind == "squat"]
    assert results["allot"].holds == 0 and results["allot"].debug_in_holds == 0
    holds = [e for e in subs(results["baseline"]) if e.kind == "squat"]
    assert {e.user for e in holds} == squatters
    # 6-hour holds renewed for two days: at least 7 per squatter (the first starts by noon).
    per_user = Counter(e.user for e in holds)
    assert all(n >= 7 for n in per_user.values()), per_user
    started = {e.workload for e in results["baseline"].log
               if type(e).__struct_config__.tag == "workload.started"}
    assert {e.workload for e in holds} - started <= {max(e.workload for e in holds)}


def test_a_squatter_debugs_inside_the_hold(tmp_path: Path) -> None:
    """While a hold runs, its owner's debug work is not submitted; everyone else's is."""
    results, _, squatters = squat_runs(tmp_path)
    allot_debug = {e.workload: e for e in subs(results["allot"]) if e.kind == "debug"}
    base_debug = {e.workload for e in subs(results["baseline"]) if e.kind == "debug"}
    skipped = set(allot_debug) - base_debug
    assert len(skipped) == results["baseline"].debug_in_holds > 0
    assert {allot_debug[w].user for w in skipped} <= squatters
    # Every skipped one arrived while its owner's hold was running.
    running: dict[str, list[tuple[int, int]]] = {}
    start: dict[str, int] = {}
    owner = {}
    for e in results["baseline"].log:
        tag = type(e).__struct_config__.tag
        if tag == "workload.submitted" and e.kind == "squat":
            owner[e.workload] = e.user
        elif tag == "workload.started" and e.workload in owner:
            start[e.workload] = e.at
        elif tag in ("workload.finished", "workload.preempted") and e.workload in start:
            running.setdefault(owner[e.workload], []).append((start.pop(e.workload), e.at))
    for wid, at in start.items():  # holds still running at the horizon
        running.setdefault(owner[wid], []).append((at, 2**62))
    for w in skipped:
        d = allot_debug[w]
        assert any(a <= d.at < b for a, b in running[d.user]), w


def test_holds_are_charged_like_any_job(tmp_path: Path) -> None:
    """A hold is high priority, not resumable and protected, so it opts out under the baseline."""
    results, _, _ = squat_runs(tmp_path)
    holds = {e.workload: e for e in subs(results["baseline"]) if e.kind == "squat"}
    assert all(e.priority == 1 and not e.resumable and e.min_runtime_s == 28800
               for e in holds.values())
    starts = [e for e in results["baseline"].log
              if type(e).__struct_config__.tag == "workload.started" and e.workload in holds]
    assert starts and all(e.allocated for e in starts)


EVAL = """
name = "eval-preemptible"
seed = 1
horizon_days = 0.1
tick_s = 600
start = "2026-01-05T00:00:00+00:00"
[policy]
team_depth = 1
[cluster]
id = "eval"
hosts = 2
[budget]
root = "lab"
[[budget.nodes]]
path = "lab/a"
[[sources]]
type = "list"
[[sources.workloads]]
workload = "eval"
submit_at = 0
budget = "lab/a"
user = "alice"
gpus = 8
min_runtime_s = 0
kind = "eval"
duration_s = 3600
[[sources.workloads]]
workload = "train"
submit_at = 0
budget = "lab/a"
user = "alice"
gpus = 8
min_runtime_s = 600
duration_s = 3600
"""


@pytest.mark.parametrize("policy", ["allot", "baseline"])
def test_eval_runs_preemptible_under_both_policies(tmp_path: Path, policy: str) -> None:
    """The team is far under its limit, yet its eval job (no minimum runtime) does not opt out."""
    path = tmp_path / "eval.toml"
    path.write_text(EVAL)
    log = Simulation(load_scenario(path), policy, tmp_path).run().log
    started = {e.workload: e.allocated for e in log
               if type(e).__struct_config__.tag == "workload.started"}
    assert started == {"eval": False, "train": True}


def test_the_calibrated_scenario_inflates_priorities() -> None:
    """Priority inflation: at least 90 % of every class's workloads are HIGH."""
    scenario = load_scenario(REPO / "scenarios" / "ai2-month.toml")
    sources = load_sources(scenario, REPO / "scenarios")
    by_kind: dict[str, Counter[int]] = {}
    for w in sources.workloads:
        by_kind.setdefault(w.kind, Counter())[w.priority] += 1
    for kind, counts in by_kind.items():
        assert counts[1] >= 0.9 * sum(counts.values()), (kind, counts)
