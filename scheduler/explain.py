"""Why a workload is where it is: its rank, its place in line, what blocks it, as data.

``explain(state, workload_id)`` runs one traced cycle on the current state (a
pure function: the state is not touched) and reads off the workload's outcome,
then classifies what stands in its way:

- ``reserved``: it holds hosts; it starts when their protection ends (``until``);
- ``protected_victims``: enough GPUs are held by work it may preempt, once that
  work's protection ends (``until``);
- ``reserved_hosts``: it would fit, but the hosts are reserved for another
  workload until ``until`` and its protection would outlast that;
- ``better_ranked``: the GPUs it needs are held by allocations ranked ahead of it;
- ``fragmentation``: enough GPUs are free, but not on hosts that fit its shape;
- ``faulty_hosts``: it would fit the cluster if its faulty hosts were healthy;
- ``no_free_gpus``: unallocated work only starts on free GPUs, and no host has enough;
- ``search_budget``: it could preempt its way in, but the cycle's searches ran out.

The cycle itself records these (``scheduler.policy.cycle.Outcome``); this module only
puts them into words.

The answer also carries the fair-share key of its allocation level by level,
which is the metric users asked to see when "priority" changed meaning.
"""

from __future__ import annotations

import msgspec

from projections.workloads import PENDING, RUNNING
from scheduler.index.fair_share_order import Level, Ranking, commitments
from scheduler.policy.cycle import Outcome, decide
from scheduler.state import State
from scheduler.time_text import date_text, duration_text


class UnknownWorkload(KeyError):
    """No workload with that id in the state."""


