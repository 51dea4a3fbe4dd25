"""Hierarchical fair share: which allocation is served next, level by level.

Among siblings, the node with the lowest *usage per share* goes first (Slurm's
Fair Tree Level FS = S/U, inverted); ties go to the larger share, then the name.
A leaf's place in the global order is the tree walked depth first with every
node's children in that order, so a node never jumps ahead of an under-served
sibling of one of its ancestors.

*Usage* here is the GPU-seconds charged inside the lookback window plus the
charge already committed by running allocated workloads (GPUs x protected time
left). Counting the commitment keeps the key continuous over time (usage grows
exactly as the commitment shrinks) and lets one cycle spread a burst of free
GPUs across allocations: each admission commits its minimum runtime and moves
its allocation down the order at once.

Everything is integers (GPU-seconds, share weights), so comparisons are exact.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

import msgspec

from scheduler.rules import less_used

KEEP_MAX = (1 << 20) - 1  # the largest keep_value (a leaf that has used nothing)

if TYPE_CHECKING:
    from projections.workloads import Move
    from scheduler.state import State


def fair_share_time(state: State) -> int:
    """The instant fair share is evaluated at: now, rounded down to the policy's period."""
    period = state.policy.fair_share_period_s
    return state.now - state.now % period


def commitments(state: State) -> dict[str, int]:
    """GPU-seconds each leaf's running allocated workloads are still protected for.

    Counted from the fair-share instant (see ``fair_share_time``), so that usage
    (read exactly at that instant) plus commitment stays constant while work
    runs: what accrues is exactly what the commitment loses. Do not change the
    dict returned: it is shared until the running set or the instant changes.
    """
    return _fair_share_base(state).committed


def _commitment(gpus: int, allocated: bool, until: int | None, started_at: int | None,
                now: int) -> int:
    """One running workload's part of ``commitments`` at the fair-share instant ``now``."""
    if not allocated or until is None:
        return 0
    # Measured from the fair-share instant, or from its start if it began later
    # (its run since then is not in the usage read at that instant).
    since = now if started_at is None or started_at < now else started_at
    return gpus * (until - since) if until > since else 0


def _sums(state: State, committed: dict[str, int], fs: int) -> dict[str, int]:
    """Every node's usage at the fair-share instant ``fs`` plus ``committed``, leaves up."""
    st = state.budget.structure()
    use = state.usage.usage_of(st.leaves, fs)
    for leaf, c in committed.items():
        if leaf in use:
            use[leaf] += c
    for path, kids in st.internal:
        use[path] = sum([use[c] for c in kids])
    return use


class _FairShareBase:
    """What every cycle's order starts from, kept across cycles (in ``State.memo``).

    At one fair-share instant, tree and policy, the usage read at the instant
    does not change (``UsageProjection.usage_of``), so the order's inputs change
    only with the running set, through the commitments. Those are a sum of one
    integer per running workload (``_commitment``), so a start or stop moves
    exactly its workload's term: replaying the running set's journal
    (``WorkloadsProjection.moves``) onto the sums gives the same integers as
    summing afresh, and a level whose children's sums did not move keeps its
    sorted order (``pristine``), which is a function of those sums alone.
    Anything else (a new instant, tree or policy, or a journal that no longer
    reaches back far enough) builds the base afresh.
    """

    __slots__ = ("committed", "fs", "parts", "policy", "pristine", "running_version", "tree",
                 "tree_version", "use")

    def __init__(self, state: State, fs: int) -> None:
        tree = state.budget
        self.fs = fs
        self.tree = tree
        self.tree_version = tree.version
        self.policy = state.policy
        self.running_version = state.workloads.running_version
        # Each contributing running workload's term: id -> (leaf, GPU-seconds).
        parts: dict[str, tuple[str, int]] = {}
        committed: dict[str, int] = {}
        for w in state.workloads.running.values():
            c = _commitment(w.gpus, w.allocated, w.protected_until, w.started_at, fs)
            if c:
                parts[w.id] = (w.budget, c)
                committed[w.budget] = committed.get(w.budget, 0) + c
        self.parts = parts
        self.committed = committed
        self.use = _sums(state, committed, fs)
        # Each level sorted at this base's sums, filled as cycles walk the tree
        # (``Ranking.sorted_children`` before any in-cycle commitment).
        self.pristine: dict[str, list[str]] = {}

    def current(self, state: State, fs: int) -> bool:
        """Whether this base is (or can be brought up to) the state's, advancing it if so."""
        tree = state.budget
        if fs != self.fs or tree is not self.tree or tree.version != self.tree_version \
                or state.policy != self.policy:
            return False
        wl = state.workloads
        behind = wl.running_version - self.running_version
        if not behind:
            return True
        moves = wl.moves
        if behind < 0 or behind > len(moves):
            return False
        self._advance(moves[len(moves) - behind:], tree.structure().parent)
        self.running_version = wl.running_version
        return True

    def _advance(self, moves: list[Move], parent: dict[str, str | None]) -> None:
        # ``committed``, ``use`` and ``pristine`` are replaced, never changed in
        # place: a Ranking or a caller may still hold the old ones.
        parts = self.parts
        delta: dict[str, int] = {}
        for m in moves:
            if m.started_at is None:  # a stop: take back its term, if it had one
                part = parts.pop(m.id, None)
                if part is not None:
                    delta[part[0]] = delta.get(part[0], 0) - part[1]
            else:
                c = _commitment(m.gpus, m.allocated, m.protected_until, m.started_at, self.fs)
                if c:
                    parts[m.id] = (m.budget, c)
                    delta[m.budget] = delta.get(m.budget, 0) + c
        if not any(delta.values()):
            return
        committed = dict(self.committed)
        use = dict(self.use)
        stale: set[str] = set()
        for leaf, d in delta.items():
            if not d:
                continue
            left = committed.get(leaf, 0) + d
            if left:
                committed[leaf] = left
            else:
                del committed[leaf]
            if leaf in use:
                p: str | None = leaf
                while p is not None:
                    use[p] += d
                    p = parent.get(p)
                    if p is not None:
                        stale.add(p)
        self.committed = committed
        self.use = use
        self.pristine = {p: order for p, order in self.pristine.items() if p not in stale}


