"""Valid sample records of every event type, and the paths of their integer and string values.

Built from the structs' own type information (``msgspec.inspect``), so a new
type or field is covered by the limit tests without editing them. Every
optional field is filled in, and every array holds one item, so nested values
(``$.placement[0].gpus``) are reached too.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import msgspec
from msgspec import inspect as mi

from events import ALL_TYPES, tag_of

Path = tuple[str | int, ...]


def _value(t: mi.Type) -> Any:
    if isinstance(t, mi.UnionType):
        return _value(next(x for x in t.types if not isinstance(x, mi.NoneType)))
    if isinstance(t, mi.IntType):
        return 1
    if isinstance(t, mi.StrType):
        return "x"
    if isinstance(t, mi.BoolType):
        return False
    if isinstance(t, mi.LiteralType):
        return t.values[0]
    if isinstance(t, mi.VarTupleType | mi.ListType):
        return [_value(t.item_type)]
    if isinstance(t, mi.StructType):
        return {f.encode_name: _value(f.type) for f in t.fields}
    raise AssertionError(f"no sample for {t!r}")  # a new kind of field: extend this helper


def sample(cls: type) -> dict[str, Any]:
    """A valid record of ``cls`` as a dict, every field present."""
    info = mi.type_info(cls)
    assert isinstance(info, mi.StructType)
    record = {"type": tag_of(cls), **_value(info)}
    record["v"] = 1
    return record


def leaves(t: mi.Type, path: Path = ()) -> Iterator[tuple[Path, mi.Type]]:
    """Every integer or string value under ``t``, with its path (arrays at index 0)."""
    if isinstance(t, mi.UnionType):
        for x in t.types:
            if not isinstance(x, mi.NoneType):
                yield from leaves(x, path)
    elif isinstance(t, mi.IntType | mi.StrType):
        yield path, t
    elif isinstance(t, mi.VarTupleType | mi.ListType):
        yield from leaves(t.item_type, (*path, 0))
    elif isinstance(t, mi.StructType):
        for f in t.fields:
            yield from leaves(f.type, (*path, f.encode_name))


def json_path(path: Path) -> str:
    """``("shares", 0, "shares")`` as msgspec names it: ``$.shares[0].shares``."""
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)


def with_value(record: dict[str, Any], path: Path, value: Any) -> dict[str, Any]:
    """A copy of ``record`` with the value at ``path`` replaced."""
    out = copy.deepcopy(record)
    node: Any = out
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value
    return out


def every_leaf() -> Iterator[tuple[type, Path, mi.Type]]:
    """(event class, path, type) of every integer and string value of every event type."""
    for cls in ALL_TYPES:
        info = mi.type_info(cls)
        for path, t in leaves(info):
            yield cls, path, t


def encode_record(record: dict[str, Any]) -> bytes:
    return msgspec.json.encode(record)
