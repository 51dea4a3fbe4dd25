"""Admission: whether a record may enter the journal as an input at all.

The journal's structure is what makes a record a decision: a decision type,
right after the input that caused it, ``cause`` naming that input and an id
``<cause>/<n>``. That only means something if no input can look like one, so
before an input is validated (``scheduler.validation``, which journals a
rejection) it must be *admissible*:

- its type is an input type (``not_an_input``): a producer cannot publish a
  ``workload.preempted``;
- it carries no ``cause`` (``has_cause``): only the engine sets it;
- its id matches ``events.limits.INPUT_ID_PATTERN`` (``bad_id``): no ``/``, so a
  producer can never take an id the scheduler will derive, and nothing a
  terminal or a log line would misread;
- it belongs to this engine's cluster (``wrong_cluster``);
- its values are ones a valid record can hold (``bad_value``: Python callers
  can build structs the wire would refuse, such as NaN shares).

An inadmissible input is refused: the engine raises ``InputRefused``, the live
worker dead-letters the record, and neither the journal nor the state ever
sees it. A fold of a journal therefore makes the same call on the same record
and skips it the same way, so live and replay share one rule.
"""

from __future__ import annotations

import re
from typing import Final

from msgspec.structs import astuple

from events import DECISION_TYPES, Event, tag_of
from events.errors import AllotError
from events.limits import CLUSTER_ID_PATTERN, INPUT_ID_PATTERN
from events.values import BOOL as _BOOL_KIND
from events.values import FLAT_CHECKS, FieldCheck, problem, version_of_class
from events.values import INT as _INT_KIND
from events.values import LITERAL as _LITERAL_KIND
from events.values import STR as _STR_KIND

_INPUT_ID = re.compile(INPUT_ID_PATTERN)
_CLUSTER_ID = re.compile(CLUSTER_ID_PATTERN)
# The field kinds of events.values, as Final names (compiled, they are C statics,
# not a dict lookup of another module's globals per field).
_STR: Final = _STR_KIND
_INT: Final = _INT_KIND
_BOOL: Final = _BOOL_KIND
_LITERAL: Final = _LITERAL_KIND
# Likewise the objects read per input (the same objects: the version table is
# updated in place by a version bump), and the decision types as a set: a
# type hashes and compares by identity, so membership is the tuple's.
_FLAT_CHECKS: Final = FLAT_CHECKS
_VERSION_OF_CLASS: Final = version_of_class
_ASTUPLE: Final = astuple
_DECISIONS: Final = frozenset(DECISION_TYPES)


class Refusal:
    """Stable reason codes for refused inputs (dead letters carry them too)."""

    NOT_AN_INPUT: Final = "not_an_input"
    HAS_CAUSE: Final = "has_cause"
    BAD_ID: Final = "bad_id"
    WRONG_CLUSTER: Final = "wrong_cluster"
    BAD_VALUE: Final = "bad_value"


class InputRefused(AllotError):
    """An input that may not enter the journal. Nothing changed; dead-letter it."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def valid_input_id(event_id: object) -> bool:
    """True when ``event_id`` is a string a producer may use as an event id."""
    return isinstance(event_id, str) and _INPUT_ID.fullmatch(event_id) is not None


def valid_cluster_id(cluster: object) -> bool:
    """True when ``cluster`` is a usable cluster id (a Kafka key, part of tick ids)."""
    return isinstance(cluster, str) and _CLUSTER_ID.fullmatch(cluster) is not None


def refusal(cluster: str, e: Event) -> tuple[str, str] | None:
    """Why input ``e`` may not enter ``cluster``'s journal, or None when it may."""
    kind = type(e)
    if kind in _DECISIONS:
        return (Refusal.NOT_AN_INPUT,
                f"{tag_of(kind)} is decided by the scheduler and cannot be published as input")
    if e.cause is not None:
        return (Refusal.HAS_CAUSE,
                f"inputs carry no cause (got cause={_show(e.cause)}); only the scheduler "
                f"derives events")
    if not valid_input_id(e.id):
        return (Refusal.BAD_ID,
                f"event id {_show(e.id)} must match {INPUT_ID_PATTERN} (no '/', spaces or "
                f"control characters)")
    if e.cluster != cluster:
        return (Refusal.WRONG_CLUSTER,
                f"event for cluster {_show(e.cluster)} sent to {cluster!r}")
    problem = value_problem(e)
    if problem is not None:
        return (Refusal.BAD_VALUE, problem)
    return None


def _show(value: object, limit: int = 80) -> str:
    """A value for a message: repr, cut short (a hostile id can be long)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def value_problem(e: Event) -> str | None:
    """What a valid record could not hold in ``e`` (see events.values), or None.

    Most inputs pass ``_holds``, a field-by-field test that proves ``problem``
    would answer None (``events.values.FLAT_CHECKS`` says why) at a fraction of
    the cost of the JSON round trip; any other event gets ``problem``'s answer.
    """
    checks = _FLAT_CHECKS.get(type(e))
    if checks is not None and _holds(_ASTUPLE(e), checks) \
            and e.v == _VERSION_OF_CLASS[type(e)]:  # after _holds: v is an int now
        return None
    return problem(e)


def _holds(values: tuple[object, ...], checks: tuple[FieldCheck, ...]) -> bool:
    """True when every field value passes its check (events.values, "the flat fast path")."""
    # Both are in the order of type(e).__struct_fields__, one item per field.
    for i in range(len(checks)):
        v = values[i]
        kind, nullable, lo, hi, literals = checks[i]
        if v is None:
            if not nullable:
                return False
        elif kind == _STR:
            # exact types only: a subclass could encode as anything
            if type(v) is not str or len(v) > hi or not v.isascii():
                return False
        elif kind == _INT:
            if type(v) is not int or v < lo or v > hi:
                return False
        elif kind == _BOOL:
            if type(v) is not bool:
                return False
        elif kind == _LITERAL:
            if type(v) is not str or v not in literals:
                return False
        else:
            return False
    return True
