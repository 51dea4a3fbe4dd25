"""Sibling sums: per budget node, its children holding allocated victims, by usage per share.

The cycle's preemption bound (``Cycle.freeable``) asks, at each level of a
candidate's budget path, how many victim GPUs sit under the siblings it may
take from: under the fair-share rule those are a suffix of the siblings
ordered by usage per share (``fair_share.less_used``). One entry per parent
answers that with a bisection: the (usage, share) of its children holding
allocated victims, ascending by usage per share; per position, the victims'
GPUs from there to the end; and the GPUs under children with no share (any
candidate may take those). ``sums_of`` builds an entry; the objects below
keep entries while what they were built from holds.

Within a cycle (``SiblingSums``). Key: (the fair-share order's version,
victims left in the index). Lapse: a commitment (``Ranking.commit``) or a
victim stopped (``VictimIndex.discard``) drops the entries of the parents of
the nodes it moved (``moved``); any other change of the key drops them all.

Across cycles (``CarriedSums``, ``Memos.siblings``). Key: the four objects
the entries read (the order's ``use`` and ``shares`` dicts, the tree's
``children``, the index's ``by_node``), by identity and held (so ``is``
cannot meet a new object at a freed one's address). Before its first
commitment a cycle's ``use`` is a dict never changed in place (the fair-share
base's, or a fresh sum: ``Ranking.commit`` copies before charging), and
before its first victim stopped so is ``by_node`` (the memoised index's,
shared by its forks until one discards: ``VictimIndex.fork``); so a later
cycle at the same four objects reads the same integers and takes the
entries over. Lapse: any other object. ``Engine(accelerate=False)`` keeps
nothing across inputs; tests/test_core_cycle_carry.py checks every entry
handed out against one built afresh.
"""

from __future__ import annotations

from functools import cmp_to_key
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from scheduler.index.fair_share_order import Ranking
    from scheduler.index.victim_index import VictimIndex
    from scheduler.state import State

# One parent's entry: (usage, share) ascending by usage per share, suffix sums of
# victim GPUs, GPUs of children with no share.
Sums = tuple[list[tuple[int, int]], list[int], int]

# Up to this many children with victims, ``sums_of`` sorts them by insertion.
_INSERTION_SORT: Final = 16


def sums_of(children: list[str], use: dict[str, int], shares: dict[str, int],
            by_node: dict[str, int]) -> Sums:
    """The entry of a parent with ``children`` (see the module docstring).

    Sums of the same integers as a loop over the children: the bound reads the
    same totals from it.
    """
    ranked: list[tuple[int, int, int]] = []
    zero = 0
    for y in children:
        g = by_node.get(y)
        if g is None:
            continue
        sy = shares[y]
        if sy <= 0:
            zero += g
        else:
            ranked.append((use[y], sy, g))
    # Most parents hold victims under a few children: an insertion sort in native
    # integer arithmetic for those, no sort call. It moves an entry only past ones
    # strictly after it, so ties keep the children's order, as the stable sort
    # does: the same list.
    n = len(ranked)
    if n <= _INSERTION_SORT:
        for j in range(1, n):
            item = ranked[j]
            ui, si = item[0], item[1]
            i = j
            while i > 0:
                before = ranked[i - 1]
                if before[0] * si <= ui * before[1]:
                    break
                ranked[i] = before
                i -= 1
            ranked[i] = item
    else:
        ranked.sort(key=cmp_to_key(_by_use_per_share))
    gpus = [0] * (len(ranked) + 1)
    for j in range(len(ranked) - 1, -1, -1):
        gpus[j] = gpus[j + 1] + ranked[j][2]
    return [(u, s) for u, s, _ in ranked], gpus, zero


def _by_use_per_share(a: tuple[int, int, int], b: tuple[int, int, int]) -> int:
    """Order (usage, share, ...) by usage per share, in exact integers (shares > 0)."""
    d = a[0] * b[1] - b[0] * a[1]
    return (d > 0) - (d < 0)


class CarriedSums:
    """Entries carried across cycles (``Memos.siblings``), with the four objects they read."""

    __slots__ = ("by_node", "children", "shares", "sums", "use")

    def __init__(self, use: dict[str, int], by_node: dict[str, int], children: dict[str, list[str]],
                 shares: dict[str, int], sums: dict[str, Sums]) -> None:
        self.use = use
        self.by_node = by_node
        self.children = children
        self.shares = shares
        self.sums = sums


class SiblingSums:
    """One cycle's entries per parent, exact at ``at`` (order version, victims left).

    While ``shared``, ``sums`` is the state memo's dict (``CarriedSums``), copied
    before anything is dropped from it.
    """

    __slots__ = ("at", "shared", "state", "sums")

    def __init__(self, state: State) -> None:
        self.state = state
        self.sums: dict[str, Sums] = {}
        self.at: tuple[int, int] = (-1, -1)
        self.shared = False

    def of(self, parent: str, r: Ranking, idx: VictimIndex, stopped_any: bool) -> Sums:
        """``parent``'s entry at ``r``'s usage and ``idx``'s counts (``stopped_any``: the
        cycle has stopped some workload)."""
        at = (r.version, idx.size)
        if self.at != at:
            self.sums = self.take_over(r, idx, stopped_any)
            self.at = at
        found = self.sums.get(parent)
        if found is None:
            found = self.sums[parent] = sums_of(r.children[parent], r.use, r.shares, idx.by_node)
        return found

    def take_over(self, r: Ranking, idx: VictimIndex, stopped_any: bool) -> dict[str, Sums]:
        """The entries to start from: the state memo's when the cycle has committed nothing
        and stopped nobody and they were built at the same four objects; else none."""
        if r.version or stopped_any:  # (this cycle's own copies: changed in place)
            self.shared = False
            return {}
        use, by_node, children, shares = r.use, idx.by_node, r.children, r.shares
        memos = self.state.memos
        cached = memos.siblings
        if cached is not None and cached.use is use and cached.by_node is by_node \
                and cached.children is children and cached.shares is shares:
            sums = cached.sums
        else:
            sums = {}
            memos.siblings = CarriedSums(use, by_node, children, shares, sums)
        self.shared = True
        return sums

    def moved(self, nodes: list[str], was: tuple[int, int], parent: dict[str, str | None],
              now: tuple[int, int]) -> None:
        """Drop the entries of the parents (``parent``) of ``nodes``, whose usage or victim
        GPUs moved from key ``was`` to key ``now``.

        Entries not valid at ``was`` are stale anyway, dropped whole at the next read.
        """
        if self.at != was:
            return
        sums = self.sums
        if self.shared:  # the memo's keep the entries of the objects they were built at
            sums = self.sums = dict(sums)
            self.shared = False
        for node in nodes:
            p = parent.get(node)
            if p is not None:
                sums.pop(p, None)
        self.at = now


__all__ = ["CarriedSums", "SiblingSums", "Sums", "sums_of"]
