"""The Python client of the live scheduler: publish inputs, read back the decisions they caused.

Producers talk to allot through two topics only: they put an input on
``allot.inbox`` and read the journal. This module is that, for Python:

- ``Client.publish(event)``: one record on the inbox, key = the cluster id,
  on the partition murmur2 gives that key (the Java client's and aiokafka's
  default partitioner; a librdkafka producer must set
  ``partitioner=murmur2_random`` to agree). Retries re-send the *same* bytes,
  so the same event id: the scheduler drops the copy. ``new_id`` makes a
  fresh id in the input id grammar (``events.limits.INPUT_ID_PATTERN``).
- ``Client.request(event)``: publish, then wait until the input appears in the
  journal and its group is complete, and return the decisions it caused (the
  journal records whose ``cause`` is its id, fenced and deduplicated), or the
  dead letter it got instead. ``Client.follow`` waits for any later decision
  (``workload.started`` is caused by the tick after a submission, not by it).
- ``JournalTail``: one journal partition read in order through the ``Fence``
  (a record counts only under the partition's latest claim), duplicates
  dropped by id. The executor, the live view and the demo read through it.
- ``SyncClient``: the same for scripts, on a private event loop.

Reading on Tansu (docs/live-clients.md has the figures): a fetch waits its
whole ``fetch_max_wait_ms`` even when data is there, and a short wait on a
long partition returns nothing at all. So a tail starts with a long wait to
catch up and shortens it at the end; whenever a fetch comes back empty while
the partition holds more, it lengthens the wait again. Seeking to "the end"
uses ``end_offsets`` only as a lower bound (Tansu answers the last batch's
base offset + 1).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, TypeVar

import msgspec
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.partitioner import murmur2

from events import DECISION_TYPES, ClockTicked, Event, MalformedEvent, decode, encode, tag_of
from events.errors import AllotError
from events.limits import INPUT_ID_PATTERN
from streams.records import (
    DEADLETTER,
    INBOX,
    JOURNAL,
    KIND_CLAIM,
    BadJournalRecord,
    DeadLetter,
    Fence,
    JournalRecord,
    dead_letter_id,
    decode_dead_letter,
    parse_journal,
    topic,
)

T = TypeVar("T")

# Fetch waits (ms) of journal reads: catching up, and at the tail (see the module doc).
BULK_WAIT_MS = 200
TAIL_WAIT_MS = 20
# Event ids a tail remembers to drop copies (copies of a record follow it closely).
DEDUPE_IDS = 200_000

_ID_OK = re.compile(INPUT_ID_PATTERN)
_ID_BAD_CHARS = re.compile(r"[^A-Za-z0-9._:@+=~-]")


class ClientError(AllotError):
    """The client could not do what was asked: no broker, no topic, a timeout, a bad id."""


class NotJournaled(ClientError):
    """An input did not reach the journal (nor the dead letter) in time."""


def partition_for(key: str, partitions: int) -> int:
    """The partition of ``key``: murmur2, positive, modulo the count (Java's and aiokafka's rule)."""
    return (murmur2(key.encode()) & 0x7FFFFFFF) % partitions


def new_id(prefix: str = "c") -> str:
    """A fresh input id: ``<prefix>:<32 hex>``, the prefix cleaned to the id grammar."""
    clean = _ID_BAD_CHARS.sub("-", prefix)[:60] or "c"
    return f"{clean}:{uuid.uuid4().hex}"


def check_id(event_id: str) -> str:
    """``event_id`` if it is a valid input id, else ClientError naming the grammar."""
    if _ID_OK.fullmatch(event_id) is None:
        raise ClientError(f"{event_id!r} is not a valid input id ({INPUT_ID_PATTERN}: no '/', "
                          f"no spaces, ASCII only)")
    return event_id


# -- reading one journal partition --------------------------------------------------------------


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
                 bulk_wait_ms: int = BULK_WAIT_MS, client_id: str = "allot-tail") -> None:
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

    async def start(self) -> None:
        c = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, group_id=None,
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             fetch_max_wait_ms=self.bulk_wait_ms,
                             max_partition_fetch_bytes=16 * 1024 * 1024,
                             client_id=self.client_id)
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
                            found = parse_journal(m.partition, m.offset, m.value, m.headers)
            if found is not None:
                return found
            hi = lo
            width *= 4
        return None

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


# -- what an input caused ----------------------------------------------------------------------


class Result(msgspec.Struct, kw_only=True):
    """What became of one published input."""

    id: str
    cluster: str
    inbox_partition: int
    inbox_offset: int
    status: str                                  # accepted | rejected | dead_letter
    input: dict[str, Any] | None = None          # the input as journaled
    journal_offset: int | None = None
    decisions: list[dict[str, Any]] = []         # the decisions whose cause is this input
    dead_letter: dict[str, Any] | None = None
    followed: list[dict[str, Any]] = []          # later decisions asked for with ``follow``
    seconds: float = 0.0                         # publish -> group complete (wall clock)
    setup_seconds: float = 0.0                   # opening the tail (the latest-claim search)

    @property
    def ok(self) -> bool:
        return self.status == "accepted"


def _plain(value: Any) -> Any:
    """An event (or any struct) as the JSON it is on the wire, decoded: dicts, lists, scalars."""
    return msgspec.json.decode(msgspec.json.encode(value))


REJECTIONS = frozenset({"workload.rejected", "budget.edit_rejected", "input.rejected"})


def outcome_status(decisions: list[Event]) -> str:
    return "rejected" if any(tag_of(type(d)) in REJECTIONS for d in decisions) else "accepted"


class Published(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    cluster: str
    partition: int
    offset: int


# -- the client --------------------------------------------------------------------------------


class Client:
    """Publish inputs to a live allot and read back what they caused (asyncio, aiokafka)."""

    def __init__(self, bootstrap: str, prefix: str = "", *,
                 signer: tuple[str, bytes] | None = None, retries: int = 5,
                 retry_backoff_s: float = 0.25, request_timeout_ms: int = 10_000,
                 tail_wait_ms: int = TAIL_WAIT_MS, client_id: str = "allot-client") -> None:
        self.bootstrap = bootstrap
        self.prefix = prefix
        self.inbox = topic(INBOX, prefix)
        self.journal = topic(JOURNAL, prefix)
        self.deadletter = topic(DEADLETTER, prefix)
        self.signer = signer
        self.retries = retries
        self.retry_backoff_s = retry_backoff_s
        self.request_timeout_ms = request_timeout_ms
        self.tail_wait_ms = tail_wait_ms
        self.client_id = client_id
        self._producer: AIOKafkaProducer | None = None
        self._partitions: dict[str, int] = {}

    async def __aenter__(self) -> Client:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        p = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all", linger_ms=1,
                             request_timeout_ms=self.request_timeout_ms,
                             client_id=self.client_id)
        try:
            await p.start()
        except KafkaError as exc:
            with contextlib.suppress(Exception):
                await p.stop()
            raise ClientError(f"cannot reach Kafka at {self.bootstrap}: {exc}") from exc
        self._producer = p

    async def close(self) -> None:
        if self._producer is not None:
            with contextlib.suppress(Exception):
                await self._producer.stop()
            self._producer = None

    async def partitions(self, name: str) -> int:
        """The partition count of topic ``name`` (ClientError when it does not exist)."""
        n = self._partitions.get(name)
        if n is None:
            assert self._producer is not None, "start() first"
            try:
                parts = await self._producer.partitions_for(name)
            except KafkaError as exc:
                raise ClientError(f"no topic {name} on {self.bootstrap} ({exc}): is a worker "
                                  f"running with this topic prefix?") from exc
            n = self._partitions[name] = len(parts)
        return n

    async def partition_of(self, cluster: str) -> int:
        return partition_for(cluster, await self.partitions(self.inbox))

    def headers_for(self, value: bytes) -> list[tuple[str, bytes]] | None:
        if self.signer is None:
            return None
        from streams.signing import sign_headers

        return sign_headers(value, self.signer[0], self.signer[1])

    async def publish(self, event: Event) -> Published:
        """Put ``event`` on the inbox; retry with the same bytes; the record's position."""
        if type(event) in DECISION_TYPES:
            raise ClientError(f"{tag_of(type(event))} is a decision: only the scheduler writes it")
        check_id(event.id)
        assert self._producer is not None, "start() first"
        value = encode(event)
        p = await self.partition_of(event.cluster)
        headers = self.headers_for(value)
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            try:
                md = await self._producer.send_and_wait(self.inbox, value,
                                                        key=event.cluster.encode(), partition=p,
                                                        headers=headers)
                return Published(id=event.id, cluster=event.cluster, partition=p,
                                 offset=int(md.offset))
            except KafkaError as exc:  # the same bytes again: a copy is dropped by id
                last = exc
                await asyncio.sleep(self.retry_backoff_s * (2 ** attempt))
        raise ClientError(f"could not publish {event.id} after {self.retries + 1} attempts: {last}")

    async def publish_many(self, events: list[Event]) -> list[Published]:
        """Publish several inputs in order (one partition keeps their order per cluster)."""
        return [await self.publish(e) for e in events]

    async def tail(self, cluster: str, start: str = "end") -> JournalTail:
        """A started ``JournalTail`` on ``cluster``'s journal partition."""
        p = partition_for(cluster, await self.partitions(self.journal))
        t = JournalTail(self.bootstrap, self.journal, p, start=start,
                        tail_wait_ms=self.tail_wait_ms, client_id=f"{self.client_id}-tail")
        try:
            await t.start()
        except BaseException:
            await t.stop()
            raise
        return t

    async def request(self, event: Event, timeout: float = 30.0,
                      follow: Callable[[Event], bool] | None = None,
                      follow_timeout: float | None = None) -> Result:
        """Publish ``event`` and wait for its group; with ``follow``, also for a later decision.

        ``follow(decision)`` is asked of every later decision of the cluster;
        the first it accepts ends the wait (``Result.followed``). NotJournaled
        after ``timeout`` when the input shows up neither in the journal nor
        in the dead letter.
        """
        t_setup = time.monotonic()
        tail = await self.tail(event.cluster, start="end")
        dl = await self._dead_letter_watch()
        t0 = time.monotonic()
        try:
            pub = await self.publish(event)
            res = await self._await_group(tail, dl, pub, t0 + timeout)
            res.seconds = time.monotonic() - t0
            res.setup_seconds = t0 - t_setup
            if follow is not None and res.ok:
                deadline = time.monotonic() + (follow_timeout if follow_timeout else timeout)
                res.followed = [_plain(e)
                                for e in await self._follow(tail, event.cluster, follow, deadline)]
            return res
        finally:
            await tail.stop()
            await dl.stop()

    async def _dead_letter_watch(self) -> _DeadLetterWatch:
        w = _DeadLetterWatch(self.bootstrap, self.deadletter, f"{self.client_id}-dl")
        await w.start()
        return w

    async def _await_group(self, tail: JournalTail, dl: _DeadLetterWatch, pub: Published,
                           deadline: float) -> Result:
        want_dl = dead_letter_id(self.inbox, pub.partition, pub.offset)
        res = Result(id=pub.id, cluster=pub.cluster, inbox_partition=pub.partition,
                     inbox_offset=pub.offset, status="pending")
        found: Event | None = None
        decisions: list[Event] = []
        while time.monotonic() < deadline:
            items = await tail.poll(timeout_ms=200)
            for i, item in enumerate(items):
                e = item.event
                if e.cluster != pub.cluster:
                    continue
                if found is None:
                    if item.kind != "decision" and e.id == pub.id:
                        found = e
                        res.input = _plain(e)
                        res.journal_offset = item.offset
                    continue
                if item.kind == "decision":
                    if e.cause == pub.id:
                        decisions.append(e)
                    continue
                # The cluster's next input: the group of ours is complete.
                tail.unread(items[i:])
                res.decisions = [_plain(d) for d in decisions]
                res.status = outcome_status(decisions)
                return res
            if found is None:
                letter = dl.find(want_dl)
                if letter is not None:
                    res.status = "dead_letter"
                    res.dead_letter = _plain(letter)
                    return res
                await dl.poll()
        if found is not None:
            # No next input in time (no ticker?): report what the journal holds so far.
            res.decisions = [_plain(d) for d in decisions]
            res.status = outcome_status(decisions)
            return res
        raise NotJournaled(f"{pub.id} reached the inbox ({self.inbox}[{pub.partition}] offset "
                           f"{pub.offset}) but neither the journal nor the dead letter within "
                           f"the timeout: is a worker scheduling cluster {pub.cluster!r}?")

    async def _follow(self, tail: JournalTail, cluster: str, pred: Callable[[Event], bool],
                      deadline: float) -> list[Event]:
        while time.monotonic() < deadline:
            items = await tail.poll(timeout_ms=200)
            for i, item in enumerate(items):
                if item.kind == "decision" and item.event.cluster == cluster and pred(item.event):
                    tail.unread(items[i + 1:])
                    return [item.event]
        return []

    async def clock(self, cluster: str, timeout: float = 30.0) -> int:
        """The cluster's trusted time: the ``at`` of the next tick journaled (waits for one)."""
        tail = await self.tail(cluster, start="end")
        try:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                for item in await tail.poll(timeout_ms=200):
                    if type(item.event) is ClockTicked and item.event.cluster == cluster:
                        return int(item.event.at)
            raise ClientError(f"no tick of cluster {cluster!r} in {timeout:.0f} s: is a worker "
                              f"scheduling it?")
        finally:
            await tail.stop()


