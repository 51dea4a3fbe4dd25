"""Workload events: the scheduling contract and its lifecycle.

A workload is submitted to a budget leaf with a contract: GPUs and shape, a
minimum runtime (protected and charged for that long; 0 means unallocated: free,
never protected) and whether it can resume after preemption. The scheduler
answers with ``workload.started``, ``workload.preempted`` or
``workload.rejected``; the executor reports ``workload.finished`` (and ``workload.stopped``
when a preempted run's GPUs are free); the owner may publish
``workload.cancelled``.
"""

from __future__ import annotations

from typing import Literal

from events.base import Event, Slot
from events.limits import Array, Duration, Int64, PathText, Text


class WorkloadKind:
    """Known workload kinds (an open set: unknown kinds are accepted as-is)."""

    TRAINING = "training"
    DEBUG = "debug"
    INTERACTIVE = "interactive"
    EVAL = "eval"
    BATCH = "batch"


class WorkloadSubmitted(Event, frozen=True, kw_only=True, tag="workload.submitted"):
    """A workload asks for GPUs under a budget leaf.

    Shape: ``hosts`` x ``gpus_per_host`` = ``gpus``. A single-host workload may
    omit ``gpus_per_host``; a gang must give a shape that divides evenly.
    ``expected_duration_s`` is for simulation only; the scheduler never reads it.
    """

    workload: Text
    budget: Text
    user: Text
    gpus: Int64
    hosts: Int64 = 1
    gpus_per_host: Int64 | None = None
    min_runtime_s: Int64
    resumable: bool = False
    priority: Int64 = 0
    kind: Text = WorkloadKind.TRAINING
    expected_duration_s: Int64 | None = None
    # The cost of preempting it (optional; read by the victim cost and the audit).
    # A resumable workload checkpoints every ``checkpoint_interval_s`` seconds of
    # run time counted from each start (None: continuously), and a resumed run
    # spends ``restart_overhead_s`` before it makes progress again. So a
    # preemption after ``ran`` seconds loses ``ran % checkpoint_interval_s +
    # restart_overhead_s`` seconds of work if resumable, all ``ran`` if not.
    # Wire bounds as every duration (events.limits); the validator rejects a
    # non-positive interval or a negative overhead with ``bad_preemption_cost``.
    checkpoint_interval_s: Duration | None = None
    restart_overhead_s: Duration = 0
    # Set on a resubmission: the workload this one re-runs after that one was
    # preempted without being resumable (so the audit can link the two).
    resubmit_of: Text | None = None
    # What to run, for a real executor (``allot executor local``; docs/executor.md).
    # The scheduler never reads these; a simulated workload needs none of them.
    # ``command``: the argv, run without a shell, once per host of the placement
    # (a gang's peers find each other through MASTER_ADDR/RANK/WORLD_SIZE).
    # ``workdir``: its working directory (default: the executor's). ``env``:
    # ``NAME=value`` entries added to its environment. ``log_path``: the file
    # its output goes to, ``{workload}``, ``{run}``, ``{rank}`` and ``{host}`` replaced
    # (default: one file per workload and run under the executor's log
    # directory). ``time_limit_s``: wall-clock limit of one run (Slurm's
    # ``--time``): the executor stops a run that exceeds it and reports it
    # failed with reason ``time_limit``. ``grace_s``: how long it needs to stop
    # after SIGTERM, if less than the policy's ``preemption_grace_s`` (more is
    # never granted): a command checkpoints by trapping SIGTERM.
    command: Array[Text] | None = None
    workdir: PathText | None = None
    env: Array[Text] | None = None
    log_path: PathText | None = None
    time_limit_s: Duration | None = None
    grace_s: Duration | None = None


class WorkloadCancelled(Event, frozen=True, kw_only=True, tag="workload.cancelled"):
    """The owner (or a manager of its budget) withdraws a pending or running workload."""

    workload: Text
    reason: Text = ""


class WorkloadRejected(Event, frozen=True, kw_only=True, tag="workload.rejected"):
    """A submission (``cause``) was refused, and why."""

    workload: Text
    reason: Text
    detail: Text = ""


