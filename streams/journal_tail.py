"""Reading one journal partition in order: through the fence, copies dropped by event id.

A ``JournalTail`` is how everything outside the worker reads decisions: the
executors, the live view, the demo and ``Client.request``. A record counts
only under the partition's latest claim (``streams.records.Fence``), and a copy
of an event already read is dropped by its id.

Reading on Tansu (docs/live-clients.md has the figures): a fetch waits its
whole ``fetch_max_wait_ms`` even when data is there, and a short wait on a
long partition returns nothing at all. So a tail starts with a long wait to
catch up and shortens it at the end; whenever a fetch comes back empty while
the partition holds more, it lengthens the wait again. Seeking to "the end"
uses ``end_offsets`` only as a lower bound (Tansu answers the last batch's
base offset + 1).

With a ``seal_check`` (``identity.journal_seal.SealCheck``), a record whose
worker seal does not verify counts for nothing, before the fence (so a forged
claim cannot fence the real owner out of the reader's view); ``forged``
counts them.
"""

from __future__ import annotations

import contextlib
import time
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

import msgspec
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from events import MalformedEvent, decode
from identity.journal_seal import LEGACY, OK, SealCheck, SealGate
from streams.config import kafka_client_options
from streams.errors import ClientError
from streams.records import KIND_CLAIM, BadJournalRecord, Fence, JournalRecord, parse_journal

# Fetch waits (ms) of journal reads: catching up, and at the tail (see the module doc).
BULK_WAIT_MS = 200
TAIL_WAIT_MS = 20
# Event ids a tail remembers to drop copies (copies of a record follow it closely).
DEDUPE_IDS = 200_000


class TailItem(msgspec.Struct, frozen=True, kw_only=True):
    """One journal record that counts, decoded."""

    offset: int
    kind: str               # input | decision
    event: Any              # an events.Event
    timestamp_ms: int       # the broker's append time of the record (informative)


