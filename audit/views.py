"""The audit's views, and the derived tables that the expensive ones read.

Every metric is a SQL view over ``events`` (audit/sql/views.sql, documented in
docs/audit.md). What those views would need a sort over the whole log for
(each start paired with the workload's next lifecycle event, each host's
timeline) and the hourly totals on top of them are computed once per run, when
the log is loaded, and stored in the ``derived_*`` tables (audit/sql/derive.sql);
those views read the tables. ``derived_status`` records what each run's rows
were derived from, and ``create_views`` (so every writer open) and
``report.summary`` derive again any run whose events changed other than through
the loader or that an older version loaded. ``create_plain_views`` puts the
plain definitions (audit/sql/plain.sql, straight from the events) in their
place, to check them.

``audit_meta`` holds the fingerprint of the view definitions a writer last
created, so a read-only opener can tell whether the stored views are this
version's (audit/database.py).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from importlib import resources
from typing import Any

import duckdb

from audit.schema import COLUMNS, ensure_events_table, literal, quote
from events.policy import PolicyConfigured
from events.union import tag_of

# Views whose rows the loader computes once per run and stores in a table named
# derived_<view> (audit/sql/derive.sql); the view then reads that table.
DERIVED: tuple[str, ...] = (
    "workloads", "runs", "host_intervals", "cluster_hours", "team_demand_by_hour",
    "unproductive_by_hour", "requeue_waits")
# The views plain.sql defines (the ones above, and waits, read from derived_workloads).
PLAIN_VIEWS: tuple[str, ...] = (
    "waits", "runs", "workloads", "team_demand_by_hour", "cluster_hours", "host_intervals",
    "unproductive_by_hour", "requeue_waits")
# Which runs the derived tables hold, and from what: a run is re-derived when its
# event count, last seq or the fingerprint (of the SQL and the events columns)
# no longer match.
DERIVED_STATUS = "derived_status"
# What the loader records per run, and the lines it left out (see audit.load).
LOADED_RUNS = "loaded_runs"
SKIPPED_LINES = "skipped_lines"
META = "audit_meta"
# views.sql is run in two parts; the derived tables are created in between.
_DERIVED_MARKER = "-- @derived"


def create_views(con: duckdb.DuckDBPyConnection) -> None:
    """(Re)create the ``events`` table if missing, every audit view and macro, and the derived tables.

    Runs whose derived rows are missing or stale (loaded by an older version, or
    events changed other than by ``load_log``) are derived again.
    """
    ensure_events_table(con)
    ensure_loader_tables(con)
    if _views_current(con):
        # Recreating 40-odd views costs DuckDB about a third of a CPU-second of binding;
        # a database whose views this same SQL already made only needs its runs derived.
        refresh_derived(con)
        return
    before, after = _views_sql()
    con.execute(before)
    _ensure_derived_tables(con)
    con.execute(after)
    con.execute(f"CREATE TABLE IF NOT EXISTS {META} (key VARCHAR PRIMARY KEY, value VARCHAR)")
    con.execute(f"INSERT OR REPLACE INTO {META} VALUES ('views', ?)", [views_fingerprint(con)])
    refresh_derived(con)


# The views and macros views.sql creates (what ``_views_current`` checks are all there).
_CREATED = re.compile(r"^CREATE OR REPLACE (VIEW|MACRO) (\w+)", re.MULTILINE)


def _views_current(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether this database's views, macros and derived tables were made by this very SQL.

    The key is ``views_fingerprint`` (all of views.sql with its knobs, derive.sql and the
    events columns), recorded by the last ``create_views``; it lapses with any of them, or
    when any view, macro or derived table it made is missing.
    """
    stored = stored_views_fingerprint(con)
    if stored is None or stored != views_fingerprint(con):
        return False
    want = {(kind, name) for kind, name in _CREATED.findall(read_sql("views.sql"))}
    have = set(con.execute(
        "SELECT 'VIEW', view_name FROM duckdb_views() WHERE database_name = current_database() "
        "AND schema_name = 'main' AND NOT temporary "
        "UNION ALL SELECT 'MACRO', function_name FROM duckdb_functions() "
        "WHERE database_name = current_database() AND schema_name = 'main' "
        "AND function_type IN ('macro', 'table_macro')").fetchall())
    tables = [f"derived_{v}" for v in DERIVED] + [DERIVED_STATUS]
    return want <= have and all(_table_exists(con, t) for t in tables)