class WorkloadStarted(Event, frozen=True, kw_only=True, tag="workload.started"):
    """The scheduler placed a workload.

    ``allocated``: charged to its budget and protected until ``protected_until``.
    ``protected_until`` is ``null`` only under the baseline policy, for jobs that
    opted out of preemption (protected until they end).
    """

    workload: Text
    placement: Array[Slot]
    allocated: bool
    protected_until: Int64 | None


class WorkloadReserved(Event, frozen=True, kw_only=True, tag="workload.reserved"):
    """Hosts are held for a blocked large workload until its victims' protection ends.

    Until ``until``, other work may start on ``hosts`` only if its protection
    ends by then (backfill); from ``until`` the holder takes the hosts back,
    preempting any backfill there (reason ``reservation``), so it cannot starve.
    A later reservation for the same workload replaces this one.
    """

    workload: Text
    hosts: Array[Text]
    until: Int64


PreemptionReason = Literal[
    "fair_share",           # a better-ranked allocation needed the GPUs
    "reclaim",              # an allocation within its guaranteed share took back borrowed GPUs
    "reclaim_unallocated",  # allocated work reclaimed GPUs lent to unallocated work
    "priority",             # same allocation, higher priority (or the baseline's priority)
    "host_drain",           # the host is degraded and the protection ended
    "host_failure",         # the host failed: protection does not apply
    "reservation",          # a reservation's holder took back its hosts from backfill
]


class WorkloadPreempted(Event, frozen=True, kw_only=True, tag="workload.preempted"):
    """A running workload was stopped by the scheduler.

    ``by``: the preempting workload's id, or the host for drains and failures.
    ``requeued``: resumable workloads go back to the queue; others end here.
    """

    workload: Text
    reason: PreemptionReason
    by: Text | None = None
    requeued: bool


class WorkloadFinished(Event, frozen=True, kw_only=True, tag="workload.finished"):
    """The executor reports that a running workload ended by itself."""

    workload: Text
    outcome: Literal["succeeded", "failed"] = "succeeded"
    # What a real executor saw (informative; the scheduler reads only ``outcome``):
    # the exit code, or the signal that ended it (``SIGKILL``...), and why it
    # ended when not by itself (``time_limit``, ``cannot_start``, ``lost``).
    exit_code: Int64 | None = None
    signal: Text | None = None
    reason: Text | None = None
    # Which run ended (1 = the first start): a report of an earlier run, late
    # after that run was preempted and the workload started again, is answered
    # ``not_running`` instead of ending the new run. None: the current run.
    run_number: Int64 | None = None


class WorkloadStopped(Event, frozen=True, kw_only=True, tag="workload.stopped"):
    """The executor reports that a preempted run's processes are gone: its GPUs are free.

    After ``workload.preempted`` the victim's GPUs stay held (nothing else is
    placed on them) until this report for its ``run_number`` (1 = the first start) or
    until the policy's grace (``preemption_grace_s``, or less if the workload
    asked for less) has passed, whichever comes first. A report for a run that
    holds nothing (late, repeated, or past the grace) is ignored.
    """

    workload: Text
    run_number: Int64
    exit_code: Int64 | None = None
    signal: Text | None = None
    # The host whose share of the run stopped (a gang runs one process group per
    # host, each stopped by its own executor): only that host's GPUs are freed.
    # None: the whole run stopped.
    host: Text | None = None


class RejectReason:
    """Stable reason codes for ``workload.rejected``."""

    MIN_RUNTIME_OVER_CAP = "min_runtime_over_cap"
    NEGATIVE_MIN_RUNTIME = "negative_min_runtime"
    BAD_PREEMPTION_COST = "bad_preemption_cost"
    MALFORMED_SHAPE = "malformed_shape"
    TOO_LARGE = "too_large"
    UNKNOWN_BUDGET = "unknown_budget"
    NOT_A_LEAF = "not_a_leaf"
    DUPLICATE_WORKLOAD = "duplicate_workload"
    FUTURE_TIME = "future_time"
    BAD_RUN_SPEC = "bad_run_spec"
