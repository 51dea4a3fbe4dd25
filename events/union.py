"""The tagged union of every event type, and which of them are inputs.

Inputs are facts and requests from outside (producers, host monitors, managers,
the executor, the ticker). Derived events are the scheduler's answers; they
always carry ``cause`` and are re-derived, not trusted, on replay.
"""

from __future__ import annotations

from typing import Union

from events.budget import BudgetEditRejected, BudgetNodeDefined, BudgetSharesSet
from events.clock import ClockTicked
from events.host import HostAdded, HostDrained, HostFaulted, HostRemoved, HostRepaired
from events.policy import PolicyConfigured
from events.rejection import InputRejected
from events.workload import (
    WorkloadCancelled,
    WorkloadFinished,
    WorkloadPreempted,
    WorkloadRejected,
    WorkloadReserved,
    WorkloadStarted,
    WorkloadSubmitted,
)

INPUT_TYPES: tuple[type, ...] = (
    PolicyConfigured,
    BudgetNodeDefined,
    BudgetSharesSet,
    HostAdded,
    HostRemoved,
    HostFaulted,
    HostRepaired,
    WorkloadSubmitted,
    WorkloadCancelled,
    WorkloadFinished,
    ClockTicked,
)

DERIVED_TYPES: tuple[type, ...] = (
    WorkloadStarted,
    WorkloadReserved,
    WorkloadPreempted,
    WorkloadRejected,
    HostDrained,
    BudgetEditRejected,
    InputRejected,
)

ALL_TYPES: tuple[type, ...] = INPUT_TYPES + DERIVED_TYPES

# Written out (not built from ALL_TYPES) so type checkers see the union.
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
]


def tag_of(cls: type) -> str:
    """The stable wire tag of an event class."""
    return cls.__struct_config__.tag  # type: ignore[attr-defined, no-any-return]


TAGS: dict[str, type] = {tag_of(c): c for c in ALL_TYPES}
INPUT_TAGS: frozenset[str] = frozenset(tag_of(c) for c in INPUT_TYPES)
DERIVED_TAGS: frozenset[str] = frozenset(tag_of(c) for c in DERIVED_TYPES)
