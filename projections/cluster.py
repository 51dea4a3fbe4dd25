"""Cluster state: hosts, their free GPUs, health and topology labels.

A host is schedulable only when healthy (``ok``). Faults move it to
``degraded`` (drains at minimum runtime) or ``failed`` (emptied at once); once
empty the scheduler marks it ``repairing`` (drained) until a repair event brings
it back to ``ok``.
"""

from __future__ import annotations

from bisect import insort
from collections.abc import Iterable

OK = "ok"
DEGRADED = "degraded"
FAILED = "failed"
REPAIRING = "repairing"


class Host:
    """One host's capacity and occupancy."""

    __slots__ = ("block", "fault_reason", "faulted_at", "free", "gpus", "health", "held", "name",
                 "rack", "workloads")

    def __init__(self, name: str, gpus: int, rack: str | None, block: str | None) -> None:
        self.name = name
        self.gpus = gpus
        self.free = gpus
        self.rack = rack
        self.block = block
        self.health = OK
        self.fault_reason = ""
        self.faulted_at: int | None = None
        self.workloads: dict[str, int] = {}  # workload id -> GPUs held here
        # GPUs of preempted runs still stopping (their grace): taken, by no workload.
        self.held = 0

    @property
    def schedulable(self) -> bool:
        return self.health == OK

    def __repr__(self) -> str:
        return f"Host({self.name!r}, {self.free}/{self.gpus} free, {self.health})"


class ClusterProjection:
    """The fold of host events and placements."""

    __slots__ = ("_capacity", "_usable_sorted", "by_free", "faulty", "health_version", "hosts",
                 "labels", "max_gpus", "order", "sizes", "usable", "usable_free")

    def __init__(self) -> None:
        self.hosts: dict[str, Host] = {}
        self.order: list[str] = []  # host names, sorted: the deterministic scan order
        self.sizes: dict[int, int] = {}  # GPUs per host -> how many hosts have that many
        # Kept up to date on every change so a cycle can snapshot free capacity in
        # O(buckets) instead of scanning hosts: free GPUs of every healthy host,
        # and healthy hosts bucketed by free GPUs (each bucket sorted by name).
        self.usable: dict[str, int] = {}
        self.usable_free = 0  # the sum of ``usable``'s values
        self.by_free: list[list[str]] = [[]]
        self.labels: dict[str, tuple[str | None, str | None]] = {}
        self.max_gpus = 0
        self.faulty: set[str] = set()  # degraded or failed, not yet drained
        self._capacity = 0
        self.health_version = 0  # bumped when the set of healthy hosts changes (memo key)
        self._usable_sorted: tuple[int, list[str]] = (-1, [])

    def usable_sorted(self) -> list[str]:
        """The healthy hosts' names, sorted (memoised until the healthy set changes; do not mutate).

        ``usable`` is re-inserted on every change of a host's free GPUs, so its own
        order is not the name order searches need.
        """
        version, names = self._usable_sorted
        if version != self.health_version:
            names = sorted(self.usable)
            self._usable_sorted = (self.health_version, names)
        return names

    def _index(self, h: Host) -> None:
        if h.health == OK:
            self.usable[h.name] = h.free
            self.usable_free += h.free
            insort(self.by_free[h.free], h.name)

    def _unindex(self, h: Host) -> None:
        if h.name in self.usable:
            del self.usable[h.name]
            self.usable_free -= h.free
            self.by_free[h.free].remove(h.name)

    def _set_free(self, h: Host, free: int) -> None:
        self._unindex(h)
        h.free = free
        self._index(h)

    def hosts_with_at_least(self, gpus: int) -> int:
        """How many hosts (healthy or not) have ``gpus`` GPUs or more."""
        return sum(n for size, n in self.sizes.items() if size >= gpus)

    @property
    def capacity(self) -> int:
        """All GPUs in the cluster, healthy or not."""
        return self._capacity

    def add(self, name: str, gpus: int, rack: str | None, block: str | None) -> None:
        h = self.hosts[name] = Host(name, gpus, rack, block)
        self.order = sorted(self.hosts)
        self.sizes[gpus] = self.sizes.get(gpus, 0) + 1
        self._capacity += gpus
        self.labels[name] = (block, rack)
        if gpus > self.max_gpus:
            self.max_gpus = gpus
            self.by_free.extend([] for _ in range(gpus + 1 - len(self.by_free)))
        self._index(h)
        self.health_version += 1

    def remove(self, name: str) -> None:
        h = self.hosts[name]
        self._unindex(h)
        self.health_version += 1
        self.faulty.discard(name)
        del self.hosts[name]
        del self.labels[name]
        gpus = h.gpus
        self._capacity -= gpus
        self.order = sorted(self.hosts)
        self.sizes[gpus] -= 1
        if not self.sizes[gpus]:
            del self.sizes[gpus]

    def fault(self, name: str, severity: str, reason: str, now: int) -> None:
        h = self.hosts[name]
        self._unindex(h)
        self.health_version += 1
        # A failure overrides a degradation; a degradation never downgrades a failure.
        if h.health != FAILED:
            h.health = FAILED if severity == FAILED else DEGRADED
        self.faulty.add(name)
        h.fault_reason = reason
        if h.faulted_at is None:
            h.faulted_at = now

    def drained(self, name: str) -> None:
        self.hosts[name].health = REPAIRING
        self.faulty.discard(name)

    def repaired(self, name: str) -> None:
        h = self.hosts[name]
        h.health = OK
        h.fault_reason = ""
        h.faulted_at = None
        self.faulty.discard(name)
        self._index(h)
        self.health_version += 1

    def allocate(self, workload: str, slots: Iterable[tuple[str, int]]) -> None:
        for host, gpus in slots:
            h = self.hosts[host]
            self._set_free(h, h.free - gpus)
            h.workloads[workload] = gpus

    def release(self, workload: str, slots: Iterable[tuple[str, int]]) -> None:
        for host, gpus in slots:
            h = self.hosts.get(host)
            if h is None:  # removed while empty of this workload: nothing to give back
                continue
            self._set_free(h, h.free + gpus)
            h.workloads.pop(workload, None)

    def hold(self, workload: str, slots: Iterable[tuple[str, int]]) -> None:
        """``workload`` left its slots, but its processes may still run: the GPUs stay taken."""
        for host, gpus in slots:
            h = self.hosts.get(host)
            if h is None:
                continue
            h.workloads.pop(workload, None)
            h.held += gpus

    def unhold(self, slots: Iterable[tuple[str, int]]) -> None:
        """GPUs ``hold`` kept are free again (the run stopped, or its grace ended)."""
        for host, gpus in slots:
            h = self.hosts.get(host)
            if h is None:
                continue
            h.held -= gpus
            self._set_free(h, h.free + gpus)

    def snapshot(self) -> list[tuple[str, int, int, str, list[tuple[str, int]]]]:
        """A canonical, comparable view (for state fingerprints)."""
        return [
            (n, h.gpus, h.free, h.health, sorted(h.workloads.items()))
            for n, h in sorted(self.hosts.items())
        ]
