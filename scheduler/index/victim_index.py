"""The victim index: the preemptible running workloads per healthy host, and their counts.

What the victim search (``scheduler.policy.victims``) and the cycle's cheap
bounds (``Cycle.freeable``) read: the victims (running work past its
protection, unallocated work always) per healthy host in a fixed order, and
their GPUs per host, per budget node, per leaf and priority. Building it walks
every running workload, so one built index is kept across cycles, and each
cycle works on a cheap ``fork`` of it that forgets the workloads the cycle
stopped.

Key: (the running set's version, the hosts' health version, the budget's
version), held with the time it was built at and when the next protection
ends (``Memos.victims``). Lapse: the key changes, or time reaches that next
protection end; then the next index is ``advanced`` from the old one where
the hosts and tree are the same (over the starts, stops and protection ends
since), else built afresh. ``Engine(accelerate=False)`` builds it afresh for
every input; tests/test_core_victim_index_advance.py compares an advanced
index with a fresh build, and the property tests compare the decisions with
and without the memos (tests/test_core_properties.py).

Within one cycle a fork also keeps two memos of its own, both dropped when a
victim goes: the candidate hosts per GPUs per host (``candidates``, also when
the cycle's free GPUs change) and per host a floor under the cost of its
cheapest victim (``cost_floors``, for one cost model).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable
from heapq import heapify, heappop, heappush
from itertools import count
from typing import TYPE_CHECKING

from projections.workloads import Workload

if TYPE_CHECKING:
    from scheduler.index.sole_leaf import SoleLeafVictims
    from scheduler.policy.placement import Capacity
    from scheduler.state import State

# "No protection ends": later than any event time (``placement.NEVER``).
NEVER = 1 << 62


class Victim:
    """A preemptible running workload, as the search sees it."""

    __slots__ = ("order", "span", "w")

    def __init__(self, w: Workload) -> None:
        self.w = w
        # A fixed scan order (ties between equally cheap plans go to the first found).
        self.order = (w.allocated, w.resumable is False, w.priority, -(w.started_at or 0), w.id)
        # What a rule's ``span`` is compared with: the hosts of allocated work (a
        # victim's placement is fixed while it runs), 0 for unallocated work.
        self.span = len(w.placement) if w.allocated else 0


# A host of ``VictimIndex.hosts_by_span``: (least span of its victims, host, its victims);
# hosts are unique, so entries compare by their first two fields.
HostBySpan = tuple[int, str, list[Victim]]

# The sole-leaf index of a victim index's hosts: (its ``on_host``, its ``hosts_by_span``)
# -> the index (``VictimIndex.sole_leaf``).
SoleLeafLookup = Callable[[dict[str, list[Victim]], list[HostBySpan]], "SoleLeafVictims[HostBySpan]"]


def _least(victims: list[Victim]) -> int:
    least = victims[0].span
    for v in victims:
        if v.span < least:
            least = v.span
    return least


def _order(v: Victim) -> tuple[object, ...]:
    return v.order


# Serial numbers of built victim indexes (a memo key, never part of a decision).
_BUILD_IDS = count(1)

# Earlier builds a victim index remembers (``VictimIndex.earlier_builds``).
_EARLIER_BUILDS_KEPT = 64


class VictimIndex:
    """Preemptible running workloads per healthy host, as one cycle sees them.

    Building it walks every running workload, so the unshared part is built once
    per running set (``build``) and each cycle takes a cheap ``fork`` of it: the
    set changes only when work starts or stops, hosts change health, or a
    protection ends, and the memo key covers exactly those. Across starts,
    stops and protection ends on the same hosts and tree the next one is
    ``advanced`` from the last instead of built.
    """

    __slots__ = (
        "_base",
        "_cands",
        "_cands_at",
        "_cands_of",
        "_floors",
        "_floors_of",
        "_hosts_by_span",
        "_ids",
        "_on_host",
        "_placed",
        "_protected",
        "_shared",
        "_usable",
        "_victims",
        "build_id",
        "by_node",
        "by_priority",
        "earlier_builds",
        "paths",
        "running_version",
        "size",
        "sole_leaf",
        "stopped_now",
        "unallocated_gpus",
        "victim_gpus",
    )

    def __init__(self) -> None:
        self.victim_gpus: dict[str, int] = {}  # upper bound on what preemption can free per host
        # Allocated victims' GPUs on healthy hosts per budget subtree (every node on
        # their path), and unallocated victims' GPUs: the cycle's cheap upper bound
        # on what a candidate could free before it pays for a search.
        self.by_node: dict[str, int] = {}
        # Per leaf, allocated victims' GPUs by priority: inside a leaf only lower
        # priority may be taken, so the bound counts only those.
        self.by_priority: dict[str, dict[int, int]] = {}
        self.unallocated_gpus = 0
        self.paths: dict[str, list[str]] = {}
        self.stopped_now: set[str] = set()
        self._usable: dict[str, int] = {}
        self._victims: dict[str, Workload] = {}
        self._ids: set[str] = set()
        # Only on a built index (``build``, ``advanced``): each victim's GPUs on
        # healthy hosts as counted (a stopped workload's placement is cleared),
        # the protected running work as a heap of (protected_until, id, run),
        # entries of runs since ended left in place, and the running set it was
        # built at.
        self._placed: dict[str, tuple[tuple[str, int], ...]] = {}
        self._protected: list[tuple[int, str, int]] = []
        self.running_version = -1
        self._on_host: dict[str, list[Victim]] | None = None  # built on the first search
        self._hosts_by_span: list[HostBySpan] | None = None  # built with ``_on_host`` (see ``hosts_by_span``)
        self._base: VictimIndex | None = None
        # See ``cost_floors``.
        self._floors: dict[str, int] = {}
        self._floors_of: object | None = None
        # Per GPUs per host, the searches' candidate hosts before reservations,
        # for ``_cands_of`` at its version (cleared when a victim goes).
        self._cands: dict[int, list[str]] = {}
        self._cands_of: Capacity | None = None
        self._cands_at = -1
        self._shared = False  # the counts are the base's (a fork that discarded nothing yet)
        self.size = 0
        # Which built index this is (forks share their base's): two forks with the
        # same build_id and no workload stopped hold the same victims.
        self.build_id = 0
        # Earlier builds of the same running set, healthy hosts and tree (the
        # same world but fewer protections ended): build_id -> the hosts of the
        # victims this build has and that one had not. See ``scheduler.policy.victims.fails_again``.
        self.earlier_builds: dict[int, frozenset[str]] = {}
        # Given by the cycle: the sole-leaf index of this index's hosts (an accelerator,
        # scheduler/index/sole_leaf.py, kept in the state's memos); None: every host is walked.
        self.sole_leaf: SoleLeafLookup | None = None

    @classmethod
    def build(cls, state: State) -> tuple[VictimIndex, int]:
        """The index of ``state`` (no workload stopped yet), and when a protection next ends."""
        idx = cls()
        idx.build_id = next(_BUILD_IDS)
        idx.running_version = state.workloads.running_version
        now = state.now
        idx.paths = state.budget.structure().paths
        idx._usable = state.cluster_state.usable
        protected = idx._protected
        for w in state.workloads.running.values():
            if w.protected_at(now):
                if w.protected_until is not None:
                    protected.append((w.protected_until, w.id, w.runs))
                continue
            idx._add(w)
        heapify(protected)
        idx.size = len(idx._victims)
        idx._ids = set(idx._victims)
        return idx, protected[0][0] if protected else NEVER

    def _add(self, w: Workload) -> bool:
        """Count ``w`` as a victim if it has GPUs on a healthy host; True if it did."""
        usable = self._usable
        placed = tuple([(host, g) for host, g in w.placement if host in usable])
        gpus = sum([g for _, g in placed])
        if not gpus:
            return False
        vg = self.victim_gpus
        for host, g in placed:
            vg[host] = vg.get(host, 0) + g
        self._victims[w.id] = w
        self._placed[w.id] = placed
        self._count(w, gpus)
        return True

    def advanced(self, state: State) -> tuple[VictimIndex, int] | None:
        """The index ``build`` would give for ``state``, from this built one, or None.

        Possible when only the running set and time moved since this one was
        built (the same healthy hosts and tree: the caller checks) and the
        running set's journal (``WorkloadsProjection.moves``) still reaches
        back to it. A victim is a running workload past its protection with
        GPUs on a healthy host, so between the two states the victims change
        only for the workloads that started or stopped (judged again as
        ``build`` judges them) and for those whose protection ended (popped
        off the protection heap, where a run that since ended is stale and
        skipped). Every count is a sum of one term per victim, so adding and
        taking back terms gives the integers a fresh build sums, and no count
        keeps a zero a fresh build would not have; the per-host victim lists
        are re-sorted where a victim came or went, by the same total order.
        Nothing a search reads depends on the order victims were added in.
        """
        wl = state.workloads
        behind = wl.running_version - self.running_version
        moves = wl.moves
        if behind < 0 or behind > len(moves):
            return None
        now = state.now
        running = wl.running
        idx = VictimIndex()
        idx.build_id = next(_BUILD_IDS)
        idx.running_version = wl.running_version
        idx.paths = self.paths
        idx._usable = self._usable
        idx._victims = dict(self._victims)
        idx._placed = dict(self._placed)
        idx.victim_gpus = dict(self.victim_gpus)
        idx.by_node = dict(self.by_node)
        idx.by_priority = dict(self.by_priority)  # a leaf's own dict is copied when it changes
        idx.unallocated_gpus = self.unallocated_gpus
        protected = idx._protected = list(self._protected)
        stopped_now: set[str] = set()
        came: list[Workload] = []
        touched = {m.id for m in moves[len(moves) - behind:]} if behind else set()
        for wid in sorted(touched):
            if wid in idx._victims:
                idx._take_back(wid)
                stopped_now.add(wid)
            w = running.get(wid)
            if w is None:
                continue
            if w.protected_at(now):
                if w.protected_until is not None:
                    heappush(protected, (w.protected_until, wid, w.runs))
            else:
                idx._unshare_priority(w.budget)
                if idx._add(w):
                    came.append(w)
        while protected:
            until, wid, run = protected[0]
            w = running.get(wid)
            if w is None or w.runs != run:  # that run ended: its entry is stale
                heappop(protected)
            elif until <= now:  # its protection ended: a victim now
                heappop(protected)
                idx._unshare_priority(w.budget)
                if idx._add(w):
                    came.append(w)
            else:
                break
        idx.size = len(idx._victims)
        idx._ids = set(idx._victims)
        if self._on_host is not None:
            idx._on_host, idx._hosts_by_span = self._moved_on_host(stopped_now, came, idx._placed)
        return idx, protected[0][0] if protected else NEVER

    def _unshare_priority(self, leaf: str) -> None:
        prio = self.by_priority.get(leaf)
        if prio is not None:
            self.by_priority[leaf] = dict(prio)

    def _take_back(self, wid: str) -> None:
        """Remove a victim of this (new, unshared) index with the GPUs it was counted with."""
        w = self._victims.pop(wid)
        vg = self.victim_gpus
        gpus = 0
        for host, g in self._placed.pop(wid):
            left = vg[host] - g
            if left:
                vg[host] = left
            else:
                del vg[host]
            gpus += g
        if not w.allocated:
            self.unallocated_gpus -= gpus
            return
        by_node = self.by_node
        for node in self.paths.get(w.budget, ()):
            left = by_node[node] - gpus
            if left:
                by_node[node] = left
            else:
                del by_node[node]
        self._unshare_priority(w.budget)
        prio = self.by_priority[w.budget]
        left = prio[w.priority] - gpus
        if left:
            prio[w.priority] = left
        else:
            del prio[w.priority]
            if not prio:
                del self.by_priority[w.budget]

    def _moved_on_host(self, stopped_now: set[str], came: list[Workload],
                       placed: dict[str, tuple[tuple[str, int], ...]]
                       ) -> tuple[dict[str, list[Victim]], list[HostBySpan]]:
        """This index's per-host lists and ``hosts_by_span``, ``stopped_now`` taken out and ``came`` put in."""
        assert self._on_host is not None and self._hosts_by_span is not None
        on_host = dict(self._on_host)
        changed: dict[str, list[Victim]] = {}
        for wid in stopped_now:
            for host, _ in self._placed[wid]:
                changed.setdefault(host, [])
        for w in came:
            v = Victim(w)
            for host, _ in placed[w.id]:
                changed.setdefault(host, []).append(v)
        by_span = list(self._hosts_by_span)  # (a bisection per changed host, not a sort)
        for host, new in changed.items():
            old = on_host.get(host)
            if old is not None:
                del by_span[bisect_left(by_span, (_least(old), host))]
            victims = [v for v in old or () if v.w.id not in stopped_now]
            victims += new
            if victims:
                victims.sort(key=_order)
                on_host[host] = victims
                insort(by_span, (_least(victims), host, victims))
            else:
                on_host.pop(host, None)
        return on_host, by_span

    @classmethod
    def for_cycle(cls, state: State, stopped_now: set[str]) -> VictimIndex:
        """A fork of the memoised index for ``state``, minus the workloads in ``stopped_now``."""
        key = (state.workloads.running_version, state.cluster_state.health_version,
               state.budget.version)
        cached = state.memos.victims
        now = state.now
        if cached is not None and cached[0] == key and cached[1] <= now < cached[2]:
            base = cached[3]
        else:
            made = None
            if cached is not None and cached[0][1:] == key[1:] and cached[1] <= now:
                made = cached[3].advanced(state)
            base, next_end = made if made is not None else cls.build(state)
            if cached is not None and cached[0] == key and cached[1] <= now:
                base._descend_from(cached[3])
            state.memos.victims = (key, now, next_end, base)
        return base.fork(stopped_now)

    def _descend_from(self, old: VictimIndex) -> None:
        """Record ``old`` (an earlier build of the same world) and what this one adds to it.

        In one world protections only end, so this build's victims are ``old``'s
        plus those whose protection ended since; the hosts they sit on are the
        only ones where a search can now do better (``scheduler.policy.victims.fails_again``).
        """
        if not old._ids <= self._ids:  # pragma: no cover - a protection never restarts
            return
        usable = self._usable
        added = frozenset(h for w in self._victims.values() if w.id not in old._ids
                          for h, _ in w.placement if h in usable)
        earlier_builds = {s: hs | added for s, hs in old.earlier_builds.items()}
        earlier_builds[old.build_id] = added
        if len(earlier_builds) > _EARLIER_BUILDS_KEPT:
            for s in sorted(earlier_builds)[: len(earlier_builds) - _EARLIER_BUILDS_KEPT]:
                del earlier_builds[s]
        self.earlier_builds = earlier_builds

    def fork(self, stopped_now: set[str]) -> VictimIndex:
        """A copy whose counts this cycle may change; the heavy parts are shared.

        The counts too are shared until the fork first discards a victim (most
        cycles stop nobody), then copied (``_unshare``).
        """
        idx = VictimIndex()
        idx.build_id = self.build_id
        idx.earlier_builds = self.earlier_builds
        idx.paths = self.paths
        idx._usable = self._usable
        idx._victims = self._victims
        idx._ids = self._ids
        idx._base = self._base or self
        idx._on_host = idx._base._on_host
        idx._hosts_by_span = idx._base._hosts_by_span
        idx.victim_gpus = self.victim_gpus
        idx.by_node = self.by_node
        idx.by_priority = self.by_priority
        idx._shared = True
        idx.unallocated_gpus = self.unallocated_gpus
        idx.size = self.size
        idx.stopped_now = stopped_now
        if stopped_now:
            for w in [w for w in self._victims.values() if w.id in stopped_now]:
                idx.discard(w)
        return idx

    def _unshare(self) -> None:
        self._ids = set(self._ids)
        self.victim_gpus = dict(self.victim_gpus)
        self.by_node = dict(self.by_node)
        self.by_priority = {leaf: dict(p) for leaf, p in self.by_priority.items()}
        self._shared = False

    @property
    def on_host(self) -> dict[str, list[Victim]]:
        """Victims per healthy host, in a fixed order (built when a search first needs it)."""
        if self._on_host is None:
            on_host: dict[str, list[Victim]] = {}
            usable = self._usable
            for w in self._victims.values():
                v = Victim(w)
                for host, _ in w.placement:
                    if host in usable:
                        on_host.setdefault(host, []).append(v)
            for victims in on_host.values():
                victims.sort(key=_order)
            self._on_host = on_host
            self._hosts_by_span = sorted((_least(vs), host, vs) for host, vs in on_host.items())
            if self._base is not None:
                self._base._on_host = on_host
                self._base._hosts_by_span = self._hosts_by_span
        return self._on_host

    @property
    def hosts_by_span(self) -> list[HostBySpan]:
        """Every host with victims as (their least ``Victim.span``, host, ``on_host`` list), sorted.

        A rule of span s can take victims only on the hosts of the prefix whose
        least span is at most s: the searches' feasibility checks, which sum
        what a rule could take, read only those. Built with ``on_host``.
        """
        if self._hosts_by_span is None:
            self.on_host  # noqa: B018 - builds both
        assert self._hosts_by_span is not None
        return self._hosts_by_span

    def _count(self, w: Workload, gpus: int) -> None:
        if not w.allocated:
            self.unallocated_gpus += gpus
            return
        by_node = self.by_node
        for node in self.paths.get(w.budget, ()):
            by_node[node] = by_node.get(node, 0) + gpus
        prio = self.by_priority.setdefault(w.budget, {})
        prio[w.priority] = prio.get(w.priority, 0) + gpus

    def lower_priority_gpus(self, leaf: str, priority: int) -> int:
        """GPUs of ``leaf``'s own victims with priority below ``priority``."""
        return sum(g for p, g in self.by_priority.get(leaf, {}).items() if p < priority)

    def discard(self, w: Workload) -> None:
        """``w`` stopped this cycle: it can no longer free anything."""
        if w.id not in self._ids:
            return
        if self._shared:
            self._unshare()
        self._ids.discard(w.id)
        self._cands = {}
        floors = self._floors
        gpus = 0
        for host, g in w.placement:
            floors.pop(host, None)
            if host in self.victim_gpus:
                self.victim_gpus[host] -= g
                gpus += g
        self.size -= 1
        self._count(w, -gpus)

    def cost_floors(self, costs: object | None) -> dict[str, int]:
        """Per host, at most the cost of its cheapest victim not stopped, under ``costs``.

        The single-host search (``scheduler.policy.victims``) writes a host's floor
        once it has asked the cost of every victim there, and skips the host in
        later searches whose best plan so far is cheaper. Key: the cost model
        (by identity; None keeps nothing); lapse: another model, and a host's
        entry when a victim there goes (``discard``).
        """
        if costs is None or costs is not self._floors_of:
            self._floors = {}
            self._floors_of = costs
        return self._floors

    def candidates(self, capacity: Capacity, per_host: int) -> list[str]:
        """Healthy hosts, by name, whose free GPUs plus all their victims' reach ``per_host``.

        Whoever asks, before reservations: kept for the cycle's other searches
        until its capacity changes or a victim goes.
        """
        if self._cands_of is not capacity or self._cands_at != capacity.version:
            self._cands = {}
            self._cands_of = capacity
            self._cands_at = capacity.version
        found = self._cands.get(per_host)
        if found is None:
            free, bound = capacity.free, self.victim_gpus
            found = self._cands[per_host] = [
                h for h in capacity.names
                if (f := free[h]) >= per_host or per_host - f <= bound.get(h, 0)]
        return found


__all__ = ["NEVER", "HostBySpan", "SoleLeafLookup", "Victim", "VictimIndex"]
