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

from collections.abc import Collection, Iterator
from functools import cmp_to_key
from typing import TYPE_CHECKING

import msgspec

from scheduler.policy.fair_share import less_used

KEEP_MAX = (1 << 20) - 1  # the largest keep_value (a leaf that has used nothing)

if TYPE_CHECKING:
    from projections.budget_tree import Structure
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
    return fair_share_base(state).committed


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
    """Every node's usage at the fair-share instant ``fs`` plus ``committed``, leaves up.

    A commitment counts only at a leaf of the tree (a workload whose leaf has
    since become an inner node charges nothing there: inner nodes are sums).
    """
    st = state.budget.structure()
    use = state.usage.usage_of(st.leaves, fs)
    for leaf, c in committed.items():
        if leaf in use:
            use[leaf] += c
    for path, kids in st.internal:
        use[path] = sum([use[c] for c in kids])
    return use


# A level no longer sorted at the current sums: an order of its children that
# was sorted, and the one child whose sum moved since ("" when several may
# have). See ``resort``.
_Stale = tuple[list[str], str]


def _moved_child(moved: dict[str, str], level: str, child: str) -> None:
    """Note in ``moved`` that ``child``'s sum under ``level`` moved ("" once a second child's did)."""
    was = moved.get(level)
    if was is None:
        moved[level] = child
    elif was and was != child:
        moved[level] = ""


def _charge(use: dict[str, int], paths: dict[str, list[str]], children: dict[str, list[str]],
            leaf: str, d: int, moved: dict[str, str]) -> None:
    """Add ``d`` to ``leaf``'s sum and its ancestors', noting each level's moved child in ``moved``.

    Nothing for a node that is not a leaf of the tree (``_sums`` counts no
    commitment there).
    """
    path = paths.get(leaf)
    if path is None or leaf in children:
        return
    i = len(path) - 1
    while i >= 0:
        node = path[i]
        v: int = use[node]
        use[node] = v + d
        if i:
            _moved_child(moved, path[i - 1], node)
        i -= 1


def _restale(sorted_levels: dict[str, list[str]], stale: dict[str, _Stale],
             moved: dict[str, str]) -> tuple[dict[str, list[str]], dict[str, _Stale]]:
    """The sorted levels and stale levels after the children ``moved`` names moved, as new dicts.

    A sorted level with a moved child becomes stale with that child (or ""),
    a stale level keeps its child only when that is the one that moved again.
    A level of one child stays sorted, whatever its sum.
    """
    kept: dict[str, list[str]] = {}
    out = dict(stale)
    for p, order in sorted_levels.items():
        c = moved.get(p)
        if c is None or len(order) == 1:
            kept[p] = order
        else:
            out[p] = (order, c)
    for p, c in moved.items():
        if p not in sorted_levels:
            entry = out.get(p)
            if entry is not None and entry[1] != c:
                out[p] = (entry[0], "")
    return kept, out


