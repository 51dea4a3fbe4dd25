"""Placement: where a workload's GPUs go, packed to keep whole hosts free.

A workload of ``hosts`` x ``gpus_per_host`` needs that many distinct healthy
hosts with that many free GPUs each: a single host for small work, a gang of
hosts (all or nothing) for large work. Hosts are chosen least-free first
(Kueue's LeastFreeCapacity), so small work fills partly used hosts and whole
hosts stay free for gangs. A gang goes to the smallest topology domain that
holds it whole: one rack, else one block (racks sit inside blocks), else
anywhere, and inside that domain to its least-free hosts (Kueue TAS's
"BestFit" profile). Among domains of the same level that can hold it, the one
left with the fewest free GPUs wins (the tightest fit).

``Capacity`` is the cycle's own copy of free GPUs: the cycle places and
preempts against it and never touches the state.
"""

from __future__ import annotations

from bisect import insort
from typing import TYPE_CHECKING

from events.errors import AllotError

if TYPE_CHECKING:
    from scheduler.state import State

NEVER = 1 << 62  # "no reservation ends": larger than any event time


class ReservationConflict(AllotError):
    """A host was reserved for a second holder: reservations must be disjoint."""


class Capacity:
    """Free GPUs per schedulable host, bucketed by free count, with reservations."""

    __slots__ = ("_owned", "by_free", "free", "labels", "max_gpus", "names", "reserved",
                 "total_free", "version")

    def __init__(self, state: State) -> None:
        cs = state.cluster_state
        self.max_gpus = cs.max_gpus
        # Copy-on-write views of the cluster's own indexes: most cycles place
        # nothing, and then nothing is copied.
        self.free: dict[str, int] = cs.usable
        self.by_free: list[list[str]] = cs.by_free
        self.labels = cs.labels
        self.names: list[str] = cs.usable_sorted()  # the keys of ``free``, sorted (shared: read only)
        self._owned = False
        # host -> (time until which it is held, the blocked workload holding it)
        self.reserved: dict[str, tuple[int, str]] = {}
        self.total_free = cs.usable_free
        # Bumped by every change of free GPUs (not by reservations), so a cycle can
        # keep an answer that reads only ``free`` / ``by_free`` until it moves.
        self.version = 0

    # -- mutation (cycle-local) -----------------------------------------------------

    def _own(self) -> None:
        self.free = dict(self.free)
        self.by_free = [list(b) for b in self.by_free]
        self._owned = True

    def _move(self, host: str, delta: int) -> None:
        if not self._owned:
            self._own()
        f = self.free[host]
        self.by_free[f].remove(host)
        f += delta
        self.free[host] = f
        insort(self.by_free[f], host)
        self.total_free += delta
        self.version += 1

    def take(self, host: str, gpus: int) -> None:
        self._move(host, -gpus)

    def give(self, host: str, gpus: int) -> None:
        if host in self.free:  # GPUs on faulty hosts are not schedulable capacity
            self._move(host, gpus)

    def reserve(self, host: str, until: int, holder: str) -> None:
        """Hold ``host`` for ``holder`` until ``until`` (other work only as backfill)."""
        current = self.reserved.get(host)
        if current is not None and current[1] != holder:
            raise ReservationConflict(f"{host} is reserved for {current[1]}, not {holder}")
        self.reserved[host] = (until, holder)

    def release(self, host: str, holder: str) -> None:
        """Drop ``holder``'s hold on ``host`` (it started, or its reservation is void)."""
        current = self.reserved.get(host)
        if current is not None and current[1] == holder:
            del self.reserved[host]

    def holder(self, host: str) -> str | None:
        """Who holds ``host``, if anyone."""
        r = self.reserved.get(host)
        return None if r is None else r[1]

    # -- queries --------------------------------------------------------------------

    def allowed(self, host: str, ends_by: int, who: str = "") -> bool:
        """May ``who``'s work, protected until ``ends_by``, go on ``host``?

        A reserved host takes other work only as backfill: work whose protection
        ends by the reservation's end, when the holder may take the host back.
        """
        r = self.reserved.get(host)
        return r is None or r[1] == who or ends_by <= r[0]

    def barred(self, ends_by: int, who: str = "") -> set[str]:
        """The hosts ``allowed`` refuses to ``who``'s work protected until ``ends_by`` (few: reserved ones)."""
        return {h for h, (until, holder) in self.reserved.items() if holder != who and ends_by > until}

    def choose(self, hosts: int, per_host: int, ends_by: int, who: str = "") -> list[str] | None:
        """The hosts to use for ``hosts`` x ``per_host`` GPUs, or None when it does not fit."""
        if per_host > self.max_gpus or self.total_free < hosts * per_host:
            return None
        by_free = self.by_free
        reserved = self.reserved
        if hosts == 1:
            for f in range(per_host, self.max_gpus + 1):
                for name in by_free[f]:
                    if not reserved or self.allowed(name, ends_by, who):
                        return [name]
            return None
        barred = self.barred(ends_by, who) if reserved else None
        if barred:
            eligible = [name for f in range(per_host, self.max_gpus + 1) for name in by_free[f]
                        if name not in barred]
        else:
            eligible = [name for f in range(per_host, self.max_gpus + 1) for name in by_free[f]]
        if len(eligible) < hosts:
            return None
        return pack(eligible, hosts, self.free, self.labels)


def _tightest(groups: dict, n: int) -> list[str] | None:
    """The ``n`` least-free hosts of the tightest domain holding ``n``, or None.

    Tightest: the fewest free GPUs on the hosts the gang could use there (what
    is left after it is that minus a constant), then the domain's name.
    """
    best: tuple[tuple[int, str, str], list] | None = None
    for key, g in groups.items():
        if len(g) > n:
            names = (key[0] or "", key[1]) if isinstance(key, tuple) else (key, "")
            cand = (g[0], *names)
            if best is None or cand < best[0]:
                best = (cand, g)
    return None if best is None else best[1][1:n + 1]


def pack(
    eligible: list[str],
    n: int,
    free: dict[str, int],
    labels: dict[str, tuple[str | None, str | None]],
) -> list[str]:
    """Pick ``n`` of ``eligible`` (sorted least-free first): one rack, else one block, else any.

    The smallest domain that holds the whole gang wins (a rack lies inside a
    block). Among domains of that level that can hold it, the one with the
    fewest free GPUs on the hosts the gang could use wins (the tightest fit),
    then the label name; inside the domain the least-free hosts are taken.
    """
    # Per domain: [free GPUs on the hosts the gang could use there, the hosts...].
    racks: dict[tuple[str | None, str], list] = {}
    for name in eligible:
        lab = labels[name]
        if lab[1] is not None:  # a rack is named within its block: (block, rack) is its key
            g = racks.get(lab)  # type: ignore[arg-type]
            if g is None:
                racks[lab] = [free[name], name]  # type: ignore[index]
            else:
                g[0] += free[name]
                g.append(name)
    chosen = _tightest(racks, n)
    if chosen is not None:
        return chosen
    blocks: dict[str, list] = {}
    for name in eligible:
        block = labels[name][0]
        if block is not None:
            g = blocks.get(block)
            if g is None:
                blocks[block] = [free[name], name]
            else:
                g[0] += free[name]
                g.append(name)
    chosen = _tightest(blocks, n)
    if chosen is not None:
        return chosen
    return eligible[:n]
