"""One scheduling cycle of the budget policy: ``decide(state, cause) -> events``.

The cycle is a pure function of the state: it copies what it mutates (free
capacity, the fair-share order) and returns the events that carry its
decisions; the engine folds them back into the state. Written, like Kueue's
scheduler, as numbered steps:

1. Snapshot free capacity on healthy hosts, and the standing reservations
   (``scheduler.policy.reservations``): their hosts take backfill only.
2. Drain faulty hosts: preempt what is no longer protected there (everything on
   a failed host), and mark empty faulty hosts drained for repair.
3. Rank allocations by hierarchical fair share (usage + commitment per share).
4. Start the holders of reservations that came due, first: they take their
   hosts back before anything else can.
5. Admit allocated work in fair-share order: each leaf serves its queue by
   priority, visiting only shapes that could start; a workload starts on free
   GPUs (packed), else preempts the cheapest set of victims it may take
   (``scheduler.policy.rules``, ``scheduler.policy.victims``), else (if it needs whole
   hosts) is noted for a reservation. GPUs a preemption freed beyond what its
   preemptor used go to allocated work that fits, in the same order.
6. Lend every GPU still free to unallocated work (never protected, never charged).

Work per cycle is bounded by shapes, not by a queue depth that could hide work
that fits: in every leaf the first workload of each shape is examined; when it
cannot start, a later one of that shape could only do better with a shorter
minimum runtime (backfill a reservation, or commit less for fair share), so
only such are examined, at most ``queue_depth`` of them past the failure.
Preemption searches are bounded per cycle (``preemption_searches``).

When traced (``allot explain``), the cycle records for each pending workload
an ``Outcome``: how it started, or what blocks it.
"""

from __future__ import annotations

from bisect import insort
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

from projections.cluster import FAILED
from projections.workloads import Workload
from scheduler.emit import Emitter
from scheduler.index.failure_memo import failures_at
from scheduler.index.fair_share_order import (
    Ranking,
    activate_waiting,
    commitments,
)
from scheduler.index.host_free_times import HostFreeTimes
from scheduler.index.sibling_sums import SiblingSums
from scheduler.index.sole_leaf import (
    SoleLeafFrees,
    SoleLeafVictims,
    sole_leaf_frees,
    sole_leaf_victims,
)
from scheduler.index.victim_index import HostBySpan, SoleLeafLookup, Victim, VictimIndex
from scheduler.policy.guarantee import Guarantees, protection_end
from scheduler.policy.placement import NEVER, Capacity
from scheduler.policy.reservations import (
    Reservation,
    ReservationBook,
    ready_times,
    size_class,
)
from scheduler.policy.rules import (
    BALANCED_RULES,
    LOSS_RULES,
    RECLAIM,
    RECLAIM_LOSS_S,
    RECLAIM_RULES,
    BudgetRule,
    Due,
)
from scheduler.policy.victims import (
    CostModel,
    Miss,
    Plan,
    cheapest_plan,
    checkpoint_rule,
    fails_again,
    work_lost,
)

if TYPE_CHECKING:
    from events import Event
    from scheduler.state import State


class Outcome(msgspec.Struct, frozen=True, omit_defaults=True):
    """What one cycle did with one pending workload (recorded only when tracing).

    ``status`` is ``started`` (``reason``: ``fits``, ``preempted`` or
    ``reservation``) or ``blocked``, with ``reason`` one of:

    - ``reserved``: it holds hosts until ``until`` (``hosts``);
    - ``protected_victims``: work it may take holds the GPUs it needs until ``until``;
    - ``reserved_hosts``: it would fit, but the free hosts are held for ``holder``'s
      reservation until ``until``, and its own protection would outlast that;
    - ``fragmentation``: enough GPUs are free, but not on hosts that fit its shape;
    - ``faulty_hosts``: it would fit the cluster if its faulty hosts were healthy;
    - ``no_free_gpus``: unallocated work starts only on free GPUs, and no host has
      enough;
    - ``search_budget``: it could take victims now, but the cycle's preemption
      searches ran out first;
    - ``better_ranked``: the GPUs it needs are held by work it may not take;
    - ``victims_stopping``: it preempted ``victims``, whose GPUs are released when
      they stop (``workload.stopped``) or their grace ends.
    """

    status: str
    reason: str = ""
    detail: str = ""
    hosts: tuple[str, ...] = ()
    until: int | None = None
    victims: tuple[str, ...] = ()
    holder: str | None = None


def decide(state: State, cause: str = "cycle", trace: dict[str, Outcome] | None = None,
           only: str | None = None) -> list[Event]:
    """Run one cycle at ``state.now``; return its decisions as events (state untouched).

    With ``trace``, record the ``Outcome`` of every pending workload (of ``only``,
    when given) in it.
    """
    return Cycle(state, cause, trace, only).run()


def drain(state: State, cause: str) -> list[Event]:
    """Steps 1-2 only: what a host fault changes at once, without waiting for a cycle."""
    cycle = Cycle(state, cause, None)
    cycle.capacity = Capacity(state)
    cycle.drain_faulty_hosts()
    return cycle.emit.events


Shape = tuple[int, int]

