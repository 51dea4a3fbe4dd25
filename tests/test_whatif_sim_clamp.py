"""The simulator path: contracts over a lowered cap are clamped by default, refused on request, counted."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.driver import Simulation
from simulator.scenario import load_scenario, validate

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


def _run(over_cap: str):  # type: ignore[no-untyped-def]
    sc = load_scenario(SCENARIOS / "demo.toml")
    sc = validate(__import__("msgspec").structs.replace(
        sc, policy={**sc.policy, "min_runtime_cap_s": 1800}, horizon_days=1.0), "test")
    return Simulation(sc, "allot", SCENARIOS, over_cap=over_cap).run()


def _cap_rejections(result) -> int:  # type: ignore[no-untyped-def]
    return sum(1 for e in result.log if type(e).__struct_config__.tag == "workload.rejected"
               and "cap" in e.detail)


def test_clamped_by_default_and_counted() -> None:
    r = _run("clamp")
    assert r.clamped > 0 and r.refused_over_cap == 0
    assert _cap_rejections(r) == 0
    subs = [e for e in r.log if type(e).__struct_config__.tag == "workload.submitted"]
    assert max(e.min_runtime_s for e in subs) <= 1800


def test_reject_keeps_refusing_and_counts() -> None:
    r = _run("reject")
    assert r.clamped == 0 and r.refused_over_cap == _cap_rejections(r) > 0
    assert r.refused_over_cap_gpu_s > 0


def test_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="over_cap"):
        Simulation(load_scenario(SCENARIOS / "demo.toml"), "allot", SCENARIOS, over_cap="drop")
