"""The ``allot audit`` command: load logs into a DuckDB file, report on them, query them.

``allot audit load LOG`` adds a run to the database (default ``allot.duckdb``),
``allot audit report`` prints the runs side by side (and can write them as
JSON), ``allot audit sql "QUERY"`` runs any query against the events table and
the audit views. Errors are one line on stderr and exit status 2.

``register(subparsers)`` returns the audit's own subcommand set, so other
packages (the replay) can add their subcommands next to these.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import duckdb
from rich.console import Console
from rich.table import Table

from audit.load import LogLoadError, default_run_name, load_log, open_db
from audit.report import UnknownRun, render, report

DEFAULT_DB = "allot.duckdb"
EXIT_ERROR = 2

Handler = Callable[[argparse.Namespace], int]


class AuditError(Exception):
    """A failure the user can fix (bad path, bad SQL, unknown run), shown as one line."""


def _db_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", default=DEFAULT_DB, metavar="FILE",
                   help=f"the audit database (default {DEFAULT_DB})")


def register(subparsers: argparse._SubParsersAction) -> argparse._SubParsersAction:  # type: ignore[type-arg]
    """Add ``audit`` and its subcommands; return the audit subcommand set for others to extend."""
    audit = subparsers.add_parser(
        "audit", help="load event logs into DuckDB and report on them",
        description="Load allot event logs into a DuckDB file (one run per log), print the "
                    "runs' headline figures side by side, or query the audit views with SQL. "
                    "The views are described in docs/audit.md.")
    audit.set_defaults(func=lambda _args: _usage(audit))
    sub = audit.add_subparsers(title="audit commands", metavar="COMMAND")

    p = sub.add_parser("load", help="load a JSON-lines (or .parquet) log as a run",
                       description="Load an event log into the audit database. Loading the same "
                                   "run again replaces it.")
    p.add_argument("log", metavar="LOG", help="the event log (.jsonl, .jsonl.gz or .parquet)")
    _db_option(p)
    p.add_argument("--run", metavar="NAME",
                   help="the run's name (default: the log's directory name)")
    p.set_defaults(func=_guard(_load))

    p = sub.add_parser("report", help="headline figures per run, side by side",
                       description="Occupancy, owed vs received, waits, preemptions and "
                                   "fragmentation for each run, from the audit views.")
    _db_option(p)
    p.add_argument("--json", metavar="OUT", help="also write the figures as JSON to OUT")
    p.add_argument("--run", metavar="NAME", nargs="+", help="only these runs (default: all)")
    p.set_defaults(func=_guard(_report))

    p = sub.add_parser("sql", help="run a query against the events table and the audit views",
                       description="Run one SQL query (see docs/audit.md for the views) and print "
                                   "the result as a table, or as CSV with --csv.")
    p.add_argument("query", metavar="QUERY", help="the SQL to run")
    _db_option(p)
    p.add_argument("--csv", action="store_true", help="print CSV instead of a table")
    p.set_defaults(func=_guard(_sql))
    return sub


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return EXIT_ERROR


def _guard(fn: Handler) -> Handler:
    """Turn expected failures into one line on stderr and exit status 2."""

    def run(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except (AuditError, LogLoadError, UnknownRun, duckdb.Error, OSError) as exc:
            message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            print(f"allot audit: error: {message}", file=sys.stderr)
            return EXIT_ERROR

    return run


def _load(args: argparse.Namespace) -> int:
    con = open_db(args.db)
    try:
        n = load_log(con, args.log, args.run)
        run = args.run or default_run_name(args.log)
    finally:
        con.close()
    Console().print(f"loaded {n:,} events from {args.log} as run [bold]{run}[/] into {args.db}")
    return 0


def _report(args: argparse.Namespace) -> int:
    con = open_db(args.db, create=False)
    try:
        summaries = report(con, args.run)
    finally:
        con.close()
    if not summaries:
        raise AuditError(f"{args.db} holds no runs; load a log first")
    Console().print(render(summaries))
    if args.json:
        Path(args.json).write_text(json.dumps(summaries, indent=2) + "\n")
    return 0


def _sql(args: argparse.Namespace) -> int:
    con = open_db(args.db, create=False)
    try:
        cursor = con.execute(args.query)
        if cursor.description is None:  # a statement without a result (e.g. CREATE)
            return 0
        names = [d[0] for d in cursor.description]
        data = cursor.fetchall()
    finally:
        con.close()
    if args.csv:
        writer = csv.writer(sys.stdout)
        writer.writerow(names)
        writer.writerows(data)
        return 0
    table = Table(*names)
    for row in data:
        table.add_row(*(_cell(v) for v in row))
    Console().print(table)
    return 0


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float) and math.isfinite(value):
        return f"{value:.6g}"
    return str(value)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``audit ...`` as the only command (for tests and ``python -m audit.cli``)."""
    parser = argparse.ArgumentParser(prog="allot")
    register(parser.add_subparsers(metavar="COMMAND"))
    args = parser.parse_args(argv)
    if not hasattr(args, "func"):
        return _usage(parser)
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
