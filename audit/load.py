"""Loading event logs into DuckDB: one flat ``events`` table for every run.

The ``events`` table is the log as a relation: one row per event, one column per
field of any event type (the union of the msgspec structs in
``events.union.ALL_TYPES``), plus three columns the audit adds:

- ``run``: which log the row came from (several runs, e.g. ``allot`` and
  ``baseline``, live side by side and every view partitions by it);
- ``seq``: the event's 1-based position in its log. Log order is the truth for
  ordering: many events share the same ``at``;
- ``t``: the scheduler's clock when it folded the event, i.e. the running
  maximum of ``at`` in log order. The engine never moves time backwards, so a
  late input (``at`` below an earlier event's) takes effect at ``t``, and every
  duration the audit computes uses ``t``.

Columns are declared explicitly from the structs, never inferred by sampling,
so a rare event type (one ``host.faulted`` in ten million lines) keeps its
fields. Omitted fields get their struct defaults, as msgspec decoding would.

Derived tables. Loading a run then computes what the expensive views need a
sort over the whole log for (each start paired with the workload's next
lifecycle event, each host's timeline) and the hourly totals on top of them,
and stores it per run in the ``derived_*`` tables (audit/sql/derive.sql); those
views read the tables. ``derived_status``
records what each run's rows were derived from, and ``create_views`` (so
``open_db``) and ``report.summary`` derive again any run whose events changed
other than through ``load_log`` or that an older version loaded.
``create_plain_views`` puts the plain definitions (audit/sql/plain.sql, straight
from the events) in their place, to check them.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import duckdb
import msgspec
import msgspec.inspect as mi

from events.policy import PolicyConfigured
from events.union import ALL_TYPES, tag_of


class LogLoadError(Exception):
    """A log file that cannot be loaded: missing, unreadable, or not a valid allot log."""


class EventSchemaError(TypeError):
    """An event field whose type has no DuckDB column mapping, or two clashing field types."""


# Fields that mean different things (with different types) in different event
# types get their own column for the later meaning. Named here when a plain name
# reads better; otherwise the column is "<last part of the tag>_<field>" (e.g.
# workload.reserved's list of hosts is ``reserved_hosts``, next to the
# submission's integer ``hosts``).
RENAMES: dict[tuple[str, str], str] = {
    # budget.node_defined.shares is the node's own integer weight; shares_set
    # carries a list of {child, shares}.
    ("budget.shares_set", "shares"): "child_shares",
}

STAGING = "_audit_staging"
CLOCK = "_audit_clock"

# Views whose rows load_log computes once per run and stores in a table named
# derived_<view> (audit/sql/derive.sql); the view then reads that table.
DERIVED: tuple[str, ...] = (
    "workloads", "runs", "host_intervals", "cluster_hours", "team_demand_by_hour")
# Which runs the derived tables hold, and from what: a run is re-derived when its
# event count, last seq or the fingerprint (of the SQL and the events columns)
# no longer match.
DERIVED_STATUS = "derived_status"
# views.sql is run in two parts; the derived tables are created in between.
_DERIVED_MARKER = "-- @derived"


@dataclass(frozen=True)
class Column:
    """One column of the ``events`` table and how to fill it from the log."""

    name: str
    sql_type: str
    key: str  # the field's key on the wire (JSON)
    tags: tuple[str, ...]  # event types that carry the field
    # Struct default per event type, as a SQL literal (only types that have one).
    defaults: tuple[tuple[str, str], ...]


def _sql_type(info: mi.Type) -> str:
    """The DuckDB type of a msgspec field type."""
    if isinstance(info, mi.StrType):
        return "VARCHAR"
    if isinstance(info, mi.BoolType):
        return "BOOLEAN"
    if isinstance(info, mi.IntType):
        return "BIGINT"
    if isinstance(info, mi.FloatType):
        return "DOUBLE"
    if isinstance(info, mi.LiteralType):
        if all(isinstance(v, str) for v in info.values):
            return "VARCHAR"
        if all(isinstance(v, int) and not isinstance(v, bool) for v in info.values):
            return "BIGINT"
    if isinstance(info, mi.UnionType):
        members = [t for t in info.types if not isinstance(t, mi.NoneType)]
        if len(members) == 1:
            return _sql_type(members[0])
    if isinstance(info, mi.VarTupleType | mi.ListType | mi.SetType | mi.FrozenSetType):
        return f"{_sql_type(info.item_type)}[]"
    if isinstance(info, mi.StructType):
        inner = ", ".join(f"{f.encode_name} {_sql_type(f.type)}" for f in info.fields)
        return f"STRUCT({inner})"
    raise EventSchemaError(f"no DuckDB column type for msgspec type {info!r}")


def _sql_literal(value: Any, sql_type: str) -> str | None:
    """A struct default as a SQL literal; None when the default is NULL anyway."""
    if value is None or value is msgspec.NODEFAULT:
        return None
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, tuple | list) and not value:
        return f"[]::{sql_type}"
    raise EventSchemaError(f"no SQL literal for the default {value!r}")


def _build_columns() -> tuple[Column, ...]:
    """The event columns, in envelope-then-first-seen order, with type clashes split."""
    found: dict[str, dict[str, Any]] = {}
    for cls in ALL_TYPES:
        tag = tag_of(cls)
        for f in mi.type_info(cls).fields:
            sql_type = _sql_type(f.type)
            name = RENAMES.get((tag, f.name), f.name)
            if name in found and found[name]["type"] != sql_type:
                name = f"{tag.rsplit('.', 1)[-1]}_{f.name}"
            col = found.setdefault(name, {"type": sql_type, "key": f.encode_name,
                                          "tags": [], "defaults": []})
            if col["type"] != sql_type:
                raise EventSchemaError(
                    f"field {f.name!r} of {tag} is {sql_type} but the column {name!r} is "
                    f"{col['type']}; name it in audit.load.RENAMES")
            col["tags"].append(tag)
            default = f.default_factory() if f.default_factory is not msgspec.NODEFAULT else f.default
            literal = _sql_literal(default, sql_type)
            if literal is not None:
                col["defaults"].append((tag, literal))
    return tuple(
        Column(name, c["type"], c["key"], tuple(c["tags"]), tuple(c["defaults"]))
        for name, c in found.items()
    )


COLUMNS: tuple[Column, ...] = _build_columns()
# Wire keys that feed more than one column (see RENAMES).
_SHARED_KEYS: frozenset[str] = frozenset(
    c.key for c in COLUMNS if sum(1 for o in COLUMNS if o.key == c.key) > 1)
# The audit's own columns come first; ``type`` is the tag, not a struct field.
LEADING: tuple[tuple[str, str], ...] = (
    ("run", "VARCHAR"), ("seq", "BIGINT"), ("t", "BIGINT"), ("type", "VARCHAR"))


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def ensure_events_table(con: duckdb.DuckDBPyConnection) -> None:
    """Create ``events`` if missing; add columns that newer event types introduced."""
    cols = [*LEADING, *((c.name, c.sql_type) for c in COLUMNS)]
    body = ", ".join(f"{_quote(n)} {t}" for n, t in cols)
    con.execute(f"CREATE TABLE IF NOT EXISTS events ({body})")
    have = {r[0] for r in con.execute(
        "SELECT column_name FROM information_schema.columns "
        "WHERE table_name = 'events' AND table_schema = current_schema()").fetchall()}
    for name, sql_type in cols:
        if name not in have:
            con.execute(f"ALTER TABLE events ADD COLUMN {_quote(name)} {sql_type}")


def _value_expr(col: Column, source: str) -> str:
    """SQL for one column: the source value, its struct default filled in where omitted."""
    if col.key in _SHARED_KEYS:
        # One wire key, several meanings: read as JSON, typed per event type.
        tags = ", ".join(f"'{t}'" for t in col.tags)
        value = f"CASE WHEN type IN ({tags}) THEN {source}::{col.sql_type} END"
    else:
        value = source
    literals = {lit for _, lit in col.defaults}
    if not literals:
        return value
    if len(col.defaults) == len(ALL_TYPES) and len(literals) == 1:
        # Envelope fields: one default for every type (unknown future types included).
        return f"coalesce({value}, {literals.pop()})"
    whens = " ".join(f"WHEN '{tag}' THEN coalesce({value}, {lit})" for tag, lit in col.defaults)
    return f"CASE type {whens} ELSE {value} END"


def _json_source(path: str) -> str:
    """A read_json call with every wire key declared (a shared key is read as raw JSON)."""
    keys = {"type": "VARCHAR"} | {
        c.key: "JSON" if c.key in _SHARED_KEYS else c.sql_type for c in COLUMNS}
    spec = ", ".join(f"{_quote(k)}: '{t}'" for k, t in keys.items())
    return f"read_json({_literal(path)}, format = 'newline_delimited', columns = {{{spec}}})"


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _select_list(present: set[str] | None) -> str:
    """Typed, defaulted columns: from wire keys (JSON), or from the columns a Parquet file has."""
    parts = ["type"]
    for c in COLUMNS:
        if present is None:
            source = _quote(c.key)
        elif c.name in present:
            source = _quote(c.name)
        else:
            source = f"NULL::{c.sql_type}"
        parts.append(f"{_value_expr(c, source)} AS {_quote(c.name)}")
    return ", ".join(parts)


def default_run_name(path: str | os.PathLike[str]) -> str:
    """The run a log belongs to by default: its directory's name (``out/allot/x.jsonl`` -> allot)."""
    p = Path(path).resolve()
    return p.parent.name or p.stem


