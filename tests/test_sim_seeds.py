"""Many seeds: the interval arithmetic, and the parallel runner's determinism."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from simulator.driver import SimResult
from simulator.scenario import Scenario, load_scenario
from simulator.seeds import flatten, format_interval, interval, run_seeds, t975

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("df,expected", [
    (1, 12.7062), (2, 4.3027), (4, 2.7764), (9, 2.2622), (30, 2.0423),
    # Beyond the table: the expansion, against published quantiles.
    (31, 2.0395), (40, 2.0211), (60, 2.0003), (120, 1.9799), (10_000, 1.9602),
])
def test_t_quantiles(df: int, expected: float) -> None:
    assert t975(df) == pytest.approx(expected, abs=2e-4)


def test_interval_of_five_values() -> None:
    """1..5: mean 3, s = sqrt(2.5), half-width t(0.975, 4) x s / sqrt(5) = 1.9632."""
    iv = interval([1, 2, 3, 4, 5])
    assert iv is not None and iv.n == 5 and iv.mean == 3
    half = 2.776445 * math.sqrt(2.5) / math.sqrt(5)
    assert iv.low == pytest.approx(3 - half) and iv.high == pytest.approx(3 + half)
    assert iv.half_width == pytest.approx(1.96318, abs=1e-4)


def test_interval_skips_missing_values_and_needs_two_for_a_width() -> None:
    assert interval([]) is None and interval([None, None]) is None
    one = interval([None, 7.0])
    assert one is not None and (one.mean, one.low, one.high, one.n) == (7.0, None, None, 1)
    assert format_interval(one, "n") == "7.0 (1 seed)"
    two = interval([1.0, None, 3.0])
    assert two is not None and two.n == 2 and two.half_width == pytest.approx(12.706205)


def test_identical_values_have_a_zero_width_interval() -> None:
    iv = interval([0.5, 0.5, 0.5])
    assert iv is not None and iv.low == iv.high == 0.5
    assert format_interval(iv, "pct") == "50.0 +- 0.0%"


def test_flatten_keeps_numbers_only() -> None:
    assert flatten({"a": 1, "b": {"c": 0.5, "d": None, "e": "text", "f": True}}) == {
        "a": 1, "b.c": 0.5, "b.d": None}


def started_and_events(scenario: Scenario, policy: str, result: SimResult) -> dict[str, Any]:
    starts = sum(type(e).__struct_config__.tag == "workload.started" for e in result.log)
    return {"events": len(result.log), "starts": starts, "policy": policy}


def test_seeds_differ_and_processes_agree_with_one_process() -> None:
    """Two seeds give different figures; two worker processes give exactly what one process gives."""
    import msgspec

    scenario = msgspec.structs.replace(load_scenario(REPO / "scenarios" / "demo.toml"),
                                       horizon_days=0.5)
    base = REPO / "scenarios"
    one = run_seeds(scenario, base, ["allot"], [1, 2], started_and_events, workers=1)
    two = run_seeds(scenario, base, ["allot"], [1, 2], started_and_events, workers=2)
    assert [r.figures for r in one.runs] == [r.figures for r in two.runs]
    assert one.runs[0].figures != one.runs[1].figures
    assert [r.seed for r in one.runs] == [1, 2]
    events = one.stats["allot"]["events"]
    assert events.n == 2 and events.values == tuple(float(r.figures["events"]) for r in one.runs)
    assert "policy" not in one.stats["allot"]  # text is not a figure


def test_allot_simulate_seeds_writes_intervals(tmp_path: Path) -> None:
    """The command line: two seeds of half a demo day, audited (warm-up left out), summarised in seeds.json."""
    import json

    from allot.cli import main

    out = tmp_path / "out"
    code = main(["simulate", str(REPO / "scenarios" / "demo.toml"), "--seeds", "2", "--workers", "1",
                 "--horizon-days", "0.5", "--set", "window_s=3600", "--policy", "allot",
                 "--out", str(out)])  # a one-hour window: the warm-up leaves most of the run
    assert code == 0
    doc = json.loads((out / "seeds.json").read_text())
    assert doc["seeds"] == [7, 8] and [r["seed"] for r in doc["runs"]] == [7, 8]
    occ = doc["stats"]["allot"]["occupancy"]
    assert occ["n"] == 2 and occ["low"] <= occ["mean"] <= occ["high"]
    assert occ["values"] == [r["figures"]["occupancy"] for r in doc["runs"]]
    # The same runs also carry the load's calibration figures and the lost-work breakdown.
    assert doc["stats"]["allot"]["calibration.total_demand_mean"]["n"] == 2
    assert "lost_by_class.total" in doc["stats"]["allot"]


def test_allot_simulate_refuses_zero_seeds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from allot.cli import main

    assert main(["simulate", str(REPO / "scenarios" / "demo.toml"), "--seeds", "0",
                 "--out", str(tmp_path)]) == 2
    assert "--seeds" in capsys.readouterr().err