class FairShareBase:
    """What every cycle's order starts from, kept across cycles (in ``State.memos``).

    At one fair-share instant, tree and policy, the usage read at the instant
    does not change (``UsageProjection.usage_of``), so the order's inputs change
    only with the running set, through the commitments. Those are a sum of one
    integer per running workload (``_commitment``), so a start or stop moves
    exactly its workload's term: replaying the running set's journal
    (``WorkloadsProjection.moves``) onto the sums gives the same integers as
    summing afresh, and a level whose children's sums did not move keeps its
    sorted order (``sorted_levels``), which is a function of those sums alone. A
    level that does not is kept as stale (``stale``), to be re-sorted from its
    old order.

    At a later instant (same tree and policy, the journal still reaching back)
    the base moves there (``move_to``) instead of walking the running set
    again: it keeps, per contributing workload, what its term is made of, so
    the terms at the new instant come from those and the journal, and the
    usage from the leaves whose usage may have changed
    (``UsageProjection.usage_changes``). Anything else (an earlier instant, a
    new tree or policy, or a journal that no longer reaches back far enough)
    builds the base afresh.

    Invariants: ``use`` is ``_sums`` of the usage at ``fs`` and ``committed``;
    ``committed`` is ``_committed(parts, fs)``; a level in ``sorted_levels`` is its
    children sorted at ``use``; a level in ``stale`` and not in ``sorted_levels``
    holds an order sorted at ``use`` but for the child it names (any order
    when that is "").
    """

    __slots__ = (
        "committed",
        "fs",
        "parts",
        "policy",
        "running_version",
        "sorted_levels",
        "stale",
        "tree",
        "tree_version",
        "usage_epoch",
        "use",
    )

    def __init__(self, state: State, fs: int) -> None:
        tree = state.budget
        self.fs = fs
        self.tree = tree
        self.tree_version = tree.version
        self.policy = state.policy
        self.running_version = state.workloads.running_version
        # Each running workload whose term is positive at ``fs``: id -> what the
        # term is made of (see ``_Part``).
        parts: dict[str, _Part] = {}
        for w in state.workloads.running.values():
            _add_part(parts, w.id, w.budget, w.gpus, w.allocated, w.protected_until, w.started_at, fs)
        self.parts = parts
        self.committed = _committed(parts, fs)
        self.use = _sums(state, self.committed, fs)
        self.usage_epoch = state.usage.epoch  # the usage memo's, as ``use`` read it
        # Each level sorted at this base's sums, filled as cycles walk the tree
        # (``Ranking.sorted_children`` before any in-cycle commitment).
        self.sorted_levels: dict[str, list[str]] = {}
        self.stale: dict[str, _Stale] = {}

    def current(self, state: State, fs: int) -> bool:
        """Whether this base is (or can be brought up to) the state's, advancing it if so."""
        tree = state.budget
        policy = state.policy
        if fs < self.fs or tree is not self.tree or tree.version != self.tree_version \
                or (policy is not self.policy and policy != self.policy):
            return False
        wl = state.workloads
        behind = wl.running_version - self.running_version
        moves = wl.moves
        if behind < 0 or behind > len(moves):
            return False
        if fs != self.fs:
            self.move_to(state, fs, moves[len(moves) - behind:] if behind else [])
        elif behind:
            self.advance(moves[len(moves) - behind:], tree.structure())
        self.running_version = wl.running_version
        return True

    def advance(self, moves: list[Move], st: Structure) -> None:
        # ``committed``, ``use``, ``sorted_levels`` and ``stale`` are replaced, never
        # changed in place: a Ranking or a caller may still hold the old ones.
        parts = self.parts
        fs = self.fs
        delta: dict[str, int] = {}
        for m in moves:
            if m.started_at is None:  # a stop: take back its term, if it had one
                part = parts.pop(m.id, None)
                if part is not None:
                    leaf = part[0]
                    delta[leaf] = delta.get(leaf, 0) - _term(part, fs)
            else:
                c = _add_part(parts, m.id, m.budget, m.gpus, m.allocated, m.protected_until,
                              m.started_at, fs)
                if c:
                    delta[m.budget] = delta.get(m.budget, 0) + c
        if not any(delta.values()):
            return
        committed = dict(self.committed)
        use = dict(self.use)
        moved: dict[str, str] = {}
        for leaf, d in delta.items():
            if not d:
                continue
            left = committed.get(leaf, 0) + d
            if left:
                committed[leaf] = left
            else:
                del committed[leaf]
            _charge(use, st.paths, st.children, leaf, d, moved)
        self.committed = committed
        self.use = use
        self.sorted_levels, self.stale = _restale(self.sorted_levels, self.stale, moved)

    def move_to(self, state: State, fs: int, moves: list[Move]) -> None:
        """This base at the later instant ``fs``, with the running set's ``moves`` since it was last current.

        Exactly the fresh base at ``fs``: a term only shrinks as the instant
        moves on (``_term``), so the workloads with a positive term at ``fs``
        are among ``parts`` or started since (the journal); ``parts`` holds
        each one's term as the running workload's own fields give it (a start
        records what it was started with, and a running workload's fields stay
        so). A leaf's usage at ``fs`` is the one ``usage_changes`` reports, or
        else its usage at the old instant (``use`` less ``committed`` there);
        each leaf's sum then moves by its difference, up its path, as in
        ``advance``. When the usage memo cannot tell, the sums are taken afresh.
        """
        parts = self.parts
        for m in moves:
            if m.started_at is None:
                parts.pop(m.id, None)
            else:
                _add_part(parts, m.id, m.budget, m.gpus, m.allocated, m.protected_until,
                          m.started_at, fs)
        committed = _committed(parts, fs)
        usage = state.usage
        st = state.budget.structure()
        changes = usage.usage_changes(st.leaves, fs) if usage.epoch == self.usage_epoch else None
        old = self.use
        moved: dict[str, str] = {}
        if changes is None:
            use = _sums(state, committed, fs)
            for p, kids in st.children.items():
                for c in kids:
                    if use[c] != old[c]:
                        _moved_child(moved, p, c)
        else:
            before = self.committed
            use = dict(old)
            paths = st.paths
            children = st.children
            # Only a leaf whose usage or commitment may have moved can have moved.
            for leaf, used in changes.items():
                d = used + committed.get(leaf, 0) - old[leaf]
                if d:
                    _charge(use, paths, children, leaf, d, moved)
            for leaf, term in committed.items():
                if leaf not in changes and leaf in old:
                    d = term - before.get(leaf, 0)
                    if d:
                        _charge(use, paths, children, leaf, d, moved)
            for leaf, term in before.items():
                if leaf not in changes and leaf not in committed and leaf in old:
                    _charge(use, paths, children, leaf, -term, moved)
        self.fs = fs
        self.committed = committed
        self.use = use
        self.usage_epoch = usage.epoch
        self.sorted_levels, self.stale = _restale(self.sorted_levels, self.stale, moved)


