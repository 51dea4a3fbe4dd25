"""Calibration figures: how loaded and how bursty a simulated workload is, read from its log.

A scenario is calibrated when its load looks like production's, before anyone
looks at how the scheduler did on it (docs/simulation.md, "Calibration"). The
figures here describe the load, not the outcome:

- ``unallocated_share``: GPU-seconds run by unallocated work (started with
  ``allocated = false``) over all GPU-seconds run;
- ``total_demand_*``: GPUs wanted by every pending or running workload, all
  work, time-averaged per hour, over the GPUs present (mean and percentiles
  over hours);
- ``funded_demand_*``: the same for funded work (a contract with minimum
  runtime > 0), whatever the policy made of it;
- ``below_entitlement``: the share of team-hours in which a team's funded
  demand (time-averaged over the hour) was below its entitlement (its fraction
  of the tree times the GPUs present), with the same share per team and
  percentiles of demand / entitlement over team-hours.

Everything comes from one pass over the event log (``workload.*``,
``budget.node_defined``, ``host.added``/``host.removed``, ``policy.configured``),
so any log can be re-checked, live or simulated. The warm-up (by default one
lookback window from the first event, as in the audit) is left out. The budget
tree is taken as defined (``budget.shares_set`` edits are not followed: the
generated scenarios have none).

``python -m allot.calibrate SCENARIO --seeds 5`` (command-line glue: it needs
the audit for the baseline's figures, and the simulator may not import it)
prints the figures for five seeds with 95 % t-intervals.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from events import Event
from projections.budget_tree import BudgetTree

HOUR = 3600


class _Step:
    """A step function of time, integrated into hourly buckets as it changes."""

    __slots__ = ("areas", "last", "start", "value")

    def __init__(self, start: int) -> None:
        self.start = start
        self.last = start
        self.value = 0
        self.areas: dict[int, float] = {}

    def move(self, t: int, delta: int) -> None:
        self.advance(t)
        self.value += delta

    def advance(self, t: int) -> None:
        if t <= self.last:
            return
        if self.value:
            a, v, areas = self.last, self.value, self.areas
            while a < t:
                hour = (a - self.start) // HOUR
                end = min(t, self.start + (hour + 1) * HOUR)
                areas[hour] = areas.get(hour, 0.0) + v * (end - a)
                a = end
        self.last = t


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile (0..1) by linear interpolation between order statistics."""
    if not values:
        return None
    xs = sorted(values)
    pos = q * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


class _Demand:
    """GPUs wanted: all work, funded work, and funded work per team."""

    def __init__(self, start: int) -> None:
        self.total = _Step(start)
        self.funded = _Step(start)
        self.by_team: dict[str, _Step] = {}
        self.start = start

    def change(self, team: str, is_funded: bool, t: int, gpus: int) -> None:
        self.total.move(t, gpus)
        if is_funded:
            self.funded.move(t, gpus)
            step = self.by_team.get(team)
            if step is None:
                step = self.by_team[team] = _Step(self.start)
            step.move(t, gpus)


