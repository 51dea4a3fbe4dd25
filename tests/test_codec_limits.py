"""Records that used to crash or hang the core are clean refusals (issue 7, section 1).

Every failure of ``events.decode`` is a ``MalformedEvent`` (an ``AllotError``
and a ``ValueError``) with a one-line reason and, when known, the JSON path at
fault. The bounds of ``events.limits`` hold for every field of every type, and
events built through the Python API are checked by ``events.problem``.
"""

from __future__ import annotations

import msgspec
import pytest
from event_samples import encode_record, every_leaf, json_path, sample, with_value

from events import (
    ALL_TYPES,
    HostAdded,
    MalformedEvent,
    Slot,
    WorkloadStarted,
    decode,
    encode,
    problem,
    tag_of,
)
from events.errors import AllotError
from events.factory import Inputs
from events.limits import (
    INT64_MAX,
    INT64_MIN,
    MAX_ARRAY_ITEMS,
    MAX_DEPTH,
    MAX_DURATION_S,
    MAX_GPUS_PER_HOST,
    MAX_PATH_CHARS,
    MAX_RECORD_BYTES,
    MAX_SHARES,
    MAX_STRING_CHARS,
    MAX_TIME,
)
from events.schema import event_schema

TICK = b'{"type":"clock.ticked","id":"t1","at":1767571200'


def _nested(depth: int, open_: bytes = b"[", close: bytes = b"]", core: bytes = b"") -> bytes:
    """A tick whose unknown field ``x`` nests so that the whole record is ``depth`` levels deep."""
    inner = depth - 1  # the envelope object is the first level
    return TICK + b',"x":' + open_ * inner + core + close * inner + b"}"


def _refusal(data: bytes | str) -> MalformedEvent:
    with pytest.raises(MalformedEvent) as info:
        decode(data)
    exc = info.value
    assert exc.reason and "\n" not in exc.reason and len(exc.reason) <= 240
    assert exc.line is None
    return exc


# ---------------------------------------------------------------- every failure is a MalformedEvent