class Cycle:
    """The working set of one cycle. Nothing here outlives ``run()`` (what is carried across
    cycles lives in ``State.memos``, scheduler/memos.py)."""

    def __init__(self, state: State, cause: str, trace: dict[str, Outcome] | None,
                 only: str | None = None) -> None:
        self.state = state
        self.now = state.now
        self.policy = state.policy
        self.emit = Emitter(state.cluster, state.now, cause)
        self.trace = trace
        self.only = only
        self.stopped_now: set[str] = set()  # workloads stopped in this cycle
        self._victims: VictimIndex | None = None
        self._ranking: Ranking | None = None
        self._costs: CostModel | None = None
        self._loses_little: Callable[[Workload], bool] | None = None  # see ``loses_little``
        self._frees: HostFreeTimes | None = None
        self._guarantees: Guarantees | None = None
        # Per leaf, (hosts, GPUs per host, commitment) of searches that found no plan.
        self.failed: dict[str, list[tuple[int, int, int]]] = {}
        self.to_reserve: list[Workload] = []  # noted for a reservation, not yet worked out
        # Under the balanced reclaim, the noted work the balance could not serve with
        # a search to spare, whose side is under its guarantee beside a borrowing one:
        # only its reservations are planned on borrowed work (``Guarantees.lockout``).
        self.locked: set[str] = set()
        self._reach: dict[tuple[str, int, int, int], int] = {}  # could_start's per-leaf bound
        # _freeable's sibling sums per parent (an accelerator, scheduler/index/sibling_sums.py).
        self.sibling_sums = SiblingSums(state)
        self._fits: dict[Shape, bool] = {}  # could_start: fits free GPUs, at capacity version ...
        self._fits_at = -1  # ... this one
        self._failures: dict[tuple[object, ...], object] | None = None  # see failures()
        self.searches_left = self.policy.preemption_searches
        self.balanced = self.policy.preemption_rule in BALANCED_RULES
        # Reservations on borrowed work (the lock-out bound): "reclaim_balanced" only.
        self.lockout = self.policy.preemption_rule == "reclaim_balanced"
        # Preemption takes time (policy.preemption_grace_s): a victim's GPUs stay
        # taken through its grace (State.stopping), so its preemptor starts at a
        # later cycle, once they are released. 0 (the default): at once, as ever.
        self.grace = self.policy.preemption_grace_s > 0
        self.held_back = False  # a stop of this cycle kept its GPUs (see stop)
        self.sealed: set[str] = set()  # preemptors whose hosts this cycle sealed (hold_for)
        self.leftover = False  # a preemption freed more than its preemptor took
        self.started: set[str] = set()  # workloads started in this cycle

    # ------------------------------------------------------------------ the steps

    def run(self) -> list[Event]:
        # 1. Snapshot (with the reservations still standing).
        self.capacity = Capacity(self.state)
        self.book = ReservationBook(self.state, self.capacity)
        # 2. Drain faulty hosts.
        self.drain_faulty_hosts()
        # 3. Rank allocations: on first use (the ``ranking`` property), since
        #    about half the cycles of a busy cluster never need the order.
        # 4. Reservations that came due start first.
        self.start_due()
        # 5. Admit allocated work: fit, else preempt, else note for a reservation;
        #    then what preemptions left over goes to allocated work that fits.
        self.admit_allocated()
        if self.leftover:
            self.fill_leftover()
        # 6. Lend what is left to unallocated work.
        self.lend_to_unallocated()
        if self.locked:
            # Under the balanced reclaim a reservation may plan on borrowed work (the
            # lock-out bound): it changes an outcome even when no later workload would
            # have placed anything, so it is worked out in every cycle that noted one.
            self.settle_reservation()
        if self.trace is not None:
            self.settle_reservation()
            self.record_blocked()
        return self.emit.events

    # ------------------------------------------------------------------ step 2

    def drain_faulty_hosts(self) -> None:
        hosts = self.state.cluster_state.hosts
        running = self.state.workloads.running
        for name in sorted(self.state.cluster_state.faulty):
            h = hosts[name]
            failed = h.health == FAILED
            remaining = 0
            for wid in sorted(h.workloads):
                if wid in self.stopped_now:
                    continue
                w = running[wid]
                if failed or not w.protected_at(self.now):
                    self.stop(w, "host_failure" if failed else "host_drain", by=name)
                    if self.grace and self.state.grace_of(wid):
                        remaining += 1  # still stopping: drained once its GPUs are released
                else:
                    remaining += 1
            if remaining == 0 and not h.held:  # (held: preempted runs in their grace)
                self.emit.drained(name)

    # ------------------------------------------------------------------ step 4

    def start_due(self) -> None:
        """Holders of due reservations take their hosts (earliest first), before anyone else.

        By construction the reserved hosts hold enough GPUs for the holder once it
        takes the work it was granted them on, so this never needs a search budget.
        """
        if not self.book.due:
            return
        pending = self.state.workloads.all
        for wid, r in sorted(self.book.due.items(), key=lambda kv: (kv[1].until, kv[0])):
            w = pending[wid]
            started = self.place(w, self.rule(w, Due(frozenset(r.hosts), r.since)),
                                 budgeted=False)
            if wid not in self.sealed and not (self.grace and wid in self.state.stopping_for):
                self.book.release(w)  # (else its victims still stop: sealed, ``hold_for``)
            if started:
                self._commit(w.budget, w.gpus * w.min_runtime_s)

    # ------------------------------------------------------------------ step 5

    def admit_allocated(self) -> None:
        by_shape = self.state.workloads.by_shape
        if not by_shape:
            return
        ranking = self.ranking
        activate_waiting(ranking, self.state)  # every leaf with allocated work waiting
        depth = self.policy.queue_depth
        # Per leaf and shape: how far this cycle has read, and the shortest minimum
        # runtime that already failed there (only shorter ones can do better).
        cursors: dict[str, dict[Shape, int]] = {}
        floors: dict[str, dict[Shape, int]] = {}
        started_here = self.started
        leaf = ranking.best()
        while leaf is not None:
            shapes = by_shape.get(leaf, {})
            cursor = cursors.setdefault(leaf, {})
            floor = floors.setdefault(leaf, {})
            started = None
            # The next workload in the leaf's serving order among the shapes that
            # could start now; shapes that cannot are not even read. (Heads in
            # serving order, then the first whose shape could start: the same
            # choice as the least head among shapes that could, asking could_start
            # as rarely as possible.) Only the shape just read gets a new head: the
            # others' cursors and floors did not move (``_next_shorter`` of a head
            # is that head).
            heads: list[tuple[tuple[int, int, int, str], Shape, int, Workload]] = []
            for shape, queue in shapes.items():
                i = cursor.get(shape, 0)
                if floor:
                    f = floor.get(shape)
                    if f is not None:
                        i = cursor[shape] = _next_shorter(queue, i, f, depth)
                if i < len(queue):
                    heads.append((queue[i][0], shape, i, queue[i][1]))
            if len(heads) > 1:
                heads.sort()  # (queue keys are unique: never compares further)
            while True:
                pos = 0
                while pos < len(heads) and not self.could_start(leaf, heads[pos][1]):
                    pos += 1
                if pos == len(heads):
                    break
                _, shape, i, w = heads.pop(pos)
                cursor[shape] = i + 1
                if w.id not in started_here:  # (a due holder was served in step 4)
                    if self.try_allocated(w):
                        started = w
                        break
                    f = floor.get(shape)
                    if f is None or w.min_runtime_s < f:
                        floor[shape] = w.min_runtime_s
                queue = shapes[shape]
                i += 1
                f = floor.get(shape)
                if f is not None:
                    i = cursor[shape] = _next_shorter(queue, i, f, depth)
                if i < len(queue):
                    insort(heads, (queue[i][0], shape, i, queue[i][1]))
            if started is not None:
                # Its commitment moves this allocation down the order.
                self._commit(leaf, started.gpus * started.min_runtime_s)
            else:
                ranking.deactivate(leaf)
            if self.exhausted():
                break
            leaf = ranking.best()

    def fill_leftover(self) -> None:
        """GPUs a preemption freed beyond its preemptor's need: allocated work that fits, in order.

        Leaves that found nothing to start earlier in the cycle were passed over
        with less free capacity; this gives them the rest, fit only (reading at
        most ``queue_depth`` workloads per shape past one that does not fit).
        """
        by_shape = self.state.workloads.by_shape
        cap = self.capacity
        depth = self.policy.queue_depth
        starts: list[Workload] = []
        for leaf in self.ranking.iter_leaves():
            if cap.total_free <= 0:
                break
            for (n, k), queue in by_shape.get(leaf, {}).items():
                misses = 0
                for _, w in queue:
                    if cap.total_free < n * k or misses > depth:
                        break
                    if w.id in self.started:
                        continue
                    self.settle_reservation()
                    hosts = cap.choose(n, k, self.now + w.min_runtime_s, w.id)
                    if hosts is None:
                        if not cap.reserved:
                            break  # this shape fits nowhere: the rest of the queue neither
                        misses += 1  # (a shorter protection might still backfill)
                        continue
                    self.start(w, hosts)
                    starts.append(w)
        for w in starts:
            self._commit(w.budget, w.gpus * w.min_runtime_s)

    def could_start(self, leaf: str, shape: Shape) -> bool:
        """Might a workload of ``shape`` in ``leaf`` start now (fit, preempt, or be noted for a reservation)?

        An upper bound, cheap enough to ask per shape at every step: free GPUs on
        enough hosts; or a search left, and preemption could free enough even for
        a workload committing nothing (the bound of could_free at commitment 0,
        kept per leaf until capacity or victims change); or a reservation slot of
        its size class still free for work needing whole hosts.
        """
        n, k = shape
        cap = self.capacity
        if cap.total_free >= n * k:
            # Whether it fits free GPUs is the same for every leaf: kept per shape
            # until capacity changes.
            if self._fits_at != cap.version:
                self._fits = {}
                self._fits_at = cap.version
            fits = self._fits.get(shape)
            if fits is None:
                by_free = cap.by_free
                hosts = 0
                fits = False
                for f in range(k, cap.max_gpus + 1):
                    hosts += len(by_free[f])
                    if hosts >= n:
                        fits = True
                        break
                self._fits[shape] = fits
            if fits:
                return True
        if self.searches_left > 0 and self.victims().size:
            key = (leaf, cap.total_free, self.victims().size, self.ranking.version)
            bound = self._reach.get(key)
            if bound is None:
                bound = self._reach[key] = self.freeable(leaf, 0)
            if bound >= n * k:
                return True
        if k < cap.max_gpus:
            return False
        book = self.book  # (ReservationBook.slot_free, inlined: this is asked per shape at every step)
        return book.used.get(n.bit_length(), 0) < book.per_class

    def exhausted(self) -> bool:
        """Nothing more can start this cycle: no free GPU and no preemption left to try."""
        if self.capacity.total_free > 0:
            return False
        return self.searches_left <= 0 or self.victims().size == 0

    def try_allocated(self, w: Workload) -> bool:
        """Start ``w`` (fit, else preempt), or note why not; True when it started."""
        # (Whether the search budget, not the rule, is what may stop it: see ``locked``.)
        budget_left = self.searches_left > 0
        if self.place(w, None):
            return True
        if self.grace and w.id in self.state.stopping_for:
            return False  # waiting for its victims' GPUs: no reservation either
        if w.gpus_per_host >= self.capacity.max_gpus and self.book.note(w):
            self.to_reserve.append(w)
            if self.lockout and budget_left and self.guarantees.may_lockout(w.budget):
                self.locked.add(w.id)
        return False

    def place(self, w: Workload, rule: BudgetRule | None, budgeted: bool = True) -> bool:
        """Start ``w`` on free GPUs, else on the cheapest victims ``rule`` lets it take."""
        n, k = w.hosts, w.gpus_per_host
        ends_by = self.now + w.min_runtime_s
        # a. Free GPUs.
        if self.capacity.total_free >= n * k:
            self.settle_reservation()
            hosts = self.capacity.choose(n, k, ends_by, w.id)
            if hosts is not None:
                self.start(w, hosts)
                return True
        # b. Preemption, under the budget rule (scheduler.policy.rules). Skipped when a
        #    search at least as easy already failed in this leaf, or when a cheap
        #    bound says no set of victims can be enough (due holders skip both:
        #    their hosts are theirs).
        commitment = w.gpus * w.min_runtime_s
        if self.grace and w.id in self.state.stopping_for:
            # Its victims of an earlier cycle are still stopping: it waits for their
            # GPUs rather than taking more victims.
            if self.trace is not None:
                self.trace[w.id] = Outcome("blocked", "victims_stopping")
            return False
        if not self.victims().size or (budgeted and (self.searches_left <= 0
                                                     or self.dominated(w, commitment))):
            return False
        if budgeted and not self.could_free(w, commitment):
            self.note_failed(w, commitment)
            return False
        self.settle_reservation()
        if budgeted:
            self.searches_left -= 1
        plan = self.search(w, ends_by, rule)
        if plan is None or not self.balanced_set(w, plan):
            self.note_failed(w, commitment)
            return False
        victim_ids = []
        freed = 0
        self.held_back = False
        for v, reason in plan.victims:
            self.stop(v.w, reason, by=w.id)
            victim_ids.append(v.w.id)
            freed += v.w.gpus
        if self.held_back:
            # Some victim keeps its GPUs through its grace: ``w`` starts at a later
            # cycle, when they are released (it is committed now, as if started,
            # so its allocation does not take a second round of victims), on the
            # plan's hosts, sealed for it meanwhile.
            self.held_back = False
            self.hold_for(w, plan.hosts)
            if self.trace is not None:
                self.trace[w.id] = Outcome("blocked", "victims_stopping",
                                           victims=tuple(victim_ids))
            return True
        self.start(w, plan.hosts, victims=tuple(victim_ids),
                   how="reservation" if not budgeted else "preempted")
        if freed > w.gpus:
            self.leftover = True
        return True

    def hold_for(self, w: Workload, hosts: list[str]) -> None:
        """Seal ``hosts`` for ``w`` while its victims stop (a reservation due at once).

        A plan counts on free GPUs too: left open while the victims stop, they
        went to other work, and at the release ``w`` no longer fit and stopped a
        second set of victims, whose GPUs the next one took, and so on (under a
        300 s grace the 4-day ai2-month preempted 17,211 times against 1,917).
        Sealed, the hosts take nobody else until ``w`` starts (``start_due``
        serves it first once its victims have stopped). Hosts held for another
        workload's reservation (``w`` backfilling there) are left to it.
        """
        book = self.book
        if book.holds(w.id) is not None or w.id in book.due:
            book.release(w)  # (replaced by this one)
        mine = tuple(sorted(h for h in hosts if self.capacity.holder(h) in (None, w.id)))
        if mine:
            book.seal(w.id, mine)
            self.sealed.add(w.id)
            self.emit.reserved(w.id, mine, self.now)

    def balanced_set(self, w: Workload, plan: Plan) -> bool:
        """Under the balanced reclaim: does the plan's take from each side keep its test?

        The rule answers per victim (``BudgetRule.room``); what a set takes from
        one side is the sum of its victims there, which only the whole plan
        shows (``Guarantees.balanced``). A plan failing it stops nothing and
        counts as a failed search (the candidate waits, or reserves). True
        under the other rules.
        """
        if not self.balanced:
            return True
        taken = [(v.w.budget, v.w.gpus) for v, reason in plan.victims if reason == RECLAIM]
        return not taken or self.guarantees.balanced(w.budget, w.gpus, taken)

    def search(self, w: Workload, ends_by: int, rule: BudgetRule | None) -> Plan | None:
        """The victim search for ``w``, skipped when the failure memo knows its answer.

        See ``failures``: a search that failed whatever the costs, at a world
        this cycle has not changed, fails again at the same world. Its one
        lasting effect, the keep values fixed by costing victims, is repeated.
        """
        victims = self.victims()
        n, k = w.hosts, w.gpus_per_host
        costs = self.costs
        failures = None if rule is not None else self.failures()
        if failures is None:
            found = cheapest_plan(victims, n, k, ends_by, self.capacity, rule or self.rule(w),
                                  w.id, costs)
            return found if isinstance(found, Plan) else None
        key = ("search", _identity(w), self._blocked(w.id, ends_by))
        known: Any = failures.get(key)
        own = None
        if known is not None:
            build_id, kind, seen, asked = known  # type: ignore[misc]
            if build_id != victims.build_id:
                # An earlier build of this world: protections ended since (``fails_again``).
                own = self.rule(w)
                again = fails_again(victims, kind, seen, build_id, n, k, ends_by, self.capacity,
                                    own, w.id)
                if again is None:
                    known = None
                else:
                    kind, seen, more = again
                    asked = asked | more
                    failures[key] = (victims.build_id, kind, seen, asked)
            if known is not None:
                for budget in asked:
                    costs.fix_keep_value(budget)
                return None
        budgets_asked: set[str] = set()
        costs.budgets_asked = budgets_asked
        try:
            found = cheapest_plan(victims, n, k, ends_by, self.capacity, own or self.rule(w),
                                  w.id, costs)
        finally:
            costs.budgets_asked = None
        if isinstance(found, Miss):
            failures[key] = (victims.build_id, found.kind, found.hosts, frozenset(budgets_asked))
            return None
        return found

    def failures(self) -> dict[tuple[object, ...], object] | None:
        """The failure memo (scheduler/index/failure_memo.py) for the world as this cycle
        sees it, or None once the cycle changed it (started, stopped or committed anything)."""
        if self.stopped_now or self.capacity.version or (self._ranking is not None and self._ranking.version):
            return None
        if self._failures is None:  # the world is the state's: looked up once per cycle
            # (Under ``LOSS_RULES`` who may be taken moves with the time itself:
            # ``loses_little``; the memo then holds for this moment only.)
            self._failures = failures_at(
                self.state, moves_with_time=self.policy.preemption_rule in LOSS_RULES)
        return self._failures

    def _blocked(self, wid: str, ends_by: int) -> tuple[str, ...]:
        """Reserved hosts that work of ``wid`` protected until ``ends_by`` may not use."""
        if not self.capacity.reserved:
            return ()
        return tuple(sorted(self.capacity.barred(ends_by, wid)))

    def settle_reservation(self) -> None:
        """Work out the reservations noted earlier in this cycle (lazily: see scheduler.policy.reservations).

        A plan that reaches fewer hosts than the workload needs does not depend
        on the time (only on which hosts become reachable), so it goes into the
        failure memo, keyed on the reservations held for others.
        """
        while self.to_reserve:
            w = self.to_reserve.pop(0)
            failures = self.failures()
            key = None
            if failures is not None:
                key = ("plan", _identity(w), tuple(sorted((h, r[1]) for h, r in self.capacity.reserved.items()
                                                  if r[1] != w.id)))
                if key in failures:
                    self.book.plan(w, {})  # what a plan reaching too few hosts does: the slot back
                    continue
            lock = w.id in self.locked
            ready = ready_times(w, self.capacity, self.frees, self.rule(w, planning=lock),
                                self.stopped_now, self.now, self._sole_leaf_frees())
            r = self.book.plan(w, ready, at_once=lock)
            if r is not None:
                self.emit.reserved(w.id, r.hosts, r.until)
            elif failures is not None and key is not None and \
                    sum(1 for t in ready.values() if t < NEVER) < w.hosts:
                failures[key] = frozenset()

    def note_failed(self, w: Workload, commitment: int) -> None:
        """Remember a failed search in ``w``'s leaf (only entries no other one covers)."""
        n, k = w.hosts, w.gpus_per_host
        failed = self.failed.setdefault(w.budget, [])
        covered = False
        for fn, fk, fc in failed:
            if fn == n:
                if k >= fk and commitment >= fc:
                    return
                if fk >= k and fc >= commitment:
                    covered = True
        if covered:
            failed[:] = [f for f in failed if not (f[0] == n and f[1] >= k and f[2] >= commitment)]
        failed.append((n, k, commitment))

    def dominated(self, w: Workload, commitment: int) -> bool:
        """True when a search in ``w``'s leaf for as many hosts, asking no more, failed.

        Inside one leaf, later workloads have no higher priority, so they may take
        no more victims; a request for the same number of hosts and at least as
        much per host and commitment (which tightens the fair-share rule) cannot
        succeed where a smaller one failed. This keeps a cycle's cost bounded under
        backlog, like Slurm skipping jobs larger than one already known not to
        start. (Not across host counts: a gang may take victim gangs up to its own
        size, which a smaller request may not. Nor across leaves: another leaf may
        preempt its own lower-priority work, or sit elsewhere in the tree.)
        """
        failed = self.failed.get(w.budget)
        if failed is None:
            return False
        n, k = w.hosts, w.gpus_per_host
        # A loop, not any(): compiled, it allocates no generator per call (asked per candidate).
        for fn, fk, fc in failed:  # noqa: SIM110
            if n == fn and k >= fk and commitment >= fc:
                return True
        return False

    def could_free(self, w: Workload, commitment: int) -> bool:
        """A necessary condition for a search for ``w`` to succeed (see ``freeable``)."""
        if self.balanced:
            return self.freeable(w.budget, commitment, w.priority, w.gpus, w.gpus_per_host) >= w.gpus
        return self.freeable(w.budget, commitment, w.priority) >= w.gpus

    def freeable(self, leaf: str, commitment: int, priority: int | None = None,
                 gpus: int = 0, per_host: int = 1) -> int:
        """At most how many GPUs a workload of ``leaf`` committing ``commitment`` could get.

        Under the fair-share rule, whether it may take a victim is decided at the
        level where their paths part, by comparing its side with the victim's
        side (``fair_share.less_used``): so the victims it may take are whole sibling
        subtrees. Their GPUs, plus unallocated victims, plus its own leaf's of
        lower ``priority`` (all of them when None), plus free GPUs, bound what it
        could ever get. O(siblings along its path); kept in the failure memo
        while the cycle has not changed its world (it reads only the victim
        index's counts, free GPUs, the order and the guarantees: ``failures``).
        Under the balanced reclaim a side gives at most its ``room`` for the
        candidate's ``gpus``, and nothing when that is under ``per_host``
        (``_balanced_room``): most hopeless searches end here, before the gang
        walk. (``gpus`` 0 and ``per_host`` 1 bound every candidate of the leaf:
        a side's room only shrinks as the candidate grows.)
        """
        idx = self.victims()
        failures = self.failures()
        if failures is None:
            return self._freeable(idx, leaf, commitment, priority, gpus, per_host)
        key = ("free", leaf, commitment, priority, idx.build_id, gpus, per_host)
        have = failures.get(key)
        if have is None:
            have = failures[key] = self._freeable(idx, leaf, commitment, priority, gpus, per_host)
        return have  # type: ignore[return-value]

    def _balanced_room(self, idx: VictimIndex, x: str, gpus: int, per_host: int) -> int:
        """The GPUs side ``x``'s candidate on ``gpus`` GPUs could reclaim from all its siblings.

        Per sibling ``y``: nothing when its ``Guarantees.node_room`` is under
        ``per_host`` (the rule takes no victim there, ``BudgetRule._balanced_reason``),
        else at most that room and at most its victims' GPUs (``Guarantees.balanced``
        refuses a set taking more).
        """
        g = self.guarantees
        by_node = idx.by_node
        have = 0
        for y in g.siblings.get(x, ()):
            there = by_node.get(y, 0)
            if there:
                room = g.node_room(x, y, gpus)
                if room >= per_host:
                    have += room if room < there else there
        return have

    def _freeable(self, idx: VictimIndex, leaf: str, commitment: int, priority: int | None,
                  gpus: int = 0, per_host: int = 1) -> int:
        own = idx.by_node.get(leaf, 0) if priority is None else idx.lower_priority_gpus(leaf, priority)
        have = self.capacity.total_free + idx.unallocated_gpus + own
        r = self.ranking
        use, shares = r.use, r.shares
        path = r.paths[leaf]
        reclaim = self.policy.preemption_rule in RECLAIM_RULES
        balanced = self.balanced
        for i in range(1, len(path)):
            x = path[i]
            sx = shares[x]
            if sx <= 0:
                break
            # The siblings y of x it may take from: those with no share, and those
            # where less_used(use[x], sx, use[y], sy, commitment), i.e. whose
            # use[y] / sy exceeds q / sx: a suffix of the siblings by that ratio
            # (x itself is never in it: q / sx >= use[x] / sx).
            if balanced:
                have += self._balanced_room(idx, x, gpus, per_host)
                continue
            q = use[x] + commitment
            ratios, suffix, zero = self.sibling_sums.of(path[i - 1], r, idx, bool(self.stopped_now))
            if reclaim:  # any sibling may be borrowing: all their victims bound it
                # (x's own are in the sums too, and are not a sibling's: less them)
                have += zero + suffix[0] - idx.by_node.get(x, 0)
                continue
            lo, hi = 0, len(ratios)
            while lo < hi:
                mid = (lo + hi) // 2
                uy, sy = ratios[mid]
                if q * sy < uy * sx:
                    hi = mid
                else:
                    lo = mid + 1
            have += zero + suffix[lo]
        return have

    def _commit(self, leaf: str, gpu_seconds: int) -> None:
        """``ranking.commit``, keeping the sibling sums of the parents it leaves alone."""
        r = self.ranking
        was = r.version
        r.commit(leaf, gpu_seconds)
        if r.version != was and self._victims is not None:
            # ``commit`` charged ``leaf`` and every ancestor (up ``r.parent``).
            moved: list[str] = []
            p: str | None = leaf
            while p is not None:
                moved.append(p)
                p = r.parent.get(p)
            size = self._victims.size
            self.sibling_sums.moved(moved, (was, size), r.parent, (r.version, size))

    # ------------------------------------------------------------------ step 6

    def lend_to_unallocated(self) -> None:
        """Free GPUs to unallocated work, leaf by leaf in fair-share order, shape by shape.

        Capacity only shrinks in this step and unallocated work is never protected
        (so it may backfill any reserved host): a shape that does not fit now never
        will in this cycle, for any leaf. Each leaf's queue is read per shape that
        still fits, so a long queue hides nothing that fits.
        """
        by_shape = self.state.workloads.free_by_shape
        cap = self.capacity
        if not by_shape or cap.total_free <= 0:
            return
        shapes = self.state.workloads.free_shapes
        # Most cycles in a busy cluster have no room for any waiting shape: say so
        # before paying for the fair-share order.
        if not any(cap.choose(n, k, self.now) for n, k in shapes):
            return
        # Shapes that did not fit, with every waiting shape at least as large in
        # both dimensions: they will not fit either. Once every shape is ruled out, stop.
        ruled: set[Shape] = set()
        now = self.now
        for leaf in self.ranking.iter_leaves_in(by_shape):
            queues = by_shape.get(leaf)
            if not queues:
                continue
            live = [shape for shape in queues if shape not in ruled]
            if len(live) == 1:  # most leaves wait with one shape: no merging needed
                shape = live[0]
                for _, w in queues[shape]:
                    hosts = cap.choose(shape[0], shape[1], now)
                    if hosts is None:
                        break
                    self.start(w, hosts)
                    if cap.total_free <= 0:
                        return
                else:
                    continue
            elif live:
                if self._lend_merged(queues, live):
                    return
                continue
            else:
                continue
            # The shape did not fit: nor will any as large, for any leaf.
            ruled.update(s for s in shapes if s[0] >= shape[0] and s[1] >= shape[1])
            ruled.add(shape)
            if len(ruled) >= len(shapes) and ruled.issuperset(shapes):
                return
        return

    def _lend_merged(self, queues: dict[Shape, list[tuple[tuple[int, int, int, str], Workload]]],
                     live: list[Shape]) -> bool:
        """Lend to one leaf waiting with several shapes, in its serving order; True when no GPU is left."""
        cap = self.capacity
        now = self.now
        cursor = dict.fromkeys(live, 0)
        while cursor:
            best: tuple[tuple[int, int, int, str], Shape] | None = None
            for shape, i in cursor.items():
                item = queues[shape][i]
                if best is None or item[0] < best[0]:
                    best = (item[0], shape)
            assert best is not None
            shape = best[1]
            i = cursor[shape]
            hosts = cap.choose(shape[0], shape[1], now)
            if hosts is None:
                del cursor[shape]  # (a later leaf rules it out again at the cost of one try)
                continue
            self.start(queues[shape][i][1], hosts)
            if cap.total_free <= 0:
                return True
            if i + 1 < len(queues[shape]):
                cursor[shape] = i + 1
            else:
                del cursor[shape]
        return False

    # ------------------------------------------------------------------ tracing

    def record_blocked(self) -> None:
        """The Outcome of every pending workload that did not start (or of ``only``)."""
        assert self.trace is not None
        wl = self.state.workloads
        if self.only is not None:
            w = wl.all.get(self.only)
            todo = [w] if w is not None and w.status == "pending" else []
        else:
            todo = [w for q in (*wl.pending.values(), *wl.pending_free.values()) for _, w in q]
        for w in todo:
            if w.id not in self.trace:
                self.trace[w.id] = self.classify(w)

    def classify(self, w: Workload) -> Outcome:
        """What keeps ``w`` from starting, as of the end of this cycle."""
        cap = self.capacity
        held = self.book.holds(w.id)
        if held is not None:
            return Outcome("blocked", "reserved", "hosts held until the protection there ends",
                           hosts=held.hosts, until=held.until)
        n, k = w.hosts, w.gpus_per_host
        hosts = self.state.cluster_state.hosts
        most = max(cap.free.values(), default=0)
        if w.min_runtime_s == 0:
            return Outcome("blocked", "no_free_gpus",
                           f"no healthy host has {k} free GPUs (the most free on one: {most})")
        fits_all = sum(1 for h in hosts.values() if h.gpus >= k) >= n
        healthy = sum(1 for h in cap.free if hosts[h].gpus >= k)
        if fits_all and healthy < n:
            return Outcome("blocked", "faulty_hosts",
                           f"it needs {n} healthy hosts with {k} GPUs; {healthy} are healthy")
        fitting = [h for h, f in cap.free.items() if f >= k]
        if len(fitting) >= n:
            holders = sorted((r, h) for h in fitting if (r := cap.reserved.get(h)) is not None)
            until, holder = holders[0][0] if holders else (None, None)
            return Outcome("blocked", "reserved_hosts",
                           f"{len(fitting)} hosts have {k} GPUs free, but reserved hosts take only "
                           f"work whose protection ends by the reservation's end",
                           until=until, holder=holder)
        if cap.total_free >= w.gpus:
            return Outcome("blocked", "fragmentation",
                           f"{cap.total_free} GPUs are free but scattered: no {n} host(s) "
                           f"have {k} free each")
        rule = self.rule(w, planning=True)
        ready = ready_times(w, cap, self.frees, rule, self.stopped_now, self.now)
        times = sorted(ready.values())
        if len(times) >= n and times[n - 1] < NEVER:
            until = times[n - 1]
            if until <= self.now:
                return Outcome("blocked", "search_budget",
                               "work it may take holds the GPUs it needs, but this cycle's "
                               "preemption searches ran out before it", until=until)
            detail = "work it may take holds the GPUs it needs until its protection ends"
            holder = None
            if k >= cap.max_gpus and not self.book.slot_free(n):
                holder = self._class_holder(w)
                detail += "; the reservation slot of its size is held by another workload"
            return Outcome("blocked", "protected_victims", detail, until=until, holder=holder)
        return Outcome("blocked", "better_ranked",
                       "the GPUs it needs are held by work it may not take")

    def _class_holder(self, w: Workload) -> str | None:
        pending = self.state.workloads.all
        cls = size_class(w.hosts)
        for wid, r in sorted(self.book.standing.items(), key=lambda kv: (kv[1].until, kv[0])):
            if size_class(pending[wid].hosts) == cls and wid != w.id:
                return r.workload
        return None

    # ------------------------------------------------------------------ effects

    @property
    def ranking(self) -> Ranking:
        """Step 3, the fair-share order of this cycle (computed when first asked for)."""
        if self._ranking is None:
            self._ranking = Ranking(self.state, commitments(self.state))
        return self._ranking

    @property
    def frees(self) -> HostFreeTimes:
        """When the work on each host stops being protected (for reservation planning).

        The state's (``HostFreeTimes.of``): memoised across cycles, since it reads only
        the running set and the hosts, and advanced over starts and stops.
        """
        if self._frees is None:
            self._frees = HostFreeTimes.of(self.state)
        return self._frees

    @property
    def costs(self) -> CostModel:
        """What stopping each workload costs in this cycle (see scheduler.policy.victims)."""
        if self._costs is None:
            self._costs = CostModel(self.now, checkpoint_rule(self.policy),
                                    self.ranking.keep_value)
        return self._costs

    def rule(self, w: Workload, due: Due | None = None, planning: bool = False) -> BudgetRule:
        """Who ``w`` may take in this cycle: the budget rule, reclaiming when the policy says so.

        ``planning``: for the reservation planner, which under the balanced
        reclaim may also plan on borrowed work the balance does not let ``w``
        take now (``Guarantees.lockout``: the bound on a lock-out).
        """
        mode = self.policy.preemption_rule
        reclaim = mode in RECLAIM_RULES
        return BudgetRule(self.ranking, w, due, self.guarantees if reclaim else None,
                          balanced=mode in BALANCED_RULES,
                          lockout=planning and mode == "reclaim_balanced",
                          loses_little=None if planning or not reclaim else self.loses_little)

    @property
    def loses_little(self) -> Callable[[Workload], bool] | None:
        """``RECLAIM_LOSS_S`` as a test of one victim at this cycle's time (None: no bound, ``LOSS_RULES``).

        A victim may be taken by reclaim when the work it would lose now
        (``work_lost``: since its last checkpoint under its own interval, or its
        whole run if it cannot resume) is at most the bound per GPU. Its answer
        moves with the time, not only with the world: the failure memo is then
        kept for one moment only (``failures``), and the engine's idle-cycle memo
        is off (scheduler/engine.py).
        """
        if self.policy.preemption_rule not in LOSS_RULES:
            return None
        bound = RECLAIM_LOSS_S
        if self._loses_little is None:
            now = self.now
            checkpoint = checkpoint_rule(self.policy)

            def loses_little(v: Workload) -> bool:
                lost = work_lost(v, now, checkpoint(v) if v.resumable else None)
                return lost <= bound * v.gpus

            self._loses_little = loses_little
        return self._loses_little

    @property
    def guarantees(self) -> Guarantees:
        """What each budget node is guaranteed and holds, as this cycle's decisions leave it."""
        if self._guarantees is None:
            self._guarantees = Guarantees(self.state, self.stopped_now)
        return self._guarantees

    def _sole_leaf_frees(self) -> SoleLeafFrees:
        """The sole-leaf index of the host free times, kept in the state's memos."""
        memos = self.state.memos
        memos.sole_leaf_frees = index = sole_leaf_frees(memos.sole_leaf_frees, self.frees)
        return index

    def victims(self) -> VictimIndex:
        if self._victims is None:
            self._victims = VictimIndex.for_cycle(self.state, self.stopped_now)
            self._victims.sole_leaf = _sole_leaf_lookup(self.state)
        return self._victims

    def start(self, w: Workload, hosts: list[str], victims: tuple[str, ...] = (),
              how: str = "") -> None:
        per = w.gpus_per_host
        for h in hosts:
            self.capacity.take(h, per)
        self.started.add(w.id)
        book = self.book
        if book.standing or book.due:
            book.release(w)
        allocated = w.min_runtime_s > 0
        until = self.now + w.min_runtime_s
        if allocated and (self.policy.borrowed_protection_s is not None
                          or self.policy.preemption_rule in RECLAIM_RULES):
            guarantees = self.guarantees
            until = protection_end(self.now, w.min_runtime_s, guarantees.within(w.budget, w.gpus),
                                   self.policy.borrowed_protection_s)
            guarantees.take(w.budget, w.gpus)
        self.emit.started(w.id, [(h, per) for h in hosts], allocated, until)
        if self.trace is not None:
            self.trace[w.id] = Outcome("started", how or ("preempted" if victims else "fits"),
                                       hosts=tuple(hosts), victims=victims)

    def stop(self, w: Workload, reason: str, by: str | None) -> None:
        idx = self._victims
        if idx is not None and w.id not in self.stopped_now:
            left = idx.size
            idx.discard(w)
            if idx.size != left and w.allocated and self._ranking is not None:
                # ``discard`` took its GPUs off every node of its budget path (an
                # unallocated victim's off ``unallocated_gpus`` only).
                r = self._ranking
                self.sibling_sums.moved(list(idx.paths.get(w.budget, ())), (r.version, left),
                                        r.parent, (r.version, idx.size))
        self.stopped_now.add(w.id)
        if w.allocated and self._guarantees is not None:
            self._guarantees.give(w.budget, w.gpus)
        if self.grace and self.state.grace_of(w.id):
            self.held_back = True  # its GPUs stay taken until it stops (State.stopping)
        else:
            for h, g in w.placement:
                self.capacity.give(h, g)
        self.emit.preempted(w.id, reason, by, requeued=w.resumable)


