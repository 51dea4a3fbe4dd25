"""When each host's GPUs come free, carried from cycle to cycle: an accelerator of the reservations.

The policy's definition is ``scheduler.policy.reservations.host_frees``: per
host, from when each running workload there could stop being protected. It
reads only the running set and the hosts, so ``HostFreeTimes`` keeps it in the
state's memos (``Memos.frees``) and, after starts and stops, advances it
instead of building it again. Key: (host health version, number of hosts) and
the running set's version; lapse: a new host set (built again), or a running
set further behind than the running set's journal reaches (built again).
tests/test_core_host_frees.py compares every advanced value with ``host_frees``
made afresh.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scheduler.policy.reservations import FreeList, frees_on, host_frees

if TYPE_CHECKING:
    from scheduler.state import State


class HostFreeTimes:
    """``host_frees`` of the state's running set, kept with what planning and advancing it need.

    ``per_host``: per host, its ``host_frees`` list and the GPUs listed in it
    (the lists are shared with later ``HostFreeTimes``: never changed in place).
    ``on``: the hosts each listed workload is listed on. Kept in the state's
    memo and, after starts and stops, advanced rather than rebuilt (``advanced``).
    """

    __slots__ = ("on", "per_host", "running_version", "world")

    def __init__(self, per_host: dict[str, tuple[int, FreeList]],
                 on: dict[str, tuple[str, ...]], running_version: int,
                 world: tuple[int, int]) -> None:
        self.per_host = per_host
        self.on = on
        self.running_version = running_version
        self.world = world  # the host set they were built on: (health_version, hosts)

    @staticmethod
    def build(state: State, world: tuple[int, int]) -> HostFreeTimes:
        """From scratch: ``host_frees`` of the state, with its sums and hosts per workload."""
        wl = state.workloads
        per_host: dict[str, tuple[int, FreeList]] = {}
        on: dict[str, tuple[str, ...]] = {}
        for name, frees in host_frees(state.cluster_state.hosts, wl.running).items():
            per_host[name] = (_listed(frees, on, name, None), frees)
        return HostFreeTimes(per_host, on, wl.running_version, world)

    @staticmethod
    def of(state: State) -> HostFreeTimes:
        """The frees of ``state``: the memoised ones, advanced to it if they can be, else built."""
        cs = state.cluster_state
        wl = state.workloads
        world = (cs.health_version, len(cs.hosts))
        cached = state.memos.frees
        made = None
        if isinstance(cached, HostFreeTimes) and cached.world == world:
            if cached.running_version == wl.running_version:
                return cached
            made = cached.advanced(state)
        if made is None:
            made = HostFreeTimes.build(state, world)
        state.memos.frees = made
        return made

    def advanced(self, state: State) -> HostFreeTimes | None:
        """``HostFreeTimes`` of ``state`` from these (built on the same host set), or None if too far behind.

        Possible while the running set's journal (``WorkloadsProjection.moves``)
        reaches back to these. A host's list reads its placements
        (``Host.workloads``) and, of each workload placed there, whether it
        runs, ``allocated`` and ``protected_until``. On a fixed host set (same
        ``health_version``: no host added or removed) the placements change only
        when a workload starts (``allocate``, on the hosts of its placement) or
        stops (``release``, on the same hosts), and those fields only when it
        starts. So a host's list changes only through workloads that moved
        (started or stopped since), and only on hosts where such a workload
        was listed before (``on``) or is placed now: exactly those lists are
        made again, with the function ``host_frees`` uses; every other list
        holds the same entries (the same workload objects) in the same order.
        """
        wl = state.workloads
        behind = wl.running_version - self.running_version
        moves = wl.moves
        if behind < 0 or behind > len(moves):
            return None
        hosts = state.cluster_state.hosts
        running = wl.running
        moved = {m.id for m in moves[len(moves) - behind:]}
        redo: set[str] = set()
        for wid in moved:
            redo.update(self.on.get(wid, ()))
            w = running.get(wid)
            if w is not None:
                redo.update(h for h, _ in w.placement if h in hosts)
        per_host = dict(self.per_host)
        on = dict(self.on)
        for wid in moved:
            on.pop(wid, None)
        # Only workloads that moved can be new on a host made again, and their
        # ``on`` entries were dropped above; the others keep theirs.
        for name in sorted(redo):
            frees = frees_on(hosts[name], running)
            per_host[name] = (_listed(frees, on, name, moved), frees)
        return HostFreeTimes(per_host, on, wl.running_version, self.world)


def _listed(frees: FreeList, on: dict[str, tuple[str, ...]], name: str,
            only: set[str] | None) -> int:
    """The GPUs in host ``name``'s list; notes the host in ``on`` for its workloads (those in ``only``)."""
    total = 0
    for _, g, wid, _ in frees:
        total += g
        if only is None or wid in only:
            on[wid] = (*on.get(wid, ()), name)
    return total
