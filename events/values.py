"""Values a valid record can hold: the check for events built through the Python API.

msgspec checks types and bounds when it *decodes*, not when a struct is
constructed. So ``HostAdded(gpus=float("nan"))`` or ``ChildShare(shares=2.5)``
builds fine, and would then be journaled as a record no reader accepts (NaN is
written as ``null``). Events that arrive as bytes went through
``events.decode`` and always pass; events built in Python (the simulator, tests,
tools) may not, so the engine asks ``problem(event)`` at its input boundary and
refuses a non-None answer (reason ``bad_value``).

The rule is exactly "a valid record can hold it": the event encodes, fits the
record bounds, decodes to its own type under the constrained field types
(events/limits.py) and decodes to an equal value (so a list where a tuple
belongs, a bool where an int belongs, or a float, NaN or infinity anywhere an
integer belongs, is a problem).

``FLAT_CHECKS`` lets a caller answer the common case without the round trip:
see its comment for when a field-by-field test proves that ``problem`` would
answer None. Anything it cannot prove goes through ``problem`` as before.
"""

from __future__ import annotations

import math

import msgspec

from events.base import Event
from events.codec import _VERSION_OF_CLASS, MalformedEvent, decode, encode
from events.limits import INT64_MAX, INT64_MIN, MAX_DEPTH, MAX_RECORD_BYTES
from events.union import TAGS


def problem(event: object) -> str | None:
    """None when a valid record can hold ``event``; otherwise one line saying what is wrong."""
    if not isinstance(event, Event):
        return f"not an event: {type(event).__name__}"
    try:
        data = encode(event)
    except RecursionError:
        return f"nested deeper than a record may be (limit {MAX_DEPTH} levels)"
    except (TypeError, ValueError, OverflowError, msgspec.EncodeError) as exc:
        return f"cannot be encoded: {exc}"
    try:
        back = decode(data)
    except MalformedEvent as exc:
        return _non_finite(event, "$") or exc.reason
    if back != event:
        return _difference(event, back)
    return None


def _non_finite(value: object, path: str) -> str | None:
    """Where ``value`` holds a NaN or an infinity (encoded as ``null``, so named here)."""
    if isinstance(value, float):
        return None if math.isfinite(value) else f"not a finite number: {value} - at `{path}`"
    if isinstance(value, msgspec.Struct):
        for name in value.__struct_fields__:
            found = _non_finite(getattr(value, name), f"{path}.{name}")
            if found:
                return found
    elif isinstance(value, tuple | list):
        for i, item in enumerate(value):
            found = _non_finite(item, f"{path}[{i}]")
            if found:
                return found
    return None


def _difference(event: Event, back: Event) -> str:
    """Name the first field whose value does not survive encoding (NaN, a list for a tuple...)."""
    if type(back) is not type(event):
        return f"decodes as {type(back).__name__}, not {type(event).__name__}"
    for name in event.__struct_fields__:
        mine, theirs = getattr(event, name), getattr(back, name)
        if mine != theirs or type(mine) is not type(theirs):
            return (f"{type(mine).__name__} {mine!r} does not survive encoding "
                    f"(reads back as {theirs!r}) - at `$.{name}`")
    return "does not survive encoding"


# ------------------------------------------------------- the flat fast path
#
# ``problem(e)`` is None exactly when e encodes, the bytes pass ``decode``'s
# size and depth checks, the fast decoder reads them back as the current
# version of type(e), and the result equals e. For an event whose every field
# value is of one of the kinds below, each of those steps is decided by the
# values alone, so a caller may test the values instead (and must send every
# event that fails the test, or whose type has no entry, to ``problem``):
#
# - STR: exactly ``str``, ASCII, ``len <= hi``. ASCII always encodes (no lone
#   surrogate), is written as itself or as an escape of at most 6 bytes
#   (``\u001f``), decodes to the same string, and its length in characters is
#   the one ``Meta(max_length=hi)`` checks.
# - INT: exactly ``int`` (not bool, not a subclass), ``lo <= v <= hi`` where
#   [lo, hi] is the field's ``ge``/``le`` within int64: written as digits,
#   read back as the same int, inside the decoder's bounds. (lo and hi are
#   also kept within +-2**62, the small ints of compiled code, so the test is
#   two machine comparisons; a larger int64 takes the round trip instead.)
# - BOOL: exactly ``bool``: ``true``/``false``, read back as itself.
# - LITERAL: exactly ``str`` and one of the field's (all-``str``, ASCII) values.
# - ``nullable``: the field's type is ``X | None``; ``None`` is ``null``.
#
# Then (1) encoding succeeds, and it writes every field, since types with
# ``omit_defaults`` or ``array_like`` have no entry; (2) the record is at most
# ``bound`` bytes (6 bytes per character of a string, 20 per int, and each key),
# and types with ``bound > MAX_RECORD_BYTES`` have no entry, so the size check
# passes; (3) the record is one flat JSON object: outside its strings its only
# brackets are its own ``{}``, so ``codec._check_brackets`` either counts at most
# MAX_DEPTH brackets or strips strings and finds one pair: it passes; (4) the
# tag written is the one ``TAGS`` maps back to type(e), every field satisfies its
# constraint, and no type with an entry has ``__post_init__``: the fast decoder
# returns an instance of type(e); (5) its ``v`` is e.v, so decode returns it
# (not its slow path) when e.v is ``version_of_class[type(e)]``, which the
# caller must check (after the kinds: ``v`` is an INT field, so the comparison
# is of two ints); (6) every field reads back equal and of the same type, and
# the type compares by value (``eq``): ``back == e``, and ``problem`` is None.

