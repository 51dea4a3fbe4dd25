"""Forecasts scored against what happened: the ``forecasts`` table and the ``forecast_errors`` view.

Forecasts are not decisions: they never enter a journal. The simulator (at
each sampled submission) and the live state API (every forecast it serves)
write them to a JSON-lines side file (forecast/record.py). ``load_forecasts``
adds such a file to a run already loaded, into the ``forecasts`` table (one
row per record, ``n`` its line); ``forecast_errors`` pairs each with what the
run's events say happened:

- ``actual_start``: the workload's first start at or after the moment the
  forecast was made (``runs``), NULL if it never started again in the log;
- ``outcome``: ``scored`` (a forecast start and an actual one),
  ``never_started`` (the workload ended unstarted, cancelled by its user's
  patience or refused, or was still waiting when the log ends),
  ``no_start_forecast`` (the forecast gave no start: beyond its horizon, or a
  live forecast's cycle bound; ``forecast_status`` says which),
  ``unknown_workload`` (no such submission in the run);
- ``error_s``: forecast minus actual (positive: the forecast was late), and
  ``abs_error_s``;
- ``abs_error_lower_s``: for work that never started, a lower bound of the
  error: from the forecast start to when the workload ended unstarted or the
  log ended (0 when that is before the forecast start).

``summary(con, run)``: per kind and over all kinds, the counts of each outcome
and the median / p90 absolute error over the scored forecasts, then over the
scored and never-started ones (the latter at their lower bound), then over the
scored forecasts that said the work would wait (start after ``made_at``), all
with DuckDB's ``quantile_cont`` (linear interpolation, as forecast/score.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import duckdb
import msgspec

from audit.errors import AuditError, RunExists, UnknownRun

FORECASTS = "forecasts"
OUTCOMES = ("scored", "never_started", "no_start_forecast", "unknown_workload")

_TABLE = f"""CREATE TABLE IF NOT EXISTS {FORECASTS} (
    run VARCHAR, n BIGINT, workload VARCHAR, kind VARCHAR, made_at BIGINT, start BIGINT,
    status VARCHAR, not_before BIGINT, source VARCHAR)"""

_VIEW = f"""CREATE OR REPLACE VIEW forecast_errors AS
WITH nxt AS (
    SELECT f.run, f.n, min(r.start_at) AS actual_start
    FROM {FORECASTS} AS f
    JOIN runs AS r ON r.run = f.run AND r.workload = f.workload AND r.start_at >= f.made_at
    GROUP BY f.run, f.n)
SELECT f.run, f.n, f.workload, f.kind, f.source, f.made_at, f.start AS forecast_start,
       f.status AS forecast_status, f.not_before, x.actual_start,
       CASE WHEN w.workload IS NULL THEN 'unknown_workload'
            WHEN x.actual_start IS NULL THEN 'never_started'
            WHEN f.start IS NULL THEN 'no_start_forecast'
            ELSE 'scored' END AS outcome,
       f.start - x.actual_start AS error_s,
       abs(f.start - x.actual_start) AS abs_error_s,
       CASE WHEN w.workload IS NOT NULL AND x.actual_start IS NULL AND f.start IS NOT NULL
            THEN greatest(0, coalesce(w.ended_at, s.end_t) - f.start) END AS abs_error_lower_s,
       w.ended_at AS ended_unstarted_at
