"""The audit report: a run's headline figures, computed from the audit views only.

``summary(con, run)`` answers the questions in the product brief's "Numbers
from production" for one loaded log, over the part of it after the warm-up:
occupancy, the unallocated share of delivered time, owed vs received per team
(over funded work, and over all work), queue-wait percentiles per kind with
never-started work counted as censored waits, how long the largest gangs
waited (started or not), preemptions and the work they lost, and fragmentation
(stranded GPUs over capacity). ``render`` lays several runs side by side
(allot vs baseline). It is the one summary: the HTML page shows these figures
too (audit/html_report.py).

The figures are plain queries over the views in audit/sql/views.sql. The
expensive part of those views (pairing starts with stops per workload, each
host's timeline, and the hourly totals built on them) is computed once per run
when the log is loaded and stored in the derived_* tables (audit/sql/derive.sql),
so a summary reads small tables. If a run's derived rows are stale (a database
from an older version, or events edited by hand), ``summary`` derives them again
first, or, on a read-only database, computes from the plain views instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import duckdb
from rich.markup import escape
from rich.table import Table

from audit.database import current_warmup, set_warmup
from audit.errors import UnknownRun
from audit.formatting import format_bound, format_count, format_duration, format_percent
from audit.schema import quote
from audit.views import create_plain_views, drop_plain_views, ensure_derived, plain_views_active

# Statistics of one kind's waits, as summary() gives them.
WAIT_STATS = ("n", "started", "never_started", "p50", "p90", "p99", "mean", "max",
              "p50_censored", "p90_censored", "p99_censored", "mean_censored", "max_censored",
              "p50_started", "p90_started", "p99_started", "mean_started", "max_started")


# Statistics of one kind's requeue waits, as summary() gives them.
REQUEUE_WAIT_STATS = ("n", "restarted", "never_restarted", "p50", "p90", "p99", "mean", "max",
                      "p50_censored", "p90_censored", "p99_censored")


# Views that several figures read, in dependency order. While summary() computes
# the figures, each one's rows for the run are held in a TEMP table of the same
# name, which shadows the view for this connection (as the plain views do), so
# it is computed once per report instead of once per figure: log_span and
# policy scan the events (so warmup, read by most figures, does too), and
# owed_received is read by both the gross and the net owed -> received figures.
# summary(..., shared=False) computes every figure from the views themselves
# (tests/test_audit_report.py checks both give the same summary).
SHARED_VIEWS: tuple[str, ...] = ("log_span", "policy", "warmup", "capacity_by_hour", "owed_received")


class _shared_views:
    """Within the block, each of SHARED_VIEWS is a TEMP table of ``run``'s rows."""

    def __init__(self, con: duckdb.DuckDBPyConnection, run: str) -> None:
        self.con, self.run = con, run

    def __enter__(self) -> None:
        db = _one(self.con, "SELECT current_database()", [])[0]
        for view in SHARED_VIEWS:
            # Qualified: the main view, whose own reads resolve to the tables made before it.
            self.con.execute(f"CREATE OR REPLACE TEMP TABLE {view} AS "
                             f"SELECT * FROM {quote(db)}.main.{view} WHERE run = ?", [self.run])

    def __exit__(self, exc_type: object, *_: object) -> None:
        try:
            for view in reversed(SHARED_VIEWS):
                self.con.execute(f"DROP TABLE IF EXISTS temp.main.{view}")
        except duckdb.Error:
            # After a failed statement in a transaction only a ROLLBACK is accepted,
            # which drops these TEMP tables anyway; the first error is the one to see.
            if exc_type is None:
                raise


