"""The what-if driver: a recorded period played again through the same core under another policy.

The journal up to the period's start ``t1`` is folded as it was recorded (its
decisions as facts, ``scheduler.replay.JournalFold``): the state at ``t1`` is
the recorded one, running work and usage history included. The change (policy
knobs, budget shares) is then applied as inputs at ``t1``, and from there every
recorded input of the period is fed to the engine in journal order, with its
own id, while the engine decides afresh. What depended on the schedule is
re-derived instead of copied:

- **finishes**: a workload finishes when it has run the time it needs
  (``whatif.recording``; the simulator's checkpoint model across preemptions).
  When that is the very moment the journal recorded its finish, the recorded
  finish is fed at its recorded place in the journal; otherwise a finish is
  injected at its time (with a clock tick to that time before it and a cycle
  after it, as the simulator does);
- **protection ends and requeues**: cycles at the moments the simulator would
  run one (a protection ending, a second after a requeue), when the journal has
  no cycle at that time already;
- **people**: a cancel of a workload that had never started (a user giving up)
  is dropped when the workload has started under the change; a resubmission of
  a preempted workload is dropped when that workload was not preempted.
- **contracts over a lower cap**: a submission the recorded cap accepted but
  the new ``min_runtime_cap_s`` would refuse is, by default, fed with its
  minimum runtime clamped to the cap (as its owner would resubmit it); with
  ``over_cap="reject"`` it is fed as it was and refused. Both are counted.

With nothing changed every recorded input is fed as recorded, and the
decisions are the recorded ones, bit for bit (tests/test_whatif_reproduce.py).
Pure: no I/O, no wall clock (the caller times it).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from events import (
    DECISION_TYPES,
    ChildShare,
    ClockTicked,
    Event,
    HostDrained,
    PolicyConfigured,
    WorkloadCancelled,
    WorkloadFinished,
    WorkloadPreempted,
    WorkloadStarted,
    WorkloadSubmitted,
)
from events.budget import BudgetSharesSet
from events.errors import AllotError
from projections.workloads import PENDING, PREEMPTED
from scheduler import Engine
from scheduler.admission import InputRefused
from scheduler.replay import JournalFold
from whatif.recording import Recording, saved_work

OVER_CAP = ("clamp", "reject")
# A workload whose run time the journal does not tell (never finished, no
# expected duration) is assumed to need this long.
DEFAULT_ASSUMED_RUNTIME_S = 4 * 3600
FINISH, TICK = 0, 1


class WhatIfError(AllotError, ValueError):
    """A what-if that cannot be run as asked (an unknown knob, a period outside the journal, ...)."""


class Change(msgspec.Struct, frozen=True, kw_only=True):
    """What a what-if changes: policy knobs, budget shares, and what over-cap contracts do."""

    knobs: dict[str, Any] = {}
    shares: dict[str, int] = {}       # budget node path -> new shares under its parent
    over_cap: str = "clamp"
    assumed_runtime_s: int = DEFAULT_ASSUMED_RUNTIME_S

    @property
    def empty(self) -> bool:
        return not self.knobs and not self.shares


class Rerun(msgspec.Struct, kw_only=True):
    """A period played again: both journals (the same cut), and what the replay had to decide."""

    log: list[Event]          # the recorded prefix, the change, and the re-derived period
    recorded: list[Event]     # the recorded journal up to the same end
    cluster: str
    t1: int
    t2: int
    period_start: int         # index in both logs where the period begins
    inputs: int = 0           # recorded inputs of the period fed to the engine
    clamped: int = 0          # submissions fed with min_runtime_s clamped to the new cap
    refused_over_cap: int = 0  # submissions over the new cap fed as they were (and refused)
    refused_over_cap_gpu_s: int = 0
    assumed_runtime: int = 0  # workloads started whose run time is an assumption
    injected_finishes: int = 0  # finishes at times the journal did not record
    dropped_cancels: int = 0  # users' give-ups dropped: the workload had started
    dropped_resubmissions: int = 0  # resubmissions dropped: the first was not preempted
    preempted_not_resubmitted: int = 0  # non-resumable work ended by preemption, no resubmission


def _shares_event(engine: Engine, path: str, shares: int, at: int, n: int) -> BudgetSharesSet:
    tree = engine.state.budget
    if path not in tree:
        raise WhatIfError(f"--shares {path}={shares}: no budget node {path!r} at the period's start")
    parent = tree.nodes[path].parent
    if parent is None:
        raise WhatIfError(f"--shares {path}={shares}: the root has no shares to change")
    # The edit is the parent's manager's (or an ancestor's): whoever may make it.
    actor = next((m for p in _up(parent) for m in tree.nodes[p].managers), None)
    if actor is None:
        raise WhatIfError(f"--shares {path}={shares}: nobody manages {parent!r}")
    return BudgetSharesSet(id=f"whatif-shares-{n}", at=at, cluster=engine.state.cluster,
                           actor=actor, source="whatif", parent=parent,
                           shares=(ChildShare(child=path.rsplit("/", 1)[-1], shares=shares),))


def _up(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(len(parts), 0, -1)]


def rerun(events: Sequence[Event], t1: int, t2: int, change: Change, *,
          cluster: str | None = None,
          progress: Callable[[int, int], None] | None = None) -> Rerun:
    """Re-simulate ``events``' period [t1, t2] (trusted Unix seconds) under ``change``."""
    if change.over_cap not in OVER_CAP:
        raise WhatIfError(f"over_cap must be one of {OVER_CAP}, got {change.over_cap!r}")
    if not events:
        raise WhatIfError("the journal is empty")
    cluster = cluster or events[0].cluster
    rec = Recording.read(events, cluster)
    if t2 < t1:
        raise WhatIfError(f"the period ends ({t2}) before it starts ({t1})")
    # The prefix: everything before the first tick past t1, folded as recorded.
    engine = Engine(cluster)
    fold = JournalFold(engine)
    log: list[Event] = []
    n = len(events)
    i = 0
    while i < n:
        e = events[i]
        if e.cluster == cluster:
            if type(e) is ClockTicked and e.at > t1:
                break
            fold.add(e)
            log.append(e)
        i += 1
    fold.finish()
    if i == n:
        raise WhatIfError(f"the journal ends ({rec.end_time}) before the period starts ({t1})")
    period_start = len(log)
    state = engine.state
    process = engine.process
    out = Rerun(log=log, recorded=[], cluster=cluster, t1=t1, t2=t2, period_start=period_start)

    # The executor's model, carried over from the recorded prefix.
    remaining: dict[str, int] = {}
    run_start: dict[str, int] = {}
    run_no: dict[str, int] = {}
    pinned: dict[str, int] = {}   # workload -> run number whose recorded finish is due
    heap: list[tuple[int, int, int, str, int]] = []
    seq = 0

    def need(w: str) -> int:
        if w not in remaining:
            s, assumed = rec.work_needed(w, change.assumed_runtime_s)
            remaining[w] = s
            out.assumed_runtime += assumed
        return remaining[w]

    def push(t: int, kind: int, w: str = "", run: int = 0) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(heap, (t, kind, seq, w, run))

    def started(w: str, t: int, idx: int) -> None:
        run_start[w] = t
        run_no[w] = run_no.get(w, 0) + 1
        end = t + need(w)
        slot = rec.finish_slot.get(w)
        if slot is not None and slot[0] == end and slot[1] >= idx:
            pinned[w] = run_no[w]  # the recorded finish, at its recorded place
        else:
            push(end, FINISH, w, run_no[w])

    def preempted(w: str, t: int, requeued: bool) -> None:
        pinned.pop(w, None)
        if requeued:
            sub = rec.submissions[w]
            kept = saved_work(t - run_start[w], sub.checkpoint_interval_s)
            remaining[w] = max(1, need(w) - kept + sub.restart_overhead_s)

    # Replay the prefix's runs through the same model (no pushes for ended runs).
    for idx in range(period_start):
        e = log[idx]
        k = type(e)
        if k is WorkloadStarted:
            run_start[e.workload] = e.at
            run_no[e.workload] = run_no.get(e.workload, 0) + 1
            need(e.workload)
        elif k is WorkloadPreempted:
            preempted(e.workload, e.at, e.requeued)
    out.assumed_runtime = 0  # count the period's assumptions only
    for w in list(state.workloads.running):
        end = run_start[w] + remaining[w]
        slot = rec.finish_slot.get(w)
        if slot is not None and slot[0] == end and slot[1] >= i:
            pinned[w] = run_no[w]
        else:
            push(max(end, state.now), FINISH, w, run_no[w])

    made = 0

    def new_id() -> str:
        nonlocal made
        made += 1
        return f"whatif-{made}"

    def handle(derived: list[Event], idx: int) -> None:
        for d in derived:
            k = type(d)
            if k is WorkloadStarted:
                started(d.workload, state.now, idx)
                pu = d.protected_until
                if pu is not None and pu > state.now and pu not in rec.cycle_ticks:
                    push(pu, TICK)
            elif k is WorkloadPreempted:
                preempted(d.workload, state.now, d.requeued)
                if d.requeued:
                    if state.now + 1 not in rec.cycle_ticks:
                        push(state.now + 1, TICK)
                else:
                    out.preempted_not_resubmitted += 1
            elif k is HostDrained:
                pass  # repairs are the recorded host monitors' inputs

    def feed(e: Event, idx: int) -> None:
        try:
            derived = process(e)
        except InputRefused:
            return  # the recorded journal never held it either
        if derived is None:
            return
        log.append(e)
        if derived:
            log.extend(derived)
            handle(derived, idx)

    def tick(t: int, cycle: bool, idx: int) -> None:
        feed(ClockTicked(id=new_id(), at=t, cluster=cluster, actor="whatif", source="whatif",
                         cycle=cycle), idx)

    def inject_before(limit: int, idx: int) -> None:
        """Everything the change re-derived that happens before trusted time ``limit``."""
        while heap and heap[0][0] < limit:
            t = heap[0][0]
            due: list[tuple[int, str, int]] = []
            while heap and heap[0][0] == t:
                _, kind, _, w, run = heapq.heappop(heap)
                due.append((kind, w, run))
            live = [(k, w, r) for k, w, r in due
                    if k == TICK or (run_no.get(w) == r and w in state.workloads.running)]
            if not live:
                continue
            if t > state.now:
                tick(t, False, idx)
            for k, w, _ in live:
                if k == FINISH:
                    out.injected_finishes += 1
                    feed(WorkloadFinished(id=new_id(), at=t, cluster=cluster, actor="executor",
                                          source="whatif", workload=w,
                                          outcome=rec.outcome.get(w, "succeeded")), idx)  # type: ignore[arg-type]
            tick(t, True, idx)

    def apply(e: Event, what: str) -> None:
        """Feed one input of the change; a refusal is the user's error, said in one line."""
        before = len(log)
        feed(e, i)
        refused = [d for d in log[before + 1:] if getattr(d, "reason", None) is not None
                   and type(d).__struct_config__.tag in ("input.rejected", "budget.edit_rejected")]
        if refused or len(log) == before:
            why = f"{refused[0].reason}: {getattr(refused[0], 'detail', '')}" if refused else "ignored"
            raise WhatIfError(f"{what}: the scheduler refused the change ({why})")

    # The change, at the period's start, made by a manager of the budget root (the
    # only role that may configure the policy).
    now = state.now
    root = state.budget.root
    admin = state.budget.nodes[root].managers[0] if root and state.budget.nodes[root].managers \
        else "admin"
    unknown = set(change.knobs) - set(PolicyConfigured.__struct_fields__) | (
        set(change.knobs) & {"id", "at", "cluster", "actor", "source", "cause", "v"})
    if unknown:
        raise WhatIfError(f"--set: unknown policy knob(s) {sorted(unknown)}")
    if change.knobs:
        base = {k: v for k, v in msgspec.to_builtins(state.policy).items()
                if k not in ("id", "at", "cluster", "actor", "source", "cause", "v", "type")}
        try:
            policy = msgspec.convert({**base, **change.knobs, "id": "whatif-policy", "at": now,
                                      "cluster": cluster, "actor": admin, "source": "whatif"},
                                     PolicyConfigured)
        except msgspec.ValidationError as exc:
            raise WhatIfError(f"--set: {exc}") from exc
        apply(policy, "--set " + " ".join(f"{k}={v}" for k, v in change.knobs.items()))
    for j, (path, shares) in enumerate(sorted(change.shares.items())):
        apply(_shares_event(engine, path, shares, now, j + 1), f"--shares {path}={shares}")

    new_cap = state.policy.min_runtime_cap_s
    report_every = max(1, (t2 - t1) // 200)
    next_report = t1
    stop = n  # where the period ends in the journal: the first tick past t2
    while i < n:
        e = events[i]
        idx = i
        i += 1
        k = type(e)
        if e.cluster != cluster or k in DECISION_TYPES:
            continue
        if k is ClockTicked:
            if e.at > t2:
                stop = idx
                break
            if e.at > state.now:
                inject_before(e.at, idx)
            if progress is not None and e.at >= next_report:
                progress(e.at - t1, t2 - t1)
                next_report = e.at + report_every
        out.inputs += 1
        if k is WorkloadFinished:
            w = e.workload
            if pinned.get(w) == run_no.get(w) and w in state.workloads.running:
                del pinned[w]
                feed(e, idx)
            continue
        if k is WorkloadCancelled and idx in rec.patience_cancels:
            w0 = state.workloads.all.get(e.workload)
            if w0 is not None and (w0.runs > 0 or w0.status != PENDING):
                out.dropped_cancels += 1
                continue
        elif k is WorkloadSubmitted:
            if e.resubmit_of is not None:
                first = state.workloads.all.get(e.resubmit_of)
                if first is not None and first.status != PREEMPTED:
                    out.dropped_resubmissions += 1
                    continue
            if new_cap < e.min_runtime_s <= rec.cap_at.get(idx, new_cap):
                if change.over_cap == "clamp":
                    e = msgspec.structs.replace(e, min_runtime_s=new_cap)
                    out.clamped += 1
                else:
                    out.refused_over_cap += 1
                    out.refused_over_cap_gpu_s += e.gpus * rec.work_needed(
                        e.workload, change.assumed_runtime_s)[0]
        elif k is PolicyConfigured and change.knobs:
            e = msgspec.structs.replace(e, **change.knobs)
            new_cap = e.min_runtime_cap_s
        feed(e, idx)
        if k is PolicyConfigured and not change.knobs:
            new_cap = state.policy.min_runtime_cap_s
    inject_before(t2 + 1, n)
    if state.now < t2:
        tick(t2, True, n)
    # The recorded side: the same journal, cut at the same place.
    out.recorded = [e for e in events[:stop] if e.cluster == cluster]
    if progress is not None:
        progress(t2 - t1, t2 - t1)
    return out


__all__ = ["DEFAULT_ASSUMED_RUNTIME_S", "OVER_CAP", "Change", "Rerun", "WhatIfError", "rerun"]
