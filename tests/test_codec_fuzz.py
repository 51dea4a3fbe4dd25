"""Generated hostile records against the decoder: every one decodes to a valid event or is refused.

Hypothesis (seeded, no example database) builds batches of records as a
hostile producer would: valid records of every type with one value replaced
by something hostile (deep nesting, huge or non-finite numbers, wrong types,
invalid UTF-8, over-long strings), unknown or non-string tags, unknown fields
holding anything, records cut in the middle or with a byte flipped, and plain
garbage. For each record ``decode`` must either return an event that a
valid record can hold (``problem`` is None, and it re-encodes to an equal
event) or raise ``MalformedEvent`` with a one-line reason. Any other exception
fails the test. The counts are printed (run with ``-s`` to see them).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import msgspec
from event_samples import json_path, leaves, sample
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from events import ALL_TYPES, MalformedEvent, decode, encode, problem
from events.errors import AllotError
from events.limits import MAX_DEPTH, MAX_STRING_CHARS

BATCH = 25
EXAMPLES = 480  # x BATCH = 12,000 records

SAMPLES = [sample(cls) for cls in ALL_TYPES]
TAGS = [s["type"] for s in SAMPLES]
LEAVES = {
    s["type"]: list(leaves(msgspec.inspect.type_info(cls)))
    for s, cls in zip(SAMPLES, ALL_TYPES, strict=True)
}
LEAF_PATHS = {tag: [p for p, _ in found] for tag, found in LEAVES.items()}


def _in_bounds(t: msgspec.inspect.Type) -> st.SearchStrategy[Any]:
    """Any value the leaf's type accepts, bounds included."""
    if isinstance(t, msgspec.inspect.IntType):
        lo = -(2**63) if t.ge is None else t.ge
        hi = 2**63 - 1 if t.le is None else t.le
        return st.one_of(st.integers(lo, hi), st.sampled_from([lo, hi, 0]))
    assert isinstance(t, msgspec.inspect.StrType)
    top = t.max_length or MAX_STRING_CHARS
    return st.one_of(st.text(max_size=50), st.sampled_from(["", "é" * top, "[" * top]))

# ---------------------------------------------------------------- JSON fragments, as bytes

HOSTILE_SCALARS = [
    b"null", b"true", b"false", b"0", b"-0", b"-0.0", b"1.5", b"1e400", b"-1e400", b"1E+999",
    b"9223372036854775807", b"9223372036854775808", b"-9223372036854775808",
    b"-9223372036854775809", b"18446744073709551615", b"18446744073709551616",
    b"1" * 400, b"-" + b"9" * 100, b"NaN", b"Infinity", b"-Infinity", b"01", b"1e", b"+1",
    b"0x10", b'""', b'"\\ud800"', b'"\\u0000"', b'"\\u202e"', b'"\\u001b[2J"', b'"\\"',
    b'"a\\qb"', b'"\xff\xfe"', b'"\xc3"', b'"\xed\xa0\x80"', b"[]", b"{}", b"[{}]",
    b'{"":{}}', b'"' + b"a" * (MAX_STRING_CHARS + 1) + b'"',
    b'"' + "é".encode() * MAX_STRING_CHARS + b'"',
]

scalars = st.one_of(
    st.sampled_from(HOSTILE_SCALARS),
    st.integers(min_value=-(2**70), max_value=2**70).map(lambda n: str(n).encode()),
    st.floats(allow_nan=False, allow_infinity=False).map(lambda f: repr(f).encode()),
    st.text(max_size=20).map(msgspec.json.encode),
    st.binary(max_size=12).map(lambda b: b'"' + b.replace(b'"', b"").replace(b"\\", b"") + b'"'),
)


def _array(items: list[bytes]) -> bytes:
    return b"[" + b",".join(items) + b"]"


def _object(items: list[tuple[str, bytes]]) -> bytes:
    return b"{" + b",".join(msgspec.json.encode(k) + b":" + v for k, v in items) + b"}"


values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(_array),
        st.lists(st.tuples(st.text(max_size=6), inner), max_size=4).map(_object),
    ),
    max_leaves=12,
)


@st.composite
def deep(draw: st.DrawFn) -> bytes:
    """Nesting from just under the limit to far over it, arrays and objects mixed, maybe unclosed."""
    depth = draw(st.one_of(st.integers(MAX_DEPTH - 3, MAX_DEPTH + 3), st.integers(1, 5_000)))
    kinds = draw(st.lists(st.booleans(), min_size=1, max_size=4))
    opens, closes = [], []
    for i in range(depth):
        if kinds[i % len(kinds)]:
            opens.append(b"[")
            closes.append(b"]")
        else:
            opens.append(b'{"k":')
            closes.append(b"}")
    core = b"1" if not kinds[(depth - 1) % len(kinds)] else b""
    cut = draw(st.integers(0, 3))  # leave some closers off now and then
    closers = closes[::-1]
    return b"".join(opens) + core + b"".join(closers[: len(closers) - cut if cut < 3 else None])


