"""The pure processor: inbox bytes in, a dead letter or journal records out; and the journal fold.

Nothing here touches Kafka or a clock, so all of it is tested without a broker.
The worker (``streams.worker``) is the loop around it.

``Processor.handle(record, engines)`` takes one inbox record and answers with
one of three outcomes:

- ``Accepted``: the input and the decisions ``Engine.process`` derived from it;
  the worker journals the input's exact bytes, then the decisions, in order.
- ``Dead``: a ``DeadLetter`` with a stable reason (the bytes are not an event,
  the event is not one this worker may take, or the engine refused it). Nothing
  reaches the journal and no engine changes.
- ``Skipped``: the engine has seen this event id already (at-least-once
  delivery, or two tickers' ticks for one second): nothing to journal.

``PartitionFold`` folds one journal partition through the ``Fence`` (only
records under the latest claim count) into one engine per cluster, the way a
restarted owner rebuilds its state, and ``finish`` returns the decisions the
journal lacks for an input whose group a crash cut short.

The core API it calls: ``Engine.process`` (``InputRefused`` for an input the
journal must never hold), ``scheduler.replay.JournalFold`` and
``Engine.snapshot``/``Engine.restore``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import msgspec

from events import (
    BudgetNodeDefined,
    BudgetSharesSet,
    ClockTicked,
    Event,
    HostAdded,
    HostFaulted,
    HostRemoved,
    HostRepaired,
    MalformedEvent,
    PolicyConfigured,
    WorkloadCancelled,
    WorkloadFinished,
    WorkloadStopped,
    WorkloadSubmitted,
    decode,
    tag_of,
)
from events.errors import AllotError
from events.limits import INPUT_ID_PATTERN, MAX_RECORD_BYTES
from identity import authorisation
from scheduler import Engine
from scheduler.admission import InputRefused, valid_cluster_id
from scheduler.replay import JournalError, JournalFold
from scheduler.snapshot import SnapshotError as CoreSnapshotError
from streams import signing
from streams.records import (
    KIND_CLAIM,
    KIND_DECISION,
    KIND_INPUT,
    DeadLetter,
    Fence,
    JournalRecord,
    dead_letter_id,
)

# How much of a dead-lettered record's bytes the dead letter repeats.
DEAD_LETTER_VALUE_CHARS = 4096


class InboxRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One record as the consumer delivered it."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()


class Accepted(msgspec.Struct, frozen=True, kw_only=True):
    """An input to journal (its exact bytes) with the decisions it caused."""

    event: Event
    value: bytes
    derived: list[Event]

    @property
    def cluster(self) -> str:
        return self.event.cluster


class Dead(msgspec.Struct, frozen=True, kw_only=True):
    """A record that goes to the dead letter instead of the journal."""

    letter: DeadLetter


class Skipped(msgspec.Struct, frozen=True, kw_only=True):
    """An event the engine already took (same id): nothing to journal."""

    event: Event


Outcome = Accepted | Dead | Skipped


# -- reasons --------------------------------------------------------------------------
# Stable dead-letter reason codes (docs/live.md lists them). The engine's own refusals
# (not_an_input, has_cause, bad_id, wrong_cluster, bad_value) keep the engine's codes.
MALFORMED = "malformed"
UNKNOWN_TYPE = "unknown_type"
UNKNOWN_VERSION = "unknown_version"
TOO_LARGE = "too_large"
NO_VALUE = "no_value"
UNKNOWN_CLUSTER = "unknown_cluster"
WRONG_KEY = "wrong_key"
WRONG_PARTITION = "wrong_partition"
UNTRUSTED_TICK = "untrusted_tick"
SIGNER_NOT_ACTOR = "signer_not_actor"
NOT_AN_INPUT = "not_an_input"
HAS_CAUSE = "has_cause"
BAD_ID = "bad_id"
UNAUTHENTICATED = authorisation.UNAUTHENTICATED
REVOKED = authorisation.REVOKED
NOT_AUTHORISED = authorisation.NOT_AUTHORISED
FOREIGN_ID = "foreign_id"
STALE = "stale"

REASONS: dict[str, str] = {
    MALFORMED: "the bytes are not a valid allot event (the detail names the JSON path)",
    UNKNOWN_TYPE: "the `type` tag names no event this worker knows",
    UNKNOWN_VERSION: "the event's `v` is newer than this worker, or has no upcaster",
    TOO_LARGE: f"the record is over {MAX_RECORD_BYTES:,} bytes",
    NO_VALUE: "the record has no value (a tombstone)",
    UNKNOWN_CLUSTER: "the event names a cluster this deployment does not schedule",
    WRONG_KEY: "the record's key is not the event's cluster id",
    WRONG_PARTITION: "the record is on another partition than its cluster's (a producer "
                     "with another partitioner: use murmur2)",
    UNTRUSTED_TICK: "a `clock.ticked` not signed by the ticker: only the trusted clock ticks",
    signing.UNSIGNED: "an unsigned input while `require_signatures` is on",
    signing.UNKNOWN_SIGNER: "`allot-signer` names no key in the keyring",
    signing.BAD_SIGNATURE: "`allot-signature` does not match the value under the signer's key",
    SIGNER_NOT_ACTOR: "a signed input whose `actor` is not its signer",
    UNAUTHENTICATED: "with authorisation on: unsigned, an unknown key or signer, or a bad "
                     "signature (the detail says which)",
    REVOKED: "signed with a key that was revoked or rotated away before this input",
    NOT_AUTHORISED: "the signer's roles do not allow this input (docs/events.md, "
                    "\"Who may send what\")",
    FOREIGN_ID: "a signed input whose id does not begin with `<signer>:` (ids are per signer)",
    STALE: "a signed input whose `at` is older than the dedupe window (a replayed record)",
    NOT_AN_INPUT: "a decision type (derived by the scheduler) sent as an input",
    HAS_CAUSE: "an input with `cause` set (only decisions have one)",
    BAD_ID: f"an id that is not {INPUT_ID_PATTERN} in full",
    "wrong_cluster": "an event for another cluster than the engine's",
    "bad_value": "a value no valid record can hold",
}

# Inputs after which the schedule may change, so a nudge (an immediate tick) helps.
SCHEDULE_INPUTS: tuple[type, ...] = (
    WorkloadSubmitted, WorkloadCancelled, WorkloadFinished, HostAdded, HostRemoved,
    HostFaulted, HostRepaired, BudgetNodeDefined, BudgetSharesSet, PolicyConfigured,
    WorkloadStopped,  # a preempted run's GPUs are free: its preemptor may start
)



# -- the core API ---------------------------------------------------------------------

def process_input(engine: Engine, event: Event) -> list[Event] | None:
    """``Engine.process``: None for a duplicate id, else the decisions; ``InputRefused`` if barred."""
    return engine.process(event)


def new_engine(cluster: str) -> Engine:
    """A fresh engine for one cluster."""
    return Engine(cluster)


SNAPSHOT_FORMAT = "allot.engine/msgpack"


def snapshot_engine(engine: Engine) -> tuple[str, bytes]:
    """``(format, bytes)`` of the engine's whole state (``Engine.snapshot``: versioned msgpack)."""
    return SNAPSHOT_FORMAT, engine.snapshot()


