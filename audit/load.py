"""Loading event logs into the audit database: the only thing that writes it.

``load(con, path, run)`` adds one log as a *run*: its events go into the
``events`` table (audit/schema.py), then the run's rows of the derived tables
are computed (audit/views.py). Which lines are events is ``events.decode``'s
decision, never DuckDB's (audit/records.py): every line is decoded on a thread
while DuckDB's JSON reader reads the same file, and the load goes ahead only if
both saw the same events. A log cut mid-line (a crash while writing) loads the
lines before the cut and names it; a bad line with valid lines after it refuses
the load, naming it, unless ``skip_bad`` (then each skipped line is recorded in
``skipped_lines``). A file DuckDB's reader would take differently from the
decoder (duplicate keys, for one) is written again through ``events.encode``
and read from that copy.

A run is never replaced by accident: loading into a run that already has
events raises RunExists unless ``replace`` is given.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import msgspec

from audit.database import open_db
from audit.errors import LogLoadError, RunExists
from audit.records import BadLine, BadLog, Plan, Scan, plan, scan, scan_lines, write_lines
from audit.schema import COLUMNS, json_source, literal, quote, row_to_wire, select_list
from audit.views import (
    DERIVED,
    DERIVED_STATUS,
    LOADED_RUNS,
    SKIPPED_LINES,
    create_plain_views,
    create_views,
    derive_run,
    drop_plain_views,
    ensure_derived,
    forget_run,
    refresh_derived,
    stale_runs,
)

STAGING = "_audit_staging"
CLOCK = "_audit_clock"
# The one limit beyond the decoder's: the hourly views list every hour a run
# spans, so a run may span at most this much (a century and a half), with every
# time well inside int64 so hour arithmetic cannot overflow. A single input
# stamped 2**62 would otherwise make a log "span" 10**15 hours.
MAX_SPAN_S = 150 * 366 * 86_400
MAX_ABS_AT = 2**53

__all__ = [
    "COLUMNS", "DERIVED", "DERIVED_STATUS", "LoadResult", "LogLoadError", "RunExists",
    "create_plain_views", "create_views", "default_run_name", "drop_plain_views",
    "ensure_derived", "load", "load_log", "open_db", "refresh_derived", "stale_runs",
]


@dataclass(frozen=True, slots=True)
class LoadResult:
    """What one load did."""

    run: str
    source: str
    events: int  # events loaded
    lines: int  # lines in the file (blank ones included)
    skipped: tuple[BadLine, ...]  # bad lines left out with skip_bad
    cut: BadLine | None  # the last line, left out because the log ends mid-line
    rewritten: bool  # read from a copy the loader wrote (lines left out, or re-encoded)


def default_run_name(path: str | os.PathLike[str]) -> str:
    """The run a log belongs to by default: its directory's name (``out/allot/x.jsonl`` -> allot)."""
    p = Path(path).resolve()
    return p.parent.name or p.stem


def load_log(con: duckdb.DuckDBPyConnection, path: str | os.PathLike[str], run: str | None = None,
             *, replace: bool = False, skip_bad: bool = False) -> int:
    """``load``, returning the number of events loaded."""
    return load(con, path, run, replace=replace, skip_bad=skip_bad).events


def load(con: duckdb.DuckDBPyConnection, path: str | os.PathLike[str], run: str | None = None,
         *, replace: bool = False, skip_bad: bool = False) -> LoadResult:
    """Load a JSON-lines (optionally gzip) or ``.parquet`` log, or an archive directory, as a run.

    ``run`` defaults to the log's directory (an archive's own name).

    Raises RunExists when the run already has events and ``replace`` is False,
    and LogLoadError when the file is missing or is not a log the audit can
    load (naming the first bad line); either way the database is left as it was.
    """
    p = Path(path)
    from archive.events import is_archive

    archived = is_archive(p)
    if not archived and not p.is_file():
        raise LogLoadError(f"no such log file: {p}")
    run = run or (p.resolve().name if archived else default_run_name(p))
    # The views and derived tables must exist (this also re-derives stale runs).
    create_views(con)
    if not replace:
        _refuse_existing(con, run)
    if archived:
        result = _load_archive(con, p, run, skip_bad)
    elif p.suffix == ".parquet":
        result = _load_parquet(con, p, run, skip_bad)
    else:
        result = _load_json(con, p, run, skip_bad)
    # Derived in a second transaction, once the staging rows are freed (they take
    # gigabytes on a large log, and a transaction keeps what it drops until it
    # ends). Should this fail, the run has no derived rows and is stale, so the
    # next writer open or summary() derives it again.
    derive_run(con, run)
    return result