def calibration_figures(log: Iterable[Event], warmup_s: int | None = None) -> dict[str, Any]:
    """The calibration figures of one log (fractions in 0..1, demand in multiples of capacity).

    ``warmup_s``: seconds after the first event left out of every figure;
    None means the policy's lookback window (``window_s``), or nothing for a log no
    longer than that, as the audit does.
    """
    events = list(log)
    if not events:
        raise ValueError("an empty log has no calibration figures")
    start = events[0].at
    tree = BudgetTree()
    team_depth = 2
    window = 604_800
    present = _Step(start)
    demand = _Demand(start)
    run_alloc = _Step(start)
    run_free = _Step(start)
    # workload -> [GPUs, funded, team, status, allocated run]
    work: dict[str, list[Any]] = {}
    host_gpus: dict[str, int] = {}
    now = start
    for e in events:
        now = max(now, e.at)
        tag = type(e).__struct_config__.tag
        if tag == "policy.configured":
            team_depth = e.team_depth  # type: ignore[attr-defined]
            window = e.window_s  # type: ignore[attr-defined]
        elif tag == "budget.node_defined":
            if e.path not in tree:  # type: ignore[attr-defined]
                tree.define(e.path, e.managers, e.shares)  # type: ignore[attr-defined]
        elif tag == "host.added":
            if e.host not in host_gpus:  # type: ignore[attr-defined]
                host_gpus[e.host] = e.gpus  # type: ignore[attr-defined]
                present.move(now, e.gpus)  # type: ignore[attr-defined]
        elif tag == "host.removed":
            present.move(now, -host_gpus.pop(e.host, 0))  # type: ignore[attr-defined]
        elif tag == "workload.submitted":
            if e.workload in work:  # type: ignore[attr-defined]
                continue  # a re-sent or conflicting submission: ignored or rejected
            team = "/".join(e.budget.split("/")[: team_depth + 1])  # type: ignore[attr-defined]
            is_funded = e.min_runtime_s > 0  # type: ignore[attr-defined]
            work[e.workload] = [e.gpus, is_funded, team, "pending", False]  # type: ignore[attr-defined]
            demand.change(team, is_funded, now, e.gpus)  # type: ignore[attr-defined]
        elif tag == "workload.rejected":
            rec = work.get(e.workload)  # type: ignore[attr-defined]
            if rec is not None and rec[3] == "pending":
                rec[3] = "ended"
                demand.change(rec[2], rec[1], now, -rec[0])
        elif tag == "workload.started":
            rec = work[e.workload]  # type: ignore[attr-defined]
            rec[3] = "running"
            rec[4] = e.allocated  # type: ignore[attr-defined]
            (run_alloc if rec[4] else run_free).move(now, rec[0])
        elif tag in ("workload.finished", "workload.cancelled", "workload.preempted"):
            rec = work.get(e.workload)  # type: ignore[attr-defined]
            if rec is None or rec[3] == "ended":
                continue
            if rec[3] == "running":
                (run_alloc if rec[4] else run_free).move(now, -rec[0])
            if tag == "workload.preempted" and e.requeued:  # type: ignore[attr-defined]
                rec[3] = "pending"
            else:
                rec[3] = "ended"
                demand.change(rec[2], rec[1], now, -rec[0])
    end = now
    for s in (present, demand.total, demand.funded, run_alloc, run_free, *demand.by_team.values()):
        s.advance(end)
    # The audit's rule (audit/sql/views.sql, ``warmup``): by default one window, unless
    # the log is no longer than that, then nothing (a short log is measured whole).
    skip = (window if end - start > window else 0) if warmup_s is None else warmup_s
    first_hour = -(-skip // HOUR)
    hours = list(range(first_hour, (end - start) // HOUR))  # whole hours only
    if not hours:
        raise ValueError("the log is shorter than its warm-up plus one hour")
    cap = {h: present.areas.get(h, 0.0) / HOUR for h in hours}
    ran_alloc = sum(run_alloc.areas.get(h, 0.0) for h in hours)
    ran_free = sum(run_free.areas.get(h, 0.0) for h in hours)
    total_ratio = [demand.total.areas.get(h, 0.0) / HOUR / cap[h] for h in hours if cap[h]]
    funded_ratio = [demand.funded.areas.get(h, 0.0) / HOUR / cap[h] for h in hours if cap[h]]
    teams = sorted(n for n in tree.nodes if n.count("/") == team_depth)
    below: dict[str, float] = {}
    ratios: list[float] = []
    below_all = 0
    for team in teams:
        frac = tree.entitlement(team)
        if frac <= 0:
            continue
        step = demand.by_team.get(team)
        n_below = 0
        n = 0
        for h in hours:
            ent = frac * cap[h]
            if ent <= 0:
                continue
            d = (step.areas.get(h, 0.0) if step else 0.0) / HOUR
            ratios.append(d / ent)
            n_below += d < ent
            n += 1
        if n:
            below[team] = n_below / n
            below_all += n_below
    return {
        "hours": len(hours),
        "warmup_s": skip,
        "unallocated_share": ran_free / (ran_alloc + ran_free) if ran_alloc + ran_free else None,
        "total_demand_mean": sum(total_ratio) / len(total_ratio) if total_ratio else None,
        "total_demand_p10": percentile(total_ratio, 0.1),
        "total_demand_p50": percentile(total_ratio, 0.5),
        "total_demand_p90": percentile(total_ratio, 0.9),
        "funded_demand_mean": sum(funded_ratio) / len(funded_ratio) if funded_ratio else None,
        "funded_demand_p10": percentile(funded_ratio, 0.1),
        "funded_demand_p50": percentile(funded_ratio, 0.5),
        "funded_demand_p90": percentile(funded_ratio, 0.9),
        "below_entitlement": below_all / len(ratios) if ratios else None,
        "below_entitlement_min_team": min(below.values(), default=None),
        "below_entitlement_max_team": max(below.values(), default=None),
        "demand_vs_entitlement_p10": percentile(ratios, 0.1),
        "demand_vs_entitlement_p50": percentile(ratios, 0.5),
        "demand_vs_entitlement_p90": percentile(ratios, 0.9),
        "below_entitlement_by_team": below,
    }