def restore_engine(fmt: str, data: bytes) -> Engine:
    """The engine a ``snapshot_engine`` result holds; ``SnapshotError`` if it cannot be restored.

    The core's snapshot carries its own version and upcasts older layouts; one
    from a newer writer is refused, and the worker then folds the journal instead.
    """
    if fmt != SNAPSHOT_FORMAT:
        raise SnapshotError(f"unknown snapshot format {fmt!r}")
    try:
        return Engine.restore(data)
    except CoreSnapshotError as exc:
        raise SnapshotError(str(exc)) from None
    except (ValueError, TypeError, KeyError, IndexError, msgspec.DecodeError) as exc:
        raise SnapshotError(f"unreadable snapshot: {type(exc).__name__}") from None


class SnapshotError(AllotError):
    """A snapshot that cannot be restored (unknown format, corrupt bytes, a newer version)."""


# -- the processor ----------------------------------------------------------------------

def _text(value: bytes | None) -> str:
    if value is None:
        return ""
    return value[: DEAD_LETTER_VALUE_CHARS * 4].decode("utf-8", "replace")[:DEAD_LETTER_VALUE_CHARS]


def decode_failure_reason(exc: MalformedEvent) -> str:
    """The dead-letter reason for bytes the codec refused."""
    text = exc.reason
    if text.startswith("unknown event type"):
        return UNKNOWN_TYPE
    if "newer than this reader" in text or text.startswith("no upcaster"):
        return UNKNOWN_VERSION
    return MALFORMED


