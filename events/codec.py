"""JSON on the wire: encoding, decoding, upcasting, and the errors bad bytes raise.

The wire format is one JSON object per event (one per line in files, one per
record on Kafka). Decoding is strict about types and lenient about unknown
fields, which is what additive evolution needs: a newer producer may add a field
and an older consumer still reads the event.

Decoding is also the first trust boundary: the bytes may come from anyone who
can write to the inbox. Every failure of ``decode`` (and of ``iter_lines`` and
``read_log``) is a ``MalformedEvent`` with a one-line reason, never another
exception. Before the parser runs, a record is held to the bounds of
``events.limits`` that the types cannot state (its size and its nesting depth);
the bounds of single values (int64, string length, array length, GPUs per host,
shares) are in the field types, so the parser enforces them.

Breaking changes bump an event type's ``v`` and register an upcaster here that
lifts the old payload to the new shape, so old logs stay readable forever.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from itertools import accumulate
from pathlib import Path
from typing import Any, BinaryIO

import msgspec

from events.base import SCHEMA_VERSION, Event
from events.errors import AllotError
from events.limits import MAX_DEPTH, MAX_RECORD_BYTES
from events.union import TAGS, AnyEvent

# A reason is printed on one terminal line and stored in dead letters: values
# quoted from hostile input (an enum value of 4 KB, say) are cut to this.
_MAX_REASON_CHARS = 240
# msgspec ends a message with the JSON path at fault: "... - at `$.shares[0].shares`".
_POSITION = re.compile(r" - at `(\$[^`]*)`$")


def _one_line(text: str) -> str:
    """``text`` as one printable line of bounded length (controls and bidi escaped).

    A long text is cut in the middle, so its JSON path at the end survives.
    """
    if not text.isprintable():
        text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    if len(text) > _MAX_REASON_CHARS:
        m = _POSITION.search(text)
        tail = m.group(0) if m and len(m.group(0)) < _MAX_REASON_CHARS // 2 else ""
        text = text[: _MAX_REASON_CHARS - 3 - len(tail)] + "..." + tail
    return text


class MalformedEvent(AllotError, ValueError):
    """Bytes that are not a valid allot event.

    ``reason``: one line saying what is wrong (msgspec's wording where it comes
    from the parser, e.g. ``Expected `int`, got `str` - at `$.gpus```).
    ``position``: the JSON path at fault when known (``$.shares[0].shares``), else None.
    ``line``: the 1-based line number when the bytes were a line of a log, else None.
    ``raw``: the offending bytes, when known. ``str(exc)`` is ``line N: reason``
    when the line is known, else the reason.
    """

    def __init__(self, reason: str, raw: bytes | None = None, *,
                 position: str | None = None, line: int | None = None) -> None:
        reason = _one_line(reason)
        if position is None:
            m = _POSITION.search(reason)
            position = m.group(1) if m else None
        super().__init__(f"line {line}: {reason}" if line is not None else reason)
        self.reason = reason
        self.raw = raw
        self.position = position
        self.line = line


class _Versions(dict[str, int]):
    """Current version per tag, mirrored per class for the decoder's fast path.

    (Reading a struct's tag costs more than decoding a small event, so the
    fast path looks the version up by class; assigning a tag keeps both right.)
    """

    def __init__(self, versions: dict[str, int]) -> None:
        super().__init__()
        self.by_class: dict[type, int] = {}
        for tag, v in versions.items():
            self[tag] = v

    def __setitem__(self, tag: str, version: int) -> None:
        super().__setitem__(tag, version)
        self.by_class[TAGS[tag]] = version


# Current version per tag. All types are at their first version today.
CURRENT_VERSION: dict[str, int] = _Versions({tag: SCHEMA_VERSION for tag in TAGS})
_VERSION_OF_CLASS = CURRENT_VERSION.by_class  # type: ignore[attr-defined]

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


# ---------------------------------------------------------------- nesting depth
#
# A JSON parser recurses once per level of nesting, and msgspec does so even to
# skip an unknown field: 1,000 levels raise RecursionError, and more (under a
# raised recursion limit) would overflow the C stack. So depth is checked on
# the raw bytes first, without recursion and at C speed:
#
# 0. A record with no "[" at all and no "{" after its first byte has at most
#    one bracket: two memchr calls (inputs; 87.5% of a simulated ai2-month
#    journal, benchmarks/bench_codec.py).
# 1. A record with at most MAX_DEPTH opening brackets in all cannot nest deeper
#    (strings only add to the count): a start of a gang of h hosts has h + 2
#    (12.4% of that journal).
# 2. Otherwise (0.06%) drop escape pairs (so no quote is escaped), keep the text outside
#    strings (every other piece between quotes), keep only its brackets, and
#    strip innermost pairs MAX_DEPTH times: each pass removes every empty
#    container, lowering the depth by exactly one, so a record within the limit
#    is then empty.

# Bytes as ints: ``int in bytes`` is a bare memchr, several times cheaper than
# ``bytes.find`` (which parses its arguments) on a record of a few hundred bytes.
_OPEN_SQUARE, _OPEN_CURLY = ord("["), ord("{")
_ESCAPE = re.compile(rb"\\.", re.S)
_NOT_BRACKETS = bytes(c for c in range(256) if c not in b"{}[]")
_AS_PARENS = bytes.maketrans(b"{[}]", b"(())")
_STEP = [0] * 256
_STEP[ord("(")], _STEP[ord(")")] = 1, -1


def _check_brackets(data: bytes) -> None:
    """Steps 1 and 2 above, for a record with more than one bracket."""
    if data.count(b"{") + data.count(b"[") <= MAX_DEPTH:
        return
    if b"\\" in data:
        data = _ESCAPE.sub(b"", data)
    outside = b"".join(data.split(b'"')[::2])
    brackets = left = outside.translate(_AS_PARENS, _NOT_BRACKETS)
    for _ in range(MAX_DEPTH):
        if not left:
            return
        left = left.replace(b"()", b"")
    if not left:
        return
    # Too deep, or not JSON at all: only records that are refused get here.
    if max(accumulate(map(_STEP.__getitem__, brackets))) > MAX_DEPTH:
        raise MalformedEvent(f"JSON nested deeper than {MAX_DEPTH} levels")
    raise MalformedEvent("not JSON: brackets do not balance")


def _as_bytes(data: object) -> bytes:
    if isinstance(data, bytes):
        return data
    if isinstance(data, str):
        try:
            return data.encode()
        except UnicodeEncodeError as exc:
            raise MalformedEvent(f"not UTF-8: {exc.reason} at character {exc.start}") from None
    if isinstance(data, bytearray | memoryview):
        return bytes(data)
    raise MalformedEvent(f"expected bytes or str, got {type(data).__name__}")


# ---------------------------------------------------------------- decoding


def _upcast(raw: dict[str, Any]) -> dict[str, Any]:
    tag = raw.get("type")
    if not isinstance(tag, str) or tag not in TAGS:
        raise MalformedEvent(f"unknown event type {tag!r} - at `$.type`")
    v = raw.get("v", SCHEMA_VERSION)
    if not isinstance(v, int) or isinstance(v, bool):
        raise MalformedEvent("Expected `int` - at `$.v`")
    current = CURRENT_VERSION[tag]
    if v > current:
        raise MalformedEvent(f"{tag} v{v} is newer than this reader (v{current}) - at `$.v`")
    while v < current:
        up = _UPCASTERS.get((tag, v))
        if up is None:
            raise MalformedEvent(f"no upcaster for {tag} v{v} - at `$.v`")
        try:
            raw = up(dict(raw))
        except Exception as exc:  # an upcaster runs on untrusted data; any failure is the record's
            raise MalformedEvent(f"cannot upcast {tag} v{v}: {type(exc).__name__}: {exc}") from exc
        if not isinstance(raw, dict):
            raise MalformedEvent(f"the upcaster of {tag} v{v} returned no object")
        v += 1
        raw["v"] = v
    return raw


def decode(data: bytes | str) -> AnyEvent:
    """Decode one event; every failure is a MalformedEvent (reason, and position when known)."""
    if type(data) is not bytes:
        data = _as_bytes(data)
    if len(data) > MAX_RECORD_BYTES:
        raise MalformedEvent(f"record over the limit of {MAX_RECORD_BYTES:,} bytes", data[:256])
    try:
        # The depth check, with its commonest case (one object, no array) inlined:
        # 91 is "[" and 123 is "{" (constants, so no name lookups on this path).
        if 91 in data or 123 in data[1:]:
            _check_brackets(data)
        event = _decoder.decode(data)
    except MalformedEvent as exc:
        exc.raw = data
        raise
    except msgspec.DecodeError as exc:
        fast_error: Exception = exc
    else:
        if event.v == _VERSION_OF_CLASS[type(event)]:
            return event
        fast_error = ValueError("version mismatch")
    # Slow path: an older (or newer) version, or a payload that needs upcasting.
    try:
        raw = _raw_decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise MalformedEvent(f"not JSON: {exc}", data) from exc
    if not isinstance(raw, dict):
        raise MalformedEvent("Expected `object` - at `$`", data)
    tag = raw.get("type")
    if not isinstance(tag, str) or (tag in CURRENT_VERSION and raw.get("v", SCHEMA_VERSION)
                                    == CURRENT_VERSION[tag]):
        # No usable tag, or the current version: the fast path's error is the real one.
        raise MalformedEvent(str(fast_error), data) from fast_error
    try:
        return msgspec.convert(_upcast(raw), AnyEvent)
    except msgspec.ValidationError as exc:
        raise MalformedEvent(str(exc), data) from exc
    except MalformedEvent as exc:
        exc.raw = data
        raise


def iter_lines(lines: Iterable[bytes]) -> Iterator[AnyEvent]:
    """Decode JSON lines, skipping blank ones; a MalformedEvent carries the 1-based ``line``."""
    for _, event in iter_numbered(lines):
        yield event


def iter_numbered(lines: Iterable[bytes]) -> Iterator[tuple[int, AnyEvent]]:
    """``(line number, event)`` for JSON lines, skipping blank ones (MalformedEvent names the line)."""
    for n, line in enumerate(lines, 1):
        line = line.strip()
        if not line:
            continue
        try:
            yield n, decode(line)
        except MalformedEvent as exc:
            raise MalformedEvent(exc.reason, line, position=exc.position, line=n) from exc


def read_numbered(path: str | Path) -> Iterator[tuple[int, AnyEvent]]:
    """``(line number, event)`` from a JSON-lines log file, lazily, each line capped in size."""
    with open(path, "rb") as fh:
        yield from iter_numbered(_capped_lines(fh))


def _capped_lines(fh: BinaryIO) -> Iterator[bytes]:
    """The lines of ``fh``, but never more than one byte over the record limit per line.

    A line longer than that is cut there (and then refused by ``decode``), so a
    file with no newline cannot make the reader hold gigabytes for one "line".
    """
    cap = MAX_RECORD_BYTES + 1
    readline = fh.readline
    while line := readline(cap):
        yield line
        if len(line) == cap and not line.endswith(b"\n"):
            return  # decode refuses it; nothing after it is read


def read_log(path: str | Path) -> list[AnyEvent]:
    """Read a JSON-lines event log file (OSError if it cannot be opened, MalformedEvent if a line is bad)."""
    with open(path, "rb") as fh:
        return list(iter_lines(_capped_lines(fh)))


def write_log(path: str | Path, events: Iterable[Event]) -> None:
    """Write events as a JSON-lines log file."""
    with open(path, "wb") as fh:
        fh.write(encode_lines(events))
