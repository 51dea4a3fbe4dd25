"""The simulation loop: the same engine as production, in virtual time.

The driver plays the world around the scheduler: it publishes submissions at
their times, plays the executor (a started workload finishes after the run time
it still needs; a resumable one keeps its progress across preemptions), the
impatient user (a workload not started within its patience is cancelled), the
host monitors (seeded faults; repairs after a host drained) and the ticker.

Preemption has a cost (the executor's model, from each workload's contract):
a resumable victim keeps the work up to its last checkpoint (every
``checkpoint_interval_s`` of run time from the run's start; continuously if
unset) and its next run first spends ``restart_overhead_s``; a victim that
cannot resume loses its whole run, and its owner resubmits it from scratch if
its ``resubmits`` count allows (a new workload ``<first id>-r<n>`` whose
submission names the one it re-runs in ``resubmit_of``). A session that can be
restored (``WorkloadSpec.checkpoint_hook_s``) runs its checkpoint hook when
preempted: if the hook completes within the grace it keeps its whole run.
``SimResult`` counts the GPU-seconds lost that way, the ground truth the
audit's figure is checked against, and per class the state lost (the work, not
counting restarts).

Under the policies a scenario's squatting model names (the old scheduler's),
some researchers hold idle jobs to debug on: the driver keeps each squatter's
hold submitted and renewed, and runs their debug work inside it while it runs
(see ``simulator.sources.SquatConfig``).
It jumps from one schedulable moment to the next: a moment is any time with an
input, a protection ending, or the periodic tick. The driver is the trusted
clock: at a moment with inputs it first moves the clock (``clock.ticked`` with
``cycle=false``) so they take effect at that moment, and after them runs one
cycle (a normal tick), which sees everything that happened at it. Every input
and every decision goes into one log, in order, exactly as the live journal
would hold them, so the log replays bit for bit.

``Simulation(on_submit=...)`` (off by default) lets a reader look at the state
right after each submission: the forecast recorder (forecast/record.py) uses
it to forecast new work as of its submission, on a copy, outside the log.
"""

from __future__ import annotations

import gc
import heapq
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import msgspec

from events import (
    ClockTicked,
    Event,
    HostDrained,
    PolicyConfigured,
    WorkloadPreempted,
    WorkloadStarted,
)
from events.factory import Inputs
from projections.cluster import OK
from projections.workloads import PENDING
from scheduler import Engine
from scheduler.state import State
from simulator.scenario import Scenario, ScenarioError
from simulator.sources import SourceOutput, SquatConfig, explicit, generator, philly
from simulator.spec import BudgetNodeSpec, SquatterSpec, WorkloadSpec, hook_budget_s

# Order of work at one moment: capacity comes back before new work arrives,
# and the cycle (tick) runs last, seeing everything that happened at that time.
FINISH, REPAIR, FAULT, SUBMIT, CANCEL, TICK = range(6)
STOPPED = 6  # a preempted run's processes are gone (workload.stopped; see WorkloadSpec.stop_s)


# What the simulated owner does with a contract longer than the policy's cap:
# resubmit it with the minimum runtime clamped to the cap (a change of cap must
# not look better by refusing work), or send it as is and let it be refused.
OVER_CAP = ("clamp", "reject")

# A non-resumable victim's owner notices and resubmits it this long after the preemption.
RESUBMIT_DELAY_S = 60

# The collector's thresholds during a run (CPython's default: 700, 10, 10). A
# run allocates millions of short-lived tuples and dicts and keeps every event
# in its log, and the scenario's sources sit in the oldest generation, which
# every full collection walks: on a calibrated month, collections took 2.8 s
# of a 16.2 s run at the defaults and 0.5 s at these (measured with
# gc.callbacks, on a loaded machine). Garbage is the same, only collected in
# larger batches.
GC_THRESHOLDS = (100_000, 50, 1000)


@contextmanager
def _fewer_collections() -> Iterator[None]:
    """Run with the collector's thresholds raised (never lowered); restore the old ones after."""
    old = gc.get_threshold()
    gc.set_threshold(*(max(o, n) for o, n in zip(old, GC_THRESHOLDS, strict=True)))
    try:
        yield
    finally:
        gc.set_threshold(*old)


