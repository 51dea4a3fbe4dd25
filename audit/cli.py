"""The ``allot audit`` command: load logs into a DuckDB file, report on them, query them, draw them.

``allot audit load LOG`` adds a run to the database (default ``allot.duckdb``);
it is the only command that writes the database. ``allot audit report`` prints
the runs side by side (and can write them as JSON), ``allot audit sql "QUERY"``
runs one query against the events table and the audit views, ``allot audit
plots`` draws every plot and the HTML page. Those three open the database
read-only and sandboxed (audit/database.py). Errors are one line on stderr and
exit status 2.

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
from rich.markup import escape
from rich.table import Table

from audit.database import open_db, open_reader, run_query
from audit.errors import AuditError
from audit.load import default_run_name, load
from audit.report import render, report, runs_in
from events.errors import AllotError

DEFAULT_DB = "allot.duckdb"
EXIT_ERROR = 2

Handler = Callable[[argparse.Namespace], int]


def _db_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", default=DEFAULT_DB, metavar="FILE",
                   help=f"the audit database (default {DEFAULT_DB})")


def _warmup_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--warmup-s", type=seconds_value, metavar="SECONDS",
                   help="leave out the first SECONDS of each run from every figure "
                        "(default: the run's lookback window, policy window_s)")


def seconds_value(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected whole seconds, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected zero or more seconds, got {value}")
    return value


def register(subparsers: argparse._SubParsersAction) -> argparse._SubParsersAction:  # type: ignore[type-arg]
    """Add ``audit`` and its subcommands; return the audit subcommand set for others to extend."""
    audit = subparsers.add_parser(
        "audit", help="load event logs into DuckDB and report on them",
        description="Load allot event logs into a DuckDB file (one run per log), print the "
                    "runs' headline figures side by side, query the audit views with SQL, or "
                    "draw them. The views are described in docs/audit.md.")
    audit.set_defaults(func=lambda _args: _usage(audit))
    sub = audit.add_subparsers(title="audit commands", metavar="COMMAND")

    p = sub.add_parser("load", help="load a JSON-lines (or .parquet) log as a run",
                       description="Load an event log into the audit database, the only command "
                                   "that writes it. Every line must be an event events.decode "
                                   "accepts: a log cut mid-line loads the lines before the cut; "
                                   "a bad line in the middle refuses the load unless --skip-bad. "
                                   "A run that already exists is replaced only with --replace.")
    p.add_argument("log", metavar="LOG", help="the event log (.jsonl, .jsonl.gz or .parquet), or an archive directory (docs/archive.md)")
    _db_option(p)
    p.add_argument("--run", metavar="NAME",
                   help="the run's name (default: the log's directory name)")
    p.add_argument("--replace", action="store_true",
                   help="replace the run if it is already loaded (otherwise that is an error)")
    p.add_argument("--skip-bad", action="store_true",
                   help="load every valid line, leave out the bad ones and record them in the "
                        "skipped_lines table")
    p.set_defaults(func=_guard(_load))

    p = sub.add_parser("report", help="headline figures per run, side by side",
                       description="Occupancy, owed vs received, waits (never-started work "
                                   "included), preemptions and fragmentation for each run, from "
                                   "the audit views, after each run's warm-up.")
    _db_option(p)
    p.add_argument("--json", metavar="OUT", help="also write the figures as JSON to OUT")
    p.add_argument("--run", metavar="NAME", nargs="+", help="only these runs (default: all)")
    _warmup_option(p)
    p.set_defaults(func=_guard(_report))

    p = sub.add_parser("sql", help="run one query against the events table and the audit views",
                       description="Run one SQL statement (see docs/audit.md for the views) on "
                                   "the database opened read-only, with no access to other "
                                   "files; print the result as a table, or as CSV with --csv.")
    p.add_argument("query", metavar="QUERY", help="the SQL to run (one statement)")
    _db_option(p)
    p.add_argument("--csv", action="store_true", help="print CSV instead of a table")
    _warmup_option(p)
    p.set_defaults(func=_guard(_sql))

    p = sub.add_parser("plots", help="draw every plot, and the HTML page, for the loaded runs",
                       description="Write the audit's plots as PNGs into OUT, and OUT/report.html "
                                   "(the summary, owed vs received per team, and every plot in "
                                   "one self-contained page).")
    _db_option(p)
    p.add_argument("--out", type=Path, default=Path("plots"), metavar="DIR",
                   help="output directory (default: plots)")
    p.add_argument("--run", metavar="NAME", nargs="+", help="only these runs (default: all)")
    _warmup_option(p)
    p.set_defaults(func=_guard(_plots))
    from audit.forecasts import add_parser as add_forecasts

    add_forecasts(sub)  # allot audit forecasts: recorded forecasts scored against the run
    return sub


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return EXIT_ERROR


def _guard(fn: Handler) -> Handler:
    """Turn expected failures into one line on stderr and exit status 2."""

    def run(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except (AllotError, duckdb.Error, OSError) as exc:
            print(f"allot audit: error: {_one_line(exc)}", file=sys.stderr)
            return EXIT_ERROR

    return run


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        return f"{exc.filename}: {exc.strerror}"
    text = str(exc).strip()
    return " ".join(text.splitlines()[0].split()) if text else type(exc).__name__


def _load(args: argparse.Namespace) -> int:
    con = open_db(args.db)
    try:
        result = load(con, args.log, args.run, replace=args.replace, skip_bad=args.skip_bad)
    finally:
        con.close()
    run = args.run or default_run_name(args.log)
    Console(highlight=False, soft_wrap=True).print(
        f"loaded {result.events:,} events from {escape(str(args.log))} as run "
        f"[bold]{escape(run)}[/] into {escape(str(args.db))}")
    # Plain prints: one line each, never wrapped, so a script can grep them.
    if result.cut is not None:
        print(f"allot audit: warning: line {result.cut.line} (the last) is not a valid event and "
              f"was not loaded: the log ends mid-line: {result.cut.reason}", file=sys.stderr)
    if result.skipped:
        first = result.skipped[0]
        print(f"allot audit: warning: skipped {len(result.skipped):,} bad line(s), listed in the "
              f"skipped_lines table; the first, line {first.line}: {first.reason}", file=sys.stderr)
    return 0


def _report(args: argparse.Namespace) -> int:
    con = open_reader(args.db, warmup_s=args.warmup_s)
    try:
        summaries = report(con, args.run)
    finally:
        con.close()
    if not summaries:
        raise AuditError(f"{args.db} holds no runs; load a log first")
    Console().print(render(summaries))
    _say_warmup(args.db, args.warmup_s, args.run)
    if args.json:
        Path(args.json).write_text(json.dumps(summaries, indent=2) + "\n")
    return 0


def _sql(args: argparse.Namespace) -> int:
    con = open_reader(args.db, warmup_s=args.warmup_s)
    try:
        cursor = run_query(con, args.query)
        if cursor.description is None:  # a statement without a result
            return 0
        names = [d[0] for d in cursor.description]
        data = cursor.fetchall()
    finally:
        con.close()
    _say_warmup(args.db, args.warmup_s)
    if args.csv:
        # "\n", not the csv module's default "\r\n": the output goes into shell pipelines.
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(names)
        writer.writerows(data)
        return 0
    table = Table(*(escape(n) for n in names))
    for row in data:
        table.add_row(*(escape(_cell(v)) for v in row))
    Console().print(table)
    return 0


def _say_warmup(db: str, warmup_s: int | None, runs: Sequence[str] | None = None) -> None:
    """One line on stderr per run: what the default warm-up left out (stdout stays the data)."""
    if warmup_s is not None:
        return  # the user chose it
    from audit.formatting import format_duration

    con = open_reader(db)
    try:
        rows = con.execute(
            "SELECT u.run, u.warmup_s, u.window_skipped, u.measured_from, s.start_t, s.end_t, "
            "p.window_s FROM warmup AS u JOIN log_span AS s USING (run) "
            "JOIN policy AS p USING (run) ORDER BY u.run").fetchall()
    finally:
        con.close()
    for run, w, skipped, measured_from, start, end, window in rows:
        if runs and run not in runs:
            continue
        if skipped:
            print(f"allot audit: {run}: the log ({format_duration(end - start)}) is no longer "
                  f"than its lookback window ({format_duration(window)}): measured from its "
                  f"start, no warm-up left out", file=sys.stderr)
        elif w:
            print(f"allot audit: {run}: the first {format_duration(measured_from - start)} of "
                  f"its {format_duration(end - start)} (one lookback window, to the hour) left "
                  f"out as warm-up; --warmup-s 0 keeps everything", file=sys.stderr)


def _plots(args: argparse.Namespace) -> int:
    from audit.html_report import write_html, write_plots

    con = open_reader(args.db, warmup_s=args.warmup_s)
    try:
        runs = list(args.run) if args.run else runs_in(con)
        if not runs:
            raise AuditError(f"{args.db} holds no runs; load a log first")
        paths = write_plots(con, runs, args.out)
        page = write_html(con, runs, args.out / "report.html")
    finally:
        con.close()
    Console(highlight=False).print(f"{len(paths)} plots and {escape(str(page))} written")
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
