"""What one host should be running, folded from its cluster's journal (pure: no I/O, no clock).

``HostBook`` reads the journal in order (fenced, copies dropped) and keeps:

- the run spec of every accepted workload (``workload.submitted``);
- how many times each workload started (its run number, counted over every
  host, as the scheduler counts ``Workload.runs``);
- ``active``: the share of each workload's current run placed on this host
  (``workload.started``), with its rank in the placement;
- ``stops``: shares the journal ended, and why: ``preempted`` (with the grace
  the scheduler gives it and whether it waits for ``workload.stopped``),
  ``finished`` (a report, maybe a gang peer's) or ``cancelled``.

An input takes effect only when no rejection answers it: ``workload.finished``
and ``workload.cancelled`` are applied when the cluster's next input shows
their group is complete (as ``streams.executor.ExecutorBook`` does).
"""

from __future__ import annotations

import msgspec

from events import (
    ClockTicked,
    Event,
    HostAdded,
    InputRejected,
    PolicyConfigured,
    WorkloadCancelled,
    WorkloadFinished,
    WorkloadPreempted,
    WorkloadRejected,
    WorkloadStarted,
    WorkloadSubmitted,
)


class Share(msgspec.Struct, frozen=True, kw_only=True):
    """This host's part of one run: ``gpus`` GPUs, rank ``rank`` of the placement's hosts."""

    workload: str
    run: int
    rank: int
    hosts: tuple[str, ...]
    gpus: int
    started_at: int


class StopOrder(msgspec.Struct, frozen=True, kw_only=True):
    """Why the journal ended a share, and how long its processes may take to stop."""

    reason: str            # preempted | finished | cancelled
    grace_s: int           # between SIGTERM and SIGKILL
    report_stopped: bool   # the scheduler holds the GPUs until workload.stopped (or the grace)


class HostBook:
    """One host's runs on one cluster, as the journal says."""

    def __init__(self, cluster: str, host: str) -> None:
        self.cluster = cluster
        self.host = host
        self.now = 0
        self.policy_grace_s = 0
        self.host_gpus: int | None = None   # this host's GPUs as the cluster knows them
        self.specs: dict[str, WorkloadSubmitted] = {}
        self.runs: dict[str, int] = {}
        self.active: dict[str, Share] = {}
        self.stops: dict[tuple[str, int], StopOrder] = {}
        self._open: Event | None = None

    def grace_of(self, workload: str) -> int:
        """The scheduler's grace for a preempted run of ``workload`` (State.grace_of)."""
        spec = self.specs.get(workload)
        asked = None if spec is None else spec.grace_s
        g = self.policy_grace_s
        return g if asked is None else max(0, min(g, asked))

    def add(self, e: Event) -> None:
        """The next journal event (of any cluster: others are skipped)."""
        if e.cluster != self.cluster:
            return
        if e.cause is None:
            self.close_group()
            self._open = e
            if type(e) is ClockTicked:
                self.now = max(self.now, e.at)
            elif type(e) is WorkloadSubmitted:
                self.specs.setdefault(e.workload, e)
            elif type(e) is HostAdded and e.host == self.host:
                self.host_gpus = e.gpus
            return
        if type(e) in (InputRejected, WorkloadRejected) and self._open is not None \
                and e.cause == self._open.id:
            o, self._open = self._open, None
            if type(o) is WorkloadSubmitted and self.specs.get(o.workload) is o:
                del self.specs[o.workload]  # a rejected submission runs nothing
            return
        if type(e) is WorkloadStarted:
            n = self.runs.get(e.workload, 0) + 1
            self.runs[e.workload] = n
            hosts = tuple(s.host for s in e.placement)
            for rank, slot in enumerate(e.placement):
                if slot.host == self.host:
                    self.active[e.workload] = Share(workload=e.workload, run=n, rank=rank,
                                                    hosts=hosts, gpus=slot.gpus, started_at=e.at)
                    break
        elif type(e) is WorkloadPreempted:
            share = self.active.pop(e.workload, None)
            if share is not None:
                g = self.grace_of(e.workload)
                self.stops[(e.workload, share.run)] = StopOrder(reason="preempted", grace_s=g,
                                                                report_stopped=g > 0)

    def close_group(self) -> None:
        """The open input took effect (nothing rejected it): apply it."""
        e, self._open = self._open, None
        if type(e) is PolicyConfigured:
            self.policy_grace_s = e.preemption_grace_s
        elif type(e) in (WorkloadFinished, WorkloadCancelled):
            run = getattr(e, "run_number", None)
            share = self.active.get(e.workload)  # type: ignore[union-attr]
            if share is not None and (run is None or run == share.run):
                del self.active[share.workload]
                reason = "finished" if type(e) is WorkloadFinished else "cancelled"
                self.stops[(share.workload, share.run)] = StopOrder(
                    reason=reason, grace_s=self.grace_of(share.workload), report_stopped=False)


__all__ = ["HostBook", "Share", "StopOrder"]