# (bytes, a fragment of the reason, the position or None)
HOSTILE = [
    pytest.param(_nested(1_000), f"nested deeper than {MAX_DEPTH}", None, id="deep-1000-unknown-field"),
    pytest.param(_nested(100_000), f"nested deeper than {MAX_DEPTH}", None, id="deep-100000"),
    pytest.param(_nested(MAX_DEPTH + 1), f"nested deeper than {MAX_DEPTH}", None, id="deep-limit+1"),
    pytest.param(_nested(60, b"{\"a\":", b"}", b"1"), f"nested deeper than {MAX_DEPTH}", None,
                 id="deep-objects"),
    pytest.param(b'{"type":"budget.shares_set","id":"b","at":1,"parent":"lab","shares":'
                 + b"[" * 2000 + b"]" * 2000 + b"}", f"nested deeper than {MAX_DEPTH}", None,
                 id="deep-known-field"),
    pytest.param(TICK + b',"d":"' + b"]" * 40 + b'","x":' + b"[" * 40 + b"]" * 40 + b"}",
                 f"nested deeper than {MAX_DEPTH}", None, id="deep-behind-closers-in-a-string"),
    pytest.param(TICK + b',"d":"\\"' + b"]" * 40 + b'","x":' + b"[" * 40 + b"]" * 40 + b"}",
                 f"nested deeper than {MAX_DEPTH}", None, id="deep-behind-an-escaped-quote"),
    pytest.param(TICK + b',"x":' + b"[" * 40 + b"]" * 30 + b"}", f"nested deeper than {MAX_DEPTH}",
                 None, id="deep-and-unclosed"),
    pytest.param(TICK + b',"x":' + b"[]" * 20 + b"]]]}", "do not balance", None,
                 id="unbalanced"),
    pytest.param(b'{"type":"workload.started","id":"t/0","at":1,"placement":['
                 + b'{"host":"h","gpus":8},' * 20 + b'{"host', "not JSON", None,
                 id="cut-after-many-brackets"),
    pytest.param(b'{"type":{},"id":"x","at":1}', "Expected `str`", "$.type", id="type-object"),
    pytest.param(b'{"type":[],"id":"x","at":1}', "Expected `str`", "$.type", id="type-array"),
    pytest.param(b'{"type":null,"id":"x","at":1}', "Expected `str`", "$.type", id="type-null"),
    pytest.param(b'{"type":{},"id":"x","at":1,"v":2}', "Expected `str`", "$.type",
                 id="type-object-old-version"),
    pytest.param(b'{"type":"workload.foo","id":"x","at":1}', "unknown event type", "$.type",
                 id="unknown-type"),
    pytest.param(b'{"type":"budget.shares_set","id":"b","at":1,"parent":"lab",'
                 b'"shares":[{"child":"a","shares":9223372036854775808}]}',
                 "<= 1000000000", "$.shares[0].shares", id="shares-2**63"),
    pytest.param(TICK[:-10] + b"9223372036854775808}", "<= 1099511627776", "$.at",
                 id="at-2**63"),
    pytest.param(TICK[:-10] + b"1099511627777}", "<= 1099511627776", "$.at",
                 id="at-after-max-time"),
    pytest.param(TICK[:-10] + b"-9223372036854775809}", ">= -9223372036854775808", "$.at",
                 id="at-below-int64"),
    pytest.param(TICK[:-10] + b"123456789012345678901234567890}", "", None, id="at-10**30"),
    pytest.param(TICK[:-10] + b"1e400}", "", None, id="at-1e400"),
    pytest.param(b'{"type":"host.added","id":"h","at":1,"host":"h1","gpus":1000000000}',
                 f"<= {MAX_GPUS_PER_HOST}", "$.gpus", id="gpus-10**9"),
    pytest.param(TICK + b',"actor":"' + b"a" * (MAX_STRING_CHARS + 1) + b'"}',
                 f"length <= {MAX_STRING_CHARS}", "$.actor", id="long-string"),
    pytest.param(TICK + b',"x":"' + b"a" * MAX_RECORD_BYTES + b'"}',
                 f"over the limit of {MAX_RECORD_BYTES:,} bytes", None, id="record-too-large"),
    pytest.param(b'{"type":"clock.ticked","id":"\xff\xfe","at":1}', "UTF-8", None, id="not-utf8"),
    pytest.param(b"\xff\xfe\x00\x01", "not JSON", None, id="binary"),
    pytest.param(TICK + b',"v":1.5}', "Expected `int`", "$.v", id="v-float"),
    pytest.param(TICK + b',"v":true}', "Expected `int`", "$.v", id="v-bool"),
    pytest.param(TICK + b',"v":' + b"9" * 40 + b"}", "", None, id="v-huge"),
    pytest.param(b'{"type":"host.faulted","id":"f","at":1,"host":"h","severity":"'
                 + b"z" * 3000 + b'"}', "Invalid enum value", "$.severity", id="long-enum-value"),
    pytest.param("{\"type\":\"clock.ticked\",\"id\":\"\ud800\",\"at\":1}", "UTF-8", None,
                 id="str-with-surrogate"),
    pytest.param(b"", "not JSON", None, id="empty"),
    pytest.param(b"[1]", "Expected `object`", "$", id="array"),
]


@pytest.mark.parametrize("data, fragment, position", HOSTILE)
def test_hostile_records_are_malformed_events(data: bytes | str, fragment: str,
                                              position: str | None) -> None:
    """Each is refused with a MalformedEvent naming the fault, never another exception."""
    exc = _refusal(data)
    assert fragment in exc.reason
    if position is not None:
        assert exc.position == position
    assert isinstance(exc, AllotError) and isinstance(exc, ValueError)


def test_reason_escapes_control_and_bidi_characters() -> None:
    """A refused value is quoted on one printable line (no terminal escapes, no bidi overrides)."""
    exc = _refusal(b'{"type":"host.faulted","id":"f","at":1,"host":"h","severity":'
                   b'"\\u001b[2J\\u202e\\n"}')
    assert exc.reason.isprintable()


def test_malformed_event_attributes() -> None:
    """reason, position and line are attributes; str() is the reason when no line is known."""
    exc = _refusal(b'{"type":"workload.submitted","id":"s","at":1,"workload":"w",'
                   b'"budget":"lab/a","user":"u","gpus":"8","min_runtime_s":60}')
    assert exc.reason == "Expected `int`, got `str` - at `$.gpus`"
    assert exc.position == "$.gpus"
    assert str(exc) == exc.reason


# ---------------------------------------------------------------- what stays accepted

ACCEPTED = [
    pytest.param(_nested(MAX_DEPTH), id="depth-at-limit"),
    pytest.param(_nested(MAX_DEPTH, b"{\"a\":", b"}", b"1"), id="object-depth-at-limit"),
    pytest.param(TICK + b',"d":"' + b"[" * 100 + b'"}', id="brackets-in-a-string"),
    pytest.param(TICK + b',"d":"\\"[[[[[[[[[[[[[[[[[[[[\\\\"}', id="brackets-after-escapes"),
    pytest.param(TICK[:-10] + str(MAX_TIME).encode() + b"}", id="at-max-time"),
    pytest.param(TICK[:-10] + str(INT64_MIN).encode() + b"}", id="at-int64-min"),
    pytest.param(TICK + b',"actor":"' + "é".encode() * MAX_STRING_CHARS + b'"}',
                 id="string-at-limit-in-characters"),
    pytest.param(b'{"type":"host.added","id":"h","at":1,"host":"h1","gpus":64}', id="gpus-64"),
]