FROM {FORECASTS} AS f
LEFT JOIN nxt AS x USING (run, n)
LEFT JOIN workloads AS w ON w.run = f.run AND w.workload = f.workload
LEFT JOIN log_span AS s ON s.run = f.run"""


class ForecastLoadError(AuditError):
    """A forecast file that cannot be loaded (unreadable, a bad line)."""


class ForecastLine(msgspec.Struct, frozen=True):
    """One line of a forecast file, as the audit reads it (written as forecast.score.ForecastRecord:
    the audit does not import the forecast package, so it states the fields it needs)."""

    workload: str
    kind: str
    made_at: int
    start: int | None
    status: str = "pending"
    not_before: int | None = None
    source: str = ""


def read_forecast_lines(path: str | os.PathLike[str]) -> list[ForecastLine]:
    """The lines of a forecast file; ``ForecastLoadError`` names the first bad one."""
    dec = msgspec.json.Decoder(ForecastLine)
    out: list[ForecastLine] = []
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ForecastLoadError(f"{path}: {exc.strerror or exc}") from None
    for n, line in enumerate(data.splitlines(), 1):
        if line.strip():
            try:
                out.append(dec.decode(line))
            except msgspec.DecodeError as exc:
                raise ForecastLoadError(f"{path}:{n}: not a forecast record: {exc}") from None
    return out


def ensure_forecast_view(con: duckdb.DuckDBPyConnection) -> None:
    """Create the ``forecasts`` table if missing and (re)create the ``forecast_errors`` view."""
    con.execute(_TABLE)
    con.execute(_VIEW)


def load_forecasts(con: duckdb.DuckDBPyConnection, path: str | os.PathLike[str], run: str,
                   replace: bool = False) -> int:
    """Add the forecast records of ``path`` to ``run`` (whose events must be loaded); return how many.

    A run that already has forecasts is replaced only with ``replace``.
    """
    if not con.execute("SELECT count(*) FROM events WHERE run = ?", [run]).fetchone()[0]:  # type: ignore[index]
        raise UnknownRun(run)
    records = read_forecast_lines(path)
    ensure_forecast_view(con)
    had = con.execute(f"SELECT count(*) FROM {FORECASTS} WHERE run = ?", [run]).fetchone()[0]  # type: ignore[index]
    if had and not replace:
        raise RunExists(f"run {run!r} already has {had:,} forecasts; pass --replace to replace them")
    con.execute("BEGIN")
    try:
        con.execute(f"DELETE FROM {FORECASTS} WHERE run = ?", [run])
        con.executemany(f"INSERT INTO {FORECASTS} VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        [(run, i, r.workload, r.kind, r.made_at, r.start, r.status, r.not_before,
                          r.source) for i, r in enumerate(records, 1)])
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return len(records)


def summary(con: duckdb.DuckDBPyConnection, run: str) -> dict[str, dict[str, Any]]:
    """Per kind, then ``all``: forecasts, each outcome's count, p50/p90 absolute error (s)."""
    ensure_forecast_view(con)
    counts = ", ".join(f"count(*) FILTER (WHERE outcome = '{o}') AS {o}" for o in OUTCOMES)
    scored = "quantile_cont(abs_error_s, {q}) FILTER (WHERE outcome = 'scored')"
    # Never-started work at the lower bound of its error (NULL when it had no forecast start).
    lower = ("quantile_cont(coalesce(abs_error_s, abs_error_lower_s), {q}) "
             "FILTER (WHERE outcome IN ('scored', 'never_started'))")
    # Work the forecast said would wait (most starts at once, and those forecasts are easy).
    waited = "outcome = 'scored' AND forecast_start > made_at"
    rows = con.execute(f"""
        SELECT coalesce(kind, 'all') AS k, count(*) AS forecasts, {counts},
               {scored.format(q=0.5)}, {scored.format(q=0.9)},
               {lower.format(q=0.5)}, {lower.format(q=0.9)},
               median(error_s) FILTER (WHERE outcome = 'scored'),
               count(*) FILTER (WHERE {waited}),
               quantile_cont(abs_error_s, 0.5) FILTER (WHERE {waited}),
               quantile_cont(abs_error_s, 0.9) FILTER (WHERE {waited})
        FROM forecast_errors WHERE run = ?
        GROUP BY GROUPING SETS ((kind), ())
        ORDER BY kind IS NULL, kind""", [run]).fetchall()
    keys = ("forecasts", *OUTCOMES, "p50_abs_error_s", "p90_abs_error_s",
            "p50_abs_error_with_never_started_s", "p90_abs_error_with_never_started_s",
            "median_error_s", "scored_waiting", "p50_abs_error_waiting_s",
            "p90_abs_error_waiting_s")
    return {r[0]: dict(zip(keys, r[1:], strict=True)) for r in rows if r[1]}


def _duration(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 3600:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


def _run(args: argparse.Namespace) -> int:
    from audit.database import open_db

    con = open_db(args.db)
    try:
        if args.file is not None:
            n = load_forecasts(con, args.file, args.run, replace=args.replace)
            if not args.json:
                print(f"loaded {n:,} forecasts from {args.file} into run {args.run}")
        doc = summary(con, args.run)
    finally:
        con.close()
    if args.json:
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    if not doc:
        print(f"run {args.run} has no forecasts (load them: allot audit forecasts FILE --run NAME)")
        return 0
    print("kind         forecasts  scored  never started  no start  p50 |err|  p90 |err|  "
          "with never-started (lower bound)  forecast to wait: n, p50, p90")
    for k, r in doc.items():
        print(f"{k:<12} {r['forecasts']:>9,} {r['scored']:>7,} {r['never_started']:>14,} "
              f"{r['no_start_forecast']:>9,} {_duration(r['p50_abs_error_s']):>10} "
              f"{_duration(r['p90_abs_error_s']):>10}  "
              f"{_duration(r['p50_abs_error_with_never_started_s']):>15} / "
              f"{_duration(r['p90_abs_error_with_never_started_s']):<15}  "
              f"{r['scored_waiting']:,}, {_duration(r['p50_abs_error_waiting_s'])}, "
              f"{_duration(r['p90_abs_error_waiting_s'])}")
    return 0


def add_parser(audit_sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``allot audit forecasts``."""
    from audit.cli import _db_option, _guard

    p = audit_sub.add_parser(
        "forecasts", help="load recorded forecasts for a run and score them against it",
        description="Load FILE (forecast records, JSON lines: written by the simulator's "
                    "recorder, `allot forecast --record`, or the state API under "
                    "ALLOT_FORECAST_RECORD) into the forecasts table for RUN, whose events are "
                    "already loaded, and print the error per kind of work: each forecast start "
                    "against the workload's next actual start (view forecast_errors, "
                    "docs/audit.md). Without FILE, print the run's figures.")
    p.add_argument("file", nargs="?", metavar="FILE", help="forecast records (JSON lines)")
    p.add_argument("--run", required=True, metavar="NAME", help="the run the forecasts are of")
    _db_option(p)
    p.add_argument("--replace", action="store_true",
                   help="replace the run's forecasts if it has some (otherwise an error)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON (seconds)")
    p.set_defaults(func=_guard(_run))


__all__ = [
    "FORECASTS",
    "OUTCOMES",
    "ForecastLine",
    "ForecastLoadError",
    "add_parser",
    "ensure_forecast_view",
    "load_forecasts",
    "read_forecast_lines",
    "summary",
]