# What one running workload's commitment is made of: (leaf, GPUs, protected
# until, measured from no earlier than). Its term at an instant is ``_term``.
_Part = tuple[str, int, int, int]


def _term(part: _Part, fs: int) -> int:
    """The part's commitment at the fair-share instant ``fs`` (``_commitment``'s value)."""
    _, gpus, until, started = part
    since = fs if started < fs else started
    return gpus * (until - since) if until > since else 0


def _add_part(parts: dict[str, _Part], wid: str, leaf: str, gpus: int, allocated: bool,
              until: int | None, started_at: int | None, fs: int) -> int:
    """Note a running workload's part when its term at ``fs`` is positive; return the term.

    A workload with no start time is measured from the instant, whichever it
    is: from ``fs`` on, that is the same as having started at ``fs``.
    """
    c = _commitment(gpus, allocated, until, started_at, fs)
    if c:
        assert until is not None
        parts[wid] = (leaf, gpus, until, fs if started_at is None else started_at)
    return c


def _committed(parts: dict[str, _Part], fs: int) -> dict[str, int]:
    """Per leaf, the sum of its parts' terms at ``fs`` (only leaves with a positive sum).

    Drops the parts whose term is 0 at ``fs``: it stays 0 at every later instant.
    """
    committed: dict[str, int] = {}
    gone: list[str] = []
    for wid, part in parts.items():
        c = _term(part, fs)
        if c:
            leaf = part[0]
            committed[leaf] = committed.get(leaf, 0) + c
        else:
            gone.append(wid)
    for wid in gone:
        del parts[wid]
    return committed


def fair_share_base(state: State) -> FairShareBase:
    fs = fair_share_time(state)
    base = state.memos.fair_share
    if isinstance(base, FairShareBase) and base.current(state, fs):
        return base
    base = FairShareBase(state, fs)
    state.memos.fair_share = base
    return base


def served_before(a: str, b: str, use: dict[str, int], shares: dict[str, int]) -> bool:
    """Whether sibling ``a`` is served before ``b``.

    The comparison of the keys ``(1, 0, 0, name)`` for a node with no share
    (served last) and ``(0, usage / share, -share, name)`` otherwise, element by
    element as tuples compare, without building them. ``usage / share`` is
    compared exactly, in integers (``less_used``'s arithmetic: a float quotient
    could call two different ratios equal, or order them the other way round).
    Names are unique among siblings, so no two keys are equal and the sorted
    order is unique.
    """
    return _precedes(a, shares[a], use[a], b, shares[b], use[b])