def _refuse_existing(con: duckdb.DuckDBPyConnection, run: str) -> None:
    row = con.execute("SELECT count(*) FROM events WHERE run = ?", [run]).fetchone()
    if not row or not row[0]:
        return
    src = con.execute(f"SELECT any_value(source) FROM {LOADED_RUNS} WHERE run = ?", [run]).fetchone()
    source = f" (from {src[0]})" if src and src[0] else ""
    raise RunExists(
        f"run {run!r} already holds {row[0]:,} events{source}; load this log as another run "
        f"with --run NAME, or pass --replace to replace it")


# -- an archive (archive/, docs/archive.md) -------------------------------------------------


def _load_archive(con: duckdb.DuckDBPyConnection, root: Path, run: str,
                  skip_bad: bool) -> LoadResult:
    """An archive directory: its events (fenced, deduplicated, grouped) as JSON lines, then those.

    ``archive.events`` reads the journal records the way the export does and
    writes each kept event's bytes as one line; the lines then load like any
    log, every one decoded by ``events.decode``. The run's source is the archive.
    """
    from archive.events import write_events

    _check_archive_seals(root)
    with tempfile.TemporaryDirectory(prefix="allot-load-archive-") as tmp:
        lines = Path(tmp) / "events.jsonl"
        with open(lines, "wb") as out:
            write_events(root, out)
        result = _load_json(con, lines, run, skip_bad)
    con.execute(f"UPDATE {LOADED_RUNS} SET source = ? WHERE run = ?", [str(root), run])
    return LoadResult(run, str(root), result.events, result.lines, result.skipped, result.cut,
                      result.rewritten)


def _check_archive_seals(root: Path) -> None:
    """Refuse an archive holding a journal record no worker signed (identity.journal_seal).

    The workers' public key comes from ``$ALLOT_KEYRING`` (a keyring file with an
    ``allot.ticker`` entry) or the local key directory of ``allot up``; with
    neither, the load says loudly that the seals were not checked.
    """
    import sys

    from identity.audit_verify import archive_seals
    from identity.journal_seal import reader_check

    check = reader_check(os.environ.get("ALLOT_KEYRING", ""))
    if check is None:
        print(f"allot audit load: WARNING: {root}: worker seals NOT checked: no worker public "
              f"key (set ALLOT_KEYRING to a keyring with an `allot.ticker` entry)",
              file=sys.stderr)
        return
    found = archive_seals(root, check)
    if found.forged:
        raise LogLoadError(
            f"{root}: {found.forged:,} of {found.records:,} archived journal record(s) carry no "
            f"valid worker seal (partition:offset {', '.join(found.failures[:5])}): no worker "
            f"wrote them; not loaded (`allot audit verify --archive {root}` lists them)")
    if found.legacy or found.unsealed:
        print(f"allot audit load: {root}: {found.legacy:,} record(s) with v1 seals and "
              f"{found.unsealed:,} unsealed record(s) from before seals: loaded, not verifiable "
              f"without the workers' secret", file=sys.stderr)


# -- JSON lines ----------------------------------------------------------------------------


def _load_json(con: duckdb.DuckDBPyConnection, p: Path, run: str, skip_bad: bool) -> LoadResult:
    # Decode every line on a thread while DuckDB reads and inserts the file (it
    # releases the GIL): when the file is clean, as logs the engine writes are,
    # the decoder's time mostly overlaps DuckDB's.
    box: dict[str, Any] = {}

    def decode_all() -> None:
        try:
            box["scan"] = scan(p)
        except BaseException as exc:  # handed to the main thread
            box["error"] = exc

    worker = threading.Thread(target=decode_all, name="audit-scan", daemon=True)
    worker.start()
    inserted: int | None = None
    refused: LogLoadError | None = None
    try:
        try:
            _stage(con, STAGING, f"SELECT {select_list(None)} FROM {json_source(str(p))}",
                   one_thread=True)
            inserted = _begin_insert(con, run, p)
        except duckdb.Error:
            inserted = None  # DuckDB cannot read the file as it is; the scan says why
        except LogLoadError as exc:
            refused = exc  # the span limit; a bad line, if the scan finds one, says more
        worker.join()
        if "error" in box:
            raise LogLoadError(f"{p}: cannot read the log: {box['error']}") from box["error"]
        found: Scan = box["scan"]
        chosen = _plan(p, found, skip_bad)
        if refused is not None and chosen.keep is None:
            raise refused
        if inserted is not None and chosen.keep is None and _staged_as(con, found):
            _finish_insert(con, run, p, found.lines, chosen, inserted)
            inserted = None
            return LoadResult(run, str(p), found.events, found.lines, (), None, False)
        if inserted is not None:
            con.execute("ROLLBACK")
            inserted = None
        return _load_rewritten(con, p, run, found, chosen, skip_bad)
    finally:
        if inserted is not None:  # an error between the insert and the commit
            con.execute("ROLLBACK")
        worker.join()
        _drop_staging(con)


