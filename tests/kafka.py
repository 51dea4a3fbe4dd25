"""Helpers for the tests that run against a real broker (the Tansu session fixture in conftest.py).

- ``BackgroundLoop``: an asyncio loop in a thread, so plain (sync) tests can
  drive aiokafka clients and in-process workers.
- ``worker_settings``: fast settings for a test (its own topic prefix, so tests
  never see each other's records).
- ``Live``: one test's view of the pipeline: an inbox producer (signing where
  asked), a journal watcher that keeps every record of every partition, the
  dead letters, and optionally an in-process ``Worker``.
- ``WorkerProcess``: ``allot worker`` as a subprocess, for kill -9 and SIGSTOP.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import msgspec
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from events import ClockTicked, Event, decode, encode
from streams import config
from streams.config import WorkerSettings
from streams.processor import InboxRecord
from streams.records import (
    DEADLETTER,
    INBOX,
    JOURNAL,
    KIND_CLAIM,
    Claim,
    DeadLetter,
    Fence,
    JournalRecord,
    decode_dead_letter,
    parse_journal,
    topic,
)
from streams.signing import sign_headers
from streams.worker import Worker, partition_for

REPO = Path(__file__).resolve().parent.parent
TICK_KEY = "test-tick-key"
T = TypeVar("T")


class BackgroundLoop:
    """An event loop running in a daemon thread; ``run`` a coroutine on it from sync code."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True,
                                       name="kafka-test-loop")
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def spawn(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def close(self) -> None:
        async def _cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            self.run(_cancel_all(), timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def unique_prefix() -> str:
    return f"t{uuid.uuid4().hex[:10]}."


def worker_settings(bootstrap: str, prefix: str, clusters: tuple[str, ...], **kw: Any) -> WorkerSettings:
    """Settings for a test worker: its own topics and group, 4 partitions, the test tick key."""
    values: dict[str, Any] = dict(
        bootstrap=bootstrap, topic_prefix=prefix, clusters=clusters, partitions=4,
        group=f"{prefix}workers", tick_key=TICK_KEY, session_timeout_ms=6000,
        heartbeat_interval_ms=1000, log_format="json", log_level="warning",
        snapshot_every_records=0, snapshot_every_s=0,
        # These tests publish unsigned inputs; the identity tests turn signatures on.
        require_signatures=False)
    values.update(kw)
    return config.load(environ={}, flags=values)


def wait_until(pred: Callable[[], T], timeout: float = 30.0, interval: float = 0.05,
               what: str = "condition") -> T:
    """Poll ``pred`` until it returns something truthy; AssertionError after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


class Live:
    """One test's producer, journal watcher and dead-letter reader (and maybe a worker)."""

    def __init__(self, bootstrap: str, prefix: str, partitions: int = 4,
                 watch_inbox: bool = False) -> None:
        self.bootstrap = bootstrap
        self.prefix = prefix
        self.partitions = partitions
        self.inbox = topic(INBOX, prefix)
        self.journal_topic = topic(JOURNAL, prefix)
        self.dl_topic = topic(DEADLETTER, prefix)
        self.bg = BackgroundLoop()
        self.records: dict[int, list[JournalRecord]] = {p: [] for p in range(partitions)}
        self.dead: list[DeadLetter] = []
        self.watch_inbox = watch_inbox
        self.inbox_records: dict[int, list[InboxRecord]] = {p: [] for p in range(partitions)}
        self._lock = threading.Lock()
        self._producer: AIOKafkaProducer | None = None
        self._watch: concurrent.futures.Future[None] | None = None
        self.workers: list[tuple[Worker, concurrent.futures.Future[None]]] = []

    # -- setup --------------------------------------------------------------------------

    def start(self) -> Live:
        from streams.topics import ensure_topics

        self.bg.run(ensure_topics(self.bootstrap, self.prefix, self.partitions))
        async def producer() -> AIOKafkaProducer:
            p = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all", linger_ms=1)
            await p.start()
            return p

        self._producer = self.bg.run(producer())
        self._watch = self.bg.spawn(self._watch_loop())
        return self

    def start_worker(self, clusters: tuple[str, ...], wait: bool = True, **kw: Any) -> Worker:
        """An in-process worker on the background loop; waits until it owns all partitions."""
        settings = worker_settings(self.bootstrap, self.prefix, clusters,
                                   partitions=self.partitions, **kw)
        async def make() -> Worker:
            return Worker(settings)

        worker = self.bg.run(make())
        fut = self.bg.spawn(worker.run())
        self.workers.append((worker, fut))
        if wait:
            wait_until(lambda: worker.ready.is_set() or fut.done(), 60, what="the worker to claim")
            if fut.done():
                fut.result()
        return worker

    def stop_worker(self, worker: Worker) -> None:
        for w, fut in list(self.workers):
            if w is worker:
                self.bg.loop.call_soon_threadsafe(w.stop)
                fut.result(30)
                self.workers.remove((w, fut))

    def close(self) -> None:
        for w, _ in list(self.workers):
            with contextlib.suppress(Exception):
                self.stop_worker(w)
        if self._watch is not None:
            self._watch.cancel()
        if self._producer is not None:
            with contextlib.suppress(Exception):
                self.bg.run(self._producer.stop(), timeout=10)
        self.bg.close()

    # -- the inbox ----------------------------------------------------------------------

    def partition_of(self, cluster: str) -> int:
        return partition_for(cluster, self.partitions)

    def send(self, event: Event | bytes, cluster: str | None = None, key: bytes | None = None,
             sign_as: tuple[str, str] | None = None, headers: list[tuple[str, bytes]] | None = None,
             partition: int | None = None) -> int:
        """Publish one inbox record; return its offset. ``sign_as=(principal, key)`` signs it."""
        assert self._producer is not None
        if isinstance(event, Event):
            value = encode(event)
            cluster = cluster or event.cluster
        else:
            value = event
        k = key if key is not None else (cluster.encode() if cluster else None)
        hs = list(headers or [])
        if sign_as is not None:
            hs += sign_headers(value, sign_as[0], sign_as[1].encode())
        p = partition if partition is not None else (
            self.partition_of(cluster) if cluster else 0)
        md = self.bg.run(self._producer.send_and_wait(self.inbox, value, key=k, partition=p,
                                                      headers=hs or None))
        return int(md.offset)

    def send_many(self, events: list[Event]) -> None:
        assert self._producer is not None

        async def go() -> None:
            futs = [await self._producer.send(self.inbox, encode(e), key=e.cluster.encode(),  # type: ignore[union-attr]
                                              partition=self.partition_of(e.cluster))
                    for e in events]
            await asyncio.gather(*futs)
        self.bg.run(go(), timeout=120)

    # -- the journal ----------------------------------------------------------------------

    async def _watch_loop(self) -> None:
        c = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, group_id=None,
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             fetch_max_wait_ms=20, max_partition_fetch_bytes=8 * 1024 * 1024)
        await c.start()
        try:
            watched = (self.journal_topic, self.dl_topic) + (
                (self.inbox,) if self.watch_inbox else ())
            tps = [TopicPartition(t, p) for t in watched for p in range(self.partitions)]
            c.assign(tps)
            for tp in tps:
                c.seek(tp, 0)
            while True:
                got = await c.getmany(timeout_ms=200)
                with self._lock:
                    for tp, msgs in got.items():
                        for m in msgs:
                            if tp.topic == self.journal_topic:
                                self.records[tp.partition].append(
                                    parse_journal(m.partition, m.offset, m.value, m.headers))
                            elif tp.topic == self.inbox:
                                self.inbox_records[tp.partition].append(InboxRecord(
                                    topic=m.topic, partition=m.partition, offset=m.offset,
                                    key=m.key, value=m.value, headers=tuple(m.headers or ())))
                            else:
                                self.dead.append(decode_dead_letter(m.value))
        finally:
            await c.stop()

    def raw(self, partition: int) -> list[JournalRecord]:
        with self._lock:
            return list(self.records[partition])

    def admitted(self, partition: int) -> list[JournalRecord]:
        """The records of one partition that count (the fence), duplicates included."""
        fence = Fence()
        return [r for r in self.raw(partition) if fence.admit(r)]

    def events(self, cluster: str) -> list[Event]:
        """The cluster's journal as every reader sees it: fenced, then deduplicated by id."""
        seen: set[str] = set()
        out: list[Event] = []
        for r in self.admitted(self.partition_of(cluster)):
            e = decode(r.value)
            if e.cluster != cluster or e.id in seen:
                continue
            seen.add(e.id)
            out.append(e)
        return out

    def claims(self, partition: int) -> list[Claim]:
        return [msgspec.json.decode(r.value, type=Claim) for r in self.raw(partition)
                if r.kind == KIND_CLAIM]

    def inbox_of(self, partition: int) -> list[InboxRecord]:
        with self._lock:
            return list(self.inbox_records[partition])

    def dead_letters(self) -> list[DeadLetter]:
        with self._lock:
            return list(self.dead)

    def wait_event(self, cluster: str, pred: Callable[[Event], bool], timeout: float = 30.0,
                   what: str = "a journal event") -> Event:
        def find() -> Event | None:
            return next((e for e in self.events(cluster) if pred(e)), None)
        return wait_until(find, timeout, what=what)


class WorkerProcess:
    """``python -m allot worker`` as a child process (kill -9 and SIGSTOP need a process).

    ``argv``: another command line with the same settings (``tests.worker_faults``).
    """

    def __init__(self, settings: WorkerSettings, log_path: Path,
                 env: dict[str, str] | None = None, argv: list[str] | None = None) -> None:
        self.settings = settings
        self.log_path = log_path
        self.env = env or {}
        self.argv = argv or [sys.executable, "-m", "allot", "worker"]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> WorkerProcess:
        env = dict(os.environ)
        for name in config.FIELDS:
            env.pop(config.ENV_PREFIX + name.upper(), None)
        env.pop(config.BOOTSTRAP_ENV, None)
        s = self.settings
        for name in config.FIELDS:
            value = getattr(s, name)
            if name == "worker_name" and not value:
                continue
            env[config.ENV_PREFIX + name.upper()] = (",".join(value) if isinstance(value, tuple)
                                                     else str(value))
        env.update(self.env)
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in wait()
        self.proc = subprocess.Popen(self.argv, cwd=REPO, env=env,
                                     stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            assert self.proc is not None
            os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        self.wait()

    def terminate(self, timeout: float = 20.0) -> int | None:
        self.signal(signal.SIGTERM)
        return self.wait(timeout)

    def wait(self, timeout: float = 20.0) -> int | None:
        if self.proc is None:
            return None
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(5)
        with contextlib.suppress(Exception):
            self._log.close()
        return code

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


# -- journal invariants ------------------------------------------------------------------------

class JournalCheck(msgspec.Struct, kw_only=True):
    """What ``check_journal`` counted in one partition."""

    records: int
    claims: int
    inputs: int
    decisions: int
    fenced: int
    duplicates: int
    dead: int
    skipped: int
    events: dict[str, list[Event]]


def check_journal(live: Live, partition: int, last_offset: int, last_inbox: int) -> JournalCheck:
    """Assert the crash-safety invariants of one journal partition up to ``last_offset``.

    - the watcher saw every offset (no hole in what is checked);
    - duplicates only exact (an id kept twice has the same bytes);
    - no input journaled twice, and inputs in inbox order;
    - no inbox record up to ``last_inbox`` lost: each is journaled, dead-lettered, or a
      copy of an event id journaled before it;
    - every cluster's journal (fenced, deduplicated) passes the replay check, so no
      decision is missing, changed or extra.
    """
    from events import DECISION_TYPES
    from scheduler.replay import verify_log

    raw = [r for r in live.raw(partition) if r.offset <= last_offset]
    assert [r.offset for r in raw] == list(range(last_offset + 1)), "the watcher missed records"
    fence = Fence()
    kept: dict[str, bytes] = {}
    where: dict[str, JournalRecord] = {}
    input_offsets: dict[str, int] = {}
    journaled_inbox: list[int] = []
    events: dict[str, list[Event]] = {}
    fenced = dups = inputs = decisions = 0
    for r in raw:
        if not fence.admit(r):
            fenced += r.kind != KIND_CLAIM
            continue
        e = decode(r.value)
        if e.id in kept:
            first = where[e.id]
            assert kept[e.id] == r.value, f"a second copy of {e.id} differs from the first"
            assert r.kind != "input", (
                f"input {e.id} journaled twice: at {first.offset} (owner {first.owner[:8]}, "
                f"inbox {first.inbox_offset}) and {r.offset} (owner {r.owner[:8]}, inbox "
                f"{r.inbox_offset}); claims: "
                + ", ".join(f"{c.offset}:{c.owner[:8]}" for c in raw if c.kind == KIND_CLAIM))
            dups += 1
            continue
        kept[e.id] = r.value
        where[e.id] = r
        events.setdefault(e.cluster, []).append(e)
        if r.kind == "input":
            inputs += 1
            if r.inbox_offset is None:
                # Only the worker's own first tick of a newly claimed cluster is
                # journaled without coming from the inbox (Worker._first_tick).
                # Its id is the tick's own, so the ticker's copy in the inbox is a
                # duplicate of it: "journaled before any inbox offset".
                assert isinstance(e, ClockTicked), f"input {e.id} has no inbox offset"
                input_offsets[e.id] = -1
                continue
            input_offsets[e.id] = r.inbox_offset
            journaled_inbox.append(r.inbox_offset)
        else:
            assert type(e) in DECISION_TYPES
            decisions += 1
    assert journaled_inbox == sorted(set(journaled_inbox)), "inputs out of inbox order"
    journaled = set(journaled_inbox)
    dead = {d.offset for d in live.dead_letters() if d.partition == partition}
    skipped = 0
    for rec in live.inbox_of(partition):
        if rec.offset > last_inbox:
            break
        if rec.offset in journaled:
            continue
        if rec.offset in dead:
            continue
        e = decode(rec.value or b"")
        assert e.id in input_offsets and input_offsets[e.id] < rec.offset, \
            f"inbox record {partition}:{rec.offset} ({e.id}) was lost"
        skipped += 1
    for cluster, evs in events.items():
        result = verify_log(enumerate(evs, 1))
        assert result.ok, f"{cluster}: {result.divergence}"
    return JournalCheck(records=len(raw), claims=len(live.claims(partition)), inputs=inputs,
                        decisions=decisions, fenced=fenced, duplicates=dups,
                        dead=len(dead), skipped=skipped, events=events)


def fingerprints(events: list[Event], cluster: str) -> tuple[str, str]:
    """(a clean fold of the journal, a fresh engine's run over its inputs): state fingerprints."""
    from events import DECISION_TYPES
    from scheduler import Engine
    from scheduler.replay import fold_log

    fresh = Engine(cluster)
    for e in events:
        if type(e) not in DECISION_TYPES:
            fresh.process(e)
    return fold_log(events, cluster=cluster).state.fingerprint(), fresh.state.fingerprint()


def get_state(port: int) -> dict[str, Any]:
    """A worker's ``/state`` (per partition: journal offset and cluster fingerprints)."""
    import json
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/state", timeout=15) as resp:
        return json.loads(resp.read())