@pytest.mark.parametrize("data", ACCEPTED)
def test_records_within_the_limits_decode(data: bytes) -> None:
    decode(data)


def test_a_large_gang_start_decodes() -> None:
    """A start of a 5,000-host gang (many brackets, all shallow) decodes: the depth scan's slow path."""
    start = WorkloadStarted(id="t1/0", at=0, cause="t1", workload="w", allocated=True,
                            protected_until=1, placement=tuple(
                                Slot(host=f"h{i:05d}", gpus=8) for i in range(5_000)))
    data = encode(start)
    assert len(data) < MAX_RECORD_BYTES
    assert decode(data) == start


# ---------------------------------------------------------------- every field has its bound


def _leaf_id(case: tuple[type, tuple, object]) -> str:
    cls, path, _ = case
    return f"{tag_of(cls)}:{json_path(path)}"


INT_LEAVES = [c for c in every_leaf() if isinstance(c[2], msgspec.inspect.IntType)]
STR_LEAVES = [c for c in every_leaf() if isinstance(c[2], msgspec.inspect.StrType)]


def test_every_type_has_a_sample() -> None:
    assert {tag_of(c) for c in ALL_TYPES} == {sample(c)["type"] for c in ALL_TYPES}
    for cls in ALL_TYPES:
        assert type(decode(encode_record(sample(cls)))) is cls


@pytest.mark.parametrize("case", INT_LEAVES, ids=_leaf_id)
def test_every_integer_is_int64(case: tuple[type, tuple, msgspec.inspect.IntType]) -> None:
    """Each integer field (nested ones too) refuses 2**63 and -2**63 - 1, naming its path."""
    cls, path, t = case
    record = sample(cls)
    for bad in (INT64_MAX + 1, INT64_MIN - 1, 10**30):
        exc = _refusal(encode_record(with_value(record, path, bad)))
        if path != ("v",):  # v is read before the types (a version newer than this reader)
            assert exc.position == json_path(path), exc.reason
    if path != ("v",):
        top = t.le if t.le is not None else INT64_MAX
        assert top <= INT64_MAX and (t.ge is None or t.ge >= INT64_MIN)
        decode(encode_record(with_value(record, path, top)))
        decode(encode_record(with_value(record, path, INT64_MIN)))


@pytest.mark.parametrize("case", STR_LEAVES, ids=_leaf_id)
def test_every_string_is_bounded(case: tuple[type, tuple, msgspec.inspect.StrType]) -> None:
    """Each string field refuses one character past its limit (MAX_STRING_CHARS, or a path's), naming its path."""
    cls, path, t = case
    limit = t.max_length
    assert limit is not None and limit <= MAX_STRING_CHARS
    record = sample(cls)
    exc = _refusal(encode_record(with_value(record, path, "a" * (limit + 1))))
    assert exc.position == json_path(path)
    decode(encode_record(with_value(record, path, "a" * limit)))


def test_bounded_fields_have_their_own_limits() -> None:
    """GPUs per host and shares have tighter bounds than int64 (events/limits.py)."""
    bounds = {(tag_of(cls), json_path(path)): t.le for cls, path, t in INT_LEAVES}
    assert bounds[("host.added", "$.gpus")] == MAX_GPUS_PER_HOST
    assert bounds[("policy.configured", "$.host_gpus")] == MAX_GPUS_PER_HOST
    assert bounds[("budget.node_defined", "$.shares")] == MAX_SHARES
    assert bounds[("budget.shares_set", "$.shares[0].shares")] == MAX_SHARES
    paths = {(tag_of(cls), json_path(path)): t.max_length for cls, path, t in STR_LEAVES}
    assert paths[("workload.submitted", "$.workdir")] == MAX_PATH_CHARS
    assert paths[("workload.submitted", "$.log_path")] == MAX_PATH_CHARS


def test_the_schema_states_the_limits() -> None:
    """The published JSON Schema carries the bounds, so producers in other languages see them."""
    defs = event_schema()["$defs"]
    added = defs["HostAdded"]["properties"]
    assert added["gpus"]["maximum"] == MAX_GPUS_PER_HOST
    assert added["host"]["maxLength"] == MAX_STRING_CHARS
    assert defs["ClockTicked"]["properties"]["at"]["maximum"] == MAX_TIME
    assert defs["PolicyConfigured"]["properties"]["window_s"]["maximum"] == MAX_DURATION_S
    assert defs["WorkloadStarted"]["properties"]["placement"]["maxItems"] == MAX_ARRAY_ITEMS
    assert defs["ChildShare"]["properties"]["shares"]["maximum"] == MAX_SHARES


