"""The audit report: a run's headline figures, computed from the audit views only.

``summary(con, run)`` answers the questions in the product brief's "Numbers
from production" for one loaded log: occupancy, the unallocated share of
delivered time, owed vs received per team, queue-wait percentiles per kind,
preemptions and the work they lost, fragmentation, and how long the largest
gang waited. ``render`` lays several runs side by side (allot vs baseline).

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
from rich.table import Table

from audit.errors import UnknownRun
from audit.views import create_plain_views, drop_plain_views, ensure_derived


def runs_in(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Every run loaded in the database, sorted."""
    return [r[0] for r in con.execute("SELECT DISTINCT run FROM events ORDER BY run").fetchall()]


def _one(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any]) -> tuple[Any, ...]:
    row = con.execute(sql, params).fetchone()
    assert row is not None, "an aggregate query always returns a row"
    return row


def summary(con: duckdb.DuckDBPyConnection, run: str, wall_seconds: float | None = None) -> dict[str, Any]:
    """The headline figures of one run (fractions in 0..1, times in seconds).

    ``wall_seconds`` is how long producing the run took (e.g. a simulation's
    wall time); the log does not know it, so the caller passes it through.
    Raises UnknownRun when the database has no events for ``run``.
    """
    if not _one(con, "SELECT count(*) FROM events WHERE run = ?", [run])[0]:
        raise UnknownRun(run)
    if ensure_derived(con, run):
        return _summary(con, run, wall_seconds)
    # A read-only database whose derived rows for this run are stale (or that
    # predates them): the same figures, computed from the events alone.
    create_plain_views(con)
    try:
        return _summary(con, run, wall_seconds)
    finally:
        drop_plain_views(con)


def _summary(con: duckdb.DuckDBPyConnection, run: str, wall_seconds: float | None) -> dict[str, Any]:
    p = [run]
    sim_seconds, events, scheduler = _one(con, """
        SELECT s.end_t - s.start_t, s.events, p.scheduler
        FROM log_span AS s JOIN policy AS p USING (run) WHERE run = ?""", p)
    occupancy, unallocated_share, busy_gpu_h = _one(con, """
        SELECT sum(allocated_gpu_h + unallocated_gpu_h) / nullif(sum(total_gpu_h - unavailable_gpu_h), 0),
               sum(unallocated_gpu_h) / nullif(sum(allocated_gpu_h + unallocated_gpu_h), 0),
               sum(allocated_gpu_h + unallocated_gpu_h)
        FROM occupancy_by_hour WHERE run = ?""", p)
    teams = con.execute("""
        SELECT team, owed_gpu_h, received_capped, ratio FROM owed_received_by_team
        WHERE run = ? ORDER BY team""", p).fetchall()
    owed = sum(o for _, o, _, _ in teams)
    ratios = [r for _, _, _, r in teams if r is not None]
    waits = {
        kind: {"p50": p50, "p90": p90, "p99": p99, "n": n, "never_started": never}
        for kind, p50, p90, p99, n, never in con.execute("""
            SELECT kind, p50, p90, p99, n, never_started FROM wait_percentiles
            WHERE run = ? ORDER BY kind = 'all', kind""", p).fetchall()
    }
    waits.setdefault("all", {"p50": None, "p90": None, "p99": None, "n": 0, "never_started": 0})
    preemptions = dict(con.execute(
        "SELECT reason, count FROM preemptions WHERE run = ? ORDER BY reason", p).fetchall())
    (lost,) = _one(con, "SELECT coalesce(sum(gpu_hours_lost), 0) FROM preemptions WHERE run = ?", p)
    # Time-weighted over the hours in which anything was free.
    (fragmentation,) = _one(con, """
        SELECT sum(fragmentation * hour_s) / nullif(sum(hour_s), 0)
        FROM fragmentation_by_hour WHERE run = ? AND fragmentation IS NOT NULL""", p)
    (largest_gang_wait,) = _one(con, """
        SELECT max(first_wait_s) FROM workloads
        WHERE run = ? AND funded
          AND gpus = (SELECT max(gpus) FROM workloads WHERE run = ? AND funded)""", [run, run])
    return {
        "run": run,
        "scheduler": scheduler,
        "events": events,
        "sim_seconds": sim_seconds,
        "wall_seconds": wall_seconds,
        "occupancy": occupancy,
        "unallocated_share": unallocated_share,
        "delivered_gpu_h": busy_gpu_h,
        "owed_received": {
            # Over all teams: every team's capped receipts over everything owed.
            "total": sum(c for _, _, c, _ in teams) / owed if owed else None,
            "worst": min(ratios, default=None),
            "teams": len(ratios),
            "teams_at_least_95": sum(r >= 0.95 for r in ratios),
            "by_team": {team: r for team, _, _, r in teams},
        },
        "wait_s": waits,
        "preemptions": preemptions,
        "lost_gpu_hours": lost,
        "fragmentation": fragmentation,
        "largest_gang_wait_s": largest_gang_wait,
    }


