"""JSON on the wire: encoding, decoding, upcasting, and the errors bad bytes raise.

The wire format is one JSON object per event (one per line in files, one per
record on Kafka). Decoding is strict about types and lenient about unknown
fields, which is what additive evolution needs: a newer producer may add a field
and an older consumer still reads the event.

Breaking changes bump an event type's ``v`` and register an upcaster here that
lifts the old payload to the new shape, so old logs stay readable forever.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import msgspec

from events.base import SCHEMA_VERSION, Event
from events.union import TAGS, AnyEvent


class MalformedEvent(ValueError):
    """Bytes that are not a valid allot event. ``reason`` names the JSON path at fault."""

    def __init__(self, reason: str, raw: bytes | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.raw = raw


# Current version per tag. All types are at their first version today.
CURRENT_VERSION: dict[str, int] = {tag: SCHEMA_VERSION for tag in TAGS}

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]
# (tag, from_version) -> function returning the payload at from_version + 1.
_UPCASTERS: dict[tuple[str, int], Upcaster] = {}


def register_upcaster(tag: str, from_version: int) -> Callable[[Upcaster], Upcaster]:
    """Register a function lifting ``tag`` payloads from ``from_version`` to the next."""

    def wrap(fn: Upcaster) -> Upcaster:
        _UPCASTERS[(tag, from_version)] = fn
        return fn

    return wrap


_decoder = msgspec.json.Decoder(AnyEvent)
_raw_decoder = msgspec.json.Decoder()
_encoder = msgspec.json.Encoder()


def encode(event: Event) -> bytes:
    """One event as compact JSON bytes."""
    return _encoder.encode(event)


def encode_lines(events: Iterable[Event]) -> bytes:
    """Events as JSON lines (each followed by a newline)."""
    buf = bytearray()
    enc = _encoder.encode_into
    for e in events:
        enc(e, buf, -1)
        buf += b"\n"
    return bytes(buf)


def _upcast(raw: dict[str, Any]) -> dict[str, Any]:
    tag = raw.get("type")
    if not isinstance(tag, str) or tag not in TAGS:
        raise MalformedEvent(f"unknown event type {tag!r} - at `$.type`")
    v = raw.get("v", SCHEMA_VERSION)
    if not isinstance(v, int):
        raise MalformedEvent("Expected `int` - at `$.v`")
    current = CURRENT_VERSION[tag]
    if v > current:
        raise MalformedEvent(f"{tag} v{v} is newer than this reader (v{current}) - at `$.v`")
    while v < current:
        up = _UPCASTERS.get((tag, v))
        if up is None:
            raise MalformedEvent(f"no upcaster for {tag} v{v} - at `$.v`")
        raw = up(dict(raw))
        v += 1
        raw["v"] = v
    return raw


def decode(data: bytes | str) -> AnyEvent:
    """Decode one event; raise MalformedEvent with a reason naming the path at fault."""
    try:
        event = _decoder.decode(data)
    except msgspec.DecodeError as exc:
        fast_error: Exception = exc
    else:
        if event.v == CURRENT_VERSION[type(event).__struct_config__.tag]:
            return event
        fast_error = ValueError("version mismatch")
    # Slow path: an older (or newer) version, or a payload that needs upcasting.
    raw_bytes = data.encode() if isinstance(data, str) else data
    try:
        raw = _raw_decoder.decode(raw_bytes)
    except msgspec.DecodeError as exc:
        raise MalformedEvent(f"not JSON: {exc}", raw_bytes) from exc
    if not isinstance(raw, dict):
        raise MalformedEvent("Expected `object` - at `$`", raw_bytes)
    if raw.get("v", SCHEMA_VERSION) == CURRENT_VERSION.get(raw.get("type", ""), -1):
        # Same version, so the fast path's error is the real one.
        raise MalformedEvent(str(fast_error), raw_bytes) from fast_error
    try:
        return msgspec.convert(_upcast(raw), AnyEvent)
    except msgspec.ValidationError as exc:
        raise MalformedEvent(str(exc), raw_bytes) from exc
    except MalformedEvent as exc:
        exc.raw = raw_bytes
        raise


def iter_lines(lines: Iterable[bytes]) -> Iterator[AnyEvent]:
    """Decode JSON lines, skipping blank ones; MalformedEvent names the line number."""
    for n, line in enumerate(lines, 1):
        line = line.strip()
        if not line:
            continue
        try:
            yield decode(line)
        except MalformedEvent as exc:
            raise MalformedEvent(f"line {n}: {exc.reason}", line) from exc


def read_log(path: str | Path) -> list[AnyEvent]:
    """Read a JSON-lines event log file."""
    with open(path, "rb") as fh:
        return list(iter_lines(fh))


def write_log(path: str | Path, events: Iterable[Event]) -> None:
    """Write events as a JSON-lines log file."""
    with open(path, "wb") as fh:
        fh.write(encode_lines(events))