def load_log(con: duckdb.DuckDBPyConnection, path: str | os.PathLike[str],
             run: str | None = None) -> int:
    """Load a JSON-lines (or ``.parquet``) log as run ``run``, replacing that run's rows.

    Then derives the run's rows of the ``derived_*`` tables. Returns the number
    of events loaded. Raises LogLoadError when the file is missing or is not a
    valid log; the tables are then left as they were.
    """
    p = Path(path)
    if not p.is_file():
        raise LogLoadError(f"no such log file: {p}")
    run = run or default_run_name(p)
    # The views and derived tables must exist (this also re-derives stale runs).
    create_views(con)
    if p.suffix == ".parquet":
        source = _parquet_source(con, str(p))
    else:
        source = f"SELECT {_select_list(None)} FROM {_json_source(str(p))}"
    # Staging keeps file order, so its rowid is the event's position; that needs
    # insertion order preserved (the default, which a caller may have turned off).
    # Reading before the delete keeps a bad file harmless.
    (keep_order,) = con.execute("SELECT current_setting('preserve_insertion_order')").fetchone() or (True,)
    con.execute("SET preserve_insertion_order = true")
    try:
        con.execute(f"CREATE OR REPLACE TEMP TABLE {STAGING} AS {source}")
    except duckdb.Error as exc:
        raise LogLoadError(f"{p}: not a valid allot log: {_first_line(exc)}") from exc
    finally:
        con.execute(f"SET preserve_insertion_order = {bool(keep_order)}")
    try:
        untyped = con.execute(f"SELECT count(*) FROM {STAGING} WHERE type IS NULL").fetchone()
        if untyped and untyped[0]:
            raise LogLoadError(f"{p}: {untyped[0]} line(s) without an event `type`")
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
        names = ", ".join(f"s.{_quote(c.name)}" for c in COLUMNS)
        con.execute("BEGIN TRANSACTION")
        try:
            con.execute("DELETE FROM events WHERE run = ?", [run])
            con.execute(
                f"INSERT INTO events BY NAME SELECT ? AS run, s.rowid + 1 AS seq, "
                f"coalesce(c.t, s.\"at\") AS t, s.type, {names} "
                f"FROM {STAGING} AS s LEFT JOIN {CLOCK} AS c ON c.r = s.rowid", [run])
            # The run's old derived rows go with its old events.
            _forget_run(con, run)
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        count = con.execute(f"SELECT count(*) FROM {STAGING}").fetchone()
    finally:
        con.execute(f"DROP TABLE IF EXISTS {STAGING}")
        con.execute(f"DROP TABLE IF EXISTS {CLOCK}")
    # Derived in a second transaction, once the staging rows are freed (they take
    # gigabytes on a large log, and a transaction keeps what it drops until it
    # ends). Should this fail, the run has no derived rows and is stale, so the
    # next open_db or summary() derives it again.
    _in_transaction(con, lambda: _derive_run(con, run))
    return int(count[0]) if count else 0