def report(con: duckdb.DuckDBPyConnection, runs: Iterable[str] | None = None,
           wall_seconds: Mapping[str, float] | None = None) -> dict[str, dict[str, Any]]:
    """``summary`` for each of ``runs`` (default: every loaded run), keyed by run."""
    names = list(runs) if runs is not None else runs_in(con)
    walls = wall_seconds or {}
    return {run: summary(con, run, walls.get(run)) for run in names}


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _dur(s: float | None) -> str:
    """Seconds as a short human duration."""
    if s is None:
        return "-"
    if s < 120:
        return f"{s:.0f} s"
    if s < 2 * 3600:
        return f"{s / 60:.1f} min"
    if s < 2 * 86400:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} d"


def _num(x: float | None, digits: int = 0) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def render(summaries: Mapping[str, Mapping[str, Any]]) -> Table:
    """The runs side by side: one row per figure, one column per run."""
    table = Table(title="allot audit", title_justify="left")
    table.add_column("figure", style="bold")
    for run in summaries:
        table.add_column(run, justify="right")
    runs = list(summaries.values())

    def row(label: str, cell: Any) -> None:
        table.add_row(label, *(cell(s) for s in runs))

    row("scheduler", lambda s: str(s.get("scheduler") or "-"))
    row("events", lambda s: _num(s["events"]))
    row("simulated time", lambda s: _dur(s["sim_seconds"]))
    row("wall time", lambda s: _dur(s["wall_seconds"]))
    row("occupancy", lambda s: _pct(s["occupancy"]))
    row("unallocated share of delivered", lambda s: _pct(s["unallocated_share"]))
    row("received / owed (all teams)", lambda s: _pct(s["owed_received"]["total"]))
    row("worst team", lambda s: _pct(s["owed_received"]["worst"]))
    row("teams at >= 95% of owed", lambda s: f"{s['owed_received']['teams_at_least_95']} of "
                                            f"{s['owed_received']['teams']}")
    kinds = sorted({k for s in runs for k in s["wait_s"]}, key=lambda k: (k == "all", k))
    for kind in kinds:
        for q in ("p50", "p90"):
            row(f"wait {q} ({kind})", lambda s, k=kind, q=q: _dur(s["wait_s"].get(k, {}).get(q)))
        row(f"never started ({kind})",
            lambda s, k=kind: _num(s["wait_s"].get(k, {}).get("never_started")))
    row("largest gang first wait", lambda s: _dur(s["largest_gang_wait_s"]))
    reasons = sorted({r for s in runs for r in s["preemptions"]})
    for reason in reasons:
        row(f"preemptions: {reason}", lambda s, r=reason: _num(s["preemptions"].get(r, 0)))
    row("GPU-hours lost to preemption", lambda s: _num(s["lost_gpu_hours"], 1))
    row("fragmentation", lambda s: _pct(s["fragmentation"]))
    return table