def _identity(w: Workload) -> tuple[object, ...]:
    """What a search or plan reads of its workload (the id alone could be reused)."""
    return (w.id, w.budget, w.priority, w.hosts, w.gpus_per_host, w.min_runtime_s)


def _next_shorter(queue: list[tuple[tuple[int, int, int, str], Workload]], i: int, floor: int,
                  depth: int) -> int:
    """The first index from ``i`` whose minimum runtime is below ``floor`` (reading at most ``depth``)."""
    end = min(len(queue), i + depth)
    while i < end:
        if queue[i][1].min_runtime_s < floor:
            return i
        i += 1
    return len(queue)  # none within reach: the shape is done for this cycle


__all__ = ["Cycle", "Outcome", "Reservation", "decide", "drain"]


def _sole_leaf_lookup(state: State) -> SoleLeafLookup:
    """The sole-leaf index of a victim index's hosts, kept in the state's memos.

    A closure over the state alone: the victim index outlives its cycle (it is memoised),
    so what it holds must not keep the cycle's objects alive.
    """

    def lookup(on_host: dict[str, list[Victim]], by_span: list[HostBySpan]
               ) -> SoleLeafVictims[HostBySpan]:
        memos = state.memos
        memos.sole_leaf_victims = index = sole_leaf_victims(memos.sole_leaf_victims, on_host,
                                                            by_span)
        return index

    return lookup
