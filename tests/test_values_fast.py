"""The flat fast path of the value check agrees with ``events.values.problem``.

``scheduler.admission._value_problem`` answers None without the JSON round
trip when a field-by-field test (``events.values.FLAT_CHECKS``) proves that
``problem`` would; every other event gets ``problem``'s own answer. So the two
must give the same answer, text included, for every event: valid ones, and
ones holding NaN, infinity, a bool for an int, a list for a tuple, huge ints,
deep nesting, over-long, non-ASCII or unencodable strings, subclasses of
``str`` and ``int``, a literal outside its values, or an old or new version.
"""

from __future__ import annotations

import enum
import functools
from typing import Any

import msgspec
import pytest
from event_samples import sample
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from msgspec import inspect as mi

from events import DECISION_TYPES, ClockTicked, decode, encode
from events.codec import CURRENT_VERSION
from events.limits import INT64_MAX, INT64_MIN, MAX_RECORD_BYTES, MAX_STRING_CHARS
from events.union import TAGS
from events.values import FLAT_CHECKS, problem
from scheduler.admission import Refusal, refusal, value_problem


class _Str(str):
    __slots__ = ()


class _Int(enum.IntEnum):
    ONE = 1


def _deep(n: int) -> Any:
    out: Any = []
    for _ in range(n):
        out = [out]
    return out


# Values a field may be given: at and around every bound, and every wrong kind.
_HOSTILE: list[Any] = [
    None, True, False, 0, 1, -1, 2, 64, 65, 10**9, 10**9 + 1,
    2**32, 2**32 + 1, 2**40, 2**40 + 1, INT64_MAX, INT64_MAX + 1, INT64_MIN, INT64_MIN - 1,
    2**62 - 1, 2**62, -(2**62), -(2**62) - 1,
    10**30, 1.0, 0.5, float("nan"), float("inf"), float("-inf"),
    "", "x", "succeeded", "failed", "other", "training",
    "a" * MAX_STRING_CHARS, "a" * (MAX_STRING_CHARS + 1),
    "\x00" * MAX_STRING_CHARS, "[" * 40, "{" * 40 + '"\\',
    "é" * MAX_STRING_CHARS, "é" * (MAX_STRING_CHARS + 1), "\ud800", "\u202e",
    _Str("x"), _Int.ONE, b"x", ["x"], ("x",), (), {"a": 1}, _deep(5), _deep(40),
    object(),
]


def _valid(cls: type) -> msgspec.Struct:
    event = decode(msgspec.json.encode(sample(cls)))
    assert type(event) is cls
    return event


def _fields(cls: type) -> list[str]:
    return list(cls.__struct_fields__)  # type: ignore[attr-defined]


@functools.cache
def _valid_values(cls: type) -> dict[str, Any]:
    """One valid event's fields (made once per type: building a sample reads its annotations)."""
    return msgspec.structs.asdict(_valid(cls))


def _build(cls: type, changes: dict[str, Any]) -> Any:
    values = dict(_valid_values(cls))
    values.update(changes)
    return cls(**values)  # msgspec does not check types on construction


_VALUES = st.sampled_from(_HOSTILE) | st.integers() | st.text(max_size=8)


@st.composite
def _events(draw: st.DrawFn) -> Any:
    cls = draw(st.sampled_from(sorted(TAGS.values(), key=lambda c: c.__name__)))
    names = _fields(cls)
    changed = draw(st.lists(st.sampled_from(names), max_size=3, unique=True))
    changes = {n: draw(_VALUES) for n in changed}
    return _build(cls, changes)


def _agree(event: Any) -> bool:
    """The fast path's answer is problem's; True when the fast path itself answered."""
    slow = problem(event)
    assert value_problem(event) == slow, (event, slow)
    return slow is None


@seed(20261202)
@settings(max_examples=3000, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(_events())
def test_fast_path_agrees_with_the_round_trip(event: Any) -> None:
    _agree(event)


@pytest.mark.parametrize("cls", sorted(TAGS.values(), key=lambda c: c.__name__),
                         ids=lambda c: c.__name__)
def test_every_field_and_every_hostile_value(cls: type) -> None:
    """Each field of each type, given each hostile value in turn: the same answer."""
    for name in _fields(cls):
        for value in _HOSTILE:
            _agree(_build(cls, {name: value}))


def test_the_common_inputs_take_the_fast_path() -> None:
    """What the simulator sends is decided without the round trip (or this gains nothing)."""
    from events.workload import WorkloadFinished, WorkloadSubmitted
    for cls in (ClockTicked, WorkloadSubmitted, WorkloadFinished):
        assert cls in FLAT_CHECKS
        assert _agree(_valid(cls))


def test_strings_at_every_bound_fit_a_record() -> None:
    """The size bound holds: every string at its limit, all escaped to 6 bytes, still fits."""
    for cls, checks in FLAT_CHECKS.items():
        info = mi.type_info(cls)
        assert isinstance(info, mi.StructType)
        # (each string at its own limit: MAX_STRING_CHARS, or less for paths)
        changes = {f.name: "\x01" * c[3] for f, c in zip(info.fields, checks, strict=True)
                   if c[0] == 0}
        assert max(c[3] for c in checks if c[0] == 0) == MAX_STRING_CHARS
        event = _build(cls, changes)
        assert len(encode(event)) <= MAX_RECORD_BYTES
        assert _agree(event)


def test_a_version_bump_is_seen() -> None:
    """The current version is read per call: after a bump, a v1 event needs an upcaster."""
    event = _valid(ClockTicked)
    assert _agree(event)
    CURRENT_VERSION["clock.ticked"] = 2
    try:
        assert not _agree(event)
        assert _agree(msgspec.structs.replace(event, v=2))
    finally:
        CURRENT_VERSION["clock.ticked"] = 1
    assert _agree(event)


@pytest.mark.parametrize("cls", sorted(TAGS.values(), key=lambda c: c.__name__),
                         ids=lambda c: c.__name__)
def test_only_decision_types_are_not_inputs(cls: type) -> None:
    """``refusal`` looks the type up in a set of the decision types: the tuple's answer."""
    event = msgspec.structs.replace(_valid(cls), cause=None, cluster="c")
    found = refusal("c", event)
    if cls in DECISION_TYPES:
        assert found is not None and found[0] == Refusal.NOT_AN_INPUT
    else:
        assert found is None or found[0] != Refusal.NOT_AN_INPUT
