"""The DuckDB audit: every scheduling metric as a SQL view over the event log.

An allot log is the complete history of a cluster: inputs (submissions, budget
edits, host faults, ticks) and the scheduler's decisions (starts, preemptions,
rejections, drains). The audit loads one or more logs ("runs", e.g. ``allot``
and ``baseline`` for the same scenario) into one DuckDB table, ``events``, and
defines views over it that answer the product's questions: did each team
receive the GPU-hours it was owed, how long did work wait, how busy and how
fragmented was the cluster, what did preemptions cost. Because the metrics are
plain SQL views, an analyst can open the database in the ``duckdb`` CLI and ask
the next question the report does not answer.

Layout: ``load`` (the events table, loading logs, the views), ``sql/views.sql``
(the view definitions), ``report`` (headline figures per run), ``cli`` (the
``allot audit`` command). The views are documented in docs/audit.md.
"""

from audit.load import LogLoadError, create_views, default_run_name, load_log, open_db
from audit.report import UnknownRun, render, report, runs_in, summary

__all__ = [
    "LogLoadError", "UnknownRun", "create_views", "default_run_name", "load_log", "open_db",
    "render", "report", "runs_in", "summary",
]
