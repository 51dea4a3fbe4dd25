"""The sole-leaf accelerator cannot change a decision.

Under ``preemption_rule = "reclaim"`` most candidates reclaim from nobody, so
their rules take no other leaf's allocated work (``Rule.own_leaf``), and the
walks for whole hosts, the reservation planner's (``ready_times``) and the
victim search's (``victims.ready_hosts``), visit only the hosts that hold no
other leaf's allocated work (scheduler/index/sole_leaf.py). Each test runs the
demo scenario under reclaim: one compares every narrowed walk with the full
walk of the same call, answer for answer and in order; one compares the whole
log with its plain twin, where the accelerator is switched off.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from events import encode_lines
from scheduler.policy import cycle as cycle_mod
from scheduler.policy import victims as victims_mod
from simulator.driver import Simulation
from simulator.scenario import load_scenario, with_overrides
from tests.sim_helpers import SCENARIOS

DAYS = 1.5


def _reclaim_demo(rule: str = "reclaim") -> bytes:
    sc = load_scenario(SCENARIOS / "demo.toml")
    sc = with_overrides(sc, horizon_days=DAYS,
                        policy={**sc.policy, "preemption_rule": rule, "borrowed_protection_s": 0})
    return encode_lines(Simulation(sc, "allot", SCENARIOS).run().log)


def _full_walks(hosts_by_span: list[Any]) -> SimpleNamespace:
    """A stand-in for the victim index's accelerator that narrows nothing."""
    return SimpleNamespace(entries=lambda own: (hosts_by_span,))


@pytest.mark.parametrize("rule", ["reclaim", "reclaim_balanced"])
def test_every_narrowed_walk_answers_as_the_full_walk(monkeypatch: pytest.MonkeyPatch,
                                                      rule: str) -> None:
    narrowed = [0, 0]
    real_times = cycle_mod.ready_times

    def times(w, capacity, frees, rule_, stopped_now, now, sole=None):  # type: ignore[no-untyped-def]
        got = real_times(w, capacity, frees, rule_, stopped_now, now, sole)
        if sole is not None and rule_.own_leaf is not None:
            narrowed[0] += 1
            assert list(got.items()) == list(real_times(w, capacity, frees, rule_, stopped_now, now).items())
        return got

    real_ready = victims_mod.ready_hosts

    def ready(self, hosts, per_host, capacity, barred, eligible):  # type: ignore[no-untyped-def]
        got = real_ready(self, hosts, per_host, capacity, barred, eligible)
        if eligible.own_leaf is not None and self.sole_leaf is not None:
            narrowed[1] += 1
            lookup, self.sole_leaf = self.sole_leaf, None
            try:
                full = real_ready(self, hosts, per_host, capacity, barred, eligible)
            finally:
                self.sole_leaf = lookup
            # Enough hosts either way; when too few, the same ones (the caller reads no more).
            assert (len(got) >= hosts and len(full) >= hosts) or set(got) == set(full)
        return got

    monkeypatch.setattr(cycle_mod, "ready_times", times)
    monkeypatch.setattr(victims_mod, "ready_hosts", ready)
    _reclaim_demo(rule)
    # The accelerator was exercised (the balanced rule's planner may plan on borrowed
    # work, ``Guarantees.lockout``: its reservation walks are never narrowed).
    assert narrowed[1] > 0 and (narrowed[0] > 0 or rule == "reclaim_balanced")


@pytest.mark.parametrize("rule", ["reclaim", "reclaim_balanced"])
def test_the_log_is_the_same_without_the_accelerator(monkeypatch: pytest.MonkeyPatch,
                                                     rule: str) -> None:
    fast = _reclaim_demo(rule)
    monkeypatch.setattr(cycle_mod, "sole_leaf_frees", lambda cached, frees: None)
    monkeypatch.setattr(cycle_mod, "sole_leaf_victims",
                        lambda cached, on_host, hosts_by_span: _full_walks(hosts_by_span))
    plain = _reclaim_demo(rule)
    assert b'"reason":"reclaim"' in fast
    assert fast == plain