def _precedes(a: str, sa: int, ua: int, b: str, sb: int, ub: int) -> bool:
    """``served_before`` of ``a`` (shares ``sa``, sum ``ua``) and ``b`` (``sb``, ``ub``)."""
    if sa <= 0 or sb <= 0:
        if sa > 0:
            return True
        if sb > 0:
            return False
        return a < b
    xa = ua * sb  # ua / sa against ub / sb, both sides times sa * sb > 0
    xb = ub * sa
    if xa != xb:
        return xa < xb
    if sa != sb:
        return sa > sb
    return a < b


def _sorted(children: list[str], use: dict[str, int], shares: dict[str, int]) -> list[str]:
    """``children`` in ``served_before`` order, by a plain sort with that comparison."""
    def cmp(a: str, b: str) -> int:
        return -1 if served_before(a, b, use, shares) else 1  # (never equal: names are unique)

    return sorted(children, key=cmp_to_key(cmp))


# Levels this wide or narrower are re-sorted from an old order by insertion
# (``resort``); wider ones by a plain sort, whose cost does not depend on how
# far the old order is from the new one.
_INSERTION_MAX = 32


def resort(stale: _Stale, use: dict[str, int], shares: dict[str, int]) -> list[str]:
    """The level sorted at ``use``, as a new list, from its stale entry.

    With one moved child, the rest of the old order is still sorted (only
    that child's key changed), so the child is taken out and put back where
    its new key goes: the unique sorted order. Otherwise an insertion sort
    from the old order, which gives the unique sorted order whatever the old
    order is, in about one comparison per child when few keys moved.
    """
    order, child = stale
    if child:
        out = list(order)
        i = out.index(child)
        del out[i]
        s = shares[child]
        u = use[child]
        j = i
        while j > 0:
            x = out[j - 1]
            if not _precedes(child, s, u, x, shares[x], use[x]):
                break
            j -= 1
        if j == i:
            n = len(out)
            while j < n:
                x = out[j]
                if not _precedes(x, shares[x], use[x], child, s, u):
                    break
                j += 1
        out.insert(j, child)
        return out
    if len(order) > _INSERTION_MAX:
        return _sorted(order, use, shares)
    out = []
    for c in order:
        j = len(out)
        while j > 0 and served_before(c, out[j - 1], use, shares):
            j -= 1
        out.insert(j, c)
    return out


class _Shape:
    """What the order reads of one version of the tree, beyond ``Structure``: kept with it."""

    __slots__ = ("leaf_parents", "splits", "structure", "under")

    def __init__(self, st: Structure) -> None:
        self.structure = st
        # Per leaf and victim leaf, where their paths part (``may_preempt``),
        # filled as asked: at most one entry per pair of leaves asked about.
        self.splits: dict[str, dict[str, _Split]] = {}
        # Per inner node, the leaves below it (``iter_leaves_in``).
        under: dict[str, list[str]] = {p: [] for p in st.children}
        for leaf in st.leaves:
            for p in st.paths[leaf][:-1]:
                under[p].append(leaf)
        self.under = under
        # The inner nodes whose children are all leaves: a depth-first walk
        # yields their children in their order, one after the other.
        children = st.children
        self.leaf_parents = {p for p, kids in children.items() if not any(k in children for k in kids)}


def _shape(state: State, st: Structure) -> _Shape:
    """The ``_Shape`` of the tree's current ``Structure`` (replaced whenever the tree changes)."""
    shape = state.memos.fair_share_shape
    if isinstance(shape, _Shape) and shape.structure is st:
        return shape
    shape = _Shape(st)
    state.memos.fair_share_shape = shape
    return shape


# Where two leaves' paths part: (the first's side, its shares, the second's
# side, its shares), or ("", 0, "", 0) when one path contains the other.
_Split = tuple[str, int, str, int]