class Explanation(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Everything allot can say about one workload right now."""

    workload: str
    status: str
    budget: str
    kind: str
    gpus: int
    shape: str
    min_runtime_s: int
    resumable: bool
    priority: int
    allocated: bool
    submitted_at: int
    now: int
    rank: list[Level]
    allocation_position: int       # 1-based, among allocations with pending allocated work
    allocations: int
    queue_position: int | None = None  # 1-based inside its leaf's queue
    queue_length: int | None = None
    cycle: Outcome | None = None
    blocked_by: str | None = None
    until: int | None = None
    holder: str | None = None          # the workload holding a reservation it waits on
    hosts: tuple[str, ...] = ()
    placement: tuple[tuple[str, int], ...] = ()
    protected_until: int | None = None
    last_preemption: tuple[str, str | None, int] | None = None
    summary: list[str] = []


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def explain(state: State, workload_id: str) -> Explanation:
    """Explain ``workload_id`` in ``state``; raise UnknownWorkload when there is none."""
    w = state.workloads.all.get(workload_id)
    if w is None:
        raise UnknownWorkload(workload_id)
    now = state.now
    ranking = Ranking(state, commitments(state))
    order = [leaf for leaf in ranking.leaf_order() if leaf in state.workloads.pending]
    levels = ranking.levels(w.budget) if w.budget in state.budget else []
    exp = Explanation(
        workload=w.id, status=w.status, budget=w.budget, kind=w.kind, gpus=w.gpus,
        shape=f"{w.hosts} x {w.gpus_per_host}", min_runtime_s=w.min_runtime_s,
        resumable=w.resumable, priority=w.priority, allocated=w.min_runtime_s > 0,
        submitted_at=w.submitted_at, now=now, rank=levels,
        allocation_position=order.index(w.budget) + 1 if w.budget in order else 0,
        allocations=len(order),
        last_preemption=state.last_preemption.get(w.id),
    )
    words = exp.summary
    words.append(_rank_sentence(w.budget, levels))
    if w.status == RUNNING:
        exp.placement = w.placement
        exp.protected_until = w.protected_until
        if not w.allocated:
            words.append("It runs unallocated: free of charge, and any allocated workload may "
                         "preempt it.")
        elif w.protected_until is None or w.protected_until > now:
            until = "until it ends" if w.protected_until is None else \
                (f"for {duration_text(w.protected_until - now)} more (until "
                 f"{date_text(w.protected_until)})")
            words.append(f"It is protected {until}; only a host failure can stop it.")
        else:
            words.append("Its protection has ended: a better-ranked allocation that needs its "
                         "GPUs may preempt it (it is charged while it runs).")
    elif w.status == PENDING:
        queue = (state.workloads.pending if w.min_runtime_s > 0
                 else state.workloads.pending_free).get(w.budget, [])
        ids = [x.id for _, x in queue]
        exp.queue_position = ids.index(w.id) + 1
        exp.queue_length = len(ids)
        _explain_pending(state, w, exp)
    else:
        words.append(f"It has ended: {w.status}.")
    if exp.last_preemption is not None:
        words.append(_preemption_sentence(state, w.budget, *exp.last_preemption))
        if w.status == PENDING:
            words.append("It was requeued" + (": it resumes from its last checkpoint when it "
                                              "starts again." if w.resumable else
                                              " (not resumable: its next run starts over)."))
    words.extend(_stopping_sentences(state, w.id))
    return exp


def _stopping_sentences(state: State, workload: str) -> list[str]:
    """A preempted run of ``workload`` still stopping under the grace: what it holds, how long."""
    out = []
    for (wid, run), (placement, until, _by) in sorted(state.stopping.items()):
        if wid != workload:
            continue
        hosts = ", ".join(f"{h}:{g}" for h, g in placement)
        out.append(f"Its preempted run {run} is stopping (SIGTERM sent): its GPUs ({hosts}) take "
                   f"no other work until its executor reports it stopped, or the grace ends at "
                   f"{date_text(until)}, when it is killed.")
    return out


# Why a preemptor could take the victim's GPUs, per preemption reason.
_BECAUSE = {
    "fair_share": "{theirs} was less used per share over the window than {yours}",
    "reclaim": "{yours} held more than its guaranteed fraction of the cluster, and {theirs} "
               "stayed within its own",
    "priority": "it is work of the same budget with a higher priority",
    "reservation": "it held a reservation on those hosts, and the work there had started "
                   "after it was made (backfill)",
    "reclaim_unallocated": "the preempted run was unallocated (free work gives way to any "
                           "allocated work)",
}


# A host's fault stops the work on it; ``by`` names the host.
_HOST_REASONS = {
    "host_failure": "failed, which ends its work at once, protected or not",
    "host_drain": "was faulty (degraded), and drains each run once its minimum runtime ends",
}


def _preemption_sentence(state: State, leaf: str, reason: str, by: str | None, at: int) -> str:
    """The last preemption in words: when, by whom, and why they outranked this workload."""
    if reason in _HOST_REASONS:
        return (f"It was last preempted on {date_text(at)} ({reason}): its host {by or '?'} "
                f"{_HOST_REASONS[reason]}.")
    words = f"It was last preempted on {date_text(at)} ({reason}"
    if by is None:
        return words + ")."
    pre = state.workloads.all.get(by)
    if pre is None:
        return words + f", by {by})."
    words += f", by {by} of {pre.budget})"
    yours, theirs = _sides(leaf, pre.budget)
    because = _BECAUSE.get(reason)
    if because is None:
        return words + "."
    return words + ": " + because.format(yours=yours, theirs=theirs) + "."


def _sides(leaf: str, other: str) -> tuple[str, str]:
    """The two budget nodes where the paths of ``leaf`` and ``other`` part (the leaves if they do not)."""
    a, b = leaf.split("/"), other.split("/")
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return "/".join(a[:i + 1]), "/".join(b[:i + 1])
    return leaf, other


def _date(t: int | None) -> str:
    return "an unknown time" if t is None else date_text(t)


def _rank_sentence(leaf: str, levels: list[Level]) -> str:
    if not levels:
        return f"{leaf} is not in the budget tree."
    parts = []
    for lv in levels:
        parts.append(f"{lv.node} has used {lv.usage_fraction:.0%} of its parent's usage against "
                     f"a {lv.share_fraction:.0%} share (ratio {lv.ratio:.2f}, "
                     f"{_ordinal(lv.position)} of {lv.siblings})")
    return "Fair share, level by level: " + "; ".join(parts) + "."


def _explain_pending(state: State, w, exp: Explanation) -> None:
    """What one traced cycle (state untouched) did with ``w``, in words."""
    trace: dict[str, Outcome] = {}
    decide(state, "explain", trace, only=w.id)
    outcome = trace.get(w.id)
    exp.cycle = outcome
    words = exp.summary
    words.append(f"It is {_ordinal(exp.queue_position or 0)} of {exp.queue_length} in its "
                 f"allocation's queue (priority {w.priority}, then submission time).")
    if outcome is None:  # pragma: no cover - a traced cycle records every pending workload
        return
    if outcome.status == "started":
        exp.blocked_by = None
        exp.hosts = outcome.hosts
        words.append("It starts at the next cycle" +
                     (f", preempting {', '.join(outcome.victims)}." if outcome.victims else "."))
        return
    reason = outcome.reason
    exp.blocked_by, exp.until, exp.hosts = reason, outcome.until, outcome.hosts
    exp.holder = outcome.holder
    if reason == "reserved":
        if w.id in state.reservations:
            words.append(f"It holds a reservation on {', '.join(outcome.hosts)}: it starts by "
                         f"{_date(outcome.until)}, when the protection of the work there ends.")
        else:
            words.append(f"It is next in line for a reservation (on {', '.join(outcome.hosts)} "
                         f"until {_date(outcome.until)}); the scheduler records it as soon as other "
                         f"work would compete for those hosts.")
    elif reason == "no_free_gpus":
        words.append("Unallocated work only starts on free GPUs that no allocated work can use: "
                     f"{outcome.detail}.")
    elif reason == "faulty_hosts":
        words.append(f"{outcome.detail[0].upper()}{outcome.detail[1:]}: it fits once faulty hosts "
                     f"are repaired.")
    elif reason == "reserved_hosts":
        words.append(f"{outcome.detail[0].upper()}{outcome.detail[1:]} ({_date(outcome.until)}, held "
                     f"for {outcome.holder}); its own protection would outlast that.")
    elif reason == "fragmentation":
        words.append(f"{outcome.detail[0].upper()}{outcome.detail[1:]}.")
    elif reason == "protected_victims":
        extra = (f" The reservation slot of its size is held by {outcome.holder}; it is next "
                 f"when that one starts." if outcome.holder else "")
        words.append(f"The GPUs it needs are held by work it may preempt once that work's "
                     f"minimum runtime ends, by {_date(outcome.until)} at the latest.{extra}")
    elif reason == "search_budget":
        words.append("It could preempt its way in now, but this cycle's preemption searches ran "
                     "out before its turn; the next cycle tries again.")
    else:
        words.append("The GPUs it needs are held by work it may not take: allocations that rank "
                     "ahead of its own, or work of its own allocation with the same or a higher "
                     "priority; it starts as that work ends or as fair share turns in its favour.")
        faulty = sorted(h for h, host in state.cluster_state.hosts.items()
                        if not host.schedulable and host.gpus >= w.gpus_per_host)
        if faulty:
            words.append(f"Faulty hosts big enough for it are out until repaired: "
                         f"{', '.join(faulty)}.")
