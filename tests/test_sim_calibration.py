"""Calibration figures, read from a log: checked on a run small enough to work out by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.calibration import calibration_figures, percentile
from simulator.driver import Simulation
from simulator.scenario import load_scenario

# One 8-GPU host, teams a and b with equal shares (4 GPUs each), 4 hours.
# Team a runs an 8-GPU funded job for all 4 hours (demand 8 > entitlement 4),
# and a second 8-GPU funded job waits behind it (demand 16). Team b has an
# unallocated 8-GPU eval job waiting for 2 hours, then cancelled (patience):
# its funded demand is 0 < 4 every hour.
SCENARIO = """
name = "calibration"
seed = 1
horizon_days = 0.16666666666666666
tick_s = 3600
start = "2026-01-05T00:00:00+00:00"
[policy]
team_depth = 1
[cluster]
id = "cal"
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
workload = "run"
submit_at = 0
budget = "lab/a"
user = "alice"
gpus = 8
min_runtime_s = 3600
duration_s = 100000
[[sources.workloads]]
workload = "wait"
submit_at = 0
budget = "lab/a"
user = "alice"
gpus = 8
min_runtime_s = 3600
duration_s = 3600
[[sources.workloads]]
workload = "eval"
submit_at = 0
budget = "lab/b"
user = "bob"
gpus = 8
min_runtime_s = 0
kind = "eval"
duration_s = 3600
patience_s = 7200
"""


@pytest.fixture(scope="module")
def figures(tmp_path_factory: pytest.TempPathFactory) -> dict:
    d = tmp_path_factory.mktemp("cal")
    path = d / "cal.toml"
    path.write_text(SCENARIO)
    return calibration_figures(Simulation(load_scenario(path), "allot", d).run().log, warmup_s=0)


def test_hours_and_demand(figures: dict) -> None:
    """Total demand: 24 GPUs wanted for 2 hours, then 16: 3x, 3x, 2x, 2x of 8 GPUs."""
    assert figures["hours"] == 4
    assert figures["total_demand_mean"] == pytest.approx(2.5)
    assert figures["total_demand_p10"] == pytest.approx(2.0)
    assert figures["total_demand_p90"] == pytest.approx(3.0)
    assert figures["funded_demand_mean"] == pytest.approx(2.0)


def test_only_allocated_work_ran(figures: dict) -> None:
    assert figures["unallocated_share"] == 0


def test_team_hours_below_entitlement(figures: dict) -> None:
    """Team a wants 16 of its 4 GPUs every hour, team b none of its 4: half the team-hours."""
    assert figures["below_entitlement"] == 0.5
    assert figures["below_entitlement_by_team"] == {"lab/a": 0.0, "lab/b": 1.0}
    assert figures["demand_vs_entitlement_p90"] == pytest.approx(4.0)
    assert figures["demand_vs_entitlement_p10"] == pytest.approx(0.0)


def test_the_warm_up_is_left_out(tmp_path: Path) -> None:
    """Leave out the first two hours: only the 2x hours remain."""
    path = tmp_path / "cal.toml"
    path.write_text(SCENARIO)
    log = Simulation(load_scenario(path), "allot", tmp_path).run().log
    late = calibration_figures(log, warmup_s=7200)
    assert late["hours"] == 2 and late["total_demand_mean"] == pytest.approx(2.0)


def test_percentile_interpolates() -> None:
    assert percentile([1, 2, 3, 4], 0.5) == 2.5
    assert percentile([5], 0.9) == 5
    assert percentile([], 0.5) is None


@pytest.mark.parametrize(("policy", "has_before"), [("allot", False), ("baseline", True)])
def test_the_baselines_before_figures_and_no_outcome_figure_for_allot(
        tmp_path: Path, policy: str, has_before: bool) -> None:
    """The calibration run measures the baseline's waits and occupancy, never allot's outcome."""
    from allot.calibrate import measure

    path = tmp_path / "cal.toml"
    # A one-hour lookback window, so the default warm-up leaves three hours to measure.
    path.write_text(SCENARIO.replace("team_depth = 1", "team_depth = 1\nwindow_s = 3600"))
    scenario = load_scenario(path)
    out = measure(scenario, policy, Simulation(scenario, policy, tmp_path).run())
    assert ("before" in out) is has_before
    assert "lost_by_class" in out and "unallocated_share" in out
    if has_before:
        assert set(out["before"]) == {"occupancy", "wait_p50_all_s", "wait_p90_all_s",
                                      "wait_p90_debug_s"}


def test_a_log_no_longer_than_its_window_is_measured_whole(tmp_path: Path) -> None:
    """The audit's warm-up rule: `allot simulate scenarios/demo.toml --seeds N` (a 3-day log
    under a 7-day window) gets figures, not an error."""
    demo = load_scenario(Path(__file__).resolve().parent.parent / "scenarios" / "demo.toml")
    log = Simulation(demo, "allot", tmp_path).run().log
    figures = calibration_figures(log)
    assert figures["total_demand_mean"] > 0