class Processor:
    """Turns inbox records into outcomes. Holds settings only; engines are passed in.

    ``partition_of(cluster)`` names the inbox partition a cluster's key maps to
    (the murmur2 partitioner of the Java client and aiokafka). ``clusters`` are
    the clusters this deployment schedules. ``keyring`` holds every principal
    whose signatures count, the ticker's included; registered principals'
    keys come from each cluster's state (``principal.*`` events). With
    ``authorise`` (default: ``require_signatures``) every signed input must also
    be allowed by ``identity.authorisation.TABLE`` and carry an id in its
    signer's namespace (``<signer>:...``); failures are dead letters
    (``unauthenticated``, ``revoked``, ``not_authorised``, ``foreign_id``) and
    never reach the journal, so the state is unchanged and replay exact.
    """

    def __init__(self, *, clusters: Iterable[str], partition_of: Callable[[str], int],
                 keyring: signing.Keyring, ticker_principal: str,
                 require_signatures: bool = False, worker: str = "",
                 max_bytes: int = MAX_RECORD_BYTES, admins: Iterable[str] = (),
                 authorise: bool | None = None, replay_window: bool = True) -> None:
        self.clusters = frozenset(clusters)
        self.partition_of = partition_of
        self.keyring = keyring
        self.ticker_principal = ticker_principal
        self.require_signatures = require_signatures
        self.worker = worker
        self.max_bytes = max_bytes
        # The configured first admins (their keys are in ``keyring``): admin from the start.
        self.admins = frozenset(admins)
        # Check every signed input's role (identity.authorisation); on with signatures.
        self.authorise = require_signatures if authorise is None else authorise
        # Refuse signed inputs older than the dedupe window (``stale``): replayed records.
        self.replay_window = replay_window

    def dead(self, record: InboxRecord, reason: str, detail: str) -> Dead:
        """The dead letter for ``record``: deterministic id, so a retry writes an exact copy."""
        key = None if record.key is None else record.key.decode("utf-8", "replace")
        return Dead(letter=DeadLetter(
            id=dead_letter_id(record.topic, record.partition, record.offset), reason=reason,
            detail=detail[:1000], topic=record.topic, partition=record.partition,
            offset=record.offset, key=key, value=_text(record.value), worker=self.worker))

    def check(self, record: InboxRecord, engines: dict[str, Engine] | None = None,
              checked: signing.Checked | None = None) -> Event | Dead:
        """Decode, authenticate and authorise a record up to the engine: the event, or its dead letter.

        ``engines`` gives the cluster's current state: its principal registry names
        the keys that sign (beside the configured keyring) and the roles that
        authorise. Nothing here changes it. ``checked``: signatures verified ahead
        (``signing.verify``).
        """
        value = record.value
        if value is None:
            return self.dead(record, NO_VALUE, "a record without a value is not an event")
        if len(value) > self.max_bytes:
            return self.dead(record, TOO_LARGE,
                             f"{len(value):,} bytes; the limit is {self.max_bytes:,}")
        try:
            event = decode(value)
        except MalformedEvent as exc:
            return self.dead(record, decode_failure_reason(exc), exc.reason)
        engine = (engines or {}).get(event.cluster)
        registry = engine.state.principals if engine is not None else None
        verdict = signing.verify(value, record.headers, self.keyring, registry, checked)
        is_tick = type(event) is ClockTicked
        if verdict.problem == signing.REVOKED_KEY:
            return self.dead(record, REVOKED, verdict.detail)
        if verdict.problem is not None and verdict.problem != signing.UNSIGNED:
            return self.dead(record, self._auth_reason(verdict.problem),
                             f"{verdict.problem}: {verdict.detail or 'the signature headers do not check'}")
        if is_tick:
            if verdict.signer != self.ticker_principal:
                who = "unsigned" if verdict.signer is None else f"signed by {verdict.signer!r}"
                return self.dead(record, UNTRUSTED_TICK,
                                 f"clock.ticked {who}; only {self.ticker_principal!r} ticks")
        elif verdict.signer is None and self.require_signatures:
            return self.dead(record, self._auth_reason(signing.UNSIGNED),
                             "unsigned: require_signatures is on (sign with `allot sign`)")
        if verdict.signer is not None and verdict.signer != event.actor:
            return self.dead(record, SIGNER_NOT_ACTOR,
                             f"signed by {verdict.signer!r} but actor is {event.actor[:80]!r}")
        cluster = event.cluster
        if cluster not in self.clusters:
            return self.dead(record, UNKNOWN_CLUSTER,
                             f"cluster {cluster[:80]!r} is not one of {sorted(self.clusters)}")
        key = record.key.decode("utf-8", "replace") if record.key is not None else None
        if key != cluster:
            return self.dead(record, WRONG_KEY,
                             f"key {None if key is None else key[:80]!r} but cluster {cluster!r}")
        want = self.partition_of(cluster)
        if want != record.partition:
            return self.dead(record, WRONG_PARTITION,
                             f"cluster {cluster!r} belongs on partition {want}, not "
                             f"{record.partition} (partition with murmur2 on the key)")
        signer = verdict.signer
        if signer is not None and self.authorise and not is_tick:
            # An input's identity is (signer, id): its id is in the signer's namespace,
            # so no one can take (and so drop, as a duplicate) another signer's ids.
            if not event.id.startswith(signer + ":"):
                return self.dead(record, FOREIGN_ID,
                                 f"id {event.id[:80]!r} must begin with '{signer}:'")
            state = engine.state if engine is not None else new_engine(cluster).state
            # A signed record replayed after its id left the dedupe window would be taken
            # again (the signature still holds): refuse records older than the window.
            horizon = state.now - max(state.policy.dedupe_window_s, state.policy.clock_skew_s)
            if self.replay_window and state.now > 0 and event.at < horizon:
                return self.dead(record, STALE,
                                 f"at={event.at} is older than the dedupe window allows "
                                 f"(before {horizon}): a replayed record, or a producer clock "
                                 f"far behind")
            refusal = authorisation.authorise(state, event, signer, admins=self.admins,
                                              ticker=self.ticker_principal)
            if refusal is not None:
                return self.dead(record, refusal.reason, refusal.detail)
        return event

    def _auth_reason(self, problem: str) -> str:
        """The dead-letter reason of a signature problem.

        With authorisation on, every authentication failure is ``unauthenticated``
        (the detail names which); without it, the older specific codes stay.
        """
        return authorisation.UNAUTHENTICATED if self.authorise else problem

    def handle(self, record: InboxRecord, engines: dict[str, Engine],
               checked: signing.Checked | None = None) -> Outcome:
        """The outcome of one inbox record. Creates the cluster's engine in ``engines`` if new."""
        got = self.check(record, engines, checked)
        if isinstance(got, Dead):
            return got
        event = got
        engine = engines.get(event.cluster)
        if engine is None:
            engine = engines[event.cluster] = new_engine(event.cluster)
        try:
            derived = process_input(engine, event)
        except InputRefused as exc:
            return self.dead(record, exc.reason, exc.detail)
        if derived is None:
            return Skipped(event=event)
        assert record.value is not None
        return Accepted(event=event, value=record.value, derived=derived)


