"""Reservations: hosts held for blocked workloads that need whole hosts, so they cannot starve.

Minimum-runtime protection fragments capacity: with small work arriving all
the time, some GPU of every host is always protected, and a workload needing
whole hosts (one 8-GPU host, or a gang of them) would never see them free at
once. So the best-ranked such blocked workload *reserves* the hosts where the
work it may take (``scheduler.policy.rules``) stops being protected soonest
(``workload.reserved``: hosts and ``until``).

- **Backfill only.** Until ``until`` other work may start on reserved hosts only
  if its own protection ends by then.
- **Sticky.** At ``until`` the holder is served before anything else in the
  cycle and takes its hosts back: the backfill, and the other leaves' work it
  was granted the hosts on, whatever fair share says by then (reason
  ``reservation``). Nothing admitted earlier in the cycle can take them first.
- **Disjoint.** A host is held for one workload at most; planning skips hosts
  held for others.
- **One per size class.** A slot serving the largest gangs cannot also serve
  single 8-GPU jobs, so slots are per size class (hosts needed: 1, 2-3, 4-7,
  8-15, ...), ``policy.reservations`` each (0 turns reservations off).
- **Not a trap.** The holder keeps competing normally: it starts at once if it
  fits, or can preempt its way in, elsewhere; its reservation then lapses.
- **Lazy.** A reservation is worked out in the cycle where some later workload
  would otherwise place work or preempt, because only then does it change an
  outcome; so the event appears when the reservation first matters.

**The bound.** A whole-host workload reserved at ``t`` starts by its ``until``,
which is at most ``t + min_runtime_cap_s`` (every protection it waits for
began at or before ``t`` and lasts at most the cap; later work there is
backfill). A blocked workload that ranks first among the blocked workloads of
its size class gets its class's slot as soon as one is free, so it waits for at
most the holder ahead of it to start (itself reserved, so at most one cap) and
then one cap of its own: it starts within ``2 x min_runtime_cap_s`` plus the
time until its allocation may take the work on enough hosts (fair share), and
within one cap while a slot of its class is free. Void reservations (a reserved
host left service, or the holder was cancelled) are replanned.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from scheduler.policy.placement import NEVER

if TYPE_CHECKING:
    from collections.abc import Container, Iterable

    from projections.cluster import Host
    from projections.workloads import Workload
    from scheduler.index.sole_leaf import FreeTimes, SoleLeafFrees
    from scheduler.policy.placement import Capacity
    from scheduler.policy.rules import BudgetRule
    from scheduler.state import State

# Due holds admit nobody but their holder: no ``ends_by`` is at or before this.
_SEALED = -1


class Reservation(msgspec.Struct, frozen=True):
    """Hosts held for a blocked workload until the protection there ends."""

    workload: str
    hosts: tuple[str, ...]
    until: int
    since: int  # when it was made: work started later is backfill


def size_class(hosts: int) -> int:
    """A workload's reservation class by hosts needed: 1, 2-3, 4-7, 8-15, ... -> 1, 2, 3, 4, ..."""
    return hosts.bit_length()


FreeList = list[tuple[int, int, str, "Workload"]]


def host_frees(hosts: dict[str, Host], running: dict[str, Workload]) -> dict[str, FreeList]:
    """Per host, from when each running workload there could stop being protected, soonest first.

    (time, GPUs there, id, workload): unallocated work from the beginning of
    time (-1: at once, whenever asked), allocated work from its protection end;
    work protected until it ends (no ``protected_until``) is left out. The times
    are not clamped to a cycle's ``now`` (``ready_times`` does that), so the
    result depends only on the running set and can be shared by every cycle
    until that changes (the accelerator ``scheduler.index.host_free_times.HostFreeTimes``
    keeps it, and advances it over starts and stops).
    """
    return {name: frees_on(h, running) for name, h in hosts.items()}


def frees_on(h: Host, running: dict[str, Workload]) -> FreeList:
    """One host's list of ``host_frees``."""
    frees = []
    for wid, gpus in h.workloads.items():
        other = running.get(wid)
        if other is None:
            continue
        if not other.allocated:
            frees.append((-1, gpus, wid, other))
        elif other.protected_until is not None:
            frees.append((other.protected_until, gpus, wid, other))
    frees.sort()  # (ids are unique on a host: never compares two workloads)
    return frees


