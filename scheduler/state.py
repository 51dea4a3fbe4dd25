"""The scheduler's state: every projection of one cluster, changed only by folding facts.

A *fact* is a decision of the scheduler or an input that validation accepted.
``State.apply(event)`` folds one fact; ``State.record(event)`` notes that an
event took its place in the journal (position, dedupe) without folding it,
which is what happens to a rejected input. Deciding whether an input is a fact
is not the state's business: the engine validates (``scheduler.validation``),
then records and folds. So live processing and a fold of the journal
(``scheduler.replay``) make the same two calls in the same order and reach the
same state.

Time: ``now`` is the trusted clock. Only ``clock.ticked`` moves it (forward
only); every other event takes effect at ``now``, whatever its ``at`` says.

Bounded by what is live: a workload that ended leaves the state once nothing
can refer to it any more (``lapse_s`` after it ended, by trusted time; see
``State.forget_ended``), so the state, its snapshot and a restart grow with
live work and the recent past, not with history. The journal (and the
archive) keep every workload.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Callable
from typing import Any

import msgspec

from events import (
    ALL_TYPES,
    BudgetEditRejected,
    BudgetNodeDefined,
    BudgetSharesSet,
    ClockTicked,
    Event,
    HostAdded,
    HostDrained,
    HostFaulted,
    HostRemoved,
    HostRepaired,
    InputRejected,
    PolicyConfigured,
    PrincipalKeyRevoked,
    PrincipalKeyRotated,
    PrincipalRegistered,
    WorkloadCancelled,
    WorkloadFinished,
    WorkloadPreempted,
    WorkloadRejected,
    WorkloadReserved,
    WorkloadStarted,
    WorkloadStopped,
    WorkloadSubmitted,
)
from projections import (
    BudgetTree,
    ClusterProjection,
    UsageProjection,
    Workload,
    WorkloadsProjection,
)
from projections.principals import PrincipalRegistry
from projections.workloads import CANCELLED, PENDING, PREEMPTED
from scheduler.memos import Memos
from scheduler.shape import shape_of
from scheduler.time_text import date_text, duration_text
from scheduler.verdict import Ignore, Reject

DEFAULT_POLICY = PolicyConfigured(id="default-policy", at=0, actor="allot", source="allot")


class State:
    """All projections of one cluster, plus the clock, the policy and the dedupe window."""

    def __init__(self, cluster: str = "default") -> None:
        self.cluster = cluster
        self.policy = DEFAULT_POLICY
        self.now = 0
        self.budget = BudgetTree()
        self.usage = UsageProjection(self.policy.window_s, self.policy.bucket_s,
                                     self.policy.fair_share_period_s)
        self.cluster_state = ClusterProjection()
        self.workloads = WorkloadsProjection()
        # Position in the log: how many events were folded, and the last one's id.
        self.position = 0
        # Bumped by every folded event that is not a tick: equal versions mean
        # nothing but time has changed (the engine's idle-cycle memo relies on it).
        self.version = 0
        self.last_id: str | None = None
        # Dedupe: ids seen within the policy's dedupe window (by event time).
        self._seen: set[str] = set()
        self._seen_order: deque[tuple[int, str]] = deque()
        # Hosts held for blocked large workloads: workload -> (hosts, until, since).
        self.reservations: dict[str, tuple[tuple[str, ...], int, int]] = {}
        # Derived values cycles reuse while their inputs are unchanged (victim index,
        # fair-share base, ...; scheduler/memos.py). A cache only: never part of the
        # state's identity.
        self.memos = Memos()
        # Why each workload last left a host (for explain): (reason, by, at).
        self.last_preemption: dict[str, tuple[str, str | None, int]] = {}
        # Preemption takes time (policy.preemption_grace_s > 0): a preempted run's
        # GPUs stay taken until its executor reports ``workload.stopped`` or its
        # grace ends, so nothing is placed on GPUs a dying process still uses.
        # (workload, run) -> (its placement, the grace's end, preempted by).
        self.stopping: dict[tuple[str, int], tuple[tuple[tuple[str, int], ...], int, str | None]] = {}
        # Preemptor -> how many of its victims are still stopping: it waits for
        # them instead of searching for more (scheduler.policy.cycle.place).
        self.stopping_for: dict[str, int] = {}
        # Workload -> the grace it asked for (``grace_s``; only those that did).
        self.grace_asked: dict[str, int] = {}
        # Who may sign inputs, with which keys and roles (read by the edge's authorisation).
        self.principals = PrincipalRegistry()
        self.folds: dict[type, Callable[[Any], None]] = {
            PolicyConfigured: self._policy,
            BudgetNodeDefined: self._node_defined,
            BudgetSharesSet: self._shares_set,
            HostAdded: self._host_added,
            HostRemoved: self._host_removed,
            HostFaulted: self._host_faulted,
            HostRepaired: self._host_repaired,
            HostDrained: self._host_drained,
            WorkloadSubmitted: self._submitted,
            WorkloadCancelled: self._cancelled,
            WorkloadFinished: self._finished,
            WorkloadStarted: self._started,
            WorkloadPreempted: self._preempted,
            WorkloadReserved: self._reserved,
            ClockTicked: self._ticked,
            WorkloadStopped: self._stopped,
            WorkloadRejected: _noop,
            BudgetEditRejected: _noop,
            InputRejected: _noop,
            PrincipalRegistered: self._principal_registered,
            PrincipalKeyRotated: self._key_rotated,
            PrincipalKeyRevoked: self._key_revoked,
        }

    # -- journal position and dedupe ---------------------------------------------------

    def has_seen(self, event_id: str) -> bool:
        """True when ``event_id`` was recorded within the dedupe window."""
        return event_id in self._seen

    def record(self, event: Event) -> None:
        """``event`` took its place in the journal: count it and remember its id.

        Ids are remembered by the trusted time they were seen at (never the
        producer's ``at``), for the policy's ``dedupe_window_s``.
        """
        self.position += 1
        self.last_id = event.id
        self._seen.add(event.id)
        order = self._seen_order
        # A tick is the trusted clock itself: remember it at the time it sets. Stamped with
        # the old now, a fresh state's first tick (now 0) expires at the next record, and a
        # second ticker's copy of that second is taken again.
        t = event.at if type(event) is ClockTicked and event.at > self.now else self.now
        order.append((t, event.id))
        horizon = self.now - self.policy.dedupe_window_s
        while order[0][0] < horizon:
            self._seen.discard(order.popleft()[1])

    def fold(self, event: Event) -> None:
        """Fold a fact already recorded: a decision, or an input validation accepted."""
        kind = type(event)
        self.folds[kind](event)
        if kind is not ClockTicked:
            self.version += 1

    def apply(self, event: Event) -> None:
        """Record and fold a fact (a decision, or an input already found valid)."""
        self.record(event)
        self.fold(event)

    # -- helpers for validation ---------------------------------------------------

    def leaf_has_work(self, leaf: str) -> bool:
        return self.workloads.leaf_has_work(leaf)

    # -- the lapse rule: ended workloads leave the state --------------------------------

    def lapse_s(self) -> int:
        """How long an ended workload stays in the state after it ended (trusted seconds).

        The longer of the two windows that can refer to it: the dedupe window
        (a copy of its submission within it must still be found a duplicate of
        a known workload: validation answers it from ``workloads.all``) and the
        fair-share window (usage itself is kept per leaf by the usage
        projection, not per workload, so this is the horizon people read their
        recent work over: ``allot history``, explain, the state API).
        """
        p = self.policy
        return max(p.dedupe_window_s, p.window_s)

    def forgotten_before(self) -> int:
        """The trusted time before which ended workloads have left the state."""
        return self.now - self.lapse_s()

    def absent_text(self, workload_id: str) -> str:
        """What to tell a reader who asks the live state for a workload it does not hold."""
        return (f"no workload {workload_id!r} in the live state of {self.cluster!r}: never "
                f"submitted here, or it ended before {date_text(max(0, self.forgotten_before()))} "
                f"(an ended workload leaves the live state {duration_text(self.lapse_s())} after "
                f"it ends); the journal and the archive keep its whole history "
                f"(allot explain JOURNAL ID --at DATE, allot audit load ARCHIVE)")

    def forget_ended(self) -> None:
        """Take out the workloads that ended more than ``lapse_s`` ago (by trusted time).

        Pure and driven by the journal alone: it runs when a tick moves ``now``,
        the same live, on replay and in every fold, so every fold of one journal
        forgets the same workloads at the same record. It changes no decision
        within the lapse: the cycle reads only pending and running work, usage
        is per leaf, and validation still finds every workload that ended within
        ``lapse_s``. After it, an input naming the workload is answered as for an
        unknown one (``unknown_workload``), and a submission reusing its id is a
        new workload.
        """
        ended = self.workloads.ended
        horizon = self.now - self.lapse_s()
        if not ended or ended[0][0] >= horizon:
            return
        for w in self.workloads.forget_before(horizon, self.stopping):
            self.last_preemption.pop(w.id, None)
            self.grace_asked.pop(w.id, None)

    # -- per-type folds -------------------------------------------------------------

    def _ticked(self, e: ClockTicked) -> None:
        if e.at > self.now:
            self.now = e.at
            if self.stopping:
                due = [k for k, (_, until, _) in self.stopping.items() if until <= self.now]
                for k in due:
                    self._release(k)
                if due:  # GPUs came back: a cycle at this tick is not idle
                    self.version += 1
            # (No version bump: what leaves cannot change a cycle.)
            self.forget_ended()

    def grace_of(self, workload: str) -> int:
        """Seconds a preempted run of ``workload`` may take to stop: the policy's, or less if it asked."""
        g = self.policy.preemption_grace_s
        asked = self.grace_asked.get(workload)
        return g if asked is None else max(0, min(g, asked))

    def _release(self, key: tuple[str, int]) -> None:
        placement, _, by = self.stopping.pop(key)
        self.cluster_state.unhold(placement)
        if by is not None:
            n = self.stopping_for.get(by, 0) - 1
            if n > 0:
                self.stopping_for[by] = n
            else:
                self.stopping_for.pop(by, None)

    def _stopped(self, e: WorkloadStopped) -> None:
        key = (e.workload, e.run_number)
        if e.host is not None:
            placement, until, by = self.stopping[key]
            rest = tuple((h, g) for h, g in placement if h != e.host)
            if rest:  # other hosts of the gang still stopping: free this one's GPUs only
                self.cluster_state.unhold([(h, g) for h, g in placement if h == e.host])
                self.stopping[key] = (rest, until, by)
                return
        self._release(key)

    def _policy(self, e: PolicyConfigured) -> None:
        self.policy = e
        self.usage.reconfigure(e.window_s, e.bucket_s, e.fair_share_period_s)

    def _node_defined(self, e: BudgetNodeDefined) -> None:
        self.budget.define(e.path, e.managers, e.shares)

    def _shares_set(self, e: BudgetSharesSet) -> None:
        self.budget.set_shares(e.parent, {cs.child: cs.shares for cs in e.shares})

    def _principal_registered(self, e: PrincipalRegistered) -> None:
        self.principals.register(e.principal, e.public_key, e.key_id, tuple(e.roles),
                                 tuple(e.hosts), tuple(e.acts_for))

    def _key_rotated(self, e: PrincipalKeyRotated) -> None:
        self.principals.rotate(e.principal, e.public_key, e.key_id)

    def _key_revoked(self, e: PrincipalKeyRevoked) -> None:
        self.principals.revoke(e.key_id)

    def _host_added(self, e: HostAdded) -> None:
        self.cluster_state.add(e.host, e.gpus, e.rack, e.block)

    def _host_removed(self, e: HostRemoved) -> None:
        self.cluster_state.remove(e.host)

    def _host_faulted(self, e: HostFaulted) -> None:
        self.cluster_state.fault(e.host, e.severity, e.reason, self.now)

    def _host_repaired(self, e: HostRepaired) -> None:
        self.cluster_state.repaired(e.host)

    def _host_drained(self, e: HostDrained) -> None:
        self.cluster_state.drained(e.host)

    def _submitted(self, e: WorkloadSubmitted) -> None:
        shape = shape_of(e)
        assert not isinstance(shape, str)  # validation guarantees a shape
        wl = self.workloads
        wl.submit(Workload(
            id=e.workload, budget=e.budget, user=e.user, gpus=e.gpus, hosts=shape[0],
            gpus_per_host=shape[1], min_runtime_s=e.min_runtime_s, resumable=e.resumable,
            priority=e.priority, kind=e.kind, submitted_at=self.now, seq=wl.seq,
            submit_event=e.id, expected_duration_s=e.expected_duration_s,
            checkpoint_interval_s=e.checkpoint_interval_s, restart_overhead_s=e.restart_overhead_s,
        ))
        if e.grace_s is not None:
            self.grace_asked[e.workload] = e.grace_s

    def _end_run(self, w: Workload, status: str, hold: bool = False) -> None:
        if w.allocated:
            self.usage.change_rate(w.budget, -w.gpus, self.now)
        if hold:
            self.cluster_state.hold(w.id, w.placement)
        else:
            self.cluster_state.release(w.id, w.placement)
        self.workloads.stop(w, status)
        if status != PENDING:
            self.workloads.ended_at(w, self.now)

    def _reserved(self, e: WorkloadReserved) -> None:
        self.reservations[e.workload] = (e.hosts, e.until, self.now)

    def _cancelled(self, e: WorkloadCancelled) -> None:
        w = self.workloads.all[e.workload]
        self.reservations.pop(w.id, None)
        if w.status == PENDING:
            self.workloads.cancel_pending(w)
            self.workloads.ended_at(w, self.now)
        else:
            self._end_run(w, CANCELLED)

    def _finished(self, e: WorkloadFinished) -> None:
        self._end_run(self.workloads.all[e.workload], e.outcome)

    def _started(self, e: WorkloadStarted) -> None:
        w = self.workloads.all[e.workload]
        self.reservations.pop(w.id, None)
        placement = tuple((s.host, s.gpus) for s in e.placement)
        self.workloads.start(w, placement, e.allocated, e.protected_until, self.now)
        self.cluster_state.allocate(w.id, placement)
        if e.allocated:
            self.usage.change_rate(w.budget, w.gpus, self.now)

    def _preempted(self, e: WorkloadPreempted) -> None:
        w = self.workloads.all[e.workload]
        w.preemptions += 1
        self.last_preemption[w.id] = (e.reason, e.by, self.now)
        grace = self.grace_of(w.id) if self.policy.preemption_grace_s else 0
        if grace > 0:
            self.stopping[(w.id, w.runs)] = (w.placement, self.now + grace, e.by)
            if e.by is not None:
                self.stopping_for[e.by] = self.stopping_for.get(e.by, 0) + 1
        self._end_run(w, PENDING if e.requeued else PREEMPTED, hold=grace > 0)

    # -- comparison -------------------------------------------------------------------

    def snapshot(self) -> dict[str, object]:
        """Everything that defines this state, in a canonical comparable form."""
        out: dict[str, object] = {
            "cluster": self.cluster,
            "now": self.now,
            "position": self.position,
            "policy": msgspec.to_builtins(self.policy),
            "budget": self.budget.snapshot(),
            "usage": self.usage.snapshot(),
            "hosts": self.cluster_state.snapshot(),
            "workloads": self.workloads.snapshot(),
            "reservations": sorted(self.reservations.items()),
            "queues": {
                leaf: [w.id for _, w in q]
                for leaf, q in sorted({**self.workloads.pending,
                                       **{f"{k}#free": v for k, v in
                                          self.workloads.pending_free.items()}}.items())
            },
        }
        # When each ended workload still held ended: it decides when it leaves (the lapse rule).
        out["ended"] = [list(x) for x in self.workloads.ended]
        if self.stopping:  # (only then: states of logs without a grace keep their fingerprints)
            out["stopping"] = sorted([k, list(v)] for k, v in self.stopping.items())
        if self.grace_asked:
            out["grace_asked"] = sorted(self.grace_asked.items())
        return out

    def fingerprint(self) -> str:
        """A digest of ``snapshot()``: equal states have equal fingerprints."""
        return hashlib.sha256(msgspec.json.encode(self.snapshot())).hexdigest()


def _noop(event: Event) -> None:
    return None


def _check_fold_table() -> None:
    """Every event type has a fold: fail at import, not at the first event of a new type."""
    missing = [t.__name__ for t in ALL_TYPES if t not in State("check").folds]
    if missing:  # pragma: no cover - a programming error, caught by the first import
        raise TypeError(f"State has no fold for {', '.join(missing)}")


_check_fold_table()

__all__ = ["DEFAULT_POLICY", "Ignore", "Reject", "State"]
