"""Guaranteed and borrowed GPUs: the line between "within my share" and "borrowing".

Every budget node is *guaranteed* its fraction of the cluster's GPUs now: the
product, along its path, of its share over its siblings' shares, times the
GPUs present (the lab's "owed" figure uses the same fraction of the same
GPUs, hour by hour). A node *holds* the GPUs its allocated running work uses,
its subtree's included. Funded work that starts while every node on its path
still holds no more than its guarantee, itself included, starts *within its
share*; work that starts beyond it *borrows* what others are not using.

The policy treats the two differently (``borrowed_protection_s``): work within
its share is protected for its whole minimum runtime, borrowed work only for
up to ``borrowed_protection_s``, so that a team coming back to its idle share
takes it back within that time rather than after up to eight hours (Kueue
reclaims borrowed quota by preemption at once; KAI protects only what is
within a queue's guarantee). Everything is exact integer arithmetic over the
state: ``(held + gpus) * den <= gpus_present * num``, with ``num / den`` the
node's fraction of the cluster.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from projections.budget_tree import Structure
    from scheduler.state import State

# The ``preemption_rule`` values whose balanced test asks for a margin of
# ``RECLAIM_MARGIN_PCT`` points of use per guarantee (``node_room``, condition 3):
# hysteresis, so two sides near balance do not trade GPUs back and forth.
MARGIN_RULES = ("reclaim_room_margin", "reclaim_room_checkpoint_margin")
RECLAIM_MARGIN_PCT = 10


class Guarantees:
    """Each node's guarantee and what it holds, at one moment of one cycle.

    Built from the state at the first question of a cycle, leaving out the work
    the cycle already ``stopped``; the cycle tells it of every start and stop it
    decides after that (``take``, ``give``).
    """

    __slots__ = ("_lockouts", "_reclaims", "_rooms", "fraction", "gpus", "held", "margin", "paths",
                 "siblings")

    def __init__(self, state: State, stopped: Collection[str] = ()) -> None:
        # Answers of ``reclaims`` per (candidate leaf, GPUs), each a dict by victim
        # leaf. Key: the candidate; lapse: any take or give (a new dict then, so a
        # rule holding the old one keeps the answers of its own search).
        self._reclaims: dict[tuple[str, int], dict[str, bool]] = {}
        # Answers of ``room`` per (candidate leaf, GPUs), each a dict by victim leaf;
        # the same key and lapse.
        self._rooms: dict[tuple[str, int], dict[str, int]] = {}
        # Answers of ``lockout`` per candidate leaf, each a dict by victim leaf; the
        # same lapse.
        self._lockouts: dict[str, dict[str, bool]] = {}
        shape = _shape(state)
        self.gpus = state.cluster_state.capacity
        # (The tree's tables: shared by every cycle until the tree changes, only read.)
        self.fraction = shape.fraction
        self.paths = shape.paths
        self.siblings = shape.siblings
        self.held: dict[str, int] = {}
        # The balanced test's margin, in percentage points of use per guarantee
        # (``RECLAIM_MARGIN_PCT`` under ``MARGIN_RULES``; 0: none, see ``node_room``).
        self.margin: int = (RECLAIM_MARGIN_PCT if state.policy.preemption_rule in MARGIN_RULES
                            else 0)
        for w in state.workloads.running.values():
            if w.allocated and w.id not in stopped:
                self.take(w.budget, w.gpus)

    def within(self, leaf: str, gpus: int) -> bool:
        """Would ``gpus`` more for ``leaf`` keep every node on its path within its guarantee?"""
        for node in self.paths.get(leaf, ()):
            num, den = self.fraction[node]
            if (self.held.get(node, 0) + gpus) * den > self.gpus * num:
                return False
        return True

    def node_within(self, node: str, gpus: int) -> bool:
        """Would ``gpus`` more keep ``node`` itself within its guarantee?"""
        num, den = self.fraction.get(node, (0, 1))
        return (self.held.get(node, 0) + gpus) * den <= self.gpus * num

    def borrowing(self, node: str) -> bool:
        """Does ``node`` hold more than it is guaranteed?"""
        num, den = self.fraction.get(node, (0, 1))
        return self.held.get(node, 0) * den > self.gpus * num

    def sides(self, leaf: str, other: str) -> tuple[str, str] | None:
        """The two siblings where the paths of ``leaf`` and ``other`` part (None if one holds the other)."""
        a = self.paths.get(leaf)
        b = self.paths.get(other)
        if a is None or b is None:
            return None
        for x, y in zip(a, b, strict=False):
            if x != y:
                return x, y
        return None

    def reclaims(self, leaf: str, gpus: int, victim_leaf: str) -> bool:
        """May work of ``leaf`` on ``gpus`` GPUs take back borrowed GPUs from ``victim_leaf``?

        Where the two paths part, the victim's side holds more than its guarantee
        and the candidate's side, ``gpus`` added, holds no more than its own.
        """
        sides = self.sides(leaf, victim_leaf)
        return sides is not None and self.borrowing(sides[1]) and self.node_within(sides[0], gpus)

    def reclaim_memo(self, leaf: str, gpus: int) -> dict[str, bool]:
        """The memo of ``reclaims(leaf, gpus, victim_leaf)`` by victim leaf, until the next take or give."""
        memo = self._reclaims.get((leaf, gpus))
        if memo is None:
            memo = self._reclaims[(leaf, gpus)] = {}
        return memo

    def may_reclaim(self, leaf: str, gpus: int) -> bool:
        """Could work of ``leaf`` on ``gpus`` GPUs reclaim from any leaf at all?

        False unless some node on its path stays within its guarantee with
        ``gpus`` added while a sibling of it borrows: every ``reclaims`` answer
        is then False (its two sides are such a node and sibling).
        """
        for node in self.paths.get(leaf, ()):
            if self.node_within(node, gpus) and any(self.borrowing(s) for s in self.siblings[node]):
                return True
        return False

    # -- the balanced reclaim (``preemption_rule = "reclaim_balanced"``) --------------

    def node_room(self, a: str, b: str, gpus: int) -> int:
        """How many GPUs side ``a``'s work on ``gpus`` GPUs may take back from its sibling ``b``.

        The balanced reclaim's test, per pair of sides, for a victim set taking
        ``t`` GPUs from ``b`` (exact integers; ``G`` a side's guarantee, ``h``
        what it holds now):

        1. ``h_a < G_a``: the taker's side is strictly under its guarantee before
           the start (so a side at or past its own never reclaims);
        2. ``h_b - t >= G_b``: the victim's side is still at or above its own
           after the move (work within its share is never taken);
        3. ``(h_a + gpus) / G_a <= (h_b - t) / G_b``: after the move the taker's
           side is no more used per guarantee than the victim's (so the victim's
           side has no claim to take the GPUs back: the issue's last goal); under
           ``"reclaim_room_margin"`` (margin m points), less used by at least m / 100
           (hysteresis: two sides near balance do not trade GPUs as work ends).

        Returns the largest such ``t`` (0 or less: none). Every allowed move
        lowers the total shortfall ``sum(max(0, G - h))`` (the taker's side was
        short, the victim's side stays at or above its guarantee), so GPUs
        cannot go back and forth. Unlike the plain reclaim (``node_within``), a
        gang larger than its side's guarantee may reclaim, from sides with
        enough excess: the lock-out of a big gang behind borrowed work ends.
        """
        na, da = self.fraction.get(a, (0, 1))
        nb, db = self.fraction.get(b, (0, 1))
        ha = self.held.get(a, 0)
        hb = self.held.get(b, 0)
        cap = self.gpus
        if ha * da >= cap * na:
            return 0  # 1. not strictly under its guarantee (a side with no share never is)
        # 2. (hb - t) * db >= cap * nb, i.e. t <= hb - ceil(cap * nb / db)
        keep = -((-cap * nb) // db)
        m = self.margin
        if not m:
            # 3. (ha + gpus) * nb * da <= (hb - t) * na * db (cap cancels), i.e.
            #    t <= hb - ceil((ha + gpus) * nb * da / (na * db))
            keep_balanced = -((-(ha + gpus) * nb * da) // (na * db))
        else:
            # 3 with the margin (``RECLAIM_MARGIN_PCT``, m points):
            #    (ha + gpus) / G_a + m / 100 <= (hb - t) / G_b, times 100 * cap * na * nb:
            #    100 * (ha + gpus) * da * nb + m * cap * na * nb <= 100 * (hb - t) * db * na
            keep_balanced = -((-(100 * (ha + gpus) * da * nb + m * cap * na * nb))
                              // (100 * db * na))
        return hb - max(keep, keep_balanced)

    def room(self, leaf: str, gpus: int, victim_leaf: str) -> int:
        """``node_room`` of the two sides where the paths of ``leaf`` and ``victim_leaf`` part (0: none)."""
        sides = self.sides(leaf, victim_leaf)
        return 0 if sides is None else self.node_room(sides[0], sides[1], gpus)

    def room_memo(self, leaf: str, gpus: int) -> dict[str, int]:
        """The memo of ``room(leaf, gpus, victim_leaf)`` by victim leaf, until the next take or give."""
        memo = self._rooms.get((leaf, gpus))
        if memo is None:
            memo = self._rooms[(leaf, gpus)] = {}
        return memo

    def may_reclaim_balanced(self, leaf: str, gpus: int, least: int) -> bool:
        """Could work of ``leaf`` on ``gpus`` GPUs take ``least`` GPUs from any side at all?

        False unless some node on its path has a sibling with ``node_room`` of at
        least ``least``: every ``room`` answer is one of those.
        """
        for node in self.paths.get(leaf, ()):
            for s in self.siblings[node]:
                if self.node_room(node, s, gpus) >= least:
                    return True
        return False

    def lockout(self, leaf: str, victim_leaf: str) -> bool:
        """May a reservation of ``leaf`` be planned on work of ``victim_leaf`` (the lock-out bound)?

        Where the paths part, the candidate's side is strictly under its
        guarantee and the victim's side holds more than its own. The balanced
        test alone can leave such a candidate waiting for as long as borrowed
        work runs (an indivisible gang holds all of a side's excess and more:
        Kueue's "preempt huge workload"); the reservation planner may count that
        work as freeable, so the candidate's wait is bounded by the
        reservation's (docs/simulation.md). The victims are then taken with the
        reason ``reservation``, not ``reclaim``.
        """
        sides = self.sides(leaf, victim_leaf)
        if sides is None:
            return False
        a, b = sides
        na, da = self.fraction.get(a, (0, 1))
        return self.held.get(a, 0) * da < self.gpus * na and self.borrowing(b)

    def may_lockout(self, leaf: str) -> bool:
        """Could ``lockout(leaf, victim_leaf)`` be True for any victim leaf?

        Some node on ``leaf``'s path is strictly under its guarantee while a
        sibling of it borrows: every ``lockout`` answer is such a pair.
        """
        for node in self.paths.get(leaf, ()):
            num, den = self.fraction.get(node, (0, 1))
            if self.held.get(node, 0) * den < self.gpus * num and any(
                    self.borrowing(s) for s in self.siblings[node]):
                return True
        return False

    def lockout_memo(self, leaf: str) -> dict[str, bool]:
        """The memo of ``lockout(leaf, victim_leaf)`` by victim leaf, until the next take or give."""
        memo = self._lockouts.get(leaf)
        if memo is None:
            memo = self._lockouts[leaf] = {}
        return memo

    def balanced(self, leaf: str, gpus: int, taken: Iterable[tuple[str, int]]) -> bool:
        """Does a victim set keep the balanced reclaim's test for every side it takes from?

        ``taken``: (victim leaf, GPUs) of each allocated victim taken by reclaim.
        What a set takes from one side is the sum over its victims there, which a
        per-victim answer cannot see: the cycle checks the set with this before
        it stops anything.
        """
        by_side: dict[tuple[str, str], int] = {}
        for victim_leaf, g in taken:
            sides = self.sides(leaf, victim_leaf)
            if sides is None:
                return False
            by_side[sides] = by_side.get(sides, 0) + g
        return all(t <= self.node_room(a, b, gpus) for (a, b), t in by_side.items())

    def take(self, leaf: str, gpus: int) -> None:
        """Allocated work of ``leaf`` started on ``gpus`` GPUs."""
        self._reclaims = {}
        self._rooms = {}
        self._lockouts = {}
        held = self.held
        for node in self.paths.get(leaf, ()):
            held[node] = held.get(node, 0) + gpus

    def give(self, leaf: str, gpus: int) -> None:
        """Allocated work of ``leaf`` on ``gpus`` GPUs stopped."""
        self._reclaims = {}
        self._rooms = {}
        self._lockouts = {}
        held = self.held
        for node in self.paths.get(leaf, ()):
            held[node] = held.get(node, 0) - gpus


class GuaranteeShape:
    """The budget tree's tables the guarantees read: each node's fraction, path and siblings.

    Key: the tree's ``Structure`` (a new one after every budget edit); lapse:
    replaced when the state's structure is another object. Built once per tree,
    not once per cycle.
    """

    __slots__ = ("fraction", "paths", "siblings", "structure")

    def __init__(self, structure: Structure, nodes: Iterable[str]) -> None:
        self.structure = structure
        # Each node's fraction of the cluster as an exact (numerator, denominator).
        self.fraction: dict[str, tuple[int, int]] = {}
        totals = {parent: sum(structure.shares[s] for s in kids)
                  for parent, kids in structure.children.items()}
        for node in sorted(nodes, key=lambda p: (p.count("/"), p)):
            parent = structure.parent[node]
            if parent is None:
                self.fraction[node] = (1, 1)
                continue
            total = totals[parent]
            num, den = self.fraction[parent]
            self.fraction[node] = (num * structure.shares[node], den * total) if total else (0, 1)
        # Every node on a leaf's path below the root (the root is guaranteed everything).
        self.paths: dict[str, list[str]] = {p: path[1:] for p, path in structure.paths.items()}
        # Each node's siblings (the others under its parent), for ``may_reclaim``.
        self.siblings: dict[str, tuple[str, ...]] = {
            node: tuple(s for s in structure.children[parent] if s != node)
            for node in structure.parent if (parent := structure.parent[node]) is not None}


def _shape(state: State) -> GuaranteeShape:
    """The ``GuaranteeShape`` of the state's tree as it is now."""
    st = state.budget.structure()
    shape = state.memos.guarantee_shape
    if isinstance(shape, GuaranteeShape) and shape.structure is st:
        return shape
    shape = state.memos.guarantee_shape = GuaranteeShape(st, state.budget.nodes)
    return shape


def protection_end(now: int, min_runtime_s: int, within_share: bool,
                   borrowed_protection_s: int | None) -> int:
    """When a funded start stops being protected: its minimum runtime, shortened if it borrows.

    ``borrowed_protection_s`` None keeps every start protected for its minimum
    runtime (the policy before borrowing was told apart).
    """
    if within_share or borrowed_protection_s is None:
        return now + min_runtime_s
    return now + min(min_runtime_s, borrowed_protection_s)