def changes_schedule(accepted: Accepted) -> bool:
    """True when a cycle soon after this input may decide something new (worth a nudge).

    A tick whose cycle decided something counts too: a cycle's work is bounded
    (``queue_depth`` per leaf), so more may be startable at once; the chain
    ends with the first cycle that decides nothing.
    """
    if type(accepted.event) is ClockTicked:
        return bool(accepted.derived) and accepted.event.cycle
    if not isinstance(accepted.event, SCHEDULE_INPUTS):
        return False
    # A rejected input changed nothing.
    return not any(tag_of(type(d)).endswith("rejected") for d in accepted.derived)


# -- the journal fold -------------------------------------------------------------------

class FoldStats(msgspec.Struct, kw_only=True):
    """What a fold saw, for logs and tests."""

    records: int = 0
    claims: int = 0
    fenced: int = 0         # data records written under a claim that no longer counted
    unreadable: int = 0     # records that do not decode (never written by allot)
    inputs: int = 0
    decisions: int = 0
    duplicates: int = 0     # inputs or decisions whose id was already folded
    refused: int = 0        # inputs the engine refuses (allot never journals them)
    orphans: int = 0        # decisions outside their input's group
    forged: int = 0         # records whose seal does not verify, or unsealed after sealed ones


class PartitionFold:
    """The state of one journal partition, folded record by record through the fence.

    Each admitted record goes to its cluster's ``scheduler.replay.JournalFold``
    (inputs folded the way the live engine did, decisions as facts: nothing is
    re-derived), so the fold reaches the live engines' state. ``finish``
    completes the last group of every cluster and returns, per cluster, the
    decisions the journal lacks for its last input (a crash between publishing
    an input and all of its decisions). Also tracks the last journaled inbox
    offset, where the owner resumes the inbox.
    """

    def __init__(self, partition: int, engines: dict[str, Engine] | None = None,
                 fence: Fence | None = None, last_inbox_offset: int = -1,
                 on_anomaly: Callable[[str, JournalRecord, str], None] | None = None,
                 seal_check: Callable[..., bool] | None = None) -> None:
        self.partition = partition
        # identity.journal_seal.SealCheck: refuse records no worker sealed (None: no check).
        self.seal_check = seal_check
        self.sealed = False  # a sealed record was seen: from here on every record must be
        self.fence = fence if fence is not None else Fence()
        self.last_inbox_offset = last_inbox_offset
        self.last_offset = -1      # the last journal offset added
        self.stats = FoldStats()
        self._folds: dict[str, JournalFold] = {
            c: JournalFold(e) for c, e in (engines or {}).items()}
        self._on_anomaly = on_anomaly

    @property
    def engines(self) -> dict[str, Engine]:
        return {c: f.engine for c, f in self._folds.items()}

    def _anomaly(self, kind: str, record: JournalRecord, detail: str) -> None:
        if self._on_anomaly is not None:
            self._on_anomaly(kind, record, detail)

    def add(self, record: JournalRecord) -> None:
        """Fold one journal record of this partition (in offset order)."""
        st = self.stats
        st.records += 1
        self.last_offset = record.offset
        if self.seal_check is not None and not self._seal_ok(record):
            # Before the fence: a forged claim must not move it, nor a forged input the
            # inbox position.
            st.forged += 1
            return
        if record.kind == KIND_CLAIM:
            st.claims += 1
        if not self.fence.admit(record):
            if record.kind != KIND_CLAIM:
                st.fenced += 1
            return
        if record.kind not in (KIND_INPUT, KIND_DECISION):
            return
        try:
            event = decode(record.value)
        except MalformedEvent as exc:
            st.unreadable += 1
            self._anomaly("unreadable", record, exc.reason)
            return
        if record.kind == KIND_INPUT and record.inbox_offset is not None \
                and record.inbox_offset > self.last_inbox_offset:
            self.last_inbox_offset = record.inbox_offset
        fold = self._folds.get(event.cluster)
        if fold is None:
            if not valid_cluster_id(event.cluster):
                st.unreadable += 1
                self._anomaly("unreadable", record, "not a valid cluster id")
                return
            fold = self._folds[event.cluster] = JournalFold(new_engine(event.cluster))
        fold.add(event)

    def engine_now(self, cluster: str) -> Engine | None:
        """``cluster``'s engine with every group so far folded (the state a next input meets)."""
        fold = self._folds.get(cluster)
        if fold is None:
            return None
        fold.flush()
        return fold.engine

    def _seal_ok(self, record: JournalRecord) -> bool:
        check = self.seal_check
        assert check is not None
        if record.seal is None:
            if self.sealed:
                self._anomaly("forged", record, "an unsealed record after sealed ones: no "
                                                "worker wrote it")
                return False
            return True  # a journal from before seals
        if not check(record.partition, record.kind, record.owner, record.inbox_offset,
                     record.value, record.seal):
            self._anomaly("forged", record, "its seal does not verify: no worker of this "
                                            "group wrote it (or tick_key changed since: the "
                                            "journal must be folded with the key that sealed "
                                            "it)")
            return False
        self.sealed = True
        return True

    def finish(self, recover: bool = True) -> dict[str, list[Event]]:
        """Fold every cluster's last group; with ``recover``, the decisions the journal lacks.

        After ``finish`` the engines are exactly the live ones were after the
        last complete record; the returned decisions are already folded into
        them, and the caller appends them to the journal.
        """
        out: dict[str, list[Event]] = {}
        st = self.stats
        st.inputs = st.decisions = st.duplicates = st.refused = st.orphans = 0
        for cluster, fold in self._folds.items():
            try:
                missing = fold.finish(recover=recover)
            except JournalError as exc:
                self._anomaly("diverged", JournalRecord(partition=self.partition,
                                                        offset=self.last_offset, kind="",
                                                        owner="", value=b""), str(exc))
                missing = []
            if missing:
                out[cluster] = missing
            st.inputs += fold.inputs
            st.decisions += fold.decisions
            st.duplicates += fold.duplicates
            st.refused += fold.refused
            st.orphans += fold.orphans
        return out


def to_builtins(outcome: Outcome) -> dict[str, Any]:
    """An outcome as plain data (for logs and tests)."""
    if isinstance(outcome, Dead):
        return {"dead": msgspec.to_builtins(outcome.letter)}
    if isinstance(outcome, Skipped):
        return {"skipped": outcome.event.id}
    return {"accepted": outcome.event.id, "derived": [d.id for d in outcome.derived]}
