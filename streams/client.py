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
- ``Client.tail(cluster)``: a ``streams.journal_tail.JournalTail`` on the
  cluster's journal partition (fenced, duplicates dropped by id).
- ``SyncClient``: the same for scripts, on a private event loop.

The command-line verbs built on it are in ``streams.commands``.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
import time
import uuid
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.partitioner import murmur2

from events import DECISION_TYPES, ClockTicked, Event, encode, tag_of
from events.limits import INPUT_ID_PATTERN
from streams.config import kafka_client_options
from streams.errors import ClientError, NotJournaled
from streams.journal_tail import TAIL_WAIT_MS, JournalTail
from streams.records import (
    DEADLETTER,
    INBOX,
    JOURNAL,
    DeadLetter,
    dead_letter_id,
    decode_dead_letter,
    topic,
)

if TYPE_CHECKING:
    from identity.journal_seal import SealCheck

T = TypeVar("T")

_ID_OK = re.compile(INPUT_ID_PATTERN)
ID_BAD_CHARS = re.compile(r"[^A-Za-z0-9._:@+=~-]")


def partition_for(key: str, partitions: int) -> int:
    """The partition of ``key``: murmur2, positive, modulo the count (Java's and aiokafka's rule)."""
    return (murmur2(key.encode()) & 0x7FFFFFFF) % partitions


def new_id(prefix: str = "c") -> str:
    """A fresh input id: ``<prefix>:<32 hex>``, the prefix cleaned to the id grammar."""
    clean = ID_BAD_CHARS.sub("-", prefix)[:60] or "c"
    return f"{clean}:{uuid.uuid4().hex}"


def check_id(event_id: str) -> str:
    """``event_id`` if it is a valid input id, else ClientError naming the grammar."""
    if _ID_OK.fullmatch(event_id) is None:
        raise ClientError(f"{event_id!r} is not a valid input id ({INPUT_ID_PATTERN}: no '/', "
                          f"no spaces, ASCII only)")
    return event_id


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
                 signer: tuple[str, bytes] | None = None, keychain: Any = None,
                 retries: int = 5,
                 retry_backoff_s: float = 0.25, request_timeout_ms: int = 10_000,
                 tail_wait_ms: int = TAIL_WAIT_MS, client_id: str = "allot-client",
                 seal_check: SealCheck | None = None) -> None:
        self.bootstrap = bootstrap
        self.prefix = prefix
        self.inbox = topic(INBOX, prefix)
        self.journal = topic(JOURNAL, prefix)
        self.deadletter = topic(DEADLETTER, prefix)
        self.signer = signer
        # identity.local.Keychain: sign each input as its actor when a key for it is here.
        self.keychain = keychain
        self.retries = retries
        self.retry_backoff_s = retry_backoff_s
        self.request_timeout_ms = request_timeout_ms
        self.tail_wait_ms = tail_wait_ms
        self.client_id = client_id
        # identity.journal_seal.SealCheck: every tail counts only records a worker
        # signed (an executor must never act on a forged decision); None: unchecked.
        self.seal_check = seal_check
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
                             client_id=self.client_id, **kafka_client_options())
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

    def signing_for(self, event: Event) -> tuple[str, bytes] | None:
        """``(principal, private key)`` that signs ``event``: the signer, or the actor's key."""
        if self.signer is not None:
            return self.signer
        if self.keychain is not None:
            secret = self.keychain.secret(event.actor)
            if secret is not None:
                return (event.actor, secret)
        return None

    async def publish(self, event: Event) -> Published:
        """Put ``event`` on the inbox; retry with the same bytes; the record's position.

        A signed input's id is put in its signer's namespace (``<signer>:<id>``,
        ``identity.local.namespaced_id``) as the worker requires; the returned
        ``Published.id`` is the id published.
        """
        event, value, signing = self._prepare(event)
        headers = None
        if signing is not None:
            from streams.signing import sign_headers

            headers = sign_headers(value, signing[0], signing[1])
        return await self._send(event, value, headers)

    def _prepare(self, event: Event) -> tuple[Event, bytes, tuple[str, bytes] | None]:
        """``(event, value, signing)``: the event as published (namespaced id), its bytes, its signer."""
        if type(event) in DECISION_TYPES:
            raise ClientError(f"{tag_of(type(event))} is a decision: only the scheduler writes it")
        signing = self.signing_for(event)
        if signing is not None and tag_of(type(event)) != "clock.ticked":
            from identity.local import namespaced_id

            nid = namespaced_id(signing[0], event.id)
            if nid != event.id:
                event = msgspec.structs.replace(event, id=nid)
        check_id(event.id)
        assert self._producer is not None, "start() first"
        return event, encode(event), signing

    async def _send(self, event: Event, value: bytes,
                    headers: list[tuple[str, bytes]] | None) -> Published:
        assert self._producer is not None, "start() first"
        p = await self.partition_of(event.cluster)
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

    async def publish_many(self, events: list[Event], batch_sign: bool = True) -> list[Published]:
        """Publish several inputs in order (one partition keeps their order per cluster).

        ``batch_sign``: the inputs one principal signs are signed together, with
        one Ed25519 signature of their Merkle root (``streams.signing.sign_batch_headers``:
        each record still verifies alone); a principal's single input, and every
        input when ``batch_sign`` is off, is signed alone as ``publish`` signs it.
        """
        from streams.signing import sign_batch_headers, sign_headers

        prepared = [self._prepare(e) for e in events]
        headers: list[list[tuple[str, bytes]] | None] = [None] * len(prepared)
        by_signer: dict[tuple[str, bytes], list[int]] = {}
        for i, (_e, _v, signing) in enumerate(prepared):
            if signing is not None:
                by_signer.setdefault(signing, []).append(i)
        for (principal, secret), idx in by_signer.items():
            if batch_sign and len(idx) > 1:
                for i, h in zip(idx, sign_batch_headers([prepared[i][1] for i in idx],
                                                        principal, secret), strict=True):
                    headers[i] = h
            else:
                for i in idx:
                    headers[i] = sign_headers(prepared[i][1], principal, secret)
        return [await self._send(e, v, h) for (e, v, _s), h in zip(prepared, headers, strict=True)]

    async def tail(self, cluster: str, start: str = "end") -> JournalTail:
        """A started ``JournalTail`` on ``cluster``'s journal partition."""
        p = partition_for(cluster, await self.partitions(self.journal))
        t = JournalTail(self.bootstrap, self.journal, p, start=start,
                        tail_wait_ms=self.tail_wait_ms, client_id=f"{self.client_id}-tail",
                        seal_check=self.seal_check)
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
                             client_id=self.client_id, **kafka_client_options())
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


__all__ = [
    "Client",
    "ClientError",
    "NotJournaled",
    "Published",
    "Result",
    "SyncClient",
    "check_id",
    "new_id",
    "partition_for",
]
