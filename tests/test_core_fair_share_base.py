"""The fair-share base kept across cycles (``scheduler.index.fair_share_order.FairShareBase``) is the one built afresh.

A cycle's order starts from the usage at the fair-share instant plus the
running allocated work's commitments. Inside one instant the base is advanced
by replaying the running set's journal (``WorkloadsProjection.moves``), and to
a later instant it is moved (``FairShareBase.move_to``), instead of being
rebuilt. These tests run whole scenarios and, at every order a cycle builds,
demand that the kept base equals a fresh one: the same commitments, the same
sums at every node, and every level it kept sorted in the order a plain sort
of the keys gives. They also check that advancing and moving really happened
(so the comparison proves something), and that a base which forgot to re-sort
the levels above a moved leaf, or whose children's sums changed with the
instant, is caught. The pruned walk lending uses (``Ranking.iter_leaves_in``)
is compared with the full walk.
"""

from __future__ import annotations

import random

import pytest
from sim_helpers import shipped_log

from scheduler.index import fair_share_order as ranking_mod
from scheduler.index.fair_share_order import FairShareBase, Ranking, commitments, fair_share_time
from scheduler.state import State


def _fresh(state: State) -> FairShareBase:
    return FairShareBase(state, fair_share_time(state))


def _plain_order(state: State, use: dict[str, int], path: str) -> list[str]:
    """The level sorted by its key tuples, with none of Ranking's machinery."""
    st = state.budget.structure()

    def key(c: str) -> tuple[int, float, int, str]:
        s = st.shares[c]
        return (1, 0.0, 0, c) if s <= 0 else (0, use[c] / s, -s, c)

    return sorted(st.children[path], key=key)


class Watch:
    def __init__(self) -> None:
        self.orders = 0     # orders built from the state's base
        self.advanced = 0   # of those, from a base advanced over starts and stops
        self.moved = 0      # of those, from a base moved to a later instant
        self.kept = 0       # sorted levels an advanced base carried over
        self.gaps = 0       # bases rebuilt because the journal no longer reached back to them
        self.wrong: list[str] = []


def _watch(monkeypatch: pytest.MonkeyPatch) -> Watch:
    seen = Watch()
    init = Ranking.__init__
    current = FairShareBase.current

    def checked_current(self: FairShareBase, state: State, fs: int) -> bool:
        before = self.running_version
        was_at = self.fs
        behind = state.workloads.running_version - before
        ok = current(self, state, fs)
        seen.advanced += ok and self.running_version != before
        seen.moved += ok and fs != was_at
        seen.gaps += not ok and fs == self.fs and behind > len(state.workloads.moves)
        return ok

    def checked_init(self: Ranking, state: State, committed: dict[str, int]) -> None:
        init(self, state, committed)
        base = state.memos.fair_share
        assert isinstance(base, FairShareBase)
        if committed is not base.committed:
            return
        seen.orders += 1
        fresh = _fresh(state)
        if base.committed != fresh.committed:
            seen.wrong.append(f"commitments at {state.now}")
        if base.use != fresh.use or self.use != fresh.use:
            seen.wrong.append(f"sums at {state.now}")
        for path, order in base.sorted_levels.items():
            seen.kept += 1
            if order != _plain_order(state, fresh.use, path):
                seen.wrong.append(f"level {path} at {state.now}")

    monkeypatch.setattr(FairShareBase, "current", checked_current)
    monkeypatch.setattr(Ranking, "__init__", checked_init)
    return seen


