"""One scheduling cycle of the budget policy: ``decide(state, cause) -> events``.

The cycle is a pure function of the state: it copies what it mutates (free
capacity, the fair-share order) and returns the events that carry its
decisions; the engine folds them back into the state. Written, like Kueue's
scheduler, as numbered steps:

1. Snapshot free capacity on healthy hosts and the protected commitments.
2. Drain faulty hosts: preempt what is no longer protected there (everything on
   a failed host), and mark empty faulty hosts drained for repair.
3. Rank allocations by hierarchical fair share (usage + commitment per share).
4. Admit allocated work in that order: each leaf serves its queue by priority;
   a workload starts on free GPUs (packed), else preempts the cheapest set of
   victims it may take, else (if it needs whole hosts) reserves the hosts that
   free up soonest, so later work may only backfill them until then.
5. Lend every GPU still free to unallocated work (never protected, never charged).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import msgspec

from projections.cluster import FAILED
from projections.workloads import Workload
from scheduler.emit import Emitter
from scheduler.placement import NEVER, Capacity
from scheduler.preemption import UNALLOCATED, Victim, VictimIndex
from scheduler.ranking import Ranking, commitments

if TYPE_CHECKING:
    from events import Event
    from scheduler.state import State


class Outcome(msgspec.Struct, frozen=True, omit_defaults=True):
    """What one cycle did with one pending workload (recorded only when tracing)."""

    status: str  # started | blocked | not_examined
    reason: str = ""
    detail: str = ""
    hosts: tuple[str, ...] = ()
    until: int | None = None
    victims: tuple[str, ...] = ()


class Reservation(msgspec.Struct, frozen=True):
    """Hosts held for a blocked workload until its victims' protection ends."""

    workload: str
    hosts: tuple[str, ...]
    until: int


def decide(state: State, cause: str = "cycle", trace: dict[str, Outcome] | None = None) -> list[Event]:
    """Run one cycle at ``state.now``; return its decisions as events (state untouched)."""
    return Cycle(state, cause, trace).run()


def drain(state: State, cause: str) -> list[Event]:
    """Steps 1-2 only: what a host fault changes at once, without waiting for a cycle."""
    cycle = Cycle(state, cause, None)
    cycle.capacity = Capacity(state)
    cycle.drain_faulty_hosts()
    return cycle.emit.events