def runs_in(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Every run loaded in the database, sorted."""
    return [r[0] for r in con.execute("SELECT DISTINCT run FROM events ORDER BY run").fetchall()]


def _one(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any]) -> tuple[Any, ...]:
    row = con.execute(sql, params).fetchone()
    assert row is not None, "an aggregate query always returns a row"
    return row


def summary(con: duckdb.DuckDBPyConnection, run: str, wall_seconds: float | None = None,
            warmup_s: int | None = None, shared: bool = True) -> dict[str, Any]:
    """The headline figures of one run (fractions in 0..1, times in seconds).

    ``wall_seconds`` is how long producing the run took (e.g. a simulation's
    wall time); the log does not know it, so the caller passes it through.
    ``warmup_s`` is how much of the run's start every figure leaves out
    (default: what the connection's ``allot_warmup_s`` says, else the run's
    lookback window). ``shared=False`` computes every figure straight from the
    views, without the per-report TEMP tables of SHARED_VIEWS (the same figures,
    slower). Raises UnknownRun when the database has no events for ``run``.
    """
    if not _one(con, "SELECT count(*) FROM events WHERE run = ?", [run])[0]:
        raise UnknownRun(run)
    before = current_warmup(con)
    if warmup_s is not None:
        set_warmup(con, warmup_s)
    try:
        if ensure_derived(con, run) or plain_views_active(con):
            return _figures(con, run, wall_seconds, shared)
        # A read-only database whose derived rows for this run are stale (or that
        # predates them): the same figures, computed from the events alone.
        create_plain_views(con)
        try:
            return _figures(con, run, wall_seconds, shared)
        finally:
            drop_plain_views(con)
    finally:
        if warmup_s is not None:
            set_warmup(con, before)


def _ratios(teams: list[tuple[Any, ...]]) -> dict[str, Any]:
    """Owed vs received over teams given as (team, owed, received capped, ratio)."""
    owed = sum(o or 0 for _, o, _, _ in teams)
    ratios = [r for _, _, _, r in teams if r is not None]
    return {
        # Over all teams: every team's capped receipts over everything owed.
        "total": sum(c or 0 for _, _, c, _ in teams) / owed if owed else None,
        "worst": min(ratios, default=None),
        "teams": len(ratios),
        "teams_at_least_95": sum(r >= 0.95 for r in ratios),
        "by_team": {team: r for team, _, _, r in teams},
    }


def _figures(con: duckdb.DuckDBPyConnection, run: str, wall_seconds: float | None,
             shared: bool) -> dict[str, Any]:
    if not shared:
        return _summary(con, run, wall_seconds)
    with _shared_views(con, run):
        return _summary(con, run, wall_seconds)


def _summary(con: duckdb.DuckDBPyConnection, run: str, wall_seconds: float | None) -> dict[str, Any]:
    p = [run]
    sim_seconds, events, scheduler, warmup_s, measured_from, measured_s = _one(con, """
        SELECT s.end_t - s.start_t, s.events, p.scheduler, u.warmup_s, u.measured_from, u.measured_s
        FROM log_span AS s JOIN policy AS p USING (run) JOIN warmup AS u USING (run)
        WHERE run = ?""", p)
    # Available GPU-hours are those of healthy hosts: busy / (total - unavailable).
    occupancy, unallocated_share, busy_gpu_h = _one(con, """
        SELECT sum(allocated_gpu_h + unallocated_gpu_h) / nullif(sum(total_gpu_h - unavailable_gpu_h), 0),
               sum(unallocated_gpu_h) / nullif(sum(allocated_gpu_h + unallocated_gpu_h), 0),
               sum(allocated_gpu_h + unallocated_gpu_h)
        FROM occupancy_by_hour WHERE run = ? AND NOT in_warmup""", p)
    teams = con.execute("""
        SELECT team, owed_gpu_h, received_capped, ratio, owed_all_gpu_h, received_all_capped, ratio_all
        FROM owed_received_by_team WHERE run = ? ORDER BY team""", p).fetchall()
    cols = ", ".join(WAIT_STATS)
    waits = {row[0]: dict(zip(WAIT_STATS, row[1:], strict=True)) for row in con.execute(f"""
        SELECT kind, {cols} FROM wait_percentiles
        WHERE run = ? ORDER BY kind = 'all', kind""", p).fetchall()}
    waits.setdefault("all", {s: (0 if s in ("n", "started", "never_started") else None)
                             for s in WAIT_STATS})
    # One read of each view per report: the totals come beside the rows (a window
    # over the same rows), not from a second query that would compute the view again.
    pre = con.execute("""
        SELECT reason, count, coalesce(sum(gpu_hours_lost) OVER (), 0)
        FROM preemptions WHERE run = ? ORDER BY reason""", p).fetchall()
    preemptions = {reason: n for reason, n, _ in pre}
    lost = pre[0][2] if pre else 0.0
    stranded, stranded_gpu_h = _one(con, """
        SELECT sum(stranded_gpu_h) / nullif(sum(capacity_gpu_h), 0), sum(stranded_gpu_h)
        FROM stranded_by_hour WHERE run = ? AND NOT in_warmup""", p)
    # The old figure: time-weighted over the hours in which anything was free.
    (of_free,) = _one(con, """
        SELECT sum(fragmentation * hour_s) / nullif(sum(hour_s), 0)
        FROM fragmentation_by_hour WHERE run = ? AND NOT in_warmup AND fragmentation IS NOT NULL""", p)
    gang = con.execute("""
        SELECT gpus, hosts, workloads, started, never_started, max_wait_s, max_wait_censored,
               p50_wait_s, p50_wait_censored, max_wait_started_s
        FROM largest_gang_waits WHERE run = ?""", p).fetchone()
    gpus, hosts, n_gang, started, never, max_wait, max_censored, p50, p50_censored, max_started = \
        gang or (None, None, 0, 0, 0, None, False, None, False, None)
    # Received net of what did no work (idle holds, killed work), owed unchanged.
    net_rows = con.execute("""
        SELECT team, owed_net_gpu_h, received_net_idle_capped, ratio_net_idle,
               owed_gpu_h, received_net_killed_capped, ratio_net_killed, received_net_capped, ratio_net,
               coalesce(sum(hold_gpu_h) OVER (), 0), coalesce(sum(killed_gpu_h) OVER (), 0)
        FROM owed_received_net_by_team WHERE run = ? ORDER BY team""", p).fetchall()
    net = [row[:9] for row in net_rows]
    hold_gpu_h, killed_gpu_h = net_rows[0][9:] if net_rows else (0.0, 0.0)
    rcols = ", ".join(REQUEUE_WAIT_STATS)
    requeue_waits = {row[0]: dict(zip(REQUEUE_WAIT_STATS, row[1:], strict=True)) for row in con.execute(f"""
        SELECT kind, {rcols} FROM requeue_wait_percentiles
        WHERE run = ? ORDER BY kind = 'all', kind""", p).fetchall()}
    refusals = con.execute("""
        SELECT reason, refused, demand_gpu_h FROM refusals WHERE run = ? ORDER BY reason""", p).fetchall()
    return {
        "run": run,
        "scheduler": scheduler,
        "events": events,
        "sim_seconds": sim_seconds,
        "wall_seconds": wall_seconds,
        "warmup_s": warmup_s,
        "measured_from": measured_from,
        "measured_seconds": measured_s,
        "occupancy": occupancy,
        "unallocated_share": unallocated_share,
        "delivered_gpu_h": busy_gpu_h,
        # Funded (allocated) work only: the lab's definition.
        "owed_received": _ratios([(t, o, c, r) for t, o, c, r, *_ in teams]),
        # All of a team's work, funded or not.
        "owed_received_all_work": _ratios([(t, o, c, r) for t, _, _, _, o, c, r in teams]),
        # Received net of idle holds (squatters'), of killed work, and of both.
        "owed_received_net_idle": _ratios([(t, o, c, r) for t, o, c, r, *_ in net]),
        "owed_received_net_killed": _ratios([(t, o, c, r) for t, _, _, _, o, c, r, _, _ in net]),
        "owed_received_net": _ratios([(t, o, c, r) for t, o, *_, c, r in net]),
        "idle_hold_gpu_h": hold_gpu_h,
        "killed_gpu_h": killed_gpu_h,
        "wait_s": waits,
        # The wait after each preemption with requeue, to the next start.
        "requeue_wait_s": requeue_waits,
        # Submissions refused, by reason (count, and GPU-hours of demand).
        "refused": {reason: n for reason, n, _ in refusals},
        "refused_gpu_h": {reason: gpu_h for reason, _, gpu_h in refusals},
        "preemptions": preemptions,
        "lost_gpu_hours": lost,
        "fragmentation": stranded,
        "stranded_gpu_h": stranded_gpu_h,
        "fragmentation_of_free": of_free,
        "largest_gang_wait_s": max_wait,
        "largest_gang_wait_censored": bool(max_censored),
        "largest_gang_wait_started_s": max_started,
        "largest_gang": {"gpus": gpus, "hosts": hosts, "workloads": n_gang, "started": started,
                         "never_started": never, "p50_wait_s": p50,
                         "p50_wait_censored": bool(p50_censored)},
    }


def report(con: duckdb.DuckDBPyConnection, runs: Iterable[str] | None = None,
           wall_seconds: Mapping[str, float] | None = None,
           warmup_s: int | None = None) -> dict[str, dict[str, Any]]:
    """``summary`` for each of ``runs`` (default: every loaded run), keyed by run."""
    names = list(runs) if runs is not None else runs_in(con)
    walls = wall_seconds or {}
    return {run: summary(con, run, walls.get(run), warmup_s) for run in names}


def render(summaries: Mapping[str, Mapping[str, Any]]) -> Table:
    """The runs side by side: one row per figure, one column per run."""
    table = Table(title="allot audit", title_justify="left")
    table.add_column("figure", style="bold")
    for run in summaries:
        table.add_column(escape(run), justify="right")
    runs = list(summaries.values())

    def row(label: str, cell: Any) -> None:
        table.add_row(label, *(escape(cell(s)) for s in runs))

    row("scheduler", lambda s: str(s.get("scheduler") or "-"))
    row("events", lambda s: format_count(s["events"]))
    row("simulated time", lambda s: format_duration(s["sim_seconds"]))
    row("warm-up left out", lambda s: format_duration(s.get("warmup_s")))
    row("measured time", lambda s: format_duration(s.get("measured_seconds")))
    row("wall time", lambda s: format_duration(s["wall_seconds"]))
    row("occupancy", lambda s: format_percent(s["occupancy"]))
    row("unallocated share of delivered", lambda s: format_percent(s["unallocated_share"]))
    for key, what in (("owed_received", "funded work"), ("owed_received_all_work", "all work")):
        row(f"received / owed, all teams ({what})",
            lambda s, k=key: format_percent(s.get(k, {}).get("total")))
        row(f"worst team ({what})", lambda s, k=key: format_percent(s.get(k, {}).get("worst")))
        row(f"teams at >= 95% of owed ({what})",
            lambda s, k=key: f"{s.get(k, {}).get('teams_at_least_95', 0)} of {s.get(k, {}).get('teams', 0)}")
    for key, what in (("owed_received_net_idle", "net of idle holds"),
                      ("owed_received_net_killed", "net of killed work"),
                      ("owed_received_net", "net of both")):
        row(f"received / owed, all teams ({what})",
            lambda s, k=key: format_percent(s.get(k, {}).get("total")))
        row(f"worst team ({what})", lambda s, k=key: format_percent(s.get(k, {}).get("worst")))
        row(f"teams at >= 95% of owed ({what})",
            lambda s, k=key: f"{s.get(k, {}).get('teams_at_least_95', 0)} of {s.get(k, {}).get('teams', 0)}")
    row("GPU-hours of idle holds (funded)", lambda s: f"{s.get('idle_hold_gpu_h') or 0:,.1f}")
    row("GPU-hours of killed work (funded)", lambda s: f"{s.get('killed_gpu_h') or 0:,.1f}")
    kinds = sorted({k for s in runs for k in s["wait_s"]}, key=lambda k: (k == "all", k))
    for kind in kinds:
        for q in ("p50", "p90"):
            row(f"wait {q} ({kind}, never-started censored)",
                lambda s, k=kind, q=q: format_bound(format_duration(s["wait_s"].get(k, {}).get(q)),
                                                    s["wait_s"].get(k, {}).get(f"{q}_censored")))
            row(f"wait {q} ({kind}, started only)",
                lambda s, k=kind, q=q: format_duration(s["wait_s"].get(k, {}).get(f"{q}_started")))
        row(f"never started ({kind})",
            lambda s, k=kind: format_count(s["wait_s"].get(k, {}).get("never_started")))
    rkinds = sorted({k for s in runs for k in s.get("requeue_wait_s", {})}, key=lambda k: (k == "all", k))
    for kind in rkinds:
        for q in ("p50", "p90"):
            row(f"requeue wait {q} ({kind})",
                lambda s, k=kind, q=q: format_bound(
                    format_duration(s.get("requeue_wait_s", {}).get(k, {}).get(q)),
                    s.get("requeue_wait_s", {}).get(k, {}).get(f"{q}_censored")))
        row(f"requeued runs ({kind}), never restarted",
            lambda s, k=kind: f"{format_count(s['requeue_wait_s'].get(k, {}).get('n', 0))}, "
                              f"{format_count(s['requeue_wait_s'].get(k, {}).get('never_restarted', 0))}")
    reasons_refused = sorted({r for s in runs for r in s.get("refused", {})})
    for reason in reasons_refused:
        row(f"refused: {reason} (GPU-hours of demand)",
            lambda s, r=reason: f"{format_count(s.get('refused', {}).get(r, 0))} "
                                f"({s.get('refused_gpu_h', {}).get(r, 0):,.0f})")
    row("largest gang: GPUs, started of all",
        lambda s: f"{format_count(s['largest_gang']['gpus'])}: "
                  f"{s['largest_gang']['started']} of {s['largest_gang']['workloads']}")
    row("largest gang: longest wait",
        lambda s: format_bound(format_duration(s["largest_gang_wait_s"]), s["largest_gang_wait_censored"]))
    row("largest gang: longest wait (started only)",
        lambda s: format_duration(s["largest_gang_wait_started_s"]))
    reasons = sorted({r for s in runs for r in s["preemptions"]})
    for reason in reasons:
        row(f"preemptions: {reason}", lambda s, r=reason: format_count(s["preemptions"].get(r, 0)))
    row("GPU-hours lost to preemption", lambda s: f"{s['lost_gpu_hours']:,.1f}")
    row("fragmentation (stranded / capacity)", lambda s: format_percent(s["fragmentation"]))
    row("fragmented share of free GPUs (old)", lambda s: format_percent(s["fragmentation_of_free"]))
    empty = [escape(s["run"]) for s in runs if s.get("run") and not s.get("measured_seconds")]
    if empty:
        table.caption = (f"{', '.join(empty)}: the warm-up covers the whole log, so nothing is "
                         "measured; --warmup-s SECONDS (summary(warmup_s=...)) sets a shorter one")
    return table