STR, INT, BOOL, LITERAL = 0, 1, 2, 3
NULL_ONLY = 4  # nullable, and decided here only when null (see _field_check)

# (kind, nullable, lo, hi, literal values) per field, in ``__struct_fields__`` order.
FieldCheck = tuple[int, bool, int, int, tuple[str, ...]]

# The current version per class (the codec's own dict: a version bump shows here).
version_of_class: dict[type, int] = _VERSION_OF_CLASS

_INT_DIGITS = 20  # "-9223372036854775808"
# The ints mypyc holds unboxed (63-bit tagged): comparing two of them is one instruction.
_SMALL_MIN, _SMALL_MAX = -(2**62), 2**62 - 1
_ESCAPED = 6  # the longest escape of an ASCII character


def _field_check(t: msgspec.inspect.Type) -> tuple[FieldCheck, int] | None:
    """The check of one field type and its longest encoding, or None when unsupported."""
    nullable = False
    if isinstance(t, msgspec.inspect.UnionType):
        rest = [u for u in t.types if not isinstance(u, msgspec.inspect.NoneType)]
        if len(rest) != 1 or len(t.types) != 2:
            return None
        nullable, t = True, rest[0]
    if isinstance(t, msgspec.inspect.StrType):
        if t.min_length is not None or t.pattern is not None or t.max_length is None:
            return None
        return (STR, nullable, 0, t.max_length, ()), 2 + _ESCAPED * t.max_length
    if isinstance(t, msgspec.inspect.IntType):
        if t.gt is not None or t.lt is not None or t.multiple_of is not None:
            return None
        lo = max(_SMALL_MIN, INT64_MIN if t.ge is None else t.ge)
        hi = min(_SMALL_MAX, INT64_MAX if t.le is None else t.le)
        return (INT, nullable, lo, hi, ()), _INT_DIGITS
    if isinstance(t, msgspec.inspect.BoolType):
        return (BOOL, nullable, 0, 0, ()), 5
    if isinstance(t, msgspec.inspect.LiteralType):
        values = t.values
        if not values or not all(type(v) is str and v.isascii() for v in values):
            return None
        return ((LITERAL, nullable, 0, 0, tuple(values)),  # type: ignore[arg-type]
                2 + _ESCAPED * max(len(v) for v in values))  # type: ignore[arg-type]
    if nullable:
        # A nullable field of a type the field test cannot decide (an array, say):
        # ``null`` passes (written as 4 bytes, read back as None); any other value
        # fails the test (no kind matches), so that record takes the round trip.
        return (NULL_ONLY, True, 0, 0, ()), 4
    return None


def _flat_checks(tag: str, cls: type) -> tuple[FieldCheck, ...] | None:
    """The field checks of event type ``cls`` (see above), or None when it has no fast path."""
    info = msgspec.inspect.type_info(cls)
    config = cls.__struct_config__  # type: ignore[attr-defined]
    if (not isinstance(info, msgspec.inspect.StructType) or info.tag != tag
            or info.tag_field != "type" or info.array_like or config.omit_defaults
            or not config.eq or hasattr(cls, "__post_init__")
            or tuple(f.name for f in info.fields) != cls.__struct_fields__  # type: ignore[attr-defined]
            or "v" not in cls.__struct_fields__):  # type: ignore[attr-defined]
        return None
    checks: list[FieldCheck] = []
    bound = 2 + 10 + _ESCAPED * len(tag)  # braces, and "type":"<tag>",
    for f in info.fields:
        found = _field_check(f.type)
        if found is None:
            return None
        check, longest = found
        checks.append(check)
        bound += 2 + _ESCAPED * len(f.encode_name) + 2 + max(longest, 4)  # "name":value,
    if not tag.isascii() or bound > MAX_RECORD_BYTES:
        return None
    v_check = checks[cls.__struct_fields__.index("v")]  # type: ignore[attr-defined]
    if v_check[0] != INT or v_check[1]:
        return None
    return tuple(checks)


# Event type -> its field checks, for the types the field test can decide.
FLAT_CHECKS: dict[type, tuple[FieldCheck, ...]] = {
    cls: checks for tag, cls in TAGS.items()
    if (checks := _flat_checks(tag, cls)) is not None
}