class Cycle:
    """The working set of one cycle. Nothing here outlives ``run()``."""

    def __init__(self, state: State, cause: str, trace: dict[str, Outcome] | None) -> None:
        self.state = state
        self.now = state.now
        self.policy = state.policy
        self.emit = Emitter(state.cluster, state.now, cause)
        self.trace = trace
        self.gone: set[str] = set()  # workloads stopped in this cycle
        self._victims: VictimIndex | None = None
        self._ranking: Ranking | None = None
        # Per leaf, (hosts, GPUs per host, commitment) of searches that found no plan.
        self.failed: dict[str, list[tuple[int, int, int]]] = {}
        self.to_reserve: list[Workload] = []  # blocked, reservation not yet worked out
        self._reach: dict[tuple[str, int, int, int], int] = {}  # could_start's per-leaf bound
        self.held: dict[str, Reservation] = {}  # standing reservations, by workload
        self.due: dict[str, tuple[frozenset[str], int]] = {}  # reached: (hosts, made at)

    # ------------------------------------------------------------------ the steps

    def run(self) -> list[Event]:
        # 1. Snapshot (with the reservations still standing).
        self.capacity = Capacity(self.state)
        self.load_reservations()
        # 2. Drain faulty hosts.
        self.drain_faulty_hosts()
        # 3. Rank allocations: on first use (the ``ranking`` property), since
        #    about half the cycles of a busy cluster never need the order.
        # 4. Admit allocated work: fit, else preempt, else reserve.
        self.admit_allocated()
        # 5. Lend what is left to unallocated work.
        self.lend_to_unallocated()
        if self.trace is not None:
            self.settle_reservation()
        return self.emit.events

    def load_reservations(self) -> None:
        """Reservations of earlier cycles: standing ones hold hosts, due ones take them back.

        Before ``until`` a reservation keeps its hosts for backfill only; from
        ``until`` its holder may preempt, on those hosts, any unprotected work
        that started after the reservation was made (the backfill), whatever
        fair share would say. A holder that still cannot start may then ask for
        a new reservation.
        """
        pending = self.state.workloads.all
        for wid, (hosts, until, since) in sorted(self.state.reservations.items()):
            w = pending.get(wid)
            if w is None or w.status != "pending":
                continue
            if until <= self.now:
                self.due[wid] = (frozenset(hosts), since)
                continue
            for h in hosts:
                if h in self.capacity.free:
                    self.capacity.reserve(h, until, wid)
            self.held[wid] = Reservation(wid, hosts, until)

    # ------------------------------------------------------------------ step 2

    def drain_faulty_hosts(self) -> None:
        hosts = self.state.cluster_state.hosts
        running = self.state.workloads.running
        for name in sorted(self.state.cluster_state.faulty):
            h = hosts[name]
            failed = h.health == FAILED
            remaining = 0
            for wid in sorted(h.workloads):
                if wid in self.gone:
                    continue
                w = running[wid]
                if failed or not w.protected_at(self.now):
                    self.stop(w, "host_failure" if failed else "host_drain", by=name)
                else:
                    remaining += 1
            if remaining == 0:
                self.emit.drained(name)

    # ------------------------------------------------------------------ step 4

    def admit_allocated(self) -> None:
        by_shape = self.state.workloads.by_shape
        if not by_shape:
            return
        ranking = self.ranking
        ranking.activate(list(by_shape))
        depth = self.policy.queue_depth
        self.searches_left = self.policy.preemption_searches
        self.reservations_left = self.policy.reservations - len(self.held)
        # Per leaf and shape, how far this cycle has read; per leaf, how many
        # workloads it examined (at most queue_depth, as Slurm's default_queue_depth).
        cursor: dict[tuple[str, tuple[int, int]], int] = {}
        examined: dict[str, int] = {}
        leaf = ranking.best()
        while leaf is not None:
            shapes = by_shape[leaf]
            started = None
            while examined.get(leaf, 0) < depth:
                # The next workload in the leaf's serving order among the shapes
                # that could start now; shapes that cannot are not even read.
                best: tuple[tuple[int, int, int, str], tuple[int, int], Workload] | None = None
                for shape, queue in shapes.items():
                    i = cursor.get((leaf, shape), 0)
                    if i < len(queue) and (best is None or queue[i][0] < best[0]) \
                            and self.could_start(leaf, shape):
                        best = (queue[i][0], shape, queue[i][1])
                if best is None:
                    break
                _, shape, w = best
                cursor[(leaf, shape)] = cursor.get((leaf, shape), 0) + 1
                examined[leaf] = examined.get(leaf, 0) + 1
                if self.try_allocated(w):
                    started = w
                    break
            if started is not None:
                # Its commitment moves this allocation down the order.
                ranking.commit(leaf, started.gpus * started.min_runtime_s)
                if examined[leaf] >= depth:
                    ranking.deactivate(leaf)
            else:
                ranking.deactivate(leaf)
            if self.exhausted():
                break
            leaf = ranking.best()
        if self.trace is not None:
            for leaf, queue in self.state.workloads.pending.items():
                for _, w in queue:
                    if w.id not in self.trace:
                        self.trace[w.id] = Outcome(
                            "not_examined",
                            "queue_depth" if examined.get(leaf, 0) >= depth else "cannot_start",
                            f"only the first {depth} workloads of a leaf are examined per cycle"
                            if examined.get(leaf, 0) >= depth else
                            "its shape neither fits free GPUs nor has a preemption left to try "
                            "this cycle",
                        )

    def could_start(self, leaf: str, shape: tuple[int, int]) -> bool:
        """Might a workload of ``shape`` in ``leaf`` start now (fit, preempt, or be noted for a reservation)?

        An upper bound, cheap enough to ask per shape at every step: free GPUs on
        enough hosts; or a search left, and preemption could free enough even for
        a workload committing nothing (the bound of could_free at commitment 0,
        kept per leaf until capacity or victims change); or a reservation still
        to hand out for work needing whole hosts.
        """
        n, k = shape
        cap = self.capacity
        if cap.total_free >= n * k:
            by_free = cap.by_free
            hosts = 0
            for f in range(k, cap.max_gpus + 1):
                hosts += len(by_free[f])
                if hosts >= n:
                    return True
        if self.searches_left > 0 and self.victims().size:
            key = (leaf, self.capacity.total_free, self.victims().size, self.ranking.version)
            bound = self._reach.get(key)
            if bound is None:
                bound = self._reach[key] = self.freeable(leaf, 0)
            if bound >= n * k:
                return True
        return self.reservations_left > 0 and k >= cap.max_gpus

    def exhausted(self) -> bool:
        """Nothing more can start this cycle: no free GPU and no preemption left to try."""
        if self.capacity.total_free > 0:
            return False
        return self.searches_left <= 0 or self.victims().size == 0

    def try_allocated(self, w: Workload) -> bool:
        n, k = w.hosts, w.gpus_per_host
        ends_by = self.now + w.min_runtime_s
        # a. Free GPUs.
        if self.capacity.total_free >= n * k:
            self.settle_reservation()
            hosts = self.capacity.choose(n, k, ends_by, w.id)
            if hosts is not None:
                self.start(w, hosts)
                return True
        # b. Preemption, under the fair-share rule (Kueue's LessThanOrEqualToFinalShare,
        #    made strict): only victims whose side stays more used than w's side
        #    *after* w's own commitment. That is what makes thrash impossible (the
        #    victim's side is then the more used one). Skipped when a search at
        #    least as easy already failed in this leaf, when a cheap bound says no
        #    set of victims can be enough, and for a workload holding a
        #    reservation: that reservation is its plan.
        held = self.held.get(w.id)
        commitment = w.gpus * w.min_runtime_s
        if held is None and self.searches_left > 0 and self.victims().size \
                and not self.dominated(w, commitment):
            if w.id not in self.due and not self.could_free(w, commitment):
                self.note_failed(w, commitment)
            else:
                self.settle_reservation()
                self.searches_left -= 1
                plan = self.victims().search(n, k, ends_by, self.capacity,
                                             self.rule_for(w, commitment), w.id)
                if plan is None:
                    self.note_failed(w, commitment)
                else:
                    victim_ids = []
                    for v, reason in plan.victims:
                        self.stop(v.w, reason, by=w.id)
                        victim_ids.append(v.w.id)
                    self.start(w, plan.hosts, victims=tuple(victim_ids))
                    return True
        return self.blocked(w, held)

    def blocked(self, w: Workload, held: Reservation | None) -> bool:
        """``w`` cannot start now; note it for a reservation if it needs whole hosts."""
        if held is not None:
            if self.trace is not None:
                self.trace[w.id] = Outcome("blocked", "reserved",
                                           "hosts held until protection ends there",
                                           hosts=held.hosts, until=held.until)
            return False
        if self.reservations_left > 0 and w.gpus_per_host >= self.capacity.max_gpus:
            self.reservations_left -= 1
            self.to_reserve.append(w)
        if self.trace is not None:
            self.trace[w.id] = Outcome("blocked", "no_placement")
        return False

    def settle_reservation(self) -> None:
        """Reserve hosts for blocked workloads noted earlier in this cycle (see step 4c)."""
        while self.to_reserve:
            w = self.to_reserve.pop(0)
            r = self.reserve_for(w)
            if r is not None:
                self.held[w.id] = r
                self.emit.reserved(w.id, r.hosts, r.until)
                if self.trace is not None:
                    self.trace[w.id] = Outcome("blocked", "reserved",
                                               "hosts held until protection ends there",
                                               hosts=r.hosts, until=r.until)

    def note_failed(self, w: Workload, commitment: int) -> None:
        """Remember a failed search in ``w``'s leaf (only entries no other one covers)."""
        n, k = w.hosts, w.gpus_per_host
        failed = self.failed.setdefault(w.budget, [])
        if any(n >= fn and k >= fk and commitment >= fc for fn, fk, fc in failed):
            return
        failed[:] = [f for f in failed if not (f[0] >= n and f[1] >= k and f[2] >= commitment)]
        failed.append((n, k, commitment))

    def dominated(self, w: Workload, commitment: int) -> bool:
        """True when a search in ``w``'s leaf that asked for no more than ``w`` failed.

        Inside one leaf, later workloads have no higher priority, so they may take
        no more victims; a request at least as large (hosts, GPUs per host, and
        commitment, which tightens the fair-share rule) cannot succeed where a
        smaller one failed. This keeps a cycle's cost bounded under backlog, like
        Slurm skipping jobs larger than one already known not to start. (Across
        leaves it would not hold: another leaf may preempt its own lower-priority
        work, or sit at a different point of the tree.)
        """
        n, k = w.hosts, w.gpus_per_host
        return any(n >= fn and k >= fk and commitment >= fc
                   for fn, fk, fc in self.failed.get(w.budget, ()))

    def could_free(self, w: Workload, commitment: int) -> bool:
        """A necessary condition for a search for ``w`` to succeed (see ``freeable``)."""
        return self.freeable(w.budget, commitment, w.priority) >= w.gpus

    def freeable(self, leaf: str, commitment: int, priority: int | None = None) -> int:
        """At most how many GPUs a workload of ``leaf`` committing ``commitment`` could get.

        Under the fair-share rule, whether it may take a victim is decided at the
        level where their paths part, by comparing its side with the victim's
        side: so the victims it may take are whole sibling subtrees. Their GPUs,
        plus unallocated victims, plus its own leaf's of lower ``priority`` (all
        of them when None), plus free GPUs, bound what it could ever get.
        O(siblings along its path).
        """
        idx = self.victims()
        by_node = idx.by_node
        own = by_node.get(leaf, 0) if priority is None else idx.lower_priority_gpus(leaf, priority)
        have = self.capacity.total_free + idx.unallocated_gpus + own
        r = self.ranking
        use, shares, children = r.use, r.shares, r.children
        path = r._paths[leaf]
        for i in range(1, len(path)):
            x = path[i]
            sx = shares[x]
            if sx <= 0:
                break
            ux = use[x] + commitment
            for y in children[path[i - 1]]:
                if y != x and y in by_node:
                    sy = shares[y]
                    if sy <= 0 or ux * sy < use[y] * sx:
                        have += by_node[y]
        return have

    def rule_for(self, w: Workload, commitment: int) -> Callable[[Victim], str | None]:
        """Which victims ``w`` may take, and why: the preemption rule of the budget policy.

        - unallocated work: always (``reclaim_unallocated``);
        - the same leaf: only lower priority (``priority``);
        - another leaf: only when fair share says so, counting ``commitment`` on
          ``w``'s side (``fair_share``, see Ranking.may_preempt). Decided once per
          victim leaf.
        """
        budget, priority = w.budget, w.priority
        by_leaf: dict[str, str | None] = {}
        may_preempt = self.ranking.may_preempt
        due = self.due.get(w.id)

        def rule(v: Victim) -> str | None:
            if v.cls <= UNALLOCATED:
                return "reclaim_unallocated"
            if due is not None:  # a due reservation takes back its hosts from backfill
                hosts, since = due
                if (v.w.started_at or 0) >= since and any(h in hosts for h, _ in v.w.placement):
                    return "reservation"
            vb = v.w.budget
            if vb == budget:
                return "priority" if v.w.priority < priority else None
            if vb not in by_leaf:
                by_leaf[vb] = "fair_share" if may_preempt(budget, commitment, vb) else None
            return by_leaf[vb]

        return rule

    def reserve_for(self, w: Workload) -> Reservation | None:
        """Hold the hosts that can give ``w`` its GPUs soonest; None if that is never."""
        ready = self.ready_times(w)
        finite = sorted((t, h) for h, t in ready.items() if t < NEVER)
        if len(finite) < w.hosts:
            return None
        chosen = finite[: w.hosts]
        until = max(t for t, _ in chosen)
        if until <= self.now:
            return None  # placeable now; only this cycle's search budget stopped it
        for _, h in chosen:
            self.capacity.reserve(h, until, w.id)
        return Reservation(w.id, tuple(sorted(h for _, h in chosen)), until)

    def ready_times(self, w: Workload) -> dict[str, int]:
        """Per healthy host, when ``w`` could have ``gpus_per_host`` GPUs there.

        Work ``w`` may preempt counts as gone when its protection ends; other
        work never (its end is unknown to the scheduler).
        """
        need = w.gpus_per_host
        commitment = w.gpus * w.min_runtime_s
        by_leaf: dict[str, bool] = {}
        may_preempt = self.ranking.may_preempt
        running = self.state.workloads.running
        hosts = self.state.cluster_state.hosts
        out: dict[str, int] = {}
        for name, free in self.capacity.free.items():
            if free >= need:
                if self.capacity.allowed(name, self.now + w.min_runtime_s, w.id):
                    out[name] = self.now
                continue
            frees: list[tuple[int, int]] = []
            for wid, gpus in hosts[name].workloads.items():
                if wid in self.gone:
                    continue
                other = running.get(wid)
                if other is None:  # started in this cycle: protected, ranked better
                    continue
                if other.allocated:  # (unallocated work is always fair game)
                    vb = other.budget
                    if vb == w.budget:
                        if other.priority >= w.priority:
                            continue
                    else:
                        if vb not in by_leaf:
                            by_leaf[vb] = may_preempt(w.budget, commitment, vb)
                        if not by_leaf[vb]:
                            continue
                if not other.allocated:
                    frees.append((self.now, gpus))
                elif other.protected_until is not None:  # None: protected until it ends
                    frees.append((max(self.now, other.protected_until), gpus))
            got = free
            t_ready = NEVER
            for t, g in sorted(frees):
                got += g
                if got >= need:
                    t_ready = t
                    break
            if t_ready < NEVER:
                out[name] = t_ready
        return out

    # ------------------------------------------------------------------ step 5

    def lend_to_unallocated(self) -> None:
        pending = self.state.workloads.pending_free
        if not pending or self.capacity.total_free <= 0:
            return
        # Most cycles in a busy cluster have no room for any waiting shape: say so
        # before paying for the fair-share order.
        if not any(self.capacity.choose(n, k, self.now) for n, k in self.state.workloads.free_shapes):
            return
        depth = self.policy.queue_depth
        cap = self.capacity
        # Shapes that did not fit, with every waiting shape at least as large in
        # both dimensions: they will not fit either, since capacity only shrinks
        # in this step. Once every shape waiting is ruled out, stop.
        shapes = self.state.workloads.free_shapes
        ruled: set[tuple[int, int]] = set()
        for leaf in self.ranking.iter_leaves():
            queue = pending.get(leaf)
            if not queue:
                continue
            for _, w in queue[:depth]:
                if cap.total_free <= 0:
                    return
                n, k = shape = w.hosts, w.gpus_per_host
                if shape not in ruled:
                    hosts = cap.choose(n, k, self.now)
                    if hosts is not None:
                        self.start(w, hosts)
                        continue
                    ruled.update(s for s in shapes if s[0] >= n and s[1] >= k)
                    ruled.add(shape)
                    if len(ruled) >= len(shapes) and ruled.issuperset(shapes):
                        return
                if self.trace is not None:
                    self.trace[w.id] = Outcome("blocked", "no_placement",
                                               "unallocated work only fills free GPUs")

    # ------------------------------------------------------------------ effects

    @property
    def ranking(self) -> Ranking:
        """Step 3, the fair-share order of this cycle (computed when first asked for)."""
        if self._ranking is None:
            self._ranking = Ranking(self.state, commitments(self.state))
        return self._ranking

    def victims(self) -> VictimIndex:
        if self._victims is None:
            self._victims = VictimIndex.for_cycle(self.state, self.gone)
        return self._victims

    def start(self, w: Workload, hosts: list[str], victims: tuple[str, ...] = ()) -> None:
        per = w.gpus_per_host
        for h in hosts:
            self.capacity.take(h, per)
        allocated = w.min_runtime_s > 0
        self.emit.started(w.id, [(h, per) for h in hosts], allocated,
                          self.now + w.min_runtime_s)
        if self.trace is not None:
            self.trace[w.id] = Outcome("started", "preempted" if victims else "fits",
                                       hosts=tuple(hosts), victims=victims)

    def stop(self, w: Workload, reason: str, by: str | None) -> None:
        if self._victims is not None and w.id not in self.gone:
            self._victims.discard(w)
        self.gone.add(w.id)
        for h, g in w.placement:
            self.capacity.give(h, g)
        self.emit.preempted(w.id, reason, by, requeued=w.resumable)
