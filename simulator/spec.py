"""What a workload source hands the simulator: a workload, when it arrives, how long it runs.

A source (explicit list, seeded generator, trace loader) yields ``WorkloadSpec``
values; the simulator turns each into a ``workload.submitted`` event at
``submit_at`` and, once started, a ``workload.finished`` event after
``duration_s`` of accumulated run time. ``duration_s`` is ground truth known
only to the simulated executor; the scheduler never sees it.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from events.limits import INT64_MAX, Int64, Shares, Text


class WorkloadSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One simulated workload."""

    workload: Text         # unique id
    submit_at: Int64       # seconds since the scenario start (t=0)
    budget: Text           # budget leaf path
    user: Text
    gpus: Int64
    hosts: Int64 = 1
    min_runtime_s: Int64 = 0
    resumable: bool = False
    priority: Int64 = 0    # allot: order inside the leaf; baseline: LOW(-1)/NORMAL(0)/HIGH(1)
    kind: Text = "training"
    duration_s: Int64      # total run time it needs to finish
    outcome: Literal["succeeded", "failed"] = "succeeded"  # how it ends when it runs to completion
    # The simulated user cancels the workload if it has not started this long
    # after submission (None: waits forever). Open-loop demand needs this, or a
    # queue that is always 2-3x oversubscribed grows without bound.
    patience_s: Int64 | None = None
    # The cost of a preemption (the simulated executor's model; sent on the
    # submission so the victim cost and the audit can read it). A resumable
    # workload checkpoints every ``checkpoint_interval_s`` of run time counted
    # from each start (None: continuously) and a resumed run first spends
    # ``restart_overhead_s``; a preempted one that cannot resume is resubmitted
    # by its owner up to ``resubmits`` times (each a new id ``<first id>-r<n>``,
    # ``resubmit_of`` naming the one it re-runs), from scratch.
    checkpoint_interval_s: Annotated[int, msgspec.Meta(ge=1, le=INT64_MAX)] | None = None
    restart_overhead_s: Annotated[int, msgspec.Meta(ge=0, le=INT64_MAX)] = 0
    resubmits: Annotated[int, msgspec.Meta(ge=0, le=1000)] = 0
    resubmit_of: Text | None = None
    # What a real executor would enforce and report, modelled: ``time_limit_s``
    # ends a run that lasts longer, ``failed`` (reason ``time_limit``), like
    # Slurm's --time; ``stop_s`` is how long a preempted run takes to stop after
    # SIGTERM. Under the policy's ``preemption_grace_s`` the simulated executor
    # reports ``workload.stopped`` that long after the preemption (at least 1 s;
    # never, when the grace ends first), and until then its GPUs stay held.
    time_limit_s: Annotated[int, msgspec.Meta(ge=1, le=INT64_MAX)] | None = None
    stop_s: Annotated[int, msgspec.Meta(ge=0, le=INT64_MAX)] = 0
    # A session that can be restored (issue 26): it declares a checkpoint hook
    # that takes this long, run by the executor when it is preempted, before
    # SIGTERM (docs/executor.md). If the hook completes within the grace
    # (``hook_budget_s``), the run loses nothing of its state; otherwise it keeps
    # what its last periodic checkpoint saved (none without
    # ``checkpoint_interval_s``). None: no hook (the model above).
    checkpoint_hook_s: Annotated[int, msgspec.Meta(ge=0, le=INT64_MAX)] | None = None


def hook_budget_s(grace_s: int) -> int:
    """How long a checkpoint hook may run in a grace of ``grace_s``: the executor's rule.

    The grace minus what is kept for the command's own SIGTERM handling (a
    quarter of the grace, at most 30 s): ``executor.hooks.hook_deadline`` is the
    same rule on wall-clock seconds (the simulator does not import the executor).
    """
    return grace_s - min(grace_s // 4, 30)


class BudgetNodeSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One budget node a source needs (e.g. a trace's teams and users)."""

    path: Text
    shares: Shares = 1
    managers: tuple[Text, ...] = ()


class SquatterSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A researcher who, under the old scheduler, holds an idle job to debug on.

    The driver submits a hold of ``gpus`` GPUs at ``first_at`` and renews it
    whenever it ends. While the hold runs, the researcher's debug workloads that
    fit in it run inside it and are never submitted.
    """

    user: str
    budget: str            # the researcher's leaf
    gpus: int
    first_at: int          # seconds since the scenario start
