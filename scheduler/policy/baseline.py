"""The lab's old scheduler, kept as a pluggable policy for side-by-side simulation.

Priority scheduling with opt-out preemption, as the brief describes it:

- Jobs carry LOW/NORMAL/HIGH priority (``priority`` < 0, 0, > 0). HIGH costs
  nothing, so in practice most jobs are HIGH.
- A job may opt out of preemption, and since opting out costs nothing, every
  job with a minimum runtime does so while its team is under its limit (work
  asking for none, eval and batch, runs preemptible, as it is unallocated under
  allot): a team may hold at most its
  budget share of the cluster in non-preemptible GPUs at once. Over the limit a
  job still runs, as preemptible, on idle GPUs. (allot's contract has no say
  here: the old scheduler did not know minimum runtimes.)
- A non-preemptible job may preempt any preemptible job; a preemptible job may
  preempt preemptible jobs of lower priority.
- Non-preemptible jobs are never preempted, not even to drain a faulty host:
  they run to completion there (the maintenance gridlock the brief names).
- Global order: priority, then submission time. No fair share, no reservations.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from projections.cluster import FAILED
from projections.workloads import Workload
from scheduler.emit import Emitter
from scheduler.index.victim_index import VictimIndex
from scheduler.policy.placement import Capacity
from scheduler.policy.rules import baseline_rule
from scheduler.policy.victims import Plan, cheapest_plan, flat_costs

if TYPE_CHECKING:
    from events import Event
    from scheduler.state import State


def decide(state: State, cause: str = "cycle") -> list[Event]:
    """One cycle of the priority scheduler at ``state.now``."""
    cycle = _Cycle(state, cause)
    # 1. Faulty hosts: preemptible work leaves at once; opt-out work stays until it ends.
    cycle.drain_faulty_hosts()
    # 2. Non-preemptible GPUs held per team, against the team's limit.
    cycle.count_held()
    # 3. Everything pending, in one global priority order, of which only the head is read:
    #    fit, else preempt preemptible work the job's rights allow.
    cycle.admit()
    return cycle.emit.events


class _Cycle:
    """The working set of one cycle of the priority scheduler (nothing outlives ``decide``)."""

    __slots__ = (
        "capacity",
        "emit",
        "grace",
        "held",
        "held_back",
        "now",
        "running",
        "state",
        "stopped_now",
        "team_of",
        "tree",
        "victims",
    )

    def __init__(self, state: State, cause: str) -> None:
        self.state = state
        self.now = state.now
        self.emit = Emitter(state.cluster, self.now, cause)
        self.capacity = Capacity(state)
        self.stopped_now: set[str] = set()
        self.victims: VictimIndex | None = None
        self.running = state.workloads.running
        self.tree = state.budget
        self.team_of = self.tree.structure().teams(state.policy.team_depth)
        # Preemption takes time (policy.preemption_grace_s, see cycle.Cycle.grace): a
        # preemptor whose victims keep their GPUs through a grace starts later.
        self.grace = state.policy.preemption_grace_s > 0
        self.held_back: list[str] = []
        self.held: dict[str, int] = {}

    def stop(self, w: Workload, reason: str, by: str | None) -> None:
        if self.victims is not None and w.id not in self.stopped_now:
            self.victims.discard(w)
        self.stopped_now.add(w.id)
        if self.grace and self.state.grace_of(w.id):
            self.held_back.append(w.id)  # its GPUs stay taken through its grace (State.stopping)
        else:
            for h, g in w.placement:
                self.capacity.give(h, g)
        self.emit.preempted(w.id, reason, by, requeued=w.resumable)

    def drain_faulty_hosts(self) -> None:
        """Preemptible work leaves a faulty host at once, all work a failed one; an empty
        faulty host is drained. (``faulty`` holds exactly the degraded and failed hosts;
        sorted, they are in the cluster's scan order, ``order``.)"""
        state = self.state
        hosts = state.cluster_state.hosts
        for name in sorted(state.cluster_state.faulty):
            h = hosts[name]
            host_failed = h.health == FAILED
            left = 0
            for wid in sorted(h.workloads):
                if wid in self.stopped_now:
                    continue
                w = self.running[wid]
                if host_failed or not w.allocated:
                    self.stop(w, "host_failure" if host_failed else "host_drain", by=name)
                    if self.grace and state.grace_of(wid):
                        left += 1  # still stopping: drained once its GPUs are released
                else:
                    left += 1
            if left == 0 and not h.held:
                self.emit.drained(name)

    def count_held(self) -> None:
        """Non-preemptible GPUs per team: a sum over the running set, kept while it and the
        teams are unchanged (most cycles follow an input that starts or stops nothing);
        this cycle's copy is its own, less what step 1 stopped."""
        state = self.state
        key = (state.workloads.running_version, self.tree.version, state.policy.team_depth)
        cached = state.memos.baseline_held
        if cached is not None and cached[0] == key:
            running_held: dict[str, int] = cached[1]
        else:
            running_held = {}
            for w in self.running.values():
                if w.allocated:
                    team = self.team_of[w.budget]
                    running_held[team] = running_held.get(team, 0) + w.gpus
            state.memos.baseline_held = (key, running_held)
        held = self.held = dict(running_held)
        for wid in self.stopped_now:  # stopped in step 1; on a failed host that includes opted-out work
            w = self.running[wid]
            if w.allocated:
                held[self.team_of[w.budget]] -= w.gpus

    def limit(self, team: str) -> int:
        """The team's non-preemptible limit: its budget share of the GPUs present."""
        tree = self.tree
        return int(tree.entitlement(team) * self.state.cluster_state.capacity) \
            if team in tree else 0

    def admit(self) -> None:
        """The head of the global queue (``WorkloadsProjection.queue``), in order."""
        state, now, capacity, held = self.state, self.now, self.capacity, self.held
        head = state.policy.queue_depth * 8
        queue: list[Workload] = [w for _, w in state.workloads.queue[:head]]
        searches = state.policy.preemption_searches
        # The old scheduler knew no minimum runtimes or checkpoints: a victim costs the
        # work it loses (all of its run unless it resumes), then its GPUs.
        costs = flat_costs(now)
        # Failed searches: (hosts, GPUs per host, opted out, priority). A later job
        # asking for at least as much with no more rights cannot succeed either.
        failed: list[tuple[int, int, bool, int]] = []
        limits: dict[str, int] = {}
        for w in queue:
            team = self.team_of[w.budget]
            if team not in limits:
                limits[team] = self.limit(team)
            # Work that asks for no minimum runtime (eval, batch) runs preemptible,
            # as it does under allot (unallocated): only contracted work opts out.
            opt_out = w.allocated and held.get(team, 0) + w.gpus <= limits[team]
            n, k = w.hosts, w.gpus_per_host
            placed = capacity.choose(n, k, now) if capacity.total_free >= n * k else None
            if placed is None and searches > 0 \
                    and not (self.grace and w.id in state.stopping_for) \
                    and not _dominated(failed, n, k, opt_out, w.priority):
                searches -= 1
                if self.victims is None:
                    self.victims = VictimIndex.for_cycle(state, self.stopped_now)
                victims = self.victims
                # Only preemptible (not opted-out) jobs can be victims: if all of them
                # and every free GPU would not do, do not search.
                if capacity.total_free + victims.unallocated_gpus < w.gpus:
                    failed.append((n, k, opt_out, w.priority))
                    continue
                plan = cheapest_plan(victims, w.hosts, w.gpus_per_host, now, capacity,
                                     baseline_rule(opt_out, w.priority), w.id, costs)
                if isinstance(plan, Plan):
                    self.held_back.clear()
                    for v, reason in plan.victims:
                        self.stop(v.w, reason, by=w.id)
                    # With victims in their grace it starts at a later cycle, when released.
                    placed = None if self.held_back else plan.hosts
                else:
                    failed.append((n, k, opt_out, w.priority))
            if placed is None:
                continue
            for ph in placed:
                capacity.take(ph, w.gpus_per_host)
            self.emit.started(w.id, [(h, w.gpus_per_host) for h in placed], opt_out,
                              None if opt_out else now)
            if opt_out:
                held[team] = held.get(team, 0) + w.gpus


def _dominated(failed: list[tuple[int, int, bool, int]], n: int, k: int, opt_out: bool,
               priority: int) -> bool:
    """A search as easy failed already: as many hosts or fewer, as few GPUs each or fewer,
    rights at least these (opted out, or this one is not), priority at least this."""
    for fn, fk, fo, fp in failed:
        if n >= fn and k >= fk and (fo or not opt_out) and priority <= fp:
            return True
    return False
