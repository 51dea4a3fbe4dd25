"""The audit side of the live demo: command-line glue between ``streams`` and ``audit``.

``streams`` (the live pipeline) may not import the audit, and the audit knows
nothing of Kafka, so the demo (``streams.demo.play``) is handed this module's
``audit_runs`` by the command line: it loads the demo's exported journal (and
the simulator's run of the same scenario) into DuckDB, computes the audit
summary of each, renders them side by side, and reads the per-node and
per-host GPU-seconds per hour the demo checks the Faust projections against.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from streams.demo import AuditOutcome, Figures


def node_seconds(con: Any, run: str) -> Figures:
    """GPU-seconds per budget node and hour: the audit's ``gpu_hours_by_node_hour``."""
    out: Figures = {}
    for node, hour, a, u in con.execute(
            "SELECT node, hour, allocated_gpu_h, unallocated_gpu_h FROM gpu_hours_by_node_hour "
            "WHERE run = ? AND (allocated_gpu_h > 0 OR unallocated_gpu_h > 0)", [run]).fetchall():
        out.setdefault(node, {})[int(hour)] = (round(a * 3600), round(u * 3600))
    return out


def host_seconds(con: Any, run: str) -> Figures:
    """GPU-seconds per host and hour: the audit's ``run_slots`` cut at hour boundaries."""
    out: Figures = {}
    rows = con.execute("""
        SELECT host, h,
               sum(CASE WHEN allocated THEN gpus * (least(stop_at, h + 3600) - greatest(start_at, h))
                        ELSE 0 END),
               sum(CASE WHEN allocated THEN 0
                        ELSE gpus * (least(stop_at, h + 3600) - greatest(start_at, h)) END)
        FROM (SELECT *, unnest(range(hour_of(start_at), stop_at, 3600)) AS h
              FROM run_slots WHERE run = ? AND stop_at > start_at)
        GROUP BY host, h""", [run]).fetchall()
    for host, h, a, u in rows:
        if a or u:
            out.setdefault(host, {})[int(h)] = (int(a), int(u))
    return out


# The demo lasts 3 scheduler days, less than one 7-day lookback window (the
# audit's default warm-up), so it leaves out only its first day: the figures
# then describe days 2-3, with usage windows still filling (both runs alike).
DEMO_WARMUP_S = 86_400


def audit_runs(db: Path, runs: dict[str, tuple[Path, float]], figures_of: str) -> AuditOutcome:
    """Load each run's log into ``db``; the side-by-side summary and ``figures_of``'s usage."""
    from audit.load import load_log, open_db
    from audit.report import render, summary

    db.unlink(missing_ok=True)
    con = open_db(db)
    try:
        for name, (log, _) in runs.items():
            load_log(con, log, run=name)
        sums = {name: summary(con, name, wall, warmup_s=DEMO_WARMUP_S)
                for name, (_, wall) in runs.items()}
        (db.parent / "summary.json").write_text(json.dumps(sums, indent=2, default=str))
        return AuditOutcome(table=render(sums), summaries=sums,
                            node_seconds=node_seconds(con, figures_of),
                            host_seconds=host_seconds(con, figures_of))
    finally:
        con.close()


__all__ = ["DEMO_WARMUP_S", "audit_runs", "host_seconds", "node_seconds"]
