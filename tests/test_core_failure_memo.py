"""The cycle's failure memo (scheduler/index/failure_memo.py) changes no decision, and is really used.

A victim search or reservation plan that failed at a world the cycle has not
changed is not run again at the same world (see scheduler/index/failure_memo.py
for the key); a search failure of an earlier victim index of the world (fewer
protections ended) is re-checked on the new victims' hosts only, and the
preemption bound ``freeable`` is kept there too. These tests run whole scenarios with the memo and with it
turned off and demand byte-identical logs, and check that the memo skipped a
real share of the work (so the comparison proves something). The priming of
keep values, the memo's one repeated effect, is tested on its own.
"""

from __future__ import annotations

import pytest
from sim_helpers import shipped_log

from scheduler.index.victim_index import VictimIndex
from scheduler.policy import cycle as cycle_mod
from scheduler.policy.victims import CostModel


class Counts:
    def __init__(self) -> None:
        self.asked = 0      # searches the cycle asked for
        self.searched = 0   # searches really run
        self.planned = 0    # reservation plans really worked out
        self.held = 0       # failures of an earlier victim index re-checked and still failing


@pytest.fixture
def counts(monkeypatch: pytest.MonkeyPatch) -> Counts:
    c = Counts()
    ask, real, plan = cycle_mod.Cycle.search, cycle_mod.cheapest_plan, cycle_mod.ready_times
    recheck = cycle_mod.fails_again

    def asked(self, *a, **k):  # type: ignore[no-untyped-def]
        c.asked += 1
        return ask(self, *a, **k)

    def searched(*a, **k):  # type: ignore[no-untyped-def]
        c.searched += 1
        return real(*a, **k)

    def planned(*a, **k):  # type: ignore[no-untyped-def]
        c.planned += 1
        return plan(*a, **k)

    def rechecked(*a, **k):  # type: ignore[no-untyped-def]
        out = recheck(*a, **k)
        c.held += out is not None
        return out

    monkeypatch.setattr(cycle_mod.Cycle, "search", asked)
    monkeypatch.setattr(cycle_mod, "fails_again", rechecked)
    monkeypatch.setattr(cycle_mod, "cheapest_plan", searched)
    monkeypatch.setattr(cycle_mod, "ready_times", planned)
    return c


@pytest.mark.parametrize(("name", "days"), [("ai2-month", 3.0), ("demo", None),
                                            ("ai2-month-heavy", 2.0)])