def _hosts_to_walk(need: int, capacity: Capacity, rule: BudgetRule, stopped_now: Container[str],
                   sole: SoleLeafFrees | None) -> tuple[Iterable[str], bool]:
    """The hosts ``ready_times`` walks, and whether the sole-leaf index narrowed them."""
    own = rule.own_leaf
    free_of = capacity.free
    if sole is None or own is None or stopped_now or need < capacity.max_gpus:
        return free_of, False
    by_free = capacity.by_free
    fitting = [h for f in range(need, capacity.max_gpus + 1) for h in by_free[f]]
    # (A host the frees list but capacity does not is out of service: skipped, as below.)
    return dict.fromkeys([*fitting, *(h for h in sole.hosts(own) if h in free_of)]), True


def ready_times(w: Workload, capacity: Capacity, frees: FreeTimes, rule: BudgetRule,
                stopped_now: Container[str], now: int, sole: SoleLeafFrees | None = None
                ) -> dict[str, int]:
    """Per healthy host not held for another workload, when ``w`` could have its GPUs there.

    Work ``w`` may take (``rule``) counts as stopped when its protection ends (now,
    if it has ended); other work never (its end is unknown to the scheduler).
    Work started in this cycle is protected and not ``w``'s to take (and not in
    ``frees``, built from the state); work stopped in it is stopped already.

    A host's time is the least ``T`` at which its free GPUs plus those of the
    eligible work freed by ``T`` reach ``w``'s need: the first crossing in a
    walk of ``frees`` in time order, whatever the order among equal times (so
    clamping the times to ``now`` during the walk, rather than before the sort,
    gives the same answer).

    The walk crosses iff the GPUs it passes over (work ``w`` may not take, or
    stopped in this cycle) add up to at most ``spare``: the host's free GPUs
    plus every GPU listed there, less the need. So a host with ``spare`` below
    zero is not walked, and a walk stops once it has passed over more: it could
    not cross later. Planning asks for whole hosts of the largest size, where
    ``spare`` is never above zero: a host is reached only if ``w`` may take all
    the work listed there, and its walk stops at the first it may not. (Most
    plans reach too few hosts, so most walks end so; the rule is asked only
    about the work before the stop.)

    With ``sole`` (an accelerator, scheduler/index/sole_leaf.py), a rule kept
    to its own leaf (``Rule.own_leaf``) planning whole hosts while nothing has
    stopped in this cycle walks only the hosts free enough and those holding no
    other leaf's allocated work: ``spare`` is never above zero there, so every
    other host stops at its first such workload, unreached. The answer is the
    same, in the same order.
    """
    need = w.gpus_per_host
    wid_self = w.id
    reserved = capacity.reserved
    per_host = frees.per_host
    free_of = capacity.free
    out: dict[str, int] = {}
    takes: dict[str, bool] = {}  # the rule's answer per gang (on many hosts: asked once)
    ok: bool | None
    names, narrowed = _hosts_to_walk(need, capacity, rule, stopped_now, sole)
    for name in names:
        free = free_of[name]
        if reserved:
            held = reserved.get(name)
            if held is not None and held[1] != wid_self:
                continue  # reservations are disjoint
        if free >= need:
            out[name] = now
            continue
        listed, here = per_host[name]  # (healthy hosts are hosts: always there)
        spare = free + listed - need
        if spare < 0:
            continue
        got = free
        for t, g, wid, other in here:
            if len(other.placement) > 1:
                ok = takes.get(wid)
                if ok is None:
                    ok = takes[wid] = wid not in stopped_now and rule.reason(other) is not None
            else:  # listed on this host alone: nothing to keep
                ok = wid not in stopped_now and rule.reason(other) is not None
            if ok:
                got += g
                if got >= need:
                    out[name] = t if t > now else now
                    break
            else:
                spare -= g
                if spare < 0:
                    break
    if narrowed and len(out) > 1:
        out = {h: out[h] for h in free_of if h in out}  # (the full walk's order)
    return out


