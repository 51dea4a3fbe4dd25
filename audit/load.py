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
"""

from __future__ import annotations

import os
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

    Returns the number of events loaded. Raises LogLoadError when the file is
    missing or is not a valid log; the table is then left as it was.
    """
    p = Path(path)
    if not p.is_file():
        raise LogLoadError(f"no such log file: {p}")
    run = run or default_run_name(p)
    ensure_events_table(con)
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
        # The clock (running max of ``at``) is computed on two narrow columns and
        # zipped back by position: a window over the wide staging rows costs 5x more.
        # ``at`` is a keyword in DuckDB 2 and must be quoted when unqualified.
        con.execute(
            f"CREATE OR REPLACE TEMP TABLE {CLOCK} AS SELECT rowid AS r, max(\"at\") OVER "
            f"(ORDER BY rowid ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS t "
            f"FROM {STAGING} ORDER BY r")
        names = ", ".join(f"s.{_quote(c.name)}" for c in COLUMNS)
        con.execute("BEGIN TRANSACTION")
        try:
            con.execute("DELETE FROM events WHERE run = ?", [run])
            con.execute(
                f"INSERT INTO events BY NAME SELECT ? AS run, c.r + 1 AS seq, c.t, s.type, {names} "
                f"FROM {STAGING} AS s POSITIONAL JOIN {CLOCK} AS c", [run])
            con.execute("COMMIT")
        except BaseException:
            con.execute("ROLLBACK")
            raise
        count = con.execute(f"SELECT count(*) FROM {STAGING}").fetchone()
    finally:
        con.execute(f"DROP TABLE IF EXISTS {STAGING}")
        con.execute(f"DROP TABLE IF EXISTS {CLOCK}")
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
    """(Re)create the ``events`` table if missing and every audit view and macro over it."""
    ensure_events_table(con)
    sql = resources.files("audit").joinpath("sql/views.sql").read_text()
    con.execute(sql.replace("{policy_knobs}", _policy_knobs()))


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
