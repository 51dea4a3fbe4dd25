"""The ``events`` table: one column per field of any event type, declared from the structs.

The table is the log as a relation: one row per event, one column per field of
any event type (the union of the msgspec structs in ``events.union.ALL_TYPES``),
plus four columns the audit adds first:

- ``run``: which log the row came from (several runs, e.g. ``allot`` and
  ``baseline``, live side by side and every view partitions by it);
- ``seq``: the event's 1-based position among the run's loaded events. Log
  order is the truth for ordering: many events share the same ``at``;
- ``t``: the scheduler's clock when it folded the event, i.e. the running
  maximum of ``at`` in log order. The engine never moves time backwards, so a
  late input (``at`` below an earlier event's) takes effect at ``t``, and every
  duration the audit computes uses ``t``;
- ``type``: the event's tag.

Columns are declared explicitly from the structs, never inferred by sampling,
so a rare event type (one ``host.faulted`` in ten million lines) keeps its
fields. A row holds only its own type's fields: a key that belongs to another
type is NULL, as msgspec ignores it; a defaulted field a producer left out gets
the struct's default, as msgspec fills it in. (Which lines are events at all
is ``events.decode``'s decision, see audit/records.py.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import duckdb
import msgspec
import msgspec.inspect as mi

from events.union import ALL_TYPES, tag_of


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
                    f"{col['type']}; name it in audit.schema.RENAMES")
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


def quote(name: str) -> str:
    """A SQL identifier, quoted."""
    return '"' + name.replace('"', '""') + '"'


def literal(text: str) -> str:
    """A SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def ensure_events_table(con: duckdb.DuckDBPyConnection) -> None:
    """Create ``events`` if missing; add columns that newer event types introduced."""
    cols = [*LEADING, *((c.name, c.sql_type) for c in COLUMNS)]
    body = ", ".join(f"{quote(n)} {t}" for n, t in cols)
    con.execute(f"CREATE TABLE IF NOT EXISTS events ({body})")
    have = {r[0] for r in con.execute(
        "SELECT column_name FROM information_schema.columns "
        "WHERE table_name = 'events' AND table_schema = current_schema()").fetchall()}
    for name, sql_type in cols:
        if name not in have:
            con.execute(f"ALTER TABLE events ADD COLUMN {quote(name)} {sql_type}")


def _value_expr(col: Column, source: str) -> str:
    """SQL for one column: the source value for the types that carry it, with their defaults.

    Types that do not carry the field get NULL, whatever the record held under
    that key: msgspec ignores a key that is not one of the type's fields.
    """
    value = f"{source}::{col.sql_type}" if col.key in _SHARED_KEYS else source
    defaults = dict(col.defaults)
    if len(col.tags) == len(ALL_TYPES) and len(defaults) in (0, len(ALL_TYPES)) \
            and len(set(defaults.values())) <= 1:
        # Envelope fields: every type carries them, with one default.
        return f"coalesce({value}, {defaults[col.tags[0]]})" if defaults else value
    whens = [f"WHEN type = {literal(tag)} THEN coalesce({value}, {lit})"
             for tag, lit in col.defaults]
    plain = [t for t in col.tags if t not in defaults]
    if plain:
        whens.append(f"WHEN type IN ({', '.join(literal(t) for t in plain)}) THEN {value}")
    return f"CASE {' '.join(whens)} END"


def json_source(path: str) -> str:
    """A read_json call with every wire key declared (a shared key is read as raw JSON)."""
    keys = {"type": "VARCHAR"} | {
        c.key: "JSON" if c.key in _SHARED_KEYS else c.sql_type for c in COLUMNS}
    spec = ", ".join(f"{quote(k)}: '{t}'" for k, t in keys.items())
    return f"read_json({literal(path)}, format = 'newline_delimited', columns = {{{spec}}})"


def select_list(present: set[str] | None) -> str:
    """Typed, defaulted columns: from wire keys (JSON), or from the columns a Parquet file has."""
    parts = ["type"]
    for c in COLUMNS:
        if present is None:
            source = quote(c.key)
        elif c.name in present:
            source = quote(c.name)
        else:
            source = f"NULL::{c.sql_type}"
        parts.append(f"{_value_expr(c, source)} AS {quote(c.name)}")
    return ", ".join(parts)


def row_to_wire(row: dict[str, Any]) -> dict[str, Any]:
    """A row of the events layout as the wire record of its type (its own fields only).

    NULL fields are left out, so the decoder fills in defaults or refuses a
    missing required field, as it would for a JSON line.
    """
    tag = row.get("type")
    out: dict[str, Any] = {"type": tag}
    for c in COLUMNS:
        if tag in c.tags and row.get(c.name) is not None:
            out[c.key] = row[c.name]
    return out