hostile = st.one_of(values, deep())

# ---------------------------------------------------------------- records


def _record_bytes(fields: dict[str, bytes]) -> bytes:
    return b"{" + b",".join(msgspec.json.encode(k) + b":" + v for k, v in fields.items()) + b"}"


def _fields_of(record: dict[str, Any]) -> dict[str, bytes]:
    return {k: msgspec.json.encode(v) for k, v in record.items()}


def _set_path(record: dict[str, Any], path: tuple[str | int, ...], fragment: bytes) -> bytes:
    """The record with the value at ``path`` replaced by raw JSON ``fragment``."""
    marker = "\u0000MARK\u0000"
    node: Any = record
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = marker
    return msgspec.json.encode(record).replace(msgspec.json.encode(marker), fragment)


@st.composite
def records(draw: st.DrawFn) -> tuple[str, bytes]:
    """(kind, bytes) of one generated record."""
    base = msgspec.json.decode(msgspec.json.encode(draw(st.sampled_from(SAMPLES))))
    kind = draw(st.sampled_from(["value", "value", "unknown-field", "tag", "drop-field", "valid",
                                 "cut", "flip", "garbage"]))
    if kind == "value":  # one integer or string anywhere in the record made hostile
        path = draw(st.sampled_from(LEAF_PATHS[base["type"]]))
        return f"value {json_path(path)}", _set_path(base, path, draw(hostile))
    if kind == "unknown-field":
        fields = _fields_of(base)
        fields[draw(st.sampled_from(["x", "extra", "type2", ""]))] = draw(hostile)
        return kind, _record_bytes(fields)
    if kind == "tag":
        fields = _fields_of(base)
        fields["type"] = draw(st.one_of(
            hostile, st.sampled_from(TAGS).map(lambda t: msgspec.json.encode(t + "x")),
            st.text(max_size=30).map(msgspec.json.encode)))
        if draw(st.booleans()):
            fields["v"] = draw(st.sampled_from([b"0", b"2", b"-1", b"1.0", b"true", b"null"]))
        return kind, _record_bytes(fields)
    if kind == "drop-field":
        fields = _fields_of(base)
        del fields[draw(st.sampled_from(sorted(fields)))]
        return kind, _record_bytes(fields)
    data = msgspec.json.encode(base)
    if kind == "valid":  # one value drawn within (and at) its type's bounds: must decode
        path, t = draw(st.sampled_from([x for x in LEAVES[base["type"]] if x[0] != ("v",)]))
        return kind, _set_path(base, path, msgspec.json.encode(draw(_in_bounds(t))))
    if kind == "cut":
        return kind, data[: draw(st.integers(0, len(data) - 1))]
    if kind == "flip":
        i = draw(st.integers(0, len(data) - 1))
        return kind, data[:i] + bytes([draw(st.integers(0, 255))]) + data[i + 1:]
    return kind, draw(st.binary(max_size=200))


def test_generated_hostile_records_never_crash_the_decoder() -> None:
    """Over 10,000 generated records: each decodes to a valid event or is a clean refusal."""
    counts: Counter[str] = Counter()
    by_kind: dict[str, tuple[int, int]] = {}  # kind -> (refused, accepted)

    @seed(20260105)
    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.lists(records(), min_size=BATCH, max_size=BATCH))
    def run(batch: list[tuple[str, bytes]]) -> None:
        for kind, data in batch:
            counts["tried"] += 1
            group = kind.split(" ")[0]
            try:
                event = decode(data)
            except MalformedEvent as exc:
                assert kind != "valid", (exc.reason, data[:200])  # never refuse a valid record
                assert isinstance(exc, AllotError)
                assert exc.reason and exc.reason.isprintable() and len(exc.reason) <= 240
                counts["refused"] += 1
                by_kind[group] = (by_kind.get(group, (0, 0))[0] + 1, by_kind.get(group, (0, 0))[1])
                continue
            by_kind[group] = (by_kind.get(group, (0, 0))[0], by_kind.get(group, (0, 0))[1] + 1)
            # Anything accepted is an event a valid record can hold, and round-trips.
            assert problem(event) is None, (kind, data[:200])
            assert decode(encode(event)) == event
            counts["accepted"] += 1

    run()
    print(f"\ndecoder fuzz: {counts['tried']:,} records tried, {counts['refused']:,} clean "
          f"refusals, {counts['accepted']:,} accepted, 0 crashes")
    print("  refused / accepted by kind: " + ", ".join(
        f"{k} {r:,}/{a:,}" for k, (r, a) in sorted(by_kind.items())))
    assert counts["tried"] >= 10_000
    assert counts["refused"] + counts["accepted"] == counts["tried"]
    assert counts["refused"] > counts["tried"] // 2 and counts["accepted"] > 100