def test_the_log_is_the_same_without_the_memo(name: str, days: float | None, counts: Counts,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    with_memo = shipped_log(name, days)
    asked, searched, planned = counts.asked, counts.searched, counts.planned
    monkeypatch.setattr(cycle_mod.Cycle, "failures", lambda self: None)
    without = shipped_log(name, days)
    assert with_memo == without
    assert counts.asked - asked == asked, "the same searches were asked for"
    if name != "demo":  # the demo is too small for repeats; the month runs are not
        assert searched < 0.95 * asked, f"the memo skipped too little: {searched} of {asked}"
        assert planned < counts.planned - planned, "no reservation plan was skipped"
        assert counts.held > 0, "no failure outlived a protection's end"


def test_a_recheck_that_ignores_new_victims_changes_the_log(monkeypatch: pytest.MonkeyPatch) -> None:
    """The re-checks decide real cases: trusting every earlier failure would change decisions.

    (So the comparison above, with and without the memo, is a test of
    ``victims.fails_again``, not of searches that would fail anyway.)
    """
    # Under the fair-share rule, where protections ending on busy hosts decide
    # most searches (under the default reclaim rule these two days happen not
    # to depend on a re-check).
    old_rule = {"preemption_rule": "fair_share", "borrowed_protection_s": None}
    right = shipped_log("ai2-month-heavy", 2.0, **old_rule)
    monkeypatch.setattr(cycle_mod, "fails_again",
                        lambda idx, kind, seen, *a, **k: (kind, seen, set()))
    assert shipped_log("ai2-month-heavy", 2.0, **old_rule) != right


def test_priming_fixes_the_keep_value_as_costing_would() -> None:
    seen: list[str] = []

    def keep(leaf: str) -> int:
        seen.append(leaf)
        return len(seen)

    costs = CostModel(0, lambda w: None, keep)
    costs.fix_keep_value("lab/a")
    costs.fix_keep_value("lab/a")
    assert seen == ["lab/a"], "primed once, then fixed for the cycle"
    costs.budgets_asked = budgets_asked = set()
    costs.fix_keep_value("lab/b")
    assert budgets_asked == set(), "fixing a keep value is not costing"


def _freeable_by_loop(cycle: cycle_mod.Cycle, idx: VictimIndex, leaf: str,
                      commitment: int, priority: int | None) -> int:
    """The preemption bound as a walk over every sibling (what ``_siblings`` replaces)."""
    from scheduler.policy.fair_share import less_used

    by_node = idx.by_node
    own = by_node.get(leaf, 0) if priority is None else idx.lower_priority_gpus(leaf, priority)
    have = cycle.capacity.total_free + idx.unallocated_gpus + own
    r = cycle.ranking
    path = r.paths[leaf]
    # Under reclaim any sibling may be borrowing: every sibling's victims count.
    reclaim = cycle.policy.preemption_rule == "reclaim"
    for i in range(1, len(path)):
        x = path[i]
        sx = r.shares[x]
        if sx <= 0:
            break
        for y in r.children[path[i - 1]]:
            if y != x and y in by_node and (
                    reclaim or less_used(r.use[x], sx, r.use[y], r.shares[y], commitment)):
                have += by_node[y]
    return have


@pytest.mark.parametrize("rule", ["reclaim", "fair_share"])
@pytest.mark.parametrize("name,days", [("demo", None), ("ai2-month", 2.0)])
def test_the_bound_from_sorted_sibling_sums_is_the_walk_over_siblings(
        monkeypatch: pytest.MonkeyPatch, name: str, days: float | None, rule: str) -> None:
    """Every preemption bound a run asks for equals the sum over siblings it replaces."""
    real = cycle_mod.Cycle.freeable
    asked: list[int] = []

    def checked(self, leaf, commitment, priority=None, gpus=0, per_host=1):  # type: ignore[no-untyped-def]
        # (gpus and per_host matter only under the balanced rules, not run here.)
        got = real(self, leaf, commitment, priority, gpus, per_host)
        assert got == _freeable_by_loop(self, self.victims(), leaf, commitment, priority), \
            (leaf, commitment)
        asked.append(commitment)
        return got

    monkeypatch.setattr(cycle_mod.Cycle, "freeable", checked)
    shipped_log(name, days, preemption_rule=rule)
    assert len(asked) > 1000
    assert len(set(asked)) > 50  # many commitments, not one


@pytest.mark.parametrize("name,days", [("demo", None), ("ai2-month", 6.0)])
def test_the_balanced_room_bound_refuses_only_searches_that_fail(
        monkeypatch: pytest.MonkeyPatch, name: str, days: float | None) -> None:
    """Under ``reclaim_room`` the per-side room bound only skips searches that would fail.

    Wherever ``could_free`` says no, the search it skips is run anyway (its
    answer not used): it finds no plan, or one the per-side check refuses.
    """
    real = cycle_mod.Cycle.could_free
    refused: list[str] = []

    def checked(self, w, commitment):  # type: ignore[no-untyped-def]
        ok = real(self, w, commitment)
        if not ok:
            plan = self.search(w, self.now + w.min_runtime_s, None)
            assert plan is None or not self.balanced_set(w, plan), w.id
            refused.append(w.id)
        return ok

    monkeypatch.setattr(cycle_mod.Cycle, "could_free", checked)
    shipped_log(name, days, preemption_rule="reclaim_room")
    if name == "ai2-month":
        assert refused  # the bound said no somewhere: the check is not vacuous
