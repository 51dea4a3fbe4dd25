"""Opening an audit database: one writer, and one sandboxed read-only opener for everything else.

The audit database is something analysts open, not a shell. Only the loader
writes it (``open_db``, used by ``allot audit load`` and the simulator).
Everything that reads it (``allot audit report``, ``sql``, ``plots``) goes
through ``open_reader``, which opens the file read-only with DuckDB's file
system closed to queries (no ``read_csv('/etc/passwd')``, no ``COPY ... TO``,
no ``ATTACH``, no extension installed or loaded) and the configuration locked
so no query can open it again; ``run_query`` then runs exactly one statement.
A query can still create TEMP tables and views (they live in this process's
memory and vanish with it) and read the database file it was given.
"""

from __future__ import annotations

import os
from pathlib import Path

import duckdb

from audit.errors import NotAnAuditDatabase, QueryRefused
from audit.views import (
    DERIVED,
    DERIVED_STATUS,
    create_plain_views,
    create_views,
    stale_runs,
    stored_views_fingerprint,
    table_exists,
    views_fingerprint,
)

# What a reader's connection may do. Locked, so a query cannot change it back.
READER_CONFIG: dict[str, str | bool] = {
    "enable_external_access": False,  # no files but the database: read_*, COPY, ATTACH, EXPORT
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "allow_community_extensions": False,
    # No spilling to disk: a reader leaves the file system as it found it.
    "temp_directory": "",
    "lock_configuration": True,
}

# The warm-up every figure leaves out, when a reader sets it (see the warmup view).
WARMUP_VARIABLE = "allot_warmup_s"


def open_db(path: str | os.PathLike[str] = "allot.duckdb", *, create: bool = True) -> duckdb.DuckDBPyConnection:
    """Open the audit database for writing (the loader's connection), with its views in place.

    Creates the file unless ``create`` is False; brings the views and derived
    tables up to date. Raises NotAnAuditDatabase when ``create`` is False and
    the file does not exist.
    """
    p = Path(path)
    if not create and not p.is_file():
        raise NotAnAuditDatabase(f"no audit database at {p}; load a log first (allot audit load LOG)")
    con = duckdb.connect(str(p))
    # The terminal progress bar would interleave with our own output.
    con.execute("SET enable_progress_bar = false")
    create_views(con)
    return con


def open_reader(path: str | os.PathLike[str], *, warmup_s: int | None = None) -> duckdb.DuckDBPyConnection:
    """Open an audit database read-only, sandboxed (module docstring), for report, sql and plots.

    ``warmup_s`` sets the warm-up the views leave out (default: each run's
    lookback window). Raises NotAnAuditDatabase when the file is missing, is
    not an audit database, or was written by another version of the audit
    (the message says how to bring it up to date).
    """
    p = Path(path)
    if not p.is_file():
        raise NotAnAuditDatabase(f"no audit database at {p}; load a log first (allot audit load LOG)")
    config = dict(READER_CONFIG)
    try:
        con = duckdb.connect(str(p), read_only=True, config=config)
    except duckdb.Error as exc:
        raise NotAnAuditDatabase(f"{p}: not a DuckDB database DuckDB {duckdb.__version__} can "
                                 f"open read-only: {_first_line(exc)}") from exc
    try:
        _check_current(con, p)
        if stale_runs(con):
            # Events edited by hand since they were derived: read those views from the events.
            create_plain_views(con)
        if warmup_s is not None:
            set_warmup(con, warmup_s)
    except BaseException:
        con.close()
        raise
    return con


def _check_current(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    if not table_exists(con, "events"):
        raise NotAnAuditDatabase(f"{path} is not an audit database (it has no events table)")
    needed = [DERIVED_STATUS, *(f"derived_{v}" for v in DERIVED)]
    if not all(table_exists(con, t) for t in needed) or \
            stored_views_fingerprint(con) != views_fingerprint(con):
        raise NotAnAuditDatabase(
            f"{path} was written by another version of the audit; load one of its logs again "
            f"(allot audit load --replace LOG --db {path}) to rebuild its views and derived tables")


def set_warmup(con: duckdb.DuckDBPyConnection, warmup_s: int | None) -> None:
    """Set (or with None, reset to each run's lookback window) the warm-up the views leave out."""
    if warmup_s is None:
        con.execute(f"RESET VARIABLE {WARMUP_VARIABLE}")
        return
    if isinstance(warmup_s, bool) or not isinstance(warmup_s, int) or warmup_s < 0:
        raise ValueError(f"warmup_s must be a non-negative integer number of seconds, got {warmup_s!r}")
    con.execute(f"SET VARIABLE {WARMUP_VARIABLE} = {int(warmup_s)}::BIGINT")


def current_warmup(con: duckdb.DuckDBPyConnection) -> int | None:
    """The warm-up set on this connection, or None when each run's window applies."""
    row = con.execute(f"SELECT getvariable('{WARMUP_VARIABLE}')").fetchone()
    return None if row is None or row[0] is None else int(row[0])


def run_query(con: duckdb.DuckDBPyConnection, query: str) -> duckdb.DuckDBPyConnection:
    """Run exactly one SQL statement; refuse none or several with QueryRefused.

    The statement runs as DuckDB parsed it, so a second statement hidden after a
    semicolon (``SELECT 1; DELETE FROM events``) is counted, not run.
    """
    statements = con.extract_statements(query)
    if not statements:
        raise QueryRefused("no SQL statement to run")
    if len(statements) > 1:
        raise QueryRefused(f"one statement per call, got {len(statements)}; run them one at a time")
    return con.execute(statements[0])


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