def _split(a: list[str], b: list[str], shares: dict[str, int]) -> _Split:
    """Where the paths ``a`` and ``b`` (root first) part, with the shares there."""
    i = 0
    n = min(len(a), len(b))
    while i < n and a[i] == b[i]:
        i += 1
    if i == n:
        return ("", 0, "", 0)
    return (a[i], shares[a[i]], b[i], shares[b[i]])


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
    """The fair-share order for one cycle; admissions update it as the cycle goes.

    ``use``, the sorted levels and the stale ones start as the base's own
    (``FairShareBase``) and are copied at the first in-cycle commitment, so a
    cycle that commits nothing copies nothing; ``use`` is for reading only.
    """

    __slots__ = ("_active", "_fair", "_first", "_leaf_parents", "_sorted", "_splits", "_stale",
                 "_under", "children", "parent", "paths", "shares", "tree", "use", "version")

    def __init__(self, state: State, committed: dict[str, int]) -> None:
        tree = state.budget
        self.tree = tree
        st = tree.structure()
        self.shares = st.shares
        self.children = st.children
        self.parent = st.parent
        # The order at the cycle's start is a function of the usage at the
        # fair-share instant, the commitments, the tree and the policy: kept
        # across cycles (``FairShareBase``), with every level sorted at that
        # order (its ``sorted_levels``; a level sorted after an in-cycle commitment
        # is not kept).
        base = fair_share_base(state)
        if committed is base.committed:
            self.use: dict[str, int] = base.use
            # Levels sorted at ``use``; one that is not is sorted when first
            # asked for, from its ``_stale`` entry if it has one. Until the first
            # commitment these are the base's own dicts, so what this cycle
            # sorts is kept for the next ones.
            self._sorted: dict[str, list[str]] = base.sorted_levels
            self._stale: dict[str, _Stale] = base.stale
        else:  # commitments other than the state's: nothing to share
            self.use = _sums(state, committed, fair_share_time(state))
            self._sorted = {}
            self._stale = {}
        self._active: dict[str, int] = {}
        # Per level, how many leading children of its sorted list ``best`` found
        # inactive: active counts only fall between ``activate`` calls (which
        # forget these), and a level sorted anew forgets its own.
        self._first: dict[str, int] = {}
        self.paths: dict[str, list[str]] = st.paths
        shape = _shape(state, st)
        self._splits = shape.splits
        self._under = shape.under
        self._leaf_parents = shape.leaf_parents
        self.version = 0  # bumped by every in-cycle commitment
        # (leaf, commitment) -> victim leaf -> may_preempt: shared by every rule of
        # the cycle for the same candidate leaf and commitment until a commitment
        # changes usage (``commit`` clears it). may_preempt reads only those and
        # ``use``, so a shared answer is the answer.
        self._fair: dict[tuple[str, int], dict[str, bool]] = {}

    # -- order -------------------------------------------------------------------

    def sorted_children(self, path: str) -> list[str]:
        """The children of ``path`` best-served-next first (sorted lists are never changed in place)."""
        order = self._sorted.get(path)
        if order is None:
            stale = self._stale.get(path)
            if stale is None:
                order = _sorted(self.children[path], self.use, self.shares)
            else:
                order = resort(stale, self.use, self.shares)
            self._sorted[path] = order
        return order

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
        leaf_parents = self._leaf_parents
        stack = [root]
        while stack:
            p = stack.pop()
            if p in leaf_parents:
                yield from self.sorted_children(p)
            elif p in children:
                stack.extend(reversed(self.sorted_children(p)))
            else:
                yield p

    def iter_leaves_in(self, wanted: Collection[str]) -> Iterator[str]:
        """The leaves of ``wanted`` in ``leaf_order``, walking only the subtrees that hold them.

        The same walk as ``iter_leaves`` with every subtree that holds none of
        ``wanted`` cut off, so the leaves it yields come in the same relative
        order; a cycle lending to the few leaves with unallocated work waiting
        does not walk the whole tree. Whether a subtree holds one is asked as
        the walk reaches it, so a caller that stops early asks little. The same
        caveat: no ``commit`` while iterating.
        """
        root = self.tree.root
        if root is None or not self._holds(root, wanted):
            return
        children = self.children
        leaf_parents = self._leaf_parents
        stack = [root]
        while stack:
            p = stack.pop()
            if p in leaf_parents:
                for c in self.sorted_children(p):
                    if c in wanted:
                        yield c
            elif p in children:
                order = self.sorted_children(p)
                i = len(order)
                while i > 0:
                    i -= 1
                    c = order[i]
                    if self._holds(c, wanted):
                        stack.append(c)
            else:
                yield p

    def _holds(self, node: str, wanted: Collection[str]) -> bool:
        """Whether ``node`` is a leaf of ``wanted`` or has one below it."""
        below = self._under.get(node)
        if below is None:
            return node in wanted
        return any(leaf in wanted for leaf in below)

    # -- walking with admissions ---------------------------------------------------

    @property
    def active(self) -> dict[str, int]:
        """Per node, how many activated leaves below it (itself included) still have candidates."""
        return self._active

    @active.setter
    def active(self, counts: dict[str, int]) -> None:
        self._active = counts
        self._first = {}

    def activate(self, leaves: list[str]) -> None:
        """Mark leaves that have candidates; best() only descends into active subtrees."""
        active = self._active
        paths = self.paths
        for leaf in leaves:
            path = paths.get(leaf)
            if path is None:  # not in the tree: counted, never reached
                active[leaf] = active.get(leaf, 0) + 1
                continue
            for p in path:
                active[p] = active.get(p, 0) + 1
        self._first = {}

    def deactivate(self, leaf: str) -> None:
        active = self._active
        for p in self.paths[leaf]:
            n: int = active[p]
            active[p] = n - 1

    def best(self) -> str | None:
        """The best-ranked active leaf, or None."""
        p = self.tree.root
        active = self._active
        if p is None or not active.get(p, 0):
            return None
        children = self.children
        sorted_ = self._sorted  # (no commitment while this walks)
        first = self._first
        while True:
            order = sorted_.get(p)
            if order is None:
                if p not in children:
                    return p
                order = self.sorted_children(p)
            start = first.get(p, 0)
            i = start
            n = len(order)
            while i < n and not active.get(order[i], 0):
                i += 1
            if i == n:  # pragma: no cover - active counts guarantee a child
                return None
            if i != start:
                first[p] = i
            p = order[i]

    def commit(self, leaf: str, gpu_seconds: int) -> None:
        """An admission in this cycle: charge its commitment up the path and re-sort."""
        if not gpu_seconds:
            return
        if not self.version:  # the first: from here on this cycle's own copies
            self.use = dict(self.use)
            self._sorted = dict(self._sorted)
            self._stale = dict(self._stale)
        self.version += 1
        self._fair = {}
        use = self.use
        sorted_ = self._sorted
        stale = self._stale
        first = self._first
        p: str | None = leaf
        while p is not None:
            v: int = use[p]
            use[p] = v + gpu_seconds
            parent = self.parent.get(p)
            if parent is not None:
                order = sorted_.get(parent)
                if order is not None:
                    if len(order) > 1:  # (one child's order cannot change)
                        del sorted_[parent]
                        stale[parent] = (order, p)
                        first.pop(parent, None)
                else:
                    entry = stale.get(parent)
                    if entry is not None and entry[1] != p:
                        stale[parent] = (entry[0], "")
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
        by_victim = self._splits.get(leaf)
        if by_victim is None:
            by_victim = self._splits[leaf] = {}
        split = by_victim.get(victim_leaf)
        if split is None:
            split = by_victim[victim_leaf] = _split(self.paths[leaf], self.paths[victim_leaf],
                                                    self.shares)
        x, share_x, y, share_y = split
        if not x:
            return False  # same leaf (or one contains the other): not a fair-share question
        return less_used(self.use[x], share_x, self.use[y], share_y, commitment)

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

def activate_waiting(r: Ranking, state: State) -> None:
    """``r.activate`` the leaves with allocated work waiting (``by_shape``), from a memo.

    The active counts depend only on which leaves wait and the tree, so those of
    a ranking activated from nothing are kept across cycles (most cycles follow
    one event). Key: (the waiting leaves, the budget's version), ``Memos.active``;
    lapse: either changes. A ranking already holding active leaves activates
    them afresh.
    """
    by_shape = state.workloads.by_shape
    key = (tuple(by_shape), state.budget.version)
    cached = state.memos.active
    if r.active:
        r.activate(list(by_shape))
    elif cached is not None and cached[0] == key:
        r.active = dict(cached[1])
    else:
        r.activate(list(by_shape))
        state.memos.active = (key, dict(r.active))

