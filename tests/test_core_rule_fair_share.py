"""``BudgetRule.reason`` answers ``fair_share`` exactly when ``Ranking.may_preempt`` says so.

``reason`` inlines ``fair_share``: it looks the victim's leaf up in the memo it
shares with every rule of the cycle for the same leaf and commitment, and on a
miss asks ``may_preempt`` directly. Checked against the plain comparison on
random trees (shares of 0 included), usages, commitments and admissions, asking
in random orders so that either path fills the memo first.
"""

from __future__ import annotations

import pytest
from test_core_ranking_exact import parting_of, plain_may_preempt, with_history

from projections.workloads import Workload
from scheduler.index.fair_share_order import Ranking, commitments
from scheduler.policy.rules import FAIR_SHARE, BudgetRule


def _workload(leaf: str, gpus: int, min_runtime_s: int) -> Workload:
    return Workload(id=f"w-{leaf}-{gpus}-{min_runtime_s}", budget=leaf, user="u", gpus=gpus,
                    hosts=1, gpus_per_host=gpus, min_runtime_s=min_runtime_s, resumable=False,
                    priority=0, kind="training", submitted_at=0, seq=0, submit_event="e")


def _threshold(r: Ranking, a: str, b: str) -> int | None:
    """The least commitment with which ``a`` may not take ``b``'s work, when shares decide it."""
    parting = parting_of(a, b)
    if parting is None:
        return None
    x, y = parting
    sx, sy = r.shares[x], r.shares[y]
    if sx <= 0 or sy <= 0:
        return None
    return -((r.use[x] * sy - r.use[y] * sx) // sy)  # ceil((use_y * sx - use_x * sy) / sy)


def _victim(leaf: str) -> Workload:
    v = _workload(leaf, 1, 60)
    v.placement = (("h0", 1),)  # type: ignore[assignment]
    return v


@pytest.mark.parametrize("seed", range(30))
def test_reason_is_fair_share_exactly_when_may_preempt_says_so(seed: int) -> None:
    s, leaves, rnd = with_history(seed)
    state = s.state
    r = Ranking(state, commitments(state))
    for _ in range(4):
        for a in leaves:
            for g, m in [(1, 60), (8, 3600), (64, 86400), (3, 7)]:
                rule = BudgetRule(r, _workload(a, g, m))
                for b in rnd.sample(leaves, len(leaves)):
                    if b == a:
                        continue
                    plain = plain_may_preempt(r, a, g * m, b)
                    if rnd.random() < 0.3:
                        assert rule.fair_share(b) is plain
                    assert (rule.reason(_victim(b)) == FAIR_SHARE) is plain, (a, b, g * m)
                    assert rule.fair_share(b) is plain
        for a in leaves:  # commitments on both sides of the threshold
            for b in leaves:
                t = _threshold(r, a, b)
                if b == a or t is None:
                    continue
                for c in (t - 1, t, t + 1):
                    rule = BudgetRule(r, _workload(a, 1, c))
                    assert (rule.reason(_victim(b)) == FAIR_SHARE) is (c < t), (a, b, c, t)
                    assert (rule.reason(_victim(b)) == FAIR_SHARE) is plain_may_preempt(r, a, c, b)
        r.commit(rnd.choice(leaves), rnd.randint(1, 10**5))