# ---------------------------------------------------------------- events built in Python

mk = Inputs(cluster="c", prefix="p")


def _deep_list(depth: int) -> list:
    x: list = []
    for _ in range(depth):
        x = [x]
    return x


# (event, a fragment of the problem)
BAD_VALUES = [
    pytest.param(mk.shares("lab", {"a": float("nan")}), "not a finite number",
                 id="nan-shares"),
    pytest.param(mk.shares("lab", {"a": 2.5}), "got `float` - at `$.shares[0].shares`",
                 id="float-shares"),
    pytest.param(mk.shares("lab", {"a": 2**63}), "<= 1000000000", id="shares-2**63"),
    pytest.param(mk.host("h1", gpus=10**9), f"<= {MAX_GPUS_PER_HOST} - at `$.gpus`",
                 id="gpus-10**9"),
    pytest.param(mk.host("h1", gpus=True), "got `bool`", id="bool-for-int"),
    pytest.param(mk.submit("w", "lab/a", gpus=float("inf"), min_runtime_s=60),
                 "not a finite number: inf - at `$.gpus`", id="inf-gpus"),
    pytest.param(mk.submit("w", "lab/a", gpus=8, min_runtime_s=60.0), "got `float`",
                 id="float-min-runtime"),
    pytest.param(mk.tick(2**63), "<= 1099511627776 - at `$.at`", id="at-2**63"),
    pytest.param(mk.node("lab/a", managers=["x"]), "list", id="list-for-tuple"),  # type: ignore[arg-type]
    pytest.param(mk.node("lab/" + "a" * MAX_STRING_CHARS), "length <= 4096", id="long-path"),
    pytest.param(mk.host("\ud800"), "cannot be encoded", id="lone-surrogate"),
    pytest.param(mk.shares("lab", {f"c{i}": 1 for i in range(20_000)}), "over the limit",
                 id="record-too-large"),
    pytest.param(HostAdded(id="x", at=0, host=b"h1"), "bytes", id="bytes-for-str"),  # type: ignore[arg-type]
    pytest.param("not an event", "not an event", id="not-an-event"),
    pytest.param(mk.node("lab/a", managers=_deep_list(5_000)), "nested deeper",  # type: ignore[arg-type]
                 id="deep-list"),
    pytest.param(mk.node("lab/a", managers=_deep_list(30)), "nested deeper",  # type: ignore[arg-type]
                 id="nested-list"),
    pytest.param(mk.host("h1", rack=object()), "cannot be encoded", id="unencodable"),  # type: ignore[arg-type]
    pytest.param(mk.host("h1", rack={"a": 1}), "got `object` - at `$.rack`", id="dict-for-str"),  # type: ignore[arg-type]
]


@pytest.mark.parametrize("event, fragment", BAD_VALUES)
def test_values_a_record_cannot_hold_are_problems(event: object, fragment: str) -> None:
    """problem() names what a journal record could not hold (the engine refuses: bad_value)."""
    found = problem(event)
    assert found is not None and fragment in found, found
    assert "\n" not in found


GOOD_VALUES = [
    pytest.param(mk.tick(1_767_571_200), id="tick"),
    pytest.param(mk.submit("w", "lab/a", gpus=16, hosts=2, min_runtime_s=3600,
                           expected_duration_s=7200), id="submit"),
    pytest.param(mk.shares("lab", {"a": MAX_SHARES, "b": 0}), id="shares-at-limit"),
    pytest.param(mk.host("h1", gpus=MAX_GPUS_PER_HOST, rack="r1"), id="host"),
    pytest.param(mk.node("lab/a", managers=("x", "y")), id="node"),
    pytest.param(mk.host("h1", gpus=0), id="gpus-0-is-the-validators"),
    pytest.param(mk.shares("lab", {"a": -1}), id="negative-shares-are-the-validators"),
]


@pytest.mark.parametrize("event", GOOD_VALUES)
def test_values_a_record_can_hold_are_no_problem(event: object) -> None:
    assert problem(event) is None


@pytest.mark.parametrize("cls", ALL_TYPES, ids=tag_of)
def test_every_decoded_sample_is_no_problem(cls: type) -> None:
    """Whatever decode() returns is an event a record can hold (the two checks agree)."""
    assert problem(decode(encode_record(sample(cls)))) is None