class SimResult(msgspec.Struct, kw_only=True):
    """What one simulated run produced."""

    policy: str
    log: list[Event]
    wall_seconds: float
    sim_seconds: int
    cycles: int
    workloads: int
    demand_ratio: float  # mean GPUs wanted (pending + running) / cluster GPUs
    # The executor's ground truth about preemption costs and the people model.
    lost_gpu_s: int = 0          # work preempted victims lost (checkpoint model)
    resubmitted: int = 0         # resubmissions of victims that could not resume
    holds: int = 0               # squatters' holds submitted
    debug_in_holds: int = 0      # squatters' debug workloads run inside their holds
    # Submissions whose minimum runtime is over the policy's cap: clamped to the
    # cap (as their owner would resubmit them, the default) or sent as they are
    # and refused by the scheduler (``over_cap="reject"``).
    clamped: int = 0
    refused_over_cap: int = 0
    refused_over_cap_gpu_s: int = 0  # the GPU-time (gpus x duration) of the refused ones
    # Per workload kind, the GPU-seconds of run time preempted victims lost (since
    # their last checkpoint, or their whole run): ``lost_gpu_s`` without the
    # restart overheads. For interactive sessions, the in-memory state lost.
    lost_state_gpu_s: dict[str, int] = msgspec.field(default_factory=dict)
    # Checkpoint hooks of preempted sessions (issue 26): completed within the
    # grace, or cut short by it (no grace, or a hook longer than the grace allows).
    hooks_completed: int = 0
    hooks_cut: int = 0


def load_sources(scenario: Scenario, base_dir: Path) -> SourceOutput:
    """Every source's nodes and workloads, merged (workload ids must be unique)."""
    nodes: dict[str, BudgetNodeSpec] = {}
    workloads: list[WorkloadSpec] = []
    squatters: list[SquatterSpec] = []
    squat: SquatConfig | None = None
    for i, cfg in enumerate(scenario.sources):
        seed = scenario.seed * 1000 + i
        if isinstance(cfg, generator.Config):
            cfg = msgspec.structs.replace(
                cfg,
                capacity_gpus=cfg.capacity_gpus or scenario.capacity_gpus,
                horizon_s=cfg.horizon_s or scenario.horizon_s,
                host_gpus=cfg.host_gpus or scenario.cluster.gpus_per_host,
            )
            scenario_nodes = [BudgetNodeSpec(path=n.path, shares=n.shares, managers=n.managers)
                              for n in scenario.budget.nodes]
            out = generator.load(cfg, seed=seed, base_dir=base_dir, tree=scenario_nodes)
        elif isinstance(cfg, explicit.Config):
            out = explicit.load(cfg, seed=seed, base_dir=base_dir)
        else:
            out = philly.load(cfg, seed=seed, base_dir=base_dir)
        for n in out.nodes:
            nodes.setdefault(n.path, n)
        workloads.extend(out.workloads)
        if out.squat is not None:
            if squat is not None and out.squat != squat:
                raise ValueError("two generator sources define different squatting models")
            squat = out.squat
            squatters.extend(out.squatters)
    ids = [w.workload for w in workloads]
    if len(set(ids)) != len(ids):
        raise ScenarioError("workload id {!r} is not unique across sources".format(next(
            a for a, b in zip(sorted(ids), sorted(ids)[1:], strict=False) if a == b)))
    workloads.sort(key=lambda w: (w.submit_at, w.workload))
    return SourceOutput(nodes=list(nodes.values()), workloads=workloads, squatters=squatters,
                        squat=squat)


