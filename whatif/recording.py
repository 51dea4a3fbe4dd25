"""What a recorded journal says about the world around the scheduler: each workload's runs.

A what-if keeps the world and changes the policy, so it must know what the
recorded decisions do not decide: how much run time each workload needs, how
it ends, and which inputs were people reacting to the schedule (a user giving
up on a workload that never started, an owner resubmitting a preempted one).
``Recording`` reads that from one cluster's journal in one pass, with the
executor model of the simulator (``simulator.driver``): a resumable victim keeps
its work up to its last checkpoint and pays ``restart_overhead_s`` on the next
run, so the work a workload needs is its last run plus what its earlier runs
saved. A workload the journal never saw finish needs its
``expected_duration_s`` (or an assumed run time), at least what it was seen
running.

Times here are *effective* times: an input takes effect at the trusted clock
(the last tick before it), whatever its ``at`` says.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from events import (
    ClockTicked,
    Event,
    PolicyConfigured,
    WorkloadCancelled,
    WorkloadFinished,
    WorkloadPreempted,
    WorkloadStarted,
    WorkloadSubmitted,
)

FINISHED, REQUEUED, ENDED, CANCELLED = "finished", "requeued", "ended", "cancelled"


@dataclass(slots=True)
class Run:
    """One recorded run: start and stop (effective times) and how it stopped (None: still running)."""

    start: int
    stop: int | None = None
    how: str | None = None


def saved_work(ran: int, checkpoint_interval_s: int | None) -> int:
    """Run time a preempted resumable run keeps: up to its last checkpoint (all of it if continuous)."""
    return ran - ran % checkpoint_interval_s if checkpoint_interval_s else ran


@dataclass(slots=True)
class Recording:
    """Per workload: its submission, its runs, and the slot of its recorded finish."""

    submissions: dict[str, WorkloadSubmitted] = field(default_factory=dict)
    runs: dict[str, list[Run]] = field(default_factory=dict)
    # workload -> (effective time, index in the journal) of the finish that ended its last run
    finish_slot: dict[str, tuple[int, int]] = field(default_factory=dict)
    outcome: dict[str, str] = field(default_factory=dict)
    # Journal indexes of cancels of a workload that had never started: a user giving up.
    patience_cancels: set[int] = field(default_factory=set)
    # Trusted times at which the journal ran a cycle (a tick with cycle=true).
    cycle_ticks: set[int] = field(default_factory=set)
    # The policy's cap in force at each submission (by journal index).
    cap_at: dict[int, int] = field(default_factory=dict)
    start_time: int = 0
    end_time: int = 0

    @classmethod
    def read(cls, events: Sequence[Event], cluster: str) -> Recording:
        rec = cls()
        now = 0
        cap = PolicyConfigured(id="default", at=0).min_runtime_cap_s
        first = True
        runs = rec.runs
        for i, e in enumerate(events):
            if e.cluster != cluster:
                continue
            kind = type(e)
            if kind is ClockTicked:
                if first:
                    rec.start_time = e.at
                    first = False
                if e.at > now:
                    now = e.at
                if e.cycle:
                    rec.cycle_ticks.add(e.at)
            elif kind is PolicyConfigured:
                cap = e.min_runtime_cap_s
            elif kind is WorkloadSubmitted:
                rec.submissions.setdefault(e.workload, e)
                rec.cap_at[i] = cap
            elif kind is WorkloadStarted:
                runs.setdefault(e.workload, []).append(Run(now))
            elif kind is WorkloadPreempted:
                r = _open_run(runs, e.workload)
                if r is not None:
                    r.stop, r.how = now, (REQUEUED if e.requeued else ENDED)
            elif kind is WorkloadFinished:
                r = _open_run(runs, e.workload)
                if r is not None:  # a finish of a workload not running was rejected live
                    r.stop, r.how = now, FINISHED
                    rec.finish_slot[e.workload] = (now, i)
                    rec.outcome[e.workload] = e.outcome
            elif kind is WorkloadCancelled:
                r = _open_run(runs, e.workload)
                if r is not None:
                    r.stop, r.how = now, CANCELLED
                elif not runs.get(e.workload):
                    rec.patience_cancels.add(i)
        rec.end_time = now
        return rec

    def work_needed(self, workload: str, assumed_s: int) -> tuple[int, bool]:
        """Run time ``workload`` needs in all, and whether that is an assumption.

        Known when the journal saw it finish: its last run plus what the earlier
        runs saved (less the restart overhead each resumed run paid). Otherwise
        its ``expected_duration_s``, else ``assumed_s``, and never less than what
        the journal saw it run.
        """
        sub = self.submissions[workload]
        every, overhead = sub.checkpoint_interval_s, sub.restart_overhead_s
        banked = 0
        runs = self.runs.get(workload, [])
        for r in runs:
            if r.how == REQUEUED and r.stop is not None:
                banked += saved_work(r.stop - r.start, every) - overhead
        last = runs[-1] if runs else None
        if last is not None and last.how == FINISHED and last.stop is not None:
            return max(1, banked + last.stop - last.start), False
        seen = banked + ((last.stop if last.stop is not None else self.end_time) - last.start
                         if last is not None and last.how != REQUEUED else 0)
        if sub.expected_duration_s is not None and sub.expected_duration_s > 0:
            return max(1, sub.expected_duration_s, seen), False
        return max(1, assumed_s, seen), True


def _open_run(runs: dict[str, list[Run]], workload: str) -> Run | None:
    rs = runs.get(workload)
    if rs and rs[-1].stop is None:
        return rs[-1]
    return None


__all__ = ["CANCELLED", "ENDED", "FINISHED", "REQUEUED", "Recording", "Run", "saved_work"]