def ensure_loader_tables(con: duckdb.DuckDBPyConnection) -> None:
    """The loader's own tables: one row per loaded run, one per line it left out."""
    con.execute(f"CREATE TABLE IF NOT EXISTS {LOADED_RUNS} (run VARCHAR, source VARCHAR, "
                "events BIGINT, lines BIGINT, skipped BIGINT, cut_line BIGINT)")
    con.execute(f"CREATE TABLE IF NOT EXISTS {SKIPPED_LINES} (run VARCHAR, line BIGINT, "
                "reason VARCHAR)")


def views_fingerprint(con: duckdb.DuckDBPyConnection) -> str:
    """What the stored views depend on: all of views.sql and the derived tables' fingerprint."""
    h = hashlib.sha256()
    for part in (*_views_sql(), _fingerprint(con)):
        h.update(_without_comments(part).encode())
    return h.hexdigest()[:16]


def stored_views_fingerprint(con: duckdb.DuckDBPyConnection) -> str | None:
    """The fingerprint a writer recorded when it last created the views (None: never)."""
    if not _table_exists(con, META):
        return None
    row = con.execute(f"SELECT value FROM {_main(con)}.{META} WHERE key = 'views'").fetchone()
    return row[0] if row else None


def table_exists(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    """Whether the database's main schema has a table ``name``."""
    return _table_exists(con, name)


def read_sql(name: str) -> str:
    return resources.files("audit").joinpath(f"sql/{name}").read_text()


def _views_sql() -> tuple[str, str]:
    """views.sql with the policy knobs filled in, split where the derived tables come in."""
    sql = read_sql("views.sql").replace("{policy_knobs}", _policy_knobs())
    at = sql.index("\n" + _DERIVED_MARKER + " ")
    return sql[:at], sql[at:]


def _derive_statements(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The statements of derive.sql, in order."""
    return [st.query for st in con.extract_statements(read_sql("derive.sql"))]


def _fingerprint(con: duckdb.DuckDBPyConnection) -> str:
    """What the derived rows depend on besides the events: the SQL, and the events columns."""
    cols = con.execute(
        "SELECT column_name, data_type FROM information_schema.columns "
        "WHERE table_name = 'events' AND table_schema = 'main' "
        "AND table_catalog = current_database() ORDER BY ordinal_position").fetchall()
    h = hashlib.sha256()
    for part in (read_sql("derive.sql"), _views_sql()[0], repr(cols)):
        h.update(_without_comments(part).encode())
    return h.hexdigest()[:16]


def _without_comments(sql: str) -> str:
    """The SQL with comment lines dropped and blanks squeezed: editing a comment changes nothing."""
    return " ".join(" ".join(line for line in sql.splitlines()
                             if not line.lstrip().startswith("--")).split())


def _main(con: duckdb.DuckDBPyConnection) -> str:
    """The database's own main schema, fully qualified (so a TEMP view cannot shadow it)."""
    row = con.execute("SELECT current_database()").fetchone()
    return f"{quote(row[0] if row else 'memory')}.main"


def _table_exists(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    row = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database() "
        "AND schema_name = 'main' AND table_name = ?", [name]).fetchone()
    return bool(row and row[0])


def _ensure_derived_tables(con: duckdb.DuckDBPyConnection) -> None:
    """Create the derived tables (empty) if missing, or afresh when their fingerprint changed."""
    fp = _fingerprint(con)
    names = [f"derived_{v}" for v in DERIVED]
    if all(_table_exists(con, n) for n in [*names, DERIVED_STATUS]):
        stored = {r[0] for r in con.execute(
            f"SELECT DISTINCT fingerprint FROM {_main(con)}.{DERIVED_STATUS}").fetchall()}
        if stored == {fp}:
            return
    # Missing, from another version, or empty: (re)create them from the
    # derivation's own output types, over no events. Every run is then stale.
    main = _main(con)
    with _scoped_events(con, None):
        for sql in _derive_statements(con):
            con.execute(sql)
        for view in DERIVED:
            con.execute(f"DROP TABLE IF EXISTS {main}.derived_{view}")
            con.execute(f"CREATE TABLE {main}.derived_{view} AS SELECT * FROM temp.main._derived_{view}")
    con.execute(f"DROP TABLE IF EXISTS {main}.{DERIVED_STATUS}")
    con.execute(f"CREATE TABLE {main}.{DERIVED_STATUS} (run VARCHAR, events BIGINT, last_seq BIGINT, "
                "fingerprint VARCHAR)")


# A derivation statement whose result is stored: `CREATE ... TEMP TABLE _derived_<view> AS`.
_STORED = re.compile(r"^CREATE OR REPLACE TEMP TABLE _derived_(\w+) AS\s", re.MULTILINE)


class _scoped_events:
    """Within the block, ``events`` is a TEMP view of one run's rows (None: no rows).

    On exit, drops that view and every TEMP table or view of the derivation
    (named ``_d_...`` or ``_derived_...``).
    """

    def __init__(self, con: duckdb.DuckDBPyConnection, run: str | None) -> None:
        self.con, self.run = con, run

    def __enter__(self) -> None:
        where = "false" if self.run is None else f"run = {literal(self.run)}"
        self.con.execute(f"CREATE OR REPLACE TEMP VIEW events AS "
                         f"SELECT * FROM {_main(self.con)}.events WHERE {where}")

    def __exit__(self, exc_type: object, *_: object) -> None:
        try:
            made = self.con.execute(
                "SELECT 'TABLE', table_name FROM duckdb_tables() WHERE temporary "
                "UNION ALL SELECT 'VIEW', view_name FROM duckdb_views() "
                "WHERE temporary AND NOT internal").fetchall()
            for kind, name in made:
                if name == "events" or name.startswith(("_d_", "_derived_")):
                    self.con.execute(f"DROP {kind} IF EXISTS temp.main.{quote(name)}")
        except duckdb.Error:
            # After a failed statement the transaction only accepts a ROLLBACK,
            # which undoes these TEMP objects anyway.
            if exc_type is None:
                raise


def derive_run_rows(con: duckdb.DuckDBPyConnection, run: str) -> None:
    """Compute run's derived rows from its events and replace them (in the caller's transaction).

    Each ``_derived_<view>`` result goes straight into derived_<view>; the
    statements after it read it back through a TEMP view of that run's rows.
    """
    main = _main(con)
    fp = _fingerprint(con)
    stored = set()
    with _scoped_events(con, run):
        for sql in _derive_statements(con):
            m = _STORED.search(sql)
            if m is None:
                con.execute(sql)
                continue
            view = m.group(1)
            query = sql[m.end():].strip().rstrip(";")
            con.execute(f"DELETE FROM {main}.derived_{view} WHERE run = ?", [run])
            con.execute(f"INSERT INTO {main}.derived_{view} BY NAME SELECT * FROM ({query})")
            con.execute(f"CREATE OR REPLACE TEMP VIEW _derived_{view} AS "
                        f"SELECT * FROM {main}.derived_{view} WHERE run = {literal(run)}")
            stored.add(view)
        assert stored == set(DERIVED), f"derive.sql stores {sorted(stored)}, expected {sorted(DERIVED)}"
        con.execute(f"DELETE FROM {main}.{DERIVED_STATUS} WHERE run = ?", [run])
        con.execute(f"INSERT INTO {main}.{DERIVED_STATUS} "
                    "SELECT ?, count(*), max(seq), ? FROM events", [run, fp])


def stale_runs(con: duckdb.DuckDBPyConnection, runs: Iterable[str] | None = None) -> list[str]:
    """Runs whose derived rows do not match their events (missing, changed, or older SQL)."""
    main = _main(con)
    wanted = None if runs is None else list(runs)
    where = "WHERE run IS NOT NULL" + ("" if wanted is None else " AND list_contains(?, run)")
    return [r[0] for r in con.execute(f"""
        SELECT e.run
        FROM (SELECT run, count(*) AS n, max(seq) AS last_seq FROM {main}.events {where}
              GROUP BY run) AS e
        LEFT JOIN {main}.{DERIVED_STATUS} AS s USING (run)
        WHERE s.run IS NULL OR s.events <> e.n OR s.last_seq IS DISTINCT FROM e.last_seq
           OR s.fingerprint <> ?
        ORDER BY e.run""", [*([wanted] if wanted is not None else []), _fingerprint(con)]).fetchall()]


def refresh_derived(con: duckdb.DuckDBPyConnection, runs: Iterable[str] | None = None) -> list[str]:
    """Derive again the (given) runs that are stale, and forget runs no longer in ``events``.

    ``load_log`` keeps the derived tables current; this is for databases written
    by an older version, or whose ``events`` were edited by hand. Returns the
    runs it derived.
    """
    main = _main(con)
    if runs is None:
        gone = [r[0] for r in con.execute(
            f"SELECT run FROM {main}.{DERIVED_STATUS} "
            f"WHERE run NOT IN (SELECT DISTINCT run FROM {main}.events WHERE run IS NOT NULL)").fetchall()]
        for run in gone:
            _in_transaction(con, lambda r=run: _forget_run(con, r))
            if _table_exists(con, LOADED_RUNS):
                con.execute(f"DELETE FROM {main}.{LOADED_RUNS} WHERE run = ?", [run])
                con.execute(f"DELETE FROM {main}.{SKIPPED_LINES} WHERE run = ?", [run])
    stale = stale_runs(con, runs)
    for run in stale:
        _in_transaction(con, lambda r=run: derive_run_rows(con, r))
    return stale


def ensure_derived(con: duckdb.DuckDBPyConnection, run: str) -> bool:
    """Make run's derived rows current if they are not; False if they are stale and cannot be.

    A database written before the derived tables existed gets them (and its
    views) first. Only a read-only database can leave a run stale: the caller
    then computes from the plain views (``create_plain_views``).
    """
    if _table_exists(con, DERIVED_STATUS) and not stale_runs(con, [run]):
        return True
    row = con.execute("SELECT readonly FROM duckdb_databases() "
                      "WHERE database_name = current_database()").fetchone()
    if row and row[0]:
        return False
    if _table_exists(con, DERIVED_STATUS):
        refresh_derived(con, [run])
    else:
        create_views(con)
    return True


def _forget_run(con: duckdb.DuckDBPyConnection, run: str) -> None:
    main = _main(con)
    for view in DERIVED:
        con.execute(f"DELETE FROM {main}.derived_{view} WHERE run = ?", [run])
    con.execute(f"DELETE FROM {main}.{DERIVED_STATUS} WHERE run = ?", [run])


def forget_run(con: duckdb.DuckDBPyConnection, run: str) -> None:
    """Drop run's derived rows (in the caller's transaction): its events are being replaced."""
    _forget_run(con, run)


def derive_run(con: duckdb.DuckDBPyConnection, run: str) -> None:
    """Derive run's rows in a transaction of their own (see ``derive_run_rows``)."""
    _in_transaction(con, lambda: derive_run_rows(con, run))


def _in_transaction(con: duckdb.DuckDBPyConnection, fn: Any) -> None:
    con.execute("BEGIN TRANSACTION")
    try:
        fn()
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


def create_plain_views(con: duckdb.DuckDBPyConnection) -> None:
    """Shadow the views that read derived tables with their plain definitions (audit/sql/plain.sql).

    For this connection only (TEMP views): every view then computes from the
    events alone, as a check on the derived tables. Slow on large logs.
    """
    con.execute(read_sql("plain.sql"))


def drop_plain_views(con: duckdb.DuckDBPyConnection) -> None:
    """Undo create_plain_views: the views read the derived tables again."""
    for view in PLAIN_VIEWS:
        con.execute(f"DROP VIEW IF EXISTS temp.main.{view}")


def plain_views_active(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether this connection reads the plain definitions (create_plain_views is in effect)."""
    row = con.execute("SELECT count(*) FROM duckdb_views() WHERE temporary AND NOT internal "
                      "AND list_contains(?, view_name)", [list(PLAIN_VIEWS)]).fetchone()
    return bool(row and row[0] == len(PLAIN_VIEWS))


def _policy_knobs() -> str:
    """Each PolicyConfigured knob, falling back to its default for runs without a policy event."""
    tag = tag_of(PolicyConfigured)
    knobs = []
    for c in COLUMNS:
        if c.tags == (tag,):
            default = dict(c.defaults).get(tag, "NULL")
            knobs.append(f"coalesce(p.{quote(c.name)}, {default}) AS {quote(c.name)}")
    return ",\n       ".join(knobs)
