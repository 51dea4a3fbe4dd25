"""``python -m simulator.lost_state``: the three configurations it compares, built from a scenario."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.lost_state import LostStateError, main, variant
from simulator.scenario import load_scenario
from simulator.sources import generator

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


def _classes(sc) -> dict[str, generator.ClassConfig]:
    return {c.kind: c for src in sc.sources if isinstance(src, generator.Config)
            for c in src.classes}


def test_the_configurations_change_only_the_grace_and_the_sessions() -> None:
    sc = load_scenario(SCENARIOS / "ai2-month.toml")
    assert variant(sc, "as_shipped", "interactive", 300, 120, 300) is sc
    grace = variant(sc, "grace", "interactive", 300, 120, 300)
    assert grace.policy == {**sc.policy, "preemption_grace_s": 300}
    assert _classes(grace) == _classes(sc)
    restorable = variant(sc, "restorable", "interactive", 300, 120, 240)
    assert restorable.policy == grace.policy
    before, after = _classes(sc), _classes(restorable)
    assert before["interactive"].restorable == 0.0
    assert (after["interactive"].restorable, after["interactive"].checkpoint_hook_s,
            after["interactive"].restart_overhead_s) == (1.0, 120, 240)
    assert {k: v for k, v in after.items() if k != "interactive"} == \
        {k: v for k, v in before.items() if k != "interactive"}


def test_a_scenario_without_the_class_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    sc = load_scenario(SCENARIOS / "philly.toml")
    with pytest.raises(LostStateError, match="no generated class"):
        variant(sc, "restorable", "interactive", 300, 120, 300)
    assert main([str(SCENARIOS / "philly.toml"), "--configs", "restorable"]) == 2
    assert "no generated class" in capsys.readouterr().err