class ReservationBook:
    """The reservations one cycle works with: loaded from the state, held, planned, consumed."""

    __slots__ = ("capacity", "due", "noted", "now", "per_class", "standing", "used")

    def __init__(self, state: State, capacity: Capacity) -> None:
        self.capacity = capacity
        self.now = state.now
        self.per_class = state.policy.reservations
        self.standing: dict[str, Reservation] = {}  # held until ``until``, backfill only
        self.due: dict[str, Reservation] = {}       # reached ``until``: the holder goes first
        self.used: dict[int, int] = {}              # size class -> slots taken (standing or noted)
        self.noted: dict[str, int] = {}             # noted for a reservation this cycle -> class
        if not state.reservations:
            return
        workloads = state.workloads.all
        free = capacity.free
        held = capacity.reserved
        # Earliest first, so that if a log from before reservations were disjoint
        # holds two on one host, the one due sooner keeps it and the other is void.
        # (Ids are unique: the sort never compares past them.)
        order = sorted([(until, wid, hosts, since)
                        for wid, (hosts, until, since) in state.reservations.items()])
        for until, wid, hosts, since in order:
            w = workloads.get(wid)
            if w is None or w.status != "pending":
                continue
            if any(h not in free or h in held for h in hosts):
                continue  # a host left service (or is held already): void, replanned if needed
            r = Reservation(wid, hosts, until, since)
            if until <= self.now:
                self.due[wid] = r
                for h in hosts:
                    capacity.reserve(h, _SEALED, wid)
            else:
                self.standing[wid] = r
                cls = size_class(w.hosts)
                self.used[cls] = self.used.get(cls, 0) + 1
                for h in hosts:
                    capacity.reserve(h, until, wid)

    def holds(self, wid: str) -> Reservation | None:
        """The standing reservation of ``wid``, if any."""
        return self.standing.get(wid)

    def slot_free(self, hosts: int) -> bool:
        """Is a reservation slot of this size class still free (for a workload not holding one)?"""
        return self.used.get(size_class(hosts), 0) < self.per_class

    def note(self, w: Workload) -> bool:
        """Take a slot of ``w``'s class for it (the plan is worked out later); False if none is free."""
        if w.id in self.standing or w.id in self.noted or not self.slot_free(w.hosts):
            return False
        cls = size_class(w.hosts)
        self.used[cls] = self.used.get(cls, 0) + 1
        self.noted[w.id] = cls
        return True

    def plan(self, w: Workload, ready: dict[str, int], at_once: bool = False) -> Reservation | None:
        """Reserve for noted ``w`` the hosts that give it its GPUs soonest; None if never (slot back).

        ``at_once``: a plan whose hosts are ready now is kept too (due at the next
        cycle). The balanced reclaim plans so on borrowed work it may not take by
        reclaim (``Guarantees.lockout``); otherwise such a plan means only this
        cycle's search budget stopped ``w``, and no reservation is made.
        """
        cls = self.noted.pop(w.id)
        finite = sorted((t, h) for h, t in ready.items() if t < NEVER)
        r = None
        if len(finite) >= w.hosts:
            chosen = finite[: w.hosts]
            until = max(t for t, _ in chosen)
            if until > self.now or at_once:
                r = Reservation(w.id, tuple(sorted(h for _, h in chosen)), until, self.now)
        if r is None:
            self.used[cls] -= 1
            return None
        for h in r.hosts:
            self.capacity.reserve(h, r.until, w.id)
        self.standing[w.id] = r
        return r

    def seal(self, wid: str, hosts: tuple[str, ...]) -> None:
        """Hold ``hosts`` for ``wid`` alone from now on: a reservation due at once.

        Under a grace a preemptor waits for its victims to stop; the hosts of its
        plan (their free GPUs too) are sealed for it until it starts, as a due
        reservation's are, or work started there meanwhile leaves it to stop
        another set of victims (``Cycle.hold_for``).
        """
        self.due[wid] = Reservation(wid, hosts, self.now, self.now)
        for h in hosts:
            self.capacity.reserve(h, _SEALED, wid)

    def release(self, w: Workload) -> None:
        """``w`` started (or its due reservation is over): its hosts and its slot are free again."""
        r = self.standing.pop(w.id, None)
        if r is not None:
            self.used[size_class(w.hosts)] -= 1
        else:
            r = self.due.pop(w.id, None)
        if r is not None:
            for h in r.hosts:
                self.capacity.release(h, w.id)
