"""The DuckDB audit: every scheduling metric as a SQL view over the event log.

An allot log is the complete history of a cluster: inputs (submissions, budget
edits, host faults, ticks) and the scheduler's decisions (starts, preemptions,
rejections, drains). The audit loads one or more logs ("runs", e.g. ``allot``
and ``baseline`` for the same scenario) into one DuckDB table, ``events``, and
defines views over it that answer the product's questions: did each team
receive the GPU-hours it was owed, how long did work wait (and how much never
started), how busy and how fragmented was the cluster, what did preemptions
cost. Because the metrics are plain SQL views, an analyst can open the database
in the ``duckdb`` CLI and ask the next question the report does not answer.

Layout: ``errors`` (the audit's errors), ``records`` (which lines of a log are
events: ``events.decode`` decides), ``schema`` (the events table), ``load``
(the only writer: loading logs), ``views`` (the views and the derived tables
they read; ``sql/*.sql``), ``database`` (opening: the writer, and the
sandboxed read-only opener every reader uses), ``report`` (headline figures
per run), ``formatting`` (how figures print), ``plots`` and ``html_report``
(pictures, one page), ``cli`` (the ``allot audit`` command). The views are
documented in docs/audit.md.
"""

from audit.database import open_db, open_reader, run_query
from audit.errors import (
    AuditError,
    LogLoadError,
    NotAnAuditDatabase,
    QueryRefused,
    RunExists,
    UnknownRun,
)
from audit.load import LoadResult, default_run_name, load, load_log
from audit.report import render, report, runs_in, summary
from audit.views import create_views

__all__ = [
    "AuditError", "LoadResult", "LogLoadError", "NotAnAuditDatabase", "QueryRefused", "RunExists",
    "UnknownRun", "create_views", "default_run_name", "load", "load_log", "open_db", "open_reader",
    "render", "report", "run_query", "runs_in", "summary",
]
