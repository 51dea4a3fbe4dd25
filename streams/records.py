"""Records on allot's topics: their headers, the claim that fences owners, and the reader's rule.

This module is the contract between everything that touches the topics (the
worker, the ticker, the executor, the client, the Faust projections, the
journal export). It is pure: no Kafka import, so it is tested without a broker.

Topics (names fixed; a prefix is configurable)
----------------------------------------------
``allot.inbox``
    Inputs from producers, host monitors, managers, the executor and the
    ticker. Key: the cluster id (UTF-8), so one partition orders one cluster.
    Value: one event as JSON (docs/events.schema.json). Optional headers
    ``allot-signer`` / ``allot-signature`` (see ``streams.signing``).
``allot.journal``
    The log of record, kept forever. Partition ``p`` of the journal belongs to
    partition ``p`` of the inbox. Three kinds of record, named by the
    ``allot-kind`` header:

    - ``claim``: an owner took the partition. Value: a JSON ``Claim``.
    - ``input``: an accepted input, its exact inbox bytes as the value, and
      ``allot-inbox-offset`` naming the inbox offset it came from.
    - ``decision``: a decision the scheduler derived, as event JSON.

    Every record carries ``allot-owner``: the token of the claim it was written
    under.
``allot.deadletter``
    Everything that could not be taken: a JSON ``DeadLetter`` per record.
``allot.snapshots``
    Engine snapshots (compacted where the broker compacts), key = cluster id.

The reader's rule (``Fence``)
-----------------------------
Per journal partition, a data record counts only when its ``allot-owner``
equals the token of the latest claim before it in that partition. A new owner
appends its claim *before* it folds the journal, so whatever a former owner
(frozen, partitioned away, or just slow to die) writes after that claim is
ignored by every reader, and the new owner has folded everything that counts.
After the fence, readers drop events whose id they have already kept
(at-least-once publishing makes exact duplicates normal).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import msgspec

INBOX = "allot.inbox"
JOURNAL = "allot.journal"
DEADLETTER = "allot.deadletter"
SNAPSHOTS = "allot.snapshots"

HEADER_KIND = "allot-kind"
HEADER_OWNER = "allot-owner"
HEADER_INBOX_OFFSET = "allot-inbox-offset"
HEADER_SIGNER = "allot-signer"
HEADER_SIGNATURE = "allot-signature"

KIND_CLAIM = "claim"
KIND_INPUT = "input"
KIND_DECISION = "decision"
KINDS = frozenset({KIND_CLAIM, KIND_INPUT, KIND_DECISION})

Headers = Sequence[tuple[str, bytes]]


def topic(name: str, prefix: str = "") -> str:
    """The full topic name under a configured prefix (``"" + "allot.inbox"`` by default)."""
    return f"{prefix}{name}"


class Claim(msgspec.Struct, frozen=True, kw_only=True):
    """An owner took a journal partition (and the inbox partition of the same number)."""

    token: str      # unique per claim (random); every record the owner writes carries it
    worker: str     # the worker's name, for people reading the journal
    partition: int
    at: float       # wall-clock seconds when claimed: informative only, never trusted


class DeadLetter(msgspec.Struct, frozen=True, kw_only=True):
    """A record that could not be taken, and why. ``id`` is deterministic: topic/partition/offset."""

    id: str
    reason: str     # a stable code: malformed, too_large, not_an_input, bad_id, unknown_cluster, ...
    detail: str
    topic: str
    partition: int
    offset: int
    key: str | None
    value: str      # the original bytes, decoded as UTF-8 with replacement (capped)
    worker: str = ""


def header(headers: Headers | None, name: str) -> bytes | None:
    """The value of header ``name`` (the last one, if repeated), or None."""
    found = None
    for k, v in headers or ():
        if k == name:
            found = v
    return found


def journal_headers(kind: str, owner: str, inbox_offset: int | None = None) -> list[tuple[str, bytes]]:
    """The headers of a journal record of ``kind`` written under claim token ``owner``."""
    out = [(HEADER_KIND, kind.encode()), (HEADER_OWNER, owner.encode())]
    if inbox_offset is not None:
        out.append((HEADER_INBOX_OFFSET, str(inbox_offset).encode()))
    return out


def dead_letter_id(source_topic: str, partition: int, offset: int) -> str:
    """The id of the dead letter for one source record: the same on every retry."""
    return f"{source_topic}:{partition}:{offset}"


class JournalRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One journal record as a reader sees it after parsing the headers."""

    partition: int
    offset: int
    kind: str
    owner: str
    value: bytes
    inbox_offset: int | None = None
    # The writing worker's seal (identity.journal_seal), when it wrote one.
    seal: bytes | None = None


class BadJournalRecord(ValueError):
    """A journal record without the headers every allot writer sets."""


def parse_journal(partition: int, offset: int, value: bytes | None,
                  headers: Headers | None) -> JournalRecord:
    """A raw journal record as a ``JournalRecord``; BadJournalRecord when its headers are wrong."""
    kind_b = header(headers, HEADER_KIND)
    owner_b = header(headers, HEADER_OWNER)
    if kind_b is None or owner_b is None:
        raise BadJournalRecord(f"journal {partition}:{offset} lacks {HEADER_KIND}/{HEADER_OWNER}")
    kind = kind_b.decode("utf-8", "replace")
    if kind not in KINDS:
        raise BadJournalRecord(f"journal {partition}:{offset}: unknown kind {kind!r}")
    inbox_b = header(headers, HEADER_INBOX_OFFSET)
    inbox_offset = None
    if inbox_b is not None:
        try:
            inbox_offset = int(inbox_b)
        except ValueError as exc:
            raise BadJournalRecord(f"journal {partition}:{offset}: bad inbox offset") from exc
    return JournalRecord(partition=partition, offset=offset, kind=kind,
                         owner=owner_b.decode("utf-8", "replace"), value=value or b"",
                         inbox_offset=inbox_offset, seal=header(headers, "allot-seal"))


class Fence:
    """The reader's rule for one journal partition: count a record only under the latest claim.

    Feed every record of the partition in offset order to ``admit``; it returns
    True for the data records that count. Claims themselves return False (they
    are bookkeeping, not events) and move the fence.
    """

    __slots__ = ("claim", "ignored", "token")

    def __init__(self) -> None:
        self.token: str | None = None
        self.claim: Claim | None = None
        self.ignored = 0  # data records written by a fenced-off owner

    def admit(self, record: JournalRecord) -> bool:
        if record.kind == KIND_CLAIM:
            try:
                claim = msgspec.json.decode(record.value, type=Claim)
            except msgspec.DecodeError:
                self.ignored += 1
                return False
            # The header and the body name the same token, or the claim is not one.
            if claim.token != record.owner:
                self.ignored += 1
                return False
            self.claim = claim
            self.token = claim.token
            return False
        if self.token is None or record.owner != self.token:
            self.ignored += 1
            return False
        return True


def admitted(records: Iterable[JournalRecord]) -> Iterable[JournalRecord]:
    """The records of one or more partitions that count, in the order given (fenced per partition)."""
    fences: dict[int, Fence] = {}
    for r in records:
        fence = fences.get(r.partition)
        if fence is None:
            fence = fences[r.partition] = Fence()
        if fence.admit(r):
            yield r


def encode_claim(claim: Claim) -> bytes:
    return msgspec.json.encode(claim)


def encode_dead_letter(dl: DeadLetter) -> bytes:
    return msgspec.json.encode(dl)


def decode_dead_letter(data: bytes) -> DeadLetter:
    return msgspec.json.decode(data, type=DeadLetter)
