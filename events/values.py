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
"""

from __future__ import annotations

import math

import msgspec

from events.base import Event
from events.codec import MalformedEvent, decode, encode
from events.limits import MAX_DEPTH


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