def _parquet_source(con: duckdb.DuckDBPyConnection, path: str) -> str:
    """A query over a Parquet file in the ``events`` layout (as ``COPY events TO`` writes it).

    Row order is the log order, unless the file carries ``seq`` (a re-export of a
    loaded run), which then wins. The audit's own ``run`` and ``t`` are recomputed.
    """
    scan = f"read_parquet({_literal(path)}, file_row_number = true)"
    try:
        present = {r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {scan}").fetchall()}
    except duckdb.Error as exc:
        raise LogLoadError(f"{path}: not a readable Parquet file: {_first_line(exc)}") from exc
    if "type" not in present:
        raise LogLoadError(f"{path}: no `type` column; expected the events-table layout")
    order = "seq, file_row_number" if "seq" in present else "file_row_number"
    return f"SELECT {_select_list(present)} FROM {scan} ORDER BY {order}"


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def create_views(con: duckdb.DuckDBPyConnection) -> None:
    """(Re)create the ``events`` table if missing, every audit view and macro, and the derived tables.

    Runs whose derived rows are missing or stale (loaded by an older version, or
    events changed other than by ``load_log``) are derived again.
    """
    ensure_events_table(con)
    before, after = _views_sql()
    con.execute(before)
    _ensure_derived_tables(con)
    con.execute(after)
    refresh_derived(con)


def _read_sql(name: str) -> str:
    return resources.files("audit").joinpath(f"sql/{name}").read_text()


def _views_sql() -> tuple[str, str]:
    """views.sql with the policy knobs filled in, split where the derived tables come in."""
    sql = _read_sql("views.sql").replace("{policy_knobs}", _policy_knobs())
    at = sql.index("\n" + _DERIVED_MARKER + " ")
    return sql[:at], sql[at:]


def _derive_statements(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The statements of derive.sql, in order."""
    return [st.query for st in con.extract_statements(_read_sql("derive.sql"))]


def _fingerprint(con: duckdb.DuckDBPyConnection) -> str:
    """What the derived rows depend on besides the events: the SQL, and the events columns."""
    cols = con.execute(
        "SELECT column_name, data_type FROM information_schema.columns "
        "WHERE table_name = 'events' AND table_schema = 'main' "
        "AND table_catalog = current_database() ORDER BY ordinal_position").fetchall()
    h = hashlib.sha256()
    for part in (_read_sql("derive.sql"), _views_sql()[0], repr(cols)):
        h.update(_without_comments(part).encode())
    return h.hexdigest()[:16]


def _without_comments(sql: str) -> str:
    """The SQL with comment lines dropped and blanks squeezed: editing a comment changes nothing."""
    return " ".join(" ".join(line for line in sql.splitlines()
                             if not line.lstrip().startswith("--")).split())


def _main(con: duckdb.DuckDBPyConnection) -> str:
    """The database's own main schema, fully qualified (so a TEMP view cannot shadow it)."""
    row = con.execute("SELECT current_database()").fetchone()
    return f"{_quote(row[0] if row else 'memory')}.main"


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
        where = "false" if self.run is None else f"run = {_literal(self.run)}"
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
                    self.con.execute(f"DROP {kind} IF EXISTS temp.main.{_quote(name)}")
        except duckdb.Error:
            # After a failed statement the transaction only accepts a ROLLBACK,
            # which undoes these TEMP objects anyway.
            if exc_type is None:
                raise


def _derive_run(con: duckdb.DuckDBPyConnection, run: str) -> None:
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
                        f"SELECT * FROM {main}.derived_{view} WHERE run = {_literal(run)}")
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
    stale = stale_runs(con, runs)
    for run in stale:
        _in_transaction(con, lambda r=run: _derive_run(con, r))
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
    con.execute(_read_sql("plain.sql"))


def drop_plain_views(con: duckdb.DuckDBPyConnection) -> None:
    """Undo create_plain_views: the views read the derived tables again."""
    for view in ("waits", "runs", "workloads", "team_demand_by_hour", "cluster_hours", "host_intervals"):
        con.execute(f"DROP VIEW IF EXISTS temp.main.{view}")


def _policy_knobs() -> str:
    """Each PolicyConfigured knob, falling back to its default for runs without a policy event."""
    tag = tag_of(PolicyConfigured)
    knobs = []
    for c in COLUMNS:
        if c.tags == (tag,):
            default = dict(c.defaults).get(tag, "NULL")
            knobs.append(f"coalesce(p.{_quote(c.name)}, {default}) AS {_quote(c.name)}")
    return ",\n       ".join(knobs)


def open_db(path: str | os.PathLike[str] = "allot.duckdb", *, create: bool = True) -> duckdb.DuckDBPyConnection:
    """Open (or with ``create``, create) an audit database, with its views in place.

    Raises FileNotFoundError when ``create`` is False and the file does not exist.
    """
    p = Path(path)
    if not create and not p.is_file():
        raise FileNotFoundError(f"no audit database at {p}; load a log first (allot audit load LOG)")
    con = duckdb.connect(str(p))
    # The terminal progress bar would interleave with our own output.
    con.execute("SET enable_progress_bar = false")
    create_views(con)
    return con