class _DeadLetterWatch:
    """The dead-letter topic from its end: did our record land there?"""

    def __init__(self, bootstrap: str, name: str, client_id: str) -> None:
        self.bootstrap = bootstrap
        self.name = name
        self.client_id = client_id
        self._c: AIOKafkaConsumer | None = None
        self._letters: dict[str, DeadLetter] = {}

    async def start(self) -> None:
        c = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, group_id=None,
                             enable_auto_commit=False, fetch_max_wait_ms=50,
                             client_id=self.client_id)
        await c.start()
        self._c = c
        parts = c.partitions_for_topic(self.name) or set()
        if not parts:
            return
        tps = [TopicPartition(self.name, p) for p in sorted(parts)]
        c.assign(tps)
        ends = await c.end_offsets(tps)
        for tp in tps:
            c.seek(tp, max(0, int(ends[tp]) - 1))

    async def poll(self) -> None:
        if self._c is None or not self._c.assignment():
            return
        got = await self._c.getmany(timeout_ms=50)
        for msgs in got.values():
            for m in msgs:
                with contextlib.suppress(Exception):
                    dl = decode_dead_letter(m.value)
                    self._letters[dl.id] = dl

    def find(self, dl_id: str) -> DeadLetter | None:
        return self._letters.get(dl_id)

    async def stop(self) -> None:
        if self._c is not None:
            with contextlib.suppress(Exception):
                await self._c.stop()
            self._c = None


