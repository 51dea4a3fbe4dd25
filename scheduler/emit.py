"""Stamping derived events: deterministic ids, the cycle's time, the scheduler as actor.

A derived event's id is ``<cause id>/<n>``: the same input in the same state
always yields the same ids, so a scheduler that crashed mid-cycle and re-runs it
produces events that dedupe against what it had already published, and a replay
can compare decisions by value.
"""

from __future__ import annotations

from events import (
    BudgetEditRejected,
    HostDrained,
    InputRejected,
    Slot,
    WorkloadPreempted,
    WorkloadRejected,
    WorkloadReserved,
    WorkloadStarted,
)

SCHEDULER = "allot.scheduler"


class Emitter:
    """Builds the derived events of one reaction, in order."""

    __slots__ = ("at", "cause", "cluster", "events")

    def __init__(self, cluster: str, at: int, cause: str) -> None:
        self.cluster = cluster
        self.at = at
        self.cause = cause
        self.events: list = []

    def _next_id(self) -> str:
        return f"{self.cause}/{len(self.events)}"

    def started(self, workload: str, placement: list[tuple[str, int]], allocated: bool,
                protected_until: int | None) -> WorkloadStarted:
        e = WorkloadStarted(
            id=self._next_id(), at=self.at, cluster=self.cluster, actor=SCHEDULER,
            source=SCHEDULER, cause=self.cause, workload=workload,
            placement=tuple(Slot(host=h, gpus=g) for h, g in placement),
            allocated=allocated, protected_until=protected_until,
        )
        self.events.append(e)
        return e

    def preempted(self, workload: str, reason: str, by: str | None, requeued: bool) -> None:
        self.events.append(WorkloadPreempted(
            id=self._next_id(), at=self.at, cluster=self.cluster, actor=SCHEDULER,
            source=SCHEDULER, cause=self.cause, workload=workload, reason=reason,  # type: ignore[arg-type]
            by=by, requeued=requeued,
        ))

    def reserved(self, workload: str, hosts: tuple[str, ...], until: int) -> None:
        self.events.append(WorkloadReserved(
            id=self._next_id(), at=self.at, cluster=self.cluster, actor=SCHEDULER,
            source=SCHEDULER, cause=self.cause, workload=workload, hosts=hosts, until=until,
        ))

    def drained(self, host: str) -> None:
        self.events.append(HostDrained(
            id=self._next_id(), at=self.at, cluster=self.cluster, actor=SCHEDULER,
            source=SCHEDULER, cause=self.cause, host=host,
        ))

    def workload_rejected(self, workload: str, reason: str, detail: str) -> None:
        self.events.append(WorkloadRejected(
            id=self._next_id(), at=self.at, cluster=self.cluster, actor=SCHEDULER,
            source=SCHEDULER, cause=self.cause, workload=workload, reason=reason, detail=detail,
        ))

    def budget_rejected(self, reason: str, detail: str) -> None:
        self.events.append(BudgetEditRejected(
            id=self._next_id(), at=self.at, cluster=self.cluster, actor=SCHEDULER,
            source=SCHEDULER, cause=self.cause, reason=reason, detail=detail,
        ))

    def input_rejected(self, reason: str, detail: str) -> None:
        self.events.append(InputRejected(
            id=self._next_id(), at=self.at, cluster=self.cluster, actor=SCHEDULER,
            source=SCHEDULER, cause=self.cause, reason=reason, detail=detail,
        ))