def _plan(p: Path, found: Scan, skip_bad: bool, *, storage_checked: bool = False) -> Plan:
    try:
        return plan(found, skip_bad)
    except BadLog as bad:
        first, count = bad.first, bad.count
        limit = first.line
        if not storage_checked and p.suffix != ".parquet":
            # The storage rule is otherwise only checked when DuckDB refuses the file:
            # a line before the decoder's first bad one may break it, and is then the first.
            with open(os.devnull, "wb") as sink:
                problems, _ = _on_thread(lambda: write_lines(
                    p, sink, lambda n: n < limit, canonical=True))
            if problems:
                first, count = problems[0], count + len(problems)
        more = f" ({count:,} bad lines in all)" if count > 1 else ""
        raise LogLoadError(
            f"{p}: line {first.line} is not a valid event: {first.reason}{more}; "
            "nothing was loaded (--skip-bad loads the valid lines and records the others)"
        ) from None


def _load_rewritten(con: duckdb.DuckDBPyConnection, p: Path, run: str, found: Scan,
                    chosen: Plan, skip_bad: bool) -> LoadResult:
    """Load from a copy: the lines the plan keeps, as they are, else as events.encode writes them.

    A plain copy serves a log with bad lines left out. If DuckDB's reader cannot
    take it, or reads other events than the decoder did (duplicate keys, for
    one), every kept line is written again from its decoded event; that also
    finds the lines whose integers the events table cannot hold (the storage
    rule), which count as bad lines under the same rule.
    """
    with tempfile.TemporaryDirectory(prefix="allot-load-") as tmp:
        copy = Path(tmp) / "events.jsonl"
        staged = False
        if chosen.keep is not None:
            with open(copy, "wb") as out:
                write_lines(p, out, chosen.keep, canonical=False)
            staged = _try_stage_json(con, copy) and _staged_as(con, found)
        if not staged:
            with open(copy, "wb") as out:
                # On a fresh thread, as the scan decoded: the same decoder, the same stack.
                problems, written = _on_thread(lambda: write_lines(p, out, chosen.keep, canonical=True))
            assert written is not None
            if problems:
                chosen = _plan(p, found.with_problems(problems, written), skip_bad,
                               storage_checked=True)
            try:
                _stage(con, STAGING, f"SELECT {select_list(None)} FROM {json_source(str(copy))}",
                       one_thread=True)
            except duckdb.Error as exc:
                raise LogLoadError(f"{p}: DuckDB cannot read the re-encoded log: "
                                   f"{_first_line(exc)}") from exc
            if not _staged_as(con, written):
                raise LogLoadError(f"{p}: DuckDB read other events than the decoder "
                                   "(a bug in the audit's loader; please report it)")
        inserted = _begin_insert(con, run, p)
        try:
            _finish_insert(con, run, p, found.lines, chosen, inserted)
        except BaseException:
            con.execute("ROLLBACK")
            raise
    return LoadResult(run, str(p), inserted, found.lines, chosen.skipped, chosen.cut, True)


