"""The tagged union of every event type, and which of them are inputs.

Inputs are facts and requests from outside (producers, host monitors, managers,
the executor, the ticker). Decisions (derived events) are the scheduler's
answers: only the engine writes them, each right after the input that caused
it, with ``cause`` = that input's id and id ``<cause>/<n>``. In a journal that
position is what makes a record a decision; an input can never pass for one,
because inputs of decision types, inputs carrying ``cause`` and input ids
containing ``/`` are refused before they reach the journal.
"""

from __future__ import annotations

from typing import Union, get_args

from events.budget import BudgetEditRejected, BudgetNodeDefined, BudgetSharesSet
from events.clock import ClockTicked
from events.host import HostAdded, HostDrained, HostFaulted, HostRemoved, HostRepaired
from events.policy import PolicyConfigured
from events.principal import PrincipalKeyRevoked, PrincipalKeyRotated, PrincipalRegistered
from events.rejection import InputRejected
from events.workload import (
    WorkloadCancelled,
    WorkloadFinished,
    WorkloadPreempted,
    WorkloadRejected,
    WorkloadReserved,
    WorkloadStarted,
    WorkloadStopped,
    WorkloadSubmitted,
)

# The one list of event types: the union below. Everything else (the inputs,
# the decisions, the tags, the fold and validation tables in scheduler/) is
# derived from it, and a test checks that every table covers every type.
# Written out (not built at run time) so type checkers and the schema see it.
AnyEvent = Union[  # noqa: UP007 - a named alias reads better in schemas and errors
    PolicyConfigured,
    BudgetNodeDefined,
    BudgetSharesSet,
    BudgetEditRejected,
    HostAdded,
    HostRemoved,
    HostFaulted,
    HostDrained,
    HostRepaired,
    WorkloadSubmitted,
    WorkloadCancelled,
    WorkloadRejected,
    WorkloadStarted,
    WorkloadReserved,
    WorkloadPreempted,
    WorkloadFinished,
    ClockTicked,
    InputRejected,
    WorkloadStopped,
    PrincipalRegistered,
    PrincipalKeyRotated,
    PrincipalKeyRevoked,
]

ALL_TYPES: tuple[type, ...] = get_args(AnyEvent)

# Which of them only the scheduler writes. An input of one of these types is
# refused at the journal's door (``not_an_input``), whatever it claims.
DECISION_TYPES: tuple[type, ...] = (
    WorkloadStarted,
    WorkloadReserved,
    WorkloadPreempted,
    WorkloadRejected,
    HostDrained,
    BudgetEditRejected,
    InputRejected,
)
INPUT_TYPES: tuple[type, ...] = tuple(t for t in ALL_TYPES if t not in DECISION_TYPES)


def tag_of(cls: type) -> str:
    """The stable wire tag of an event class."""
    return cls.__struct_config__.tag  # type: ignore[attr-defined, no-any-return]


TAGS: dict[str, type] = {tag_of(c): c for c in ALL_TYPES}
INPUT_TAGS: frozenset[str] = frozenset(tag_of(c) for c in INPUT_TYPES)
DECISION_TAGS: frozenset[str] = frozenset(tag_of(c) for c in DECISION_TYPES)
