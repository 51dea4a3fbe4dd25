"""The reclaiming rule's two accelerators cannot change a decision.

Under ``preemption_rule = "reclaim"`` a rule narrows its ``span`` (the widest
allocated gang the victim search asks it about) when ``Guarantees.may_reclaim``
says the candidate can reclaim from nobody, and shares its per-leaf answers
with the cycle's other rules of the same leaf and GPUs until the guarantees
move (``Guarantees.reclaim_memo``). Each test runs the demo scenario under
reclaim and checks one of them against its plain twin: the declared span
against every running workload's answer, and the whole log against a run where
the narrowing and the shared memo are turned off.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from events import encode_lines
from scheduler.policy import cycle, guarantee
from scheduler.policy.rules import BudgetRule
from simulator.driver import Simulation
from simulator.scenario import load_scenario, with_overrides
from tests.sim_helpers import SCENARIOS

DAYS = 1.5


def _reclaim_demo(rule: str = "reclaim") -> bytes:
    sc = load_scenario(SCENARIOS / "demo.toml")
    sc = with_overrides(sc, horizon_days=DAYS,
                        policy={**sc.policy, "preemption_rule": rule,
                                "borrowed_protection_s": 0})
    return encode_lines(Simulation(sc, "allot", SCENARIOS).run().log)


@pytest.fixture
def rules_checked(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Every rule a cycle builds is checked at once against the running set: [rules, narrowed]."""
    seen = [0, 0]
    plain_rule = cycle.Cycle.rule

    def checked(self: cycle.Cycle, w: object, due: object = None,
                planning: bool = False) -> BudgetRule:
        rule = plain_rule(self, w, due, planning)  # type: ignore[arg-type]
        seen[0] += 1
        seen[1] += rule.guarantees is not None and not rule.reclaiming  # narrowed: reclaims nobody
        for v in self.state.workloads.running.values():
            if not v.allocated or v.id in self.stopped_now or len(v.placement) <= rule.span:
                continue
            assert rule.reason(v) is None, (w, v)  # the span's promise (allocated work only)
        return rule

    monkeypatch.setattr(cycle.Cycle, "rule", checked)
    yield seen


@pytest.mark.parametrize("rule", ["reclaim", "reclaim_balanced"])
def test_a_narrowed_span_never_hides_work_the_rule_would_take(rules_checked: list[int],
                                                              rule: str) -> None:
    _reclaim_demo(rule)
    rules, narrowed = rules_checked
    assert rules > 100
    assert narrowed > 0  # the accelerator was exercised, not only declared


def test_the_log_is_the_same_without_the_narrowing_and_the_shared_memo(
        monkeypatch: pytest.MonkeyPatch) -> None:
    fast = _reclaim_demo()
    # The plain twin: every candidate may reclaim (the span covers every gang)
    # and each rule keeps answers of its own.
    monkeypatch.setattr(guarantee.Guarantees, "may_reclaim", lambda self, leaf, gpus: True)
    monkeypatch.setattr(guarantee.Guarantees, "reclaim_memo", lambda self, leaf, gpus: {})
    plain = _reclaim_demo()
    assert b'"reason":"reclaim"' in fast
    assert fast == plain


def test_the_balanced_log_is_the_same_without_the_narrowing_and_the_shared_memo(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The same for ``reclaim_balanced``: its bound (``may_reclaim_balanced``) and
    # its shared per-leaf rooms (``room_memo``) against a twin without them.
    fast = _reclaim_demo("reclaim_balanced")
    monkeypatch.setattr(guarantee.Guarantees, "may_reclaim_balanced",
                        lambda self, leaf, gpus, least: True)
    monkeypatch.setattr(guarantee.Guarantees, "room_memo", lambda self, leaf, gpus: {})
    plain = _reclaim_demo("reclaim_balanced")
    assert b'"reason":"reclaim"' in fast
    assert fast == plain
