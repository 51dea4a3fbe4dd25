"""Both sides of a what-if, audited the same way and set side by side, team by team.

The recorded journal and the re-simulated one are loaded into one audit
database as runs ``recorded`` and ``whatif``; every figure comes from the
audit's SQL views (audit/), measured over the period only (the warm-up is the
journal before ``t1``). Per team: owed and received GPU-hours (funded work,
the lab's definition), the received/owed ratio, p50 and p90 first waits of the
work submitted in the period, and GPU-hours lost to preemption (runs of
non-resumable work ended by a preemption).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from audit.database import current_warmup, set_warmup
from audit.load import load_log, open_db
from audit.report import summary
from events import write_log
from whatif.rerun import Rerun

RUNS = ("recorded", "whatif")


def _per_team(con: Any, run: str) -> dict[str, dict[str, Any]]:
    teams: dict[str, dict[str, Any]] = {}
    for team, owed, received, ratio in con.execute("""
            SELECT team, owed_gpu_h, received_capped, ratio FROM owed_received_by_team
            WHERE run = ? ORDER BY team""", [run]).fetchall():
        teams[team] = {"owed_gpu_h": owed, "received_gpu_h": received, "ratio": ratio}
    for team, n, p50, p90 in con.execute("""
            SELECT team, count(*), quantile_cont(wait_s, 0.5), quantile_cont(wait_s, 0.9)
            FROM waits WHERE run = ? AND NOT in_warmup GROUP BY team""", [run]).fetchall():
        teams.setdefault(team, {}).update({"submitted": n, "wait_p50_s": p50, "wait_p90_s": p90})
    for team, n, lost in con.execute("""
            SELECT r.team, count(*),
                   coalesce(sum(CASE WHEN r.requeued THEN 0 ELSE r.gpus * r.duration_s END), 0)
                       / 3600.0
            FROM runs AS r JOIN warmup AS u USING (run)
            WHERE r.run = ? AND r.stop_reason = 'preempted' AND r.stop_at >= u.measured_from
            GROUP BY r.team""", [run]).fetchall():
        teams.setdefault(team, {}).update({"preemptions": n, "lost_gpu_h": lost})
    return teams


def compare(result: Rerun, out: Path, wall_seconds: float | None = None) -> dict[str, Any]:
    """Write both journals under ``out``, audit them, and return the side-by-side document."""
    logs = {"recorded": result.recorded, "whatif": result.log}
    out.mkdir(parents=True, exist_ok=True)
    db = out / "whatif.duckdb"
    if db.exists():
        db.unlink()
    con = open_db(db)
    try:
        for run, events in logs.items():
            path = out / run / "events.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            write_log(path, events)
            load_log(con, path, run=run)
        start = result.recorded[0].at if result.recorded else result.t1
        warmup = max(0, result.t1 - start)
        summaries = {run: summary(con, run, wall_seconds=wall_seconds if run == "whatif" else None,
                                  warmup_s=warmup) for run in RUNS}
        teams_by_run = {run: _per_team_at(con, run, warmup) for run in RUNS}
    finally:
        con.close()
    names = sorted(set(teams_by_run["recorded"]) | set(teams_by_run["whatif"]))
    teams = [{"team": t, "recorded": teams_by_run["recorded"].get(t, {}),
              "whatif": teams_by_run["whatif"].get(t, {})} for t in names]
    for row in teams:
        a, b = row["recorded"].get("ratio"), row["whatif"].get("ratio")
        row["ratio_change"] = None if a is None or b is None else b - a
    return {"recorded": summaries["recorded"], "whatif": summaries["whatif"], "teams": teams,
            "database": str(db), "logs": {run: str(out / run / "events.jsonl") for run in RUNS}}


def _per_team_at(con: Any, run: str, warmup: int) -> dict[str, dict[str, Any]]:
    """``_per_team`` with the period's warm-up in force (the views read it from the connection)."""
    before = current_warmup(con)
    set_warmup(con, warmup)
    try:
        return _per_team(con, run)
    finally:
        set_warmup(con, before)


__all__ = ["RUNS", "compare"]