class JournalTail:
    """One journal partition, in order, through the Fence, copies dropped by event id.

    ``start="begin"`` reads the partition from its first record.
    ``start="end"`` finds the partition's latest claim (so the fence is right),
    then starts at the end: everything appended after ``start()`` is seen.
    ``poll()`` returns the next records that count (possibly none).
    """

    def __init__(self, bootstrap: str, journal_topic: str, partition: int, *,
                 start: str = "begin", tail_wait_ms: int = TAIL_WAIT_MS,
                 bulk_wait_ms: int = BULK_WAIT_MS, client_id: str = "allot-tail",
                 seal_check: SealCheck | None = None) -> None:
        if start not in ("begin", "end"):
            raise ValueError("start must be 'begin' or 'end'")
        self.bootstrap = bootstrap
        self.topic = journal_topic
        self.partition = partition
        self.tp = TopicPartition(journal_topic, partition)
        self.start_at = start
        self.tail_wait_ms = tail_wait_ms
        self.bulk_wait_ms = bulk_wait_ms
        self.client_id = client_id
        self.fence = Fence()
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._unread: list[TailItem] = []
        self._consumer: AIOKafkaConsumer | None = None
        self.position = 0            # the next offset to read
        self.caught_up = False       # reached the end as of start() at least once
        self._target = 0             # end_offsets at start (a lower bound of the real end)
        self.duplicates = 0
        self.unreadable = 0
        self._gate = SealGate(seal_check) if seal_check is not None else None

    async def start(self) -> None:
        c = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, group_id=None,
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             fetch_max_wait_ms=self.bulk_wait_ms,
                             max_partition_fetch_bytes=16 * 1024 * 1024,
                             client_id=self.client_id, **kafka_client_options())
        try:
            await c.start()
        except KafkaError as exc:
            await c.stop()
            raise ClientError(f"cannot reach Kafka at {self.bootstrap}: {exc}") from exc
        self._consumer = c
        parts = c.partitions_for_topic(self.topic)
        if parts is None:
            await c.topics()
            parts = c.partitions_for_topic(self.topic)
        if not parts or self.partition not in parts:
            raise ClientError(f"no topic {self.topic} (partition {self.partition}) on "
                              f"{self.bootstrap}: is a worker running with this topic prefix?")
        c.assign([self.tp])
        first = int((await c.beginning_offsets([self.tp]))[self.tp])
        end = int((await c.end_offsets([self.tp]))[self.tp])
        self._target = end
        if self.start_at == "begin" or end <= first:
            self.position = first
        else:
            claim = await self._latest_claim(first, end)
            if claim is not None:
                self.fence.admit(claim)
            self.position = max(first, end - 1)  # the last batch's first record: nothing missed
        c.seek(self.tp, self.position)
        if self.position >= end:
            self._caught_up()

    async def _latest_claim(self, first: int, end: int) -> JournalRecord | None:
        """The partition's latest claim before ``end``: windows read backwards from the end."""
        assert self._consumer is not None
        c = self._consumer
        hi = end
        width = 2_000
        while hi > first:
            lo = max(first, hi - width)
            found: JournalRecord | None = None
            c.seek(self.tp, lo)
            pos = lo
            deadline = time.monotonic() + 60
            while pos < hi:
                got = await c.getmany(self.tp, timeout_ms=1000, max_records=50_000)
                msgs = got.get(self.tp, [])
                if not msgs:
                    if time.monotonic() > deadline:
                        raise ClientError(f"{self.topic}[{self.partition}]: no progress reading "
                                          f"offsets {lo}..{hi} for the latest claim")
                    continue
                for m in msgs:
                    if m.offset >= hi:
                        pos = hi
                        break
                    pos = m.offset + 1
                    if _kind(m.headers) == KIND_CLAIM.encode():
                        with contextlib.suppress(BadJournalRecord):
                            claim = parse_journal(m.partition, m.offset, m.value, m.headers)
                            if self._claim_sealed(claim):
                                found = claim
            if found is not None:
                return found
            hi = lo
            width *= 4
        return None

    @property
    def forged(self) -> int:
        """Records refused because no worker sealed them (0 without a seal check)."""
        return self._gate.forged if self._gate is not None else 0

    def _claim_sealed(self, rec: JournalRecord) -> bool:
        """Whether a claim found reading backwards may set the fence: a worker sealed it."""
        if self._gate is None:
            return True
        return self._gate.check.verdict(rec.partition, rec.kind, rec.owner, rec.inbox_offset,
                                        rec.value, rec.seal) in (OK, LEGACY)

    def _caught_up(self) -> None:
        if not self.caught_up:
            self.caught_up = True
            _set_fetch_wait(self._consumer, self.tail_wait_ms)

    async def poll(self, timeout_ms: int = 500, max_records: int = 10_000) -> list[TailItem]:
        """The next records that count (decoded), in offset order; [] when none arrived."""
        if self._unread:
            out, self._unread = self._unread, []
            return out
        c = self._consumer
        assert c is not None, "start() first"
        got = await c.getmany(self.tp, timeout_ms=timeout_ms, max_records=max_records)
        msgs = got.get(self.tp, [])
        hw = c.highwater(self.tp)
        if not msgs:
            if hw is not None and hw > self.position + 1:
                # The partition holds more than an empty fetch showed: Tansu's fetch is
                # time-limited, so give it longer.
                _set_fetch_wait(c, min(self.bulk_wait_ms, max(2 * _fetch_wait(c), 50)))
            elif not self.caught_up and hw is not None and self.position >= self._target - 1:
                self._caught_up()
            return []
        out: list[TailItem] = []
        for m in msgs:
            if m.offset < self.position:
                continue
            self.position = m.offset + 1
            try:
                rec = parse_journal(m.partition, m.offset, m.value, m.headers)
            except BadJournalRecord:
                self.unreadable += 1
                continue
            if self._gate is not None and not self._gate.admit(
                    rec.partition, rec.kind, rec.owner, rec.inbox_offset, rec.value, rec.seal):
                continue
            if not self.fence.admit(rec):
                continue
            try:
                e = decode(rec.value)
            except MalformedEvent:
                self.unreadable += 1
                continue
            if e.id in self._seen:
                self.duplicates += 1
                continue
            self._seen[e.id] = None
            if len(self._seen) > DEDUPE_IDS:
                self._seen.popitem(last=False)
            out.append(TailItem(offset=m.offset, kind=rec.kind, event=e,
                                timestamp_ms=int(m.timestamp or 0)))
        if self.caught_up:
            if _fetch_wait(c) > self.tail_wait_ms:
                _set_fetch_wait(c, max(self.tail_wait_ms, _fetch_wait(c) // 2))
        elif self.position >= self._target:
            self._caught_up()
        return out

    def unread(self, items: list[TailItem]) -> None:
        """Give back items a reader took but did not use: the next ``poll`` returns them first."""
        self._unread = [*items, *self._unread]

    async def stop(self) -> None:
        if self._consumer is not None:
            with contextlib.suppress(Exception):
                await self._consumer.stop()
            self._consumer = None


def _kind(headers: Iterable[tuple[str, bytes]] | None) -> bytes | None:
    for k, v in headers or ():
        if k == "allot-kind":
            return v
    return None


def _fetch_wait(c: AIOKafkaConsumer | None) -> int:
    f = getattr(c, "_fetcher", None)
    return int(getattr(f, "_fetch_max_wait_ms", TAIL_WAIT_MS))


def _set_fetch_wait(c: AIOKafkaConsumer | None, ms: int) -> None:
    """Change a running consumer's fetch wait (aiokafka reads it for every fetch request)."""
    f = getattr(c, "_fetcher", None)
    if f is not None and hasattr(f, "_fetch_max_wait_ms"):
        f._fetch_max_wait_ms = int(ms)


__all__ = ["BULK_WAIT_MS", "DEDUPE_IDS", "TAIL_WAIT_MS", "JournalTail", "TailItem"]