def _on_thread(fn: Any) -> Any:
    """fn() on a fresh thread; its result, or its exception raised here."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = fn()
        except BaseException as exc:
            box["error"] = exc

    worker = threading.Thread(target=run, name="audit-rewrite", daemon=True)
    worker.start()
    worker.join()
    if "error" in box:
        raise box["error"]
    return box["result"]


def _try_stage_json(con: duckdb.DuckDBPyConnection, path: Path) -> bool:
    try:
        _stage(con, STAGING, f"SELECT {select_list(None)} FROM {json_source(str(path))}",
               one_thread=True)
    except duckdb.Error:
        return False
    return True


def _staged_as(con: duckdb.DuckDBPyConnection, expected: Scan) -> bool:
    """Whether the staged rows are the events the decoder found: count, types, times, order."""
    row = con.execute(f'SELECT count(*), coalesce(sum("at"), 0), '
                      f'coalesce(sum((rowid + 1)::HUGEINT * "at"), 0) FROM {STAGING}').fetchone()
    if row is None or row[0] != expected.events or int(row[1]) != expected.at_sum \
            or int(row[2]) != expected.at_by_position:
        return False
    by_type = Counter(dict(con.execute(
        f"SELECT type, count(*) FROM {STAGING} GROUP BY type").fetchall()))
    return by_type == expected.by_type


# -- Parquet -------------------------------------------------------------------------------


def _load_parquet(con: duckdb.DuckDBPyConnection, p: Path, run: str, skip_bad: bool) -> LoadResult:
    """A Parquet file in the events layout: staged by DuckDB, then each row decoded as its event.

    Row order is the log order, unless the file carries ``seq`` (a re-export of
    a loaded run), which then wins; a bad row is named by that position.
    """
    source = _parquet_source(con, str(p))
    try:
        try:
            _stage(con, STAGING, source)
        except duckdb.Error as exc:
            raise LogLoadError(f"{p}: not a valid allot log: {_first_line(exc)}") from exc
        found = _scan_staged(con)
        chosen = _plan(p, found, skip_bad)
        if chosen.keep is not None:
            keep = chosen.keep
            dropped = [n for n in range(1, found.lines + 1) if not keep(n)]
            _stage(con, f"{STAGING}_kept", f"SELECT * FROM {STAGING} "
                   f"WHERE NOT list_contains({dropped!r}::BIGINT[], rowid + 1) ORDER BY rowid")
            con.execute(f"DROP TABLE {STAGING}")
            con.execute(f"ALTER TABLE {STAGING}_kept RENAME TO {STAGING}")
        inserted = _begin_insert(con, run, p)
        try:
            _finish_insert(con, run, p, found.lines, chosen, inserted)
        except BaseException:
            con.execute("ROLLBACK")
            raise
    finally:
        _drop_staging(con)
    return LoadResult(run, str(p), inserted, found.lines, chosen.skipped, chosen.cut, False)


def _parquet_source(con: duckdb.DuckDBPyConnection, path: str) -> str:
    """A query over a Parquet file in the ``events`` layout (as ``COPY events TO`` writes it)."""
    scan_sql = f"read_parquet({literal(path)}, file_row_number = true)"
    try:
        present = {r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {scan_sql}").fetchall()}
    except duckdb.Error as exc:
        raise LogLoadError(f"{path}: not a readable Parquet file: {_first_line(exc)}") from exc
    if "type" not in present:
        raise LogLoadError(f"{path}: no `type` column; expected the events-table layout")
    order = "seq, file_row_number" if "seq" in present else "file_row_number"
    return f"SELECT {select_list(present)} FROM {scan_sql} ORDER BY {order}"


def _scan_staged(con: duckdb.DuckDBPyConnection) -> Scan:
    """Decode each staged row (numbered from 1) as the wire record of its type."""
    cur = con.execute(f"SELECT * FROM {STAGING} ORDER BY rowid")
    names = [d[0] for d in cur.description or ()]

    def records() -> Iterator[bytes]:
        while batch := cur.fetchmany(10_000):
            for values in batch:
                yield msgspec.json.encode(row_to_wire(dict(zip(names, values, strict=True))))

    return scan_lines(records())


# -- staging and the insert ----------------------------------------------------------------


def _stage(con: duckdb.DuckDBPyConnection, table: str, source: str, *, one_thread: bool = False) -> None:
    """Read ``source`` into the TEMP table ``table``, in order (its rowid is the position).

    ``one_thread``: read on one thread. DuckDB's JSON reader does not keep file
    order when the projection over it is heavy enough and runs on several
    threads (DuckDB 2.0.1: 5 loads in 12 of a 300,000-line log put its second
    half first), so JSON is read on one thread while the decoder takes the
    other core; the staged rows' order is then checked against the decoder's.
    """
    # Staging keeps file order, so its rowid is the event's position; that needs
    # insertion order preserved (the default, which a caller may have turned off).
    (keep_order,) = con.execute("SELECT current_setting('preserve_insertion_order')").fetchone() or (True,)
    (threads,) = con.execute("SELECT current_setting('threads')").fetchone() or (1,)
    con.execute("SET preserve_insertion_order = true")
    if one_thread:
        con.execute("SET threads = 1")
    try:
        con.execute(f"CREATE OR REPLACE TEMP TABLE {table} AS {source}")
    finally:
        con.execute(f"SET preserve_insertion_order = {bool(keep_order)}")
        con.execute(f"SET threads = {int(threads)}")


def _check_span(con: duckdb.DuckDBPyConnection, p: Path) -> None:
    """Refuse a log whose times the hourly views cannot cover (MAX_SPAN_S, MAX_ABS_AT)."""
    row = con.execute(f'SELECT min("at"), max("at"), arg_min(rowid, "at"), arg_max(rowid, "at") '
                      f"FROM {STAGING}").fetchone()
    if row is None or row[0] is None:
        return
    lo, hi, lo_pos, hi_pos = row
    if hi - lo > MAX_SPAN_S or max(abs(lo), abs(hi)) > MAX_ABS_AT:
        raise LogLoadError(
            f"{p}: its times run from at={lo} (event {lo_pos + 1}) to at={hi} (event {hi_pos + 1}); "
            f"the audit covers logs spanning at most {MAX_SPAN_S // (366 * 86_400)} years "
            f"with |at| <= 2**53")


def _begin_insert(con: duckdb.DuckDBPyConnection, run: str, p: Path) -> int:
    """Replace run's events with the staged rows, in an open transaction; return the row count."""
    _check_span(con, p)
    # The clock (running max of ``at``) is computed on two narrow columns (a
    # window over the wide staging rows costs 5x more). Only the rows where it
    # differs from ``at`` (late inputs, usually few) are kept, and joined back by
    # position: unlike a POSITIONAL JOIN, that join lets the insert run on
    # every core. ``at`` is a keyword in DuckDB 2 and must be quoted when unqualified.
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE {CLOCK} AS SELECT r, t FROM ("
        f"SELECT rowid AS r, \"at\", max(\"at\") OVER "
        f"(ORDER BY rowid ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS t "
        f"FROM {STAGING}) WHERE t IS DISTINCT FROM \"at\"")
    names = ", ".join(f"s.{quote(c.name)}" for c in COLUMNS)
    con.execute("BEGIN TRANSACTION")
    try:
        con.execute("DELETE FROM events WHERE run = ?", [run])
        con.execute(
            f"INSERT INTO events BY NAME SELECT ? AS run, s.rowid + 1 AS seq, "
            f"coalesce(c.t, s.\"at\") AS t, s.type, {names} "
            f"FROM {STAGING} AS s LEFT JOIN {CLOCK} AS c ON c.r = s.rowid", [run])
        row = con.execute(f"SELECT count(*) FROM {STAGING}").fetchone()
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return int(row[0]) if row else 0


def _finish_insert(con: duckdb.DuckDBPyConnection, run: str, p: Path, lines: int, chosen: Plan,
                   inserted: int) -> None:
    """Record the load, drop the run's old derived rows, and commit the open transaction."""
    forget_run(con, run)
    con.execute(f"DELETE FROM {LOADED_RUNS} WHERE run = ?", [run])
    con.execute(f"DELETE FROM {SKIPPED_LINES} WHERE run = ?", [run])
    left_out = [*chosen.skipped, *([chosen.cut] if chosen.cut else [])]
    con.execute(f"INSERT INTO {LOADED_RUNS} VALUES (?, ?, ?, ?, ?, ?)",
                [run, str(p), inserted, lines, len(chosen.skipped),
                 chosen.cut.line if chosen.cut else None])
    if left_out:
        con.executemany(f"INSERT INTO {SKIPPED_LINES} VALUES (?, ?, ?)",
                        [[run, b.line, b.reason] for b in left_out])
    con.execute("COMMIT")


def _drop_staging(con: duckdb.DuckDBPyConnection) -> None:
    for table in (STAGING, f"{STAGING}_kept", CLOCK):
        con.execute(f"DROP TABLE IF EXISTS {table}")


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