class Simulation:
    """One scenario under one policy."""

    def __init__(self, scenario: Scenario, policy: str, base_dir: Path,
                 sources: SourceOutput | None = None, over_cap: str = "clamp",
                 on_submit: Callable[[State, str, str], None] | None = None) -> None:
        if over_cap not in OVER_CAP:
            raise ValueError(f"over_cap must be one of {OVER_CAP}, got {over_cap!r}")
        self.over_cap = over_cap
        # Called with (state, workload id, kind) right after each submission is folded,
        # before the moment's cycle: the forecast recorder (forecast/record.py). It must
        # only read the state (forecasts copy it): decisions are the same with or without.
        self.on_submit = on_submit
        self.scenario = scenario
        self.policy = policy
        self.base_dir = base_dir
        self.sources = sources if sources is not None else load_sources(scenario, base_dir)

    def setup_events(self, mk: Inputs) -> list[Event]:
        """Policy, budget tree and hosts: the head of the log."""
        sc = self.scenario
        at = sc.epoch
        knobs = {"host_gpus": sc.cluster.gpus_per_host, **sc.policy}
        out: list[Event] = [mk.policy(at=at, actor="admin", scheduler=self.policy, **knobs)]
        b = sc.budget
        out.append(mk.node(b.root, managers=b.managers, at=at))
        defined = {b.root}
        wanted = [(n.path, n.shares, n.managers) for n in b.nodes]
        wanted += [(n.path, n.shares, n.managers) for n in self.sources.nodes]
        # Parents first; intermediate nodes a source implies but nobody defined get 1 share.
        for path, shares, managers in sorted(wanted, key=lambda x: (x[0].count("/"), x[0])):
            parts = path.split("/")
            for i in range(1, len(parts) - 1):
                mid = "/".join(parts[: i + 1])
                if mid not in defined:
                    out.append(mk.node(mid, at=at))
                    defined.add(mid)
            if path not in defined:
                out.append(mk.node(path, shares=shares, managers=managers, at=at))
                defined.add(path)
        c = sc.cluster
        per_block = c.hosts_per_rack * c.racks_per_block
        for h in range(c.hosts):
            out.append(mk.host(f"h{h:04d}", gpus=c.gpus_per_host, rack=f"r{h // c.hosts_per_rack:03d}",
                               block=f"b{h // per_block:02d}", at=at))
        return out

    def run(self, progress: Callable[[int, int], None] | None = None) -> SimResult:
        """Simulate to the horizon; ``progress(sim_seconds_done, horizon)`` is called as it goes."""
        with _fewer_collections():
            return self.run_loop(progress)

    def run_loop(self, progress: Callable[[int, int], None] | None) -> SimResult:
        wall0 = time.perf_counter()
        sc = self.scenario
        epoch, horizon = sc.epoch, sc.horizon_s
        mk = Inputs(cluster=sc.cluster.id, prefix="s", source="simulator")
        eng = Engine(sc.cluster.id)
        state = eng.state
        log: list[Event] = []
        append, extend = log.append, log.extend
        process = eng.process

        heap: list[tuple[int, int, int, object]] = []
        seq = 0

        def push(t: int, kind: int, payload: object) -> None:
            nonlocal seq
            seq += 1
            heapq.heappush(heap, (t, kind, seq, payload))

        specs = {w.workload: w for w in self.sources.workloads}
        for w in self.sources.workloads:
            if w.submit_at <= horizon:
                push(w.submit_at, SUBMIT, w)
        for t in range(0, horizon + 1, sc.tick_s):
            push(t, TICK, None)
        push(horizon, TICK, None)
        self._schedule_faults(push, horizon)

        remaining: dict[str, int] = {w.workload: max(1, w.duration_s) for w in self.sources.workloads}
        run_start: dict[str, int] = {}
        run_no: dict[str, int] = {}
        ticks_at: set[int] = set()
        fault_rng = random.Random(f"{sc.seed}:severity")
        lost_gpu_s = 0
        resubmitted = 0
        # First submission of each resubmission chain, and resubmissions so far.
        first_of: dict[str, str] = {}
        resubmissions: dict[str, int] = {}

        # Squatting (only under the policies the scenario names for it).
        squat = self.sources.squat
        squatters = self.sources.squatters if squat and self.policy in squat.policies else []
        hold_of: dict[str, str] = {}          # hold workload id -> squatter's user
        holding: dict[str, int] = {}          # user -> GPUs of their running hold
        hold_seq: dict[str, int] = {}
        holds = 0
        debug_in_holds = 0
        clamped = refused_over_cap = refused_over_cap_gpu_s = 0
        clamp = self.over_cap == "clamp"
        on_submit = self.on_submit

        def new_hold(user: str, t: int) -> None:
            nonlocal holds
            assert squat is not None
            sq = squatter[user]
            n = hold_seq.get(user, 0) + 1
            hold_seq[user] = n
            spec = WorkloadSpec(workload=f"squat-{user}-{n:04d}", submit_at=t, budget=sq.budget,
                                user=user, gpus=sq.gpus, min_runtime_s=squat.min_runtime_s,
                                priority=squat.priority, kind="squat", duration_s=squat.hold_s)
            specs[spec.workload] = spec
            remaining[spec.workload] = spec.duration_s
            hold_of[spec.workload] = user
            holds += 1
            push(t, SUBMIT, spec)

        squatter = {sq.user: sq for sq in squatters}
        for sq in squatters:
            if sq.first_at <= horizon:
                new_hold(sq.user, sq.first_at)

        def ended(wid: str, t: int) -> None:
            """A hold ended (finished, preempted, rejected): its owner takes a new one at once."""
            user = hold_of.get(wid)
            if user is not None:
                holding.pop(user, None)
                new_hold(user, t)

        def resubmit(spec: WorkloadSpec, t: int) -> None:
            nonlocal resubmitted
            first = first_of.get(spec.workload, spec.workload)
            n = resubmissions.get(first, 0) + 1
            resubmissions[first] = n
            again = msgspec.structs.replace(spec, workload=f"{first}-r{n}",
                                            submit_at=t + RESUBMIT_DELAY_S,
                                            resubmit_of=spec.workload,
                                            resubmits=spec.resubmits - 1)
            first_of[again.workload] = first
            specs[again.workload] = again
            remaining[again.workload] = max(1, again.duration_s)
            resubmitted += 1
            push(again.submit_at, SUBMIT, again)

        # Demand integral: GPUs wanted by pending + running workloads.
        wanted = 0
        wanted_area = 0
        last_t = 0
        cycles = 0

        lost_state: dict[str, int] = {}
        hooks_completed = hooks_cut = 0

        def handle(derived: list[Event], t: int) -> None:
            nonlocal wanted, lost_gpu_s, hooks_completed, hooks_cut
            for d in derived:
                if type(d) is WorkloadStarted:
                    wid = d.workload
                    run_start[wid] = t
                    if wid in hold_of:
                        holding[hold_of[wid]] = specs[wid].gpus
                    n = run_no.get(wid, 0) + 1
                    run_no[wid] = n
                    limit = specs[wid].time_limit_s
                    if limit is not None and limit < remaining[wid]:
                        push(t + limit, FINISH, (wid, n, True))   # stopped at its time limit
                    else:
                        push(t + remaining[wid], FINISH, (wid, n, False))
                    # protected_until is event time; the heap counts from the epoch.
                    pu = None if d.protected_until is None else d.protected_until - epoch
                    if pu is not None and pu > t and pu not in ticks_at:
                        ticks_at.add(pu)
                        push(pu, TICK, None)
                elif type(d) is WorkloadPreempted:
                    wid = d.workload
                    spec = specs[wid]
                    ran = t - run_start[wid]
                    grace = state.grace_of(wid) if state.policy.preemption_grace_s else 0
                    hook = spec.checkpoint_hook_s
                    # A checkpoint hook runs before SIGTERM, for at most its share
                    # of the grace: the stop takes that long more.
                    hook_s = 0 if hook is None or grace <= 0 else min(hook, hook_budget_s(grace))
                    hooked = hook is not None and grace > 0 and hook <= hook_budget_s(grace)
                    stop_s = spec.stop_s + hook_s
                    if grace > 0 and max(1, stop_s) < grace:
                        push(t + max(1, stop_s), STOPPED, (wid, run_no[wid]))
                    elif grace > 0 and t + grace not in ticks_at:
                        # The grace's end frees the GPUs at a tick: the live ticker
                        # would run one within a second, and so does the simulation.
                        ticks_at.add(t + grace)
                        push(t + grace, TICK, None)
                    if d.requeued:
                        # Work up to the last checkpoint is kept; the next run
                        # first reloads it.
                        every = spec.checkpoint_interval_s
                        saved = ran - ran % every if every else ran
                        if hook is not None:
                            # A session with hooks saves all of its state if the
                            # hook completes; else only its periodic checkpoints.
                            if hooked:
                                saved = ran
                                hooks_completed += 1
                            else:
                                saved = ran - ran % every if every else 0
                                hooks_cut += 1
                        lost_gpu_s += spec.gpus * (ran - saved + spec.restart_overhead_s)
                        lost_state[spec.kind] = lost_state.get(spec.kind, 0) + spec.gpus * (ran - saved)
                        remaining[wid] = max(1, remaining[wid] - saved + spec.restart_overhead_s)
                        # It may restart elsewhere at once: the live ticker would run
                        # the next cycle a second later, and so does the simulation.
                        if t + 1 not in ticks_at:
                            ticks_at.add(t + 1)
                            push(t + 1, TICK, None)
                    else:
                        lost_gpu_s += spec.gpus * ran
                        lost_state[spec.kind] = lost_state.get(spec.kind, 0) + spec.gpus * ran
                        wanted -= spec.gpus
                        if wid in hold_of:
                            ended(wid, t)
                        elif spec.resubmits > 0:
                            resubmit(spec, t)
                elif type(d) is HostDrained:
                    push(t + sc.faults.repair_s, REPAIR, d.host)
                elif d.__struct_config__.tag == "workload.rejected":
                    wanted -= specs[d.workload].gpus if d.workload in specs else 0

        def advance(at: int) -> None:
            """Move the trusted clock to ``at`` before the inputs of a new moment."""
            if at > state.now:
                e = mk.tick(at, cycle=False)
                process(e)
                append(e)

        def feed(e: Event, t: int) -> None:
            if type(e) is not ClockTicked:  # a tick moves the clock itself
                advance(e.at)
            out = process(e)
            if out is None:
                return
            append(e)
            if out:
                extend(out)
                handle(out, t)

        for e in self.setup_events(mk):
            advance(e.at)
            out = process(e)
            if out:  # the setup of a scenario is never refused: a refusal is a scenario error
                raise ScenarioError(f"{sc.name}: the scheduler refused {type(e).__struct_config__.tag}"
                                    f": {getattr(out[0], 'reason', '')} {getattr(out[0], 'detail', '')}")
            append(e)
        next_report = 0
        while heap:
            t = heap[0][0]
            if t > horizon:
                break
            wanted_area += wanted * (t - last_t)
            last_t = t
            at = epoch + t
            if progress is not None and t >= next_report:
                progress(t, horizon)
                next_report = t + 6 * 3600
            while heap and heap[0][0] == t:
                _, kind, _, payload = heapq.heappop(heap)
                if kind == FINISH:
                    wid, n, limited = payload  # type: ignore[misc]
                    if run_no.get(wid) == n and wid in state.workloads.running:
                        spec = specs[wid]
                        wanted -= spec.gpus
                        if limited:
                            feed(mk.finish(wid, at=at, outcome="failed", reason="time_limit",
                                           signal="SIGTERM", run_number=n), t)
                        else:
                            feed(mk.finish(wid, at=at, outcome=spec.outcome), t)
                        if wid in hold_of:
                            ended(wid, t)
                elif kind == SUBMIT:
                    spec = payload  # type: ignore[assignment]
                    if spec.kind == "debug" and holding.get(spec.user, 0) >= spec.gpus:
                        # A squatter debugs inside their hold: nothing is submitted.
                        debug_in_holds += 1
                        continue
                    wanted += spec.gpus
                    min_runtime_s = spec.min_runtime_s
                    if min_runtime_s > state.policy.min_runtime_cap_s:
                        if clamp:
                            min_runtime_s = state.policy.min_runtime_cap_s
                            clamped += 1
                        else:
                            refused_over_cap += 1
                            refused_over_cap_gpu_s += spec.gpus * spec.duration_s
                    feed(mk.submit(spec.workload, spec.budget, spec.gpus, min_runtime_s,
                                   at=at, user=spec.user, hosts=spec.hosts,
                                   resumable=spec.resumable, priority=spec.priority,
                                   kind=spec.kind, expected_duration_s=spec.duration_s,
                                   checkpoint_interval_s=spec.checkpoint_interval_s,
                                   restart_overhead_s=spec.restart_overhead_s,
                                   resubmit_of=spec.resubmit_of,
                                   time_limit_s=spec.time_limit_s), t)
                    if on_submit is not None:
                        on_submit(state, spec.workload, spec.kind)
                    if spec.patience_s is not None:
                        push(t + spec.patience_s, CANCEL, spec.workload)
                elif kind == CANCEL:
                    w = state.workloads.all.get(payload)  # type: ignore[arg-type]
                    if w is not None and w.status == PENDING and w.runs == 0:
                        wanted -= w.gpus
                        feed(mk.cancel(w.id, actor=w.user, at=at, reason="patience"), t)
                elif kind == FAULT:
                    host, severity = payload  # type: ignore[misc]
                    h = state.cluster_state.hosts.get(host)
                    if h is not None and h.health == OK:
                        if severity is None:  # a random fault: draw how bad it is
                            severity = "failed" if fault_rng.random() < sc.faults.failed_fraction \
                                else "degraded"
                        feed(mk.fault(host, severity, at=at, reason="injected"), t)
                elif kind == REPAIR:
                    feed(mk.repair(payload, at=at), t)  # type: ignore[arg-type]
                elif kind == STOPPED:
                    wid, n = payload  # type: ignore[misc]
                    if (wid, n) in state.stopping:
                        feed(mk.stopped(wid, n, at=at, signal="SIGTERM"), t)
            # One cycle per moment, after everything that happened at it.
            cycles += 1
            feed(mk.tick(at), t)
        if progress is not None:
            progress(horizon, horizon)
        span = max(1, last_t)
        capacity = state.cluster_state.capacity or 1
        return SimResult(
            policy=self.policy,
            log=log,
            wall_seconds=time.perf_counter() - wall0,
            sim_seconds=last_t,
            cycles=cycles,
            workloads=len(self.sources.workloads),
            demand_ratio=wanted_area / (capacity * span),
            lost_gpu_s=lost_gpu_s,
            resubmitted=resubmitted,
            holds=holds,
            debug_in_holds=debug_in_holds,
            clamped=clamped,
            refused_over_cap=refused_over_cap,
            refused_over_cap_gpu_s=refused_over_cap_gpu_s,
            lost_state_gpu_s=dict(sorted(lost_state.items())),
            hooks_completed=hooks_completed,
            hooks_cut=hooks_cut,
        )

    def _schedule_faults(self, push: Callable[[int, int, object], None], horizon: int) -> None:
        for f in self.scenario.faults.scheduled:
            if f.at <= horizon:
                push(f.at, FAULT, (f.host, f.severity))
        rate = self.scenario.faults.host_fault_rate_per_day
        if rate <= 0:
            return
        rng = random.Random(f"{self.scenario.seed}:faults")
        for h in range(self.scenario.cluster.hosts):
            t = 0.0
            while True:
                t += rng.expovariate(rate / 86_400)
                if t > horizon:
                    break
                push(int(t), FAULT, (f"h{h:04d}", None))


def simulate(scenario: Scenario, policy: str, base_dir: Path,
             progress: Callable[[int, int], None] | None = None,
             over_cap: str = "clamp") -> SimResult:
    """Run ``scenario`` under ``policy`` ("allot" or "baseline")."""
    return Simulation(scenario, policy, base_dir, over_cap=over_cap).run(progress)


__all__ = ["OVER_CAP", "PolicyConfigured", "SimResult", "Simulation", "load_sources", "simulate"]
