"""Preemption: the cheapest set of running workloads whose GPUs really place a candidate.

Only workloads that are not protected can be victims: unallocated work (never
protected) and allocated work past its minimum runtime. Which of those a
candidate may take is the cycle's rule (fair share, priority inside a leaf);
this module finds, for the hosts the candidate could use, the victims to stop.

Victims cost, cheapest first: unallocated resumable, unallocated not
resumable, allocated resumable, allocated not resumable. A plan's cost is the
GPUs it takes from each class, most expensive class compared first, then the
number of victims. The search never returns a plan that would not place the
candidate, so nothing is ever preempted in vain.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable
from typing import TYPE_CHECKING

from projections.workloads import Workload

if TYPE_CHECKING:
    from scheduler.placement import Capacity
    from scheduler.state import State

UNALLOCATED_RESUMABLE = 0
UNALLOCATED = 1
ALLOCATED_RESUMABLE = 2
ALLOCATED = 3


def victim_class(w: Workload) -> int:
    if not w.allocated:
        return UNALLOCATED_RESUMABLE if w.resumable else UNALLOCATED
    return ALLOCATED_RESUMABLE if w.resumable else ALLOCATED


class Victim:
    """A preemptible running workload, as the search sees it."""

    __slots__ = ("cls", "order", "w")

    def __init__(self, w: Workload) -> None:
        self.w = w
        self.cls = victim_class(w)
        # Cheapest first: class, then the biggest (fewer victims), then the lowest
        # priority, then the latest start (least progress lost), then the id.
        self.order = (self.cls, -w.gpus, w.priority, -(w.started_at or 0), w.id)


Cost = tuple[int, int, int, int, int]
ZERO: Cost = (0, 0, 0, 0, 0)


def plan_cost(victims: list[Victim]) -> Cost:
    by_cls = [0, 0, 0, 0]
    for v in victims:
        by_cls[v.cls] += v.w.gpus
    return (by_cls[ALLOCATED], by_cls[ALLOCATED_RESUMABLE], by_cls[UNALLOCATED],
            by_cls[UNALLOCATED_RESUMABLE], len(victims))


class Plan:
    """Hosts to place on and the victims (with the reason each may be taken) to stop first."""

    __slots__ = ("cost", "hosts", "victims")

    def __init__(self, hosts: list[str], victims: list[tuple[Victim, str]], cost: Cost) -> None:
        self.hosts = hosts
        self.victims = victims
        self.cost = cost


# Given a victim, the preemption reason when the candidate may take it, else None.
Eligibility = Callable[[Victim], str | None]


NEVER = 1 << 62


class VictimIndex:
    """Preemptible running workloads per healthy host, as one cycle sees them.

    Building it walks every running workload, so the unshared part is built once
    per running set (``build``) and each cycle takes a cheap ``fork`` of it: the
    set changes only when work starts or stops, hosts change health, or a
    protection ends, and the memo key covers exactly those.
    """

    __slots__ = ("_base", "_ids", "_on_host", "_usable", "_victims", "by_node", "by_priority",
                 "gone", "paths", "size", "unallocated_gpus", "victim_gpus")

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
        self.gone: set[str] = set()
        self._usable: dict[str, int] = {}
        self._victims: list[Workload] = []
        self._ids: set[str] = set()
        self._on_host: dict[str, list[Victim]] | None = None  # built on the first search
        self._base: VictimIndex | None = None
        self.size = 0

    @classmethod
    def build(cls, state: State) -> tuple[VictimIndex, int]:
        """The index of ``state`` (no workload gone yet), and when a protection next ends."""
        idx = cls()
        now = state.now
        idx.paths = state.budget.structure().paths
        usable = idx._usable = state.cluster_state.usable
        vg = idx.victim_gpus
        next_end = NEVER
        for w in state.workloads.running.values():
            if w.protected_at(now):
                if w.protected_until is not None and w.protected_until < next_end:
                    next_end = w.protected_until
                continue
            gpus = 0
            for host, g in w.placement:
                if host in usable:
                    vg[host] = vg.get(host, 0) + g
                    gpus += g
            if gpus:
                idx._victims.append(w)
                idx._count(w, gpus)
        idx.size = len(idx._victims)
        idx._ids = {w.id for w in idx._victims}
        return idx, next_end

    @classmethod
    def for_cycle(cls, state: State, gone: set[str]) -> VictimIndex:
        """A fork of the memoised index for ``state``, minus the workloads in ``gone``."""
        key = (state.workloads.running_version, state.cluster_state.health_version,
               state.budget.version)
        cached = state.memo.get("victims")
        now = state.now
        if cached is not None and cached[0] == key and cached[1] <= now < cached[2]:  # type: ignore[index]
            base = cached[3]  # type: ignore[index]
        else:
            base, next_end = cls.build(state)
            state.memo["victims"] = (key, now, next_end, base)
        return base.fork(gone)

    def fork(self, gone: set[str]) -> VictimIndex:
        """A copy whose counts this cycle may change; the heavy parts are shared."""
        idx = VictimIndex()
        idx.paths = self.paths
        idx._usable = self._usable
        idx._victims = self._victims
        idx._ids = set(self._ids)
        idx._base = self._base or self
        idx._on_host = idx._base._on_host
        idx.victim_gpus = dict(self.victim_gpus)
        idx.by_node = dict(self.by_node)
        idx.by_priority = {leaf: dict(p) for leaf, p in self.by_priority.items()}
        idx.unallocated_gpus = self.unallocated_gpus
        idx.size = self.size
        idx.gone = gone
        for w in [w for w in self._victims if w.id in gone]:
            idx.discard(w)
        return idx

    @property
    def on_host(self) -> dict[str, list[Victim]]:
        """Victims per healthy host, cheapest first (built when a search first needs it)."""
        if self._on_host is None:
            on_host: dict[str, list[Victim]] = {}
            usable = self._usable
            for w in self._victims:
                v = Victim(w)
                for host, _ in w.placement:
                    if host in usable:
                        on_host.setdefault(host, []).append(v)
            for victims in on_host.values():
                victims.sort(key=_order)
            self._on_host = on_host
            if self._base is not None:
                self._base._on_host = on_host
        return self._on_host

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
        self._ids.discard(w.id)
        gpus = 0
        for host, g in w.placement:
            if host in self.victim_gpus:
                self.victim_gpus[host] -= g
                gpus += g
        self.size -= 1
        self._count(w, -gpus)

    def search(
        self,
        hosts: int,
        per_host: int,
        ends_by: int,
        capacity: Capacity,
        eligible: Eligibility,
        who: str = "",
    ) -> Plan | None:
        """The cheapest plan placing ``hosts`` x ``per_host`` GPUs for ``who``, or None."""
        if hosts > 1:
            return self._search_gang(hosts, per_host, ends_by, capacity, eligible, who)
        gone = self.gone
        free_of = capacity.free
        bound = self.victim_gpus
        best: tuple[tuple[Cost, int, str], list[tuple[Victim, str]]] | None = None
        for host, victims in sorted(self.on_host.items()):
            free = free_of[host]
            deficit = per_host - free
            if deficit > bound[host] or not capacity.allowed(host, ends_by, who):
                continue
            chosen = _take(victims, host, deficit, eligible, gone)
            if chosen is None:
                continue
            key = (plan_cost([v for v, _ in chosen]), free, host)
            if best is None or key < best[0]:
                best = (key, chosen)
        if best is None:
            return None
        (cost, _, host), chosen = best
        return Plan([host], chosen, cost)

    def _search_gang(
        self,
        hosts: int,
        per_host: int,
        ends_by: int,
        capacity: Capacity,
        eligible: Eligibility,
        who: str,
    ) -> Plan | None:
        """Pick hosts cheapest first, where a host's cost counts only the victims' GPUs on it.

        A victim spanning several hosts (another gang) is charged per host it
        sits on, so clearing it readies all of its hosts for the price of one
        victim; after every pick, the hosts the picked victims sit on are
        re-costed (they got cheaper). Ties go to the host whose victims ready
        more hosts, then to the fuller host, then the name.
        """
        gone = self.gone
        on_host = self.on_host
        bound = self.victim_gpus
        free = capacity.free
        reserved = capacity.reserved
        candidates = [
            h for h, f in free.items()
            if (f >= per_host or per_host - f <= bound.get(h, 0))
            and (not reserved or capacity.allowed(h, ends_by, who))
        ]
        if len(candidates) < hosts:
            return None
        # Feasibility first (most gang searches fail): could enough hosts be
        # readied if every eligible victim on them went? Stops counting at enough.
        ready = 0
        for h in candidates:
            have = free[h]
            if have < per_host:
                for v in on_host.get(h, ()):
                    if v.w.id not in gone and eligible(v) is not None:
                        have += _gpus_on(v, h)
                        if have >= per_host:
                            break
            if have >= per_host:
                ready += 1
                if ready >= hosts:
                    break
        if ready < hosts:
            return None
        selected: dict[str, Victim] = {}

        def option(host: str) -> tuple[tuple[object, ...], list[tuple[Victim, str]]] | None:
            have = free[host]
            for v in on_host.get(host, ()):
                if v.w.id in selected:
                    have += _gpus_on(v, host)
            if have >= per_host:
                return ((0, 0, 0, 0, 0, 0, -have, host), [])
            chosen = _take(on_host.get(host, ()), host, per_host - have, eligible, gone, selected)
            if chosen is None:
                return None
            by_cls = [0, 0, 0, 0]
            spread = 0
            for v, _ in chosen:
                by_cls[v.cls] += _gpus_on(v, host)
                spread += len(v.w.placement)
            key = (by_cls[ALLOCATED], by_cls[ALLOCATED_RESUMABLE], by_cls[UNALLOCATED],
                   by_cls[UNALLOCATED_RESUMABLE], len(chosen), -spread, free[host], host)
            return (key, chosen)

        options: dict[str, tuple[tuple[object, ...], list[tuple[Victim, str]]]] = {}
        for h in candidates:
            o = option(h)
            if o is not None:
                options[h] = o
        if len(options) < hosts:
            return None
        picked: list[str] = []
        reasons: dict[str, str] = {}
        while len(picked) < hosts:
            if not options:
                return None
            host = min(options, key=lambda h: options[h][0])
            _, chosen = options.pop(host)
            picked.append(host)
            touched: set[str] = set()
            for v, why in chosen:
                selected[v.w.id] = v
                reasons[v.w.id] = why
                touched.update(h for h, _ in v.w.placement)
            for h in touched:  # these hosts just got cheaper (or ready)
                if h in options:
                    o = option(h)
                    if o is None:
                        del options[h]
                    else:
                        options[h] = o
        if not selected:
            return None  # it fits without preemption; the caller places it directly
        victims = list(selected.values())
        return Plan(sorted(picked), [(v, reasons[v.w.id]) for v in victims], plan_cost(victims))


def _order(v: Victim) -> tuple[int, int, int, int, str]:
    return v.order


def _gpus_on(v: Victim, host: str) -> int:
    for h, g in v.w.placement:
        if h == host:
            return g
    return 0


def _take(victims: Iterable[Victim], host: str, deficit: int, eligible: Eligibility,
          gone: Container[str], taken: Container[str] = ()) -> list[tuple[Victim, str]] | None:
    """The cheapest eligible victims on ``host`` freeing ``deficit`` GPUs, or None.

    Skips victims already ``gone`` this cycle or ``taken`` by the plan being built.

    Victims come in cost order; take them until enough is freed, then drop,
    most expensive first, any pick that turned out not to be needed.
    """
    chosen: list[tuple[Victim, str]] = []
    got = 0
    for v in victims:
        if v.w.id in gone or v.w.id in taken:
            continue
        why = eligible(v)
        if why is None:
            continue
        chosen.append((v, why))
        got += _gpus_on(v, host)
        if got >= deficit:
            break
    if got < deficit:
        return None
    for item in reversed(list(chosen)):
        g = _gpus_on(item[0], host)
        if got - g >= deficit:
            chosen.remove(item)
            got -= g
    return chosen