def _fair_share_base(state: State) -> _FairShareBase:
    fs = fair_share_time(state)
    base = state.memo.get("fair_share")
    if isinstance(base, _FairShareBase) and base.current(state, fs):
        return base
    base = _FairShareBase(state, fs)
    state.memo["fair_share"] = base
    return base


class Level(msgspec.Struct, frozen=True):
    """One level of a leaf's rank key, for explanations."""

    node: str
    usage_gpu_s: int           # window usage + committed, GPU-seconds
    usage_fraction: float      # of the parent's usage (0 when the parent has none)
    share_fraction: float      # of the parent's shares
    ratio: float               # usage_fraction / share_fraction: < 1 means under-served
    position: int              # 1-based place among its siblings
    siblings: int


class Ranking:
    """The fair-share order for one cycle; admissions update it as the cycle goes."""

    __slots__ = ("_dirty", "_fair", "_paths", "_pristine", "_sorted", "active", "children", "parent",
                 "shares", "tree", "use", "version")

    def __init__(self, state: State, committed: dict[str, int]) -> None:
        tree = state.budget
        self.tree = tree
        st = tree.structure()
        self.shares = st.shares
        self.children = st.children
        self.parent = st.parent
        # The order at the cycle's start is a function of the usage at the
        # fair-share instant, the commitments, the tree and the policy: kept
        # across cycles (``_FairShareBase``), with every level sorted at that
        # order (``_pristine``; a level sorted after an in-cycle commitment is
        # not kept).
        base = _fair_share_base(state)
        if committed is base.committed:
            self.use: dict[str, int] = dict(base.use)
            self._pristine: dict[str, list[str]] = base.pristine
        else:  # commitments other than the state's: nothing to share
            self.use = _sums(state, committed, fair_share_time(state))
            self._pristine = {}
        # Sorted lists are replaced, never changed in place, so they can be shared.
        self._sorted: dict[str, list[str]] = dict(self._pristine)
        self._dirty: set[str] = set(self.children).difference(self._pristine)
        self.active: dict[str, int] = {}
        self._paths: dict[str, list[str]] = st.paths
        self.version = 0  # bumped by every in-cycle commitment
        # (leaf, commitment) -> victim leaf -> may_preempt: shared by every rule of
        # the cycle for the same candidate leaf and commitment until a commitment
        # changes usage (``commit`` clears it). may_preempt reads only those and
        # ``use``, so a shared answer is the answer.
        self._fair: dict[tuple[str, int], dict[str, bool]] = {}

    # -- order -------------------------------------------------------------------

    def _key(self, path: str) -> tuple[int, float, int, str]:
        s = self.shares[path]
        if s <= 0:
            return (1, 0.0, 0, path)  # zero-share nodes are served last
        return (0, self.use[path] / s, -s, path)

    def sorted_children(self, path: str) -> list[str]:
        if path in self._dirty:
            order = self._sorted[path] = sorted(self.children[path], key=self._key)
            self._dirty.discard(path)
            if not self.version:
                self._pristine[path] = order
        return self._sorted[path]

    def leaf_order(self) -> list[str]:
        """Every leaf, best-served-next first."""
        return list(self.iter_leaves())

    def iter_leaves(self) -> Iterator[str]:
        """The leaves in ``leaf_order``, sorting each level only when the walk reaches it.

        A caller that stops early (no free GPU left) skips the rest of the tree.
        Sorted orders are cached until a commitment dirties them, so do not
        ``commit`` while iterating.
        """
        root = self.tree.root
        if root is None:
            return
        children = self.children
        stack = [root]
        while stack:
            p = stack.pop()
            if p in children:
                stack.extend(reversed(self.sorted_children(p)))
            else:
                yield p

    def iter_leaves_in(self, wanted: Iterable[str]) -> Iterator[str]:
        """The leaves of ``wanted`` in ``leaf_order``, walking only the subtrees that hold them.

        The same walk as ``iter_leaves`` with every subtree that holds none of
        ``wanted`` cut off, so the leaves it yields come in the same relative
        order; a cycle lending to the few leaves with unallocated work waiting
        does not walk the whole tree. The same caveat: no ``commit`` while iterating.
        """
        root = self.tree.root
        if root is None:
            return
        parent = self.parent
        keep: set[str] = set()
        for leaf in wanted:
            p: str | None = leaf
            while p is not None and p not in keep:
                keep.add(p)
                p = parent.get(p)
        if root not in keep:
            return
        children = self.children
        stack = [root]
        while stack:
            p = stack.pop()
            if p in children:
                stack.extend([c for c in reversed(self.sorted_children(p)) if c in keep])
            else:
                yield p

    # -- walking with admissions ---------------------------------------------------

    def activate(self, leaves: list[str]) -> None:
        """Mark leaves that have candidates; best() only descends into active subtrees."""
        for leaf in leaves:
            p: str | None = leaf
            while p is not None:
                self.active[p] = self.active.get(p, 0) + 1
                p = self.parent.get(p)

    def deactivate(self, leaf: str) -> None:
        p: str | None = leaf
        while p is not None:
            self.active[p] -= 1
            p = self.parent.get(p)

    def best(self) -> str | None:
        """The best-ranked active leaf, or None."""
        p = self.tree.root
        if p is None or not self.active.get(p):
            return None
        active = self.active
        while p in self.children:
            for c in self.sorted_children(p):
                if active.get(c):
                    p = c
                    break
            else:  # pragma: no cover - active counts guarantee a child
                return None
        return p

    def commit(self, leaf: str, gpu_seconds: int) -> None:
        """An admission in this cycle: charge its commitment up the path and re-sort."""
        if not gpu_seconds:
            return
        self.version += 1
        self._fair = {}
        p: str | None = leaf
        while p is not None:
            self.use[p] += gpu_seconds
            parent = self.parent.get(p)
            if parent is not None:
                self._dirty.add(parent)
            p = parent

    # -- preemption rule -------------------------------------------------------------

    def fair_share_memo(self, leaf: str, commitment: int) -> dict[str, bool]:
        """The shared memo of ``may_preempt(leaf, commitment, victim_leaf)`` by victim leaf."""
        key = (leaf, commitment)
        memo = self._fair.get(key)
        if memo is None:
            memo = self._fair[key] = {}
        return memo

    def may_preempt(self, leaf: str, commitment: int, victim_leaf: str) -> bool:
        """Fair-share preemption test (Kueue's LessThanOrEqualToFinalShare, made strict).

        At the level where the two paths part, the preemptor's side, *after*
        adding its own commitment, must still be strictly less used per share
        than the victim's side. After the preemption the victim's side is then
        the more used one, so the victim cannot preempt straight back: no thrash.
        """
        a = self._paths[leaf]
        b = self._paths[victim_leaf]
        i = 0
        n = min(len(a), len(b))
        while i < n and a[i] == b[i]:
            i += 1
        if i == n:
            return False  # same leaf (or one contains the other): not a fair-share question
        x = a[i]
        y = b[i]
        return less_used(self.use[x], self.shares[x], self.use[y], self.shares[y], commitment)

    def keep_value(self, leaf: str) -> int:
        """How much ``leaf`` deserves to keep its work, as a small integer (0 = the least).

        The victim search's last tie-break: between equally costly victims, take
        from the allocation furthest above what it is owed (Kueue's fair-sharing
        preemption takes from the queue using the most). Over-service is the
        leaf's part of all usage divided by its entitlement (1 = exactly its
        share), quantised to 1/256 and capped; a leaf entitled to nothing keeps
        nothing. Pure arithmetic on this cycle's usage, so it is the same on
        every replay.
        """
        ent = self.tree.entitlement(leaf)
        total = self.use.get(self.tree.root or "", 0)
        if ent <= 0 or total <= 0:
            return 0 if ent <= 0 else KEEP_MAX
        q = int(self.use.get(leaf, 0) * 256 / (total * ent))
        return KEEP_MAX - min(KEEP_MAX, q)

    # -- explanation -----------------------------------------------------------------

    def levels(self, leaf: str) -> list[Level]:
        """The rank key of ``leaf``, level by level from the root's children down."""
        out: list[Level] = []
        parts = leaf.split("/")
        for i in range(1, len(parts)):
            node = "/".join(parts[: i + 1])
            parent = "/".join(parts[:i])
            sibs = self.sorted_children(parent)
            total_shares = sum(self.shares[s] for s in sibs)
            parent_use = self.use[parent]
            share_f = self.shares[node] / total_shares if total_shares else 0.0
            use_f = self.use[node] / parent_use if parent_use else 0.0
            out.append(Level(
                node=node,
                usage_gpu_s=self.use[node],
                usage_fraction=use_f,
                share_fraction=share_f,
                ratio=(use_f / share_f) if share_f else float("inf"),
                position=sibs.index(node) + 1,
                siblings=len(sibs),
            ))
        return out