@pytest.mark.parametrize(("name", "days"), [("ai2-month", 2.0), ("demo", None)])
def test_an_advanced_base_equals_a_fresh_one(name: str, days: float | None,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _watch(monkeypatch)
    shipped_log(name, days)
    assert not seen.wrong, seen.wrong[:5]
    # Most orders are built after starts and stops inside one fair-share period,
    # and the base carried sorted levels across them: the check above bites.
    assert seen.orders > 100
    assert seen.advanced > seen.orders // 4
    assert seen.moved > seen.orders // 20
    assert seen.kept > seen.orders


def test_a_base_that_keeps_stale_levels_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A mutant that never re-sorts the levels above a moved leaf must show up as wrong levels."""
    advance = FairShareBase.advance

    def keeps_everything(self: FairShareBase, moves: list[object], parent: dict[str, str | None]) -> None:
        sorted_levels = self.sorted_levels
        advance(self, moves, parent)  # type: ignore[arg-type]
        self.sorted_levels = sorted_levels

    monkeypatch.setattr(FairShareBase, "advance", keeps_everything)
    seen = _watch(monkeypatch)
    shipped_log("ai2-month", 1.0)
    assert any(w.startswith("level") for w in seen.wrong)


def test_a_moved_base_that_keeps_stale_levels_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A mutant that keeps every sorted level across instants must show up as wrong levels."""
    move_to = FairShareBase.move_to

    def keeps_everything(self: FairShareBase, state: State, fs: int, moves: list[object]) -> None:
        sorted_levels = dict(self.sorted_levels)
        move_to(self, state, fs, moves)  # type: ignore[arg-type]
        self.sorted_levels = sorted_levels

    monkeypatch.setattr(FairShareBase, "move_to", keeps_everything)
    seen = _watch(monkeypatch)
    shipped_log("ai2-month", 1.0)
    assert any(w.startswith("level") for w in seen.wrong)


def test_a_moved_base_that_keeps_old_terms_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A mutant that moves to a later instant without re-reading usage must show up as wrong sums."""

    def stays(self: FairShareBase, state: State, fs: int, moves: list[object]) -> None:
        self.fs = fs

    monkeypatch.setattr(FairShareBase, "move_to", stays)
    seen = _watch(monkeypatch)
    shipped_log("ai2-month", 0.5)
    assert any(w.startswith("sums") for w in seen.wrong)


def test_the_log_is_the_same_when_every_order_is_built_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    kept = shipped_log("ai2-month", 2.0)
    monkeypatch.setattr(FairShareBase, "current", lambda self, state, fs: False)
    assert shipped_log("ai2-month", 2.0) == kept


def test_an_old_journal_is_not_replayed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A base further behind than the journal reaches is rebuilt, not advanced from a gap."""
    monkeypatch.setattr("projections.workloads.MOVES_KEPT", 4)
    seen = _watch(monkeypatch)
    shipped_log("demo", None)
    assert seen.gaps > 0
    assert not seen.wrong, seen.wrong[:5]


def test_commitments_are_shared_until_the_running_set_moves() -> None:
    state = State()
    first = commitments(state)
    assert commitments(state) is first
    assert Ranking(state, first).use == Ranking(state, dict(first)).use


@pytest.mark.parametrize("seed", range(20))
def test_the_pruned_walk_keeps_the_full_walks_order(seed: int) -> None:
    """``iter_leaves_in`` yields the wanted leaves exactly as ``iter_leaves`` orders them."""
    from core_helpers import Sim

    rnd = random.Random(seed)
    tree = [("lab", 1, ("admin",))]
    leaves = []
    for p in range(rnd.randint(1, 4)):
        tree.append((f"lab/p{p}", rnd.randint(0, 3), ()))
        for q in range(rnd.randint(1, 4)):
            leaf = f"lab/p{p}/q{q}"
            tree.append((leaf, rnd.randint(0, 5), ()))
            leaves.append(leaf)
    s = Sim(tuple(tree), hosts=1)
    for leaf in leaves:
        if rnd.random() < 0.6:
            s.run_history(leaf, rnd.randint(1, 8), rnd.randint(60, 6000))
    state = s.engine.state
    r = Ranking(state, commitments(state))
    wanted = set(rnd.sample(leaves, rnd.randint(0, len(leaves)))) | {"lab/gone"}
    assert list(r.iter_leaves_in(wanted)) == [leaf for leaf in r.iter_leaves() if leaf in wanted]


def test_the_fair_share_memo_key_is_the_base(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every order of a run asks the base (so the checks above see every order)."""
    calls = []
    real = ranking_mod.fair_share_base
    monkeypatch.setattr(ranking_mod, "fair_share_base", lambda st: calls.append(1) or real(st))
    shipped_log("demo", None)
    assert calls
