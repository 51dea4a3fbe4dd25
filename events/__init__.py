"""The log's vocabulary: every allot event as a frozen msgspec struct.

Events are a public contract: stable ``type`` tags, a per-type schema version
``v``, JSON on the wire, a published JSON Schema (docs/events.schema.json), and
additive evolution with upcasters for the rare breaking change.
"""

from events.base import SCHEMA_VERSION, ChildShare, Event, Slot
from events.budget import BudgetEditReason, BudgetEditRejected, BudgetNodeDefined, BudgetSharesSet
from events.clock import ClockTicked
from events.codec import (
    MalformedEvent,
    decode,
    encode,
    encode_lines,
    iter_lines,
    read_log,
    write_log,
)
from events.host import HostAdded, HostDrained, HostFaulted, HostRemoved, HostRepaired
from events.policy import DAY_S, HOUR_S, PolicyConfigured
from events.principal import (
    ROLES,
    PrincipalKeyRevoked,
    PrincipalKeyRotated,
    PrincipalRegistered,
    Role,
)
from events.rejection import InputReason, InputRejected
from events.union import (
    ALL_TYPES,
    DECISION_TAGS,
    DECISION_TYPES,
    INPUT_TAGS,
    INPUT_TYPES,
    TAGS,
    AnyEvent,
    tag_of,
)
from events.values import problem
from events.workload import (
    PreemptionReason,
    RejectReason,
    WorkloadCancelled,
    WorkloadFinished,
    WorkloadKind,
    WorkloadPreempted,
    WorkloadRejected,
    WorkloadReserved,
    WorkloadStarted,
    WorkloadStopped,
    WorkloadSubmitted,
)

__all__ = [
    "ALL_TYPES",
    "DAY_S",
    "DECISION_TAGS",
    "DECISION_TYPES",
    "HOUR_S",
    "INPUT_TAGS",
    "INPUT_TYPES",
    "ROLES",
    "SCHEMA_VERSION",
    "TAGS",
    "AnyEvent",
    "BudgetEditReason",
    "BudgetEditRejected",
    "BudgetNodeDefined",
    "BudgetSharesSet",
    "ChildShare",
    "ClockTicked",
    "Event",
    "HostAdded",
    "HostDrained",
    "HostFaulted",
    "HostRemoved",
    "HostRepaired",
    "InputReason",
    "InputRejected",
    "MalformedEvent",
    "PolicyConfigured",
    "PreemptionReason",
    "PrincipalKeyRevoked",
    "PrincipalKeyRotated",
    "PrincipalRegistered",
    "RejectReason",
    "Role",
    "Slot",
    "WorkloadCancelled",
    "WorkloadFinished",
    "WorkloadKind",
    "WorkloadPreempted",
    "WorkloadRejected",
    "WorkloadReserved",
    "WorkloadStarted",
    "WorkloadStopped",
    "WorkloadSubmitted",
    "decode",
    "encode",
    "encode_lines",
    "iter_lines",
    "problem",
    "read_log",
    "tag_of",
    "write_log",
]