# -- for scripts -------------------------------------------------------------------------------


class SyncClient:
    """``Client`` for plain scripts: each method blocks; a private loop runs in a thread.

        with SyncClient("127.0.0.1:9092") as c:
            print(c.request(submit_event).status)
    """

    def __init__(self, bootstrap: str, prefix: str = "", **kw: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="allot-client")
        self._thread.start()
        self.client = Client(bootstrap, prefix, **kw)
        try:
            self._run(self.client.start())
        except BaseException:
            self.close()
            raise

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def publish(self, event: Event) -> Published:
        return self._run(self.client.publish(event))

    def request(self, event: Event, timeout: float = 30.0,
                follow: Callable[[Event], bool] | None = None) -> Result:
        return self._run(self.client.request(event, timeout, follow))

    def clock(self, cluster: str, timeout: float = 30.0) -> int:
        return self._run(self.client.clock(cluster, timeout))

    def close(self) -> None:
        if self._loop.is_running():
            with contextlib.suppress(Exception):
                self._run(self.client.close(), timeout=10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        if not self._loop.is_running():
            self._loop.close()

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def default_actor() -> str:
    """Who the command line publishes as: ``$ALLOT_ACTOR``, else the login name."""
    name = os.environ.get("ALLOT_ACTOR") or os.environ.get("USER") or "unknown"
    return _ID_BAD_CHARS.sub("-", name) or "unknown"


__all__ = [
    "Client",
    "ClientError",
    "JournalTail",
    "NotJournaled",
    "Published",
    "Result",
    "SyncClient",
    "TailItem",
    "check_id",
    "new_id",
    "partition_for",
]


# -- the command line: allot submit | cancel | budget ... | host ... ---------------------------

EXIT_REJECTED = 1
EXIT_ERROR = 2


def register(subparsers: Any) -> None:
    """Add ``submit``, ``cancel``, ``budget`` and ``host`` to the allot command line."""
    import argparse

    def common(p: argparse.ArgumentParser) -> None:
        g = p.add_argument_group("connection and identity")
        g.add_argument("--bootstrap", default=None, metavar="HOST:PORT",
                       help="Kafka bootstrap servers (else KAFKA_BOOTSTRAP_SERVERS, "
                            "ALLOT_BOOTSTRAP, --config, 127.0.0.1:9092)")
        g.add_argument("--topic-prefix", default=None, help="prefix of the topic names")
        g.add_argument("--config", default=None, metavar="FILE",
                       help="the worker's TOML settings file (bootstrap, topic_prefix, clusters)")
        g.add_argument("--cluster", default=None,
                       help="the cluster (default: the first of the setting `clusters`)")
        g.add_argument("--actor", default=None,
                       help="who publishes (default: $ALLOT_ACTOR or the login name)")
        g.add_argument("--key-file", default=None, metavar="FILE",
                       help="sign the input as --actor with the secret in FILE (first line)")
        g.add_argument("--id", dest="event_id", default=None,
                       help="the input's id (default: a fresh one); re-using an id is a retry")
        g.add_argument("--timeout", type=float, default=30.0,
                       help="seconds to wait for the decisions (default 30)")
        g.add_argument("--json", action="store_true", help="print the outcome as JSON")

    p = subparsers.add_parser(
        "submit", help="submit a workload to a live allot and print what it caused",
        description="Publish workload.submitted on the inbox and wait for the journal: print "
                    "whether it was accepted or rejected (and why). With --follow, also wait "
                    "for the workload's first scheduling decision (started, with placement). "
                    "Exit status: 0 accepted, 1 rejected or dead-lettered, 2 error.")
    p.add_argument("--budget", required=True, help="the budget leaf, e.g. lab/llm/pretrain/alice")
    p.add_argument("--gpus", type=int, required=True, help="GPUs in total")
    p.add_argument("--hosts", type=int, default=1, help="hosts of a gang (default 1)")
    p.add_argument("--gpus-per-host", type=int, default=None, help="GPUs per host of a gang")
    p.add_argument("--min-runtime", type=int, default=3600, metavar="SECONDS",
                   help="protected (and charged) minimum runtime; 0 = unallocated (default 3600)")
    p.add_argument("--resumable", action="store_true", help="can resume after a preemption")
    p.add_argument("--priority", type=int, default=0, help="order inside its leaf (default 0)")
    p.add_argument("--kind", default="training", help="training, debug, eval, ... (default training)")
    p.add_argument("--workload", default=None, help="the workload id (default: a fresh one)")
    p.add_argument("--user", default=None, help="the owner (default: --actor)")
    p.add_argument("--expected-duration", type=int, default=None, metavar="SECONDS",
                   help="run time the simulated executor plays (the scheduler never reads it)")
    p.add_argument("--follow", action="store_true",
                   help="also wait for the workload's first decision (started, preempted, ...)")
    common(p)
    p.set_defaults(func=_guarded(_submit))

    p = subparsers.add_parser(
        "cancel", help="cancel a workload", description="Publish workload.cancelled and print "
        "what it caused (only the owner or a manager of its budget may cancel).")
    p.add_argument("workload", help="the workload id")
    p.add_argument("--reason", default="", help="why (free text)")
    common(p)
    p.set_defaults(func=_guarded(_cancel))

    b = subparsers.add_parser("budget", help="define budget nodes and change shares",
                              description="Budget edits on a live allot (managers only).")
    bsub = b.add_subparsers(title="budget commands", metavar="COMMAND")
    b.set_defaults(func=lambda _a: _usage(b))
    p = bsub.add_parser("define", help="define a budget node",
                        description="Publish budget.node_defined: PATH with its share under its "
                                    "parent and its managers.")
    p.add_argument("path", help="the node, e.g. lab/llm/pretrain")
    p.add_argument("--shares", type=int, default=1, help="weight among its siblings (default 1)")
    p.add_argument("--manager", action="append", default=[], help="a manager (repeatable)")
    common(p)
    p.set_defaults(func=_guarded(_define))
    p = bsub.add_parser("shares", help="change the shares of some children of a node",
                        description="Publish budget.shares_set: CHILD=SHARES for children of "
                                    "PARENT (children not named keep theirs).")
    p.add_argument("parent", help="the parent node")
    p.add_argument("shares", nargs="+", metavar="CHILD=SHARES", help="e.g. pretrain=40")
    common(p)
    p.set_defaults(func=_guarded(_shares))

    h = subparsers.add_parser("host", help="report host faults and repairs, add hosts",
                              description="Host events on a live allot.")
    hsub = h.add_subparsers(title="host commands", metavar="COMMAND")
    h.set_defaults(func=lambda _a: _usage(h))
    p = hsub.add_parser("fault", help="report a faulty host",
                        description="Publish host.faulted: degraded drains at minimum runtime, "
                                    "failed ends its work at once.")
    p.add_argument("host")
    p.add_argument("--severity", choices=("degraded", "failed"), default="degraded")
    p.add_argument("--reason", default="", help="what the monitor saw")
    common(p)
    p.set_defaults(func=_guarded(_fault))
    p = hsub.add_parser("repair", help="report a repaired host",
                        description="Publish host.repaired: the host takes work again.")
    p.add_argument("host")
    common(p)
    p.set_defaults(func=_guarded(_repair))
    p = hsub.add_parser("add", help="add a host", description="Publish host.added.")
    p.add_argument("host")
    p.add_argument("--gpus", type=int, default=8, help="GPUs (default 8)")
    p.add_argument("--rack", default=None)
    p.add_argument("--block", default=None)
    common(p)
    p.set_defaults(func=_guarded(_add_host))


def _usage(parser: Any) -> int:
    import sys

    parser.print_help(sys.stderr)
    return EXIT_ERROR


def _guarded(fn: Callable[[Any], int]) -> Callable[[Any], int]:
    def run(args: Any) -> int:
        import logging
        import sys

        # aiokafka logs each failed connection attempt; the command says it once, in one line.
        logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
        try:
            return fn(args)
        except AllotError as exc:
            print(f"allot {args.command}: error: {exc}", file=sys.stderr)
            return EXIT_ERROR
        except KeyboardInterrupt:
            return 130
    return run


class _Ctx(msgspec.Struct, kw_only=True):
    bootstrap: str
    prefix: str
    cluster: str
    actor: str
    signer: tuple[str, bytes] | None
    event_id: str | None
    timeout: float
    json: bool


def _ctx(args: Any) -> _Ctx:
    from streams import config

    settings = config.load(args.config, flags={"bootstrap": args.bootstrap,
                                               "topic_prefix": args.topic_prefix})
    actor = args.actor or default_actor()
    signer = None
    if args.key_file:
        try:
            lines = open(args.key_file).read().splitlines()  # noqa: SIM115 - read once
        except OSError as exc:
            raise ClientError(f"--key-file: {exc.strerror or exc}") from None
        if not lines or not lines[0].strip():
            raise ClientError(f"--key-file: {args.key_file} is empty")
        signer = (actor, lines[0].strip().encode())
    if args.event_id is not None:
        check_id(args.event_id)
    return _Ctx(bootstrap=settings.bootstrap, prefix=settings.topic_prefix,
                cluster=args.cluster or settings.clusters[0], actor=actor, signer=signer,
                event_id=args.event_id, timeout=args.timeout, json=args.json)


def _envelope(ctx: _Ctx, prefix: str) -> dict[str, Any]:
    return {"id": ctx.event_id or new_id(prefix), "at": int(time.time()), "cluster": ctx.cluster,
            "actor": ctx.actor, "source": "allot-cli"}


def _send(ctx: _Ctx, event: Event, follow: Callable[[Event], bool] | None = None) -> int:
    async def go() -> Result:
        async with Client(ctx.bootstrap, ctx.prefix, signer=ctx.signer) as c:
            return await c.request(event, timeout=ctx.timeout, follow=follow)

    res = asyncio.run(go())
    _print(res, ctx.json)
    return 0 if res.ok else EXIT_REJECTED


def _print(res: Result, as_json: bool) -> None:
    import sys

    if as_json:
        sys.stdout.write(msgspec.json.format(msgspec.json.encode(res)).decode() + "\n")
        return
    from rich.console import Console

    con = Console(highlight=False)
    what = (res.input or {}).get("type", "input")
    where = f"journal offset {res.journal_offset}" if res.journal_offset is not None else \
        f"inbox {res.inbox_partition}:{res.inbox_offset}"
    if res.status == "dead_letter":
        dl = res.dead_letter or {}
        con.print(f"[red]dead letter[/]: {res.id} was not taken: [bold]{dl.get('reason')}[/] "
                  f"({dl.get('detail', '')})")
        return
    colour = "green" if res.ok else "red"
    con.print(f"[{colour}]{res.status}[/]: {what} {res.id} ({where}, {res.seconds * 1000:.0f} ms)")
    for d in [*res.decisions, *res.followed]:
        con.print("  " + describe(d))


def describe(d: dict[str, Any]) -> str:
    """One line for a decision (as plain data), the way people read it."""
    tag = d.get("type", "")
    w = d.get("workload", "")
    if tag == "workload.started":
        hosts = ", ".join(f"{s['host']}:{s['gpus']}" for s in d.get("placement", ()))
        prot = d.get("protected_until")
        extra = ("unallocated (free, never protected)" if not d.get("allocated") else
                 f"protected until {prot}" if prot is not None else "protected until it ends")
        return f"workload.started {w} on {hosts}, {extra} (cause {d.get('cause')})"
    if tag == "workload.preempted":
        return (f"workload.preempted {w}: {d.get('reason')} by {d.get('by')}, "
                f"{'requeued' if d.get('requeued') else 'ended'}")
    if tag in REJECTIONS:
        return f"{tag}: [bold]{d.get('reason')}[/] {d.get('detail', '')}".rstrip()
    if tag == "workload.reserved":
        return f"workload.reserved {w}: hosts {', '.join(d.get('hosts', ()))} until {d.get('until')}"
    if tag == "host.drained":
        return f"host.drained {d.get('host')}: empty, to automated repair"
    return f"{tag} {d.get('id')}"


def _submit(args: Any) -> int:
    from events import WorkloadSubmitted

    ctx = _ctx(args)
    workload = args.workload or new_id("w").replace(":", "-")[:40]
    env = _envelope(ctx, "submit")
    try:
        e = WorkloadSubmitted(**env, workload=workload, budget=args.budget,
                              user=args.user or ctx.actor, gpus=args.gpus, hosts=args.hosts,
                              gpus_per_host=args.gpus_per_host, min_runtime_s=args.min_runtime,
                              resumable=args.resumable, priority=args.priority, kind=args.kind,
                              expected_duration_s=args.expected_duration)
    except (TypeError, msgspec.ValidationError) as exc:
        raise ClientError(str(exc)) from None
    follow = None
    if args.follow:
        lifecycle = ("workload.started", "workload.preempted", "workload.rejected")
        follow = lambda d: tag_of(type(d)) in lifecycle and getattr(d, "workload", None) == workload  # noqa: E731
    return _send(ctx, e, follow)


def _cancel(args: Any) -> int:
    from events import WorkloadCancelled

    ctx = _ctx(args)
    return _send(ctx, WorkloadCancelled(**_envelope(ctx, "cancel"), workload=args.workload,
                                        reason=args.reason))


def _define(args: Any) -> int:
    from events import BudgetNodeDefined

    ctx = _ctx(args)
    return _send(ctx, BudgetNodeDefined(**_envelope(ctx, "budget"), path=args.path,
                                        shares=args.shares, managers=tuple(args.manager)))


def _shares(args: Any) -> int:
    from events import BudgetSharesSet, ChildShare

    ctx = _ctx(args)
    shares = []
    for item in args.shares:
        child, sep, n = item.partition("=")
        if not sep or not n.strip().lstrip("-").isdigit():
            raise ClientError(f"expected CHILD=SHARES, got {item!r}")
        shares.append(ChildShare(child=child.strip(), shares=int(n)))
    return _send(ctx, BudgetSharesSet(**_envelope(ctx, "budget"), parent=args.parent,
                                      shares=tuple(shares)))


def _fault(args: Any) -> int:
    from events import HostFaulted

    ctx = _ctx(args)
    return _send(ctx, HostFaulted(**_envelope(ctx, "host"), host=args.host,
                                  severity=args.severity, reason=args.reason))


def _repair(args: Any) -> int:
    from events import HostRepaired

    ctx = _ctx(args)
    return _send(ctx, HostRepaired(**_envelope(ctx, "host"), host=args.host))


def _add_host(args: Any) -> int:
    from events import HostAdded

    ctx = _ctx(args)
    return _send(ctx, HostAdded(**_envelope(ctx, "host"), host=args.host, gpus=args.gpus,
                                rack=args.rack, block=args.block))
