"""Policy events: the knobs a log ran under, recorded on the log itself.

A log that carries its own policy can be replayed (and re-derived, bit for bit)
without any out-of-band configuration; a what-if simulation is the same log with
a different ``policy.configured`` at its head.
"""

from __future__ import annotations

from typing import Literal

from events.base import Event
from events.limits import Duration, HostGpus, Int64

DAY_S = 86_400
HOUR_S = 3_600


class PolicyConfigured(Event, frozen=True, kw_only=True, tag="policy.configured"):
    """The scheduling policy and its knobs, from this event on."""

    # Which decide() runs: the budget scheduler, or the lab's old priority
    # scheduler kept as a baseline for side-by-side simulation.
    scheduler: Literal["allot", "baseline"] = "allot"
    # Fair-share lookback: usage older than this no longer counts.
    window_s: Duration = 7 * DAY_S
    # Usage is kept in buckets of this width so cost does not grow with history;
    # the window is therefore exact to one bucket.
    bucket_s: Duration = HOUR_S
    # Longest minimum runtime (protection) a workload may ask for.
    min_runtime_cap_s: Duration = 8 * HOUR_S
    # GPUs per host; multi-host workloads are gangs of hosts of this size.
    host_gpus: HostGpus = 8
    # Depth of the budget tree at which "teams" sit (root = 0). The baseline's
    # per-team non-preemptible limit and the audit's owed/received use it.
    team_depth: Int64 = 2
    # Bounded work per cycle (as Slurm's default_queue_depth and Kueue's
    # heads-only cycle): pending workloads examined per leaf, and preemption
    # searches per cycle. Whatever is not examined waits for the next cycle.
    queue_depth: Int64 = 64
    preemption_searches: Int64 = 32
    # How many blocked workloads may hold a reservation (anti-starvation for gangs).
    reservations: Int64 = 1
    # Fair-share usage is evaluated at ``now`` rounded down to this period (as
    # Slurm's PriorityCalcPeriod): the order cannot drift between two moments of
    # one period, which makes a cycle with no new events provably idle.
    fair_share_period_s: Duration = 300
    # Event ids are remembered this long for deduplication.
    dedupe_window_s: Duration = DAY_S
    # How far ahead of the trusted clock an input's ``at`` may be. The live
    # clock ticks once a second and producers' clocks drift, so a little
    # slack; more would let a producer pull time forward (protections end at
    # now), so anything later is rejected as ``future_time``.
    clock_skew_s: Duration = 30
    # Knobs added in schema v1 after the first release come last, so older
    # events encode as before with the new fields appended.
    # How long funded work that starts *borrowing* (beyond its budget's
    # guaranteed fraction of the cluster, at some level of its path) is
    # protected: at most its minimum runtime, at most this. A team coming back
    # to its idle share then takes it back within this time, not after up to
    # the whole minimum runtime (scheduler/policy/guarantee.py). None protects
    # every funded start for its whole minimum runtime.
    borrowed_protection_s: Duration | None = 0
    # Which running work of another budget a candidate may take once it is past
    # its protection. "fair_share": whenever, at the level where their paths
    # part, the candidate's side is less used per share over the window than
    # the victim's (time slicing by windowed usage). "reclaim": only work of a
    # side holding more than its guaranteed fraction of the cluster, and only
    # for a candidate whose side stays within its own (Kueue's
    # reclaimWithinCohort): borrowed GPUs go back to their owner at once, work
    # within its share is never time-sliced away, and no two sides can take
    # GPUs back and forth. The window still orders who starts first.
    # "reclaim_balanced" (added 2026-12-07; "reclaim" keeps its meaning so old
    # logs replay): a side strictly under its guarantee takes from a side that
    # stays at or above its own after the take, and only while the taker's
    # side ends up no more used per guarantee than the victim's; a gang larger
    # than its guarantee may reclaim too, and a reservation may plan on any
    # borrowed work (the lock-out bound). scheduler/policy/guarantee.py.
    # "reclaim_room" (added 2026-12-07): the same take as "reclaim_balanced",
    # without its reservations on borrowed work (no lock-out bound, a
    # fraction of the cost; docs/simulation.md).
    # Three variants of "reclaim_room" against its churn (added 2026-12-07,
    # night; values, not new knobs, so that no log's bytes change):
    # "reclaim_room_checkpoint" takes a victim by reclaim only while it would
    # lose at most 10 minutes of work per GPU (just after a checkpoint, or
    # early in a run that cannot resume); "reclaim_room_margin" asks the
    # balanced test for a margin of 10 points of use per guarantee, so two
    # sides near balance do not trade GPUs back and forth;
    # "reclaim_room_checkpoint_margin" both. scheduler/policy/rules.py.
    preemption_rule: Literal["fair_share", "reclaim", "reclaim_balanced",
                             "reclaim_room", "reclaim_room_checkpoint",
                             "reclaim_room_margin",
                             "reclaim_room_checkpoint_margin"] = "reclaim"
    # How long a preempted run may take to stop (SIGTERM, then SIGKILL at the
    # end of it): its GPUs take no other work until the executor reports
    # ``workload.stopped`` or this has passed. A workload may ask for less
    # (``grace_s``). 0: the GPUs are free at the preemption itself (the model
    # every log before this knob ran under).
    preemption_grace_s: Duration = 0
