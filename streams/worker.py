"""The scheduling worker: the inbox in, the journal out, the journal as its only state.

One asyncio loop per process, concurrency 1 (docs/live.md gives the reasons
and the crash-safety argument in full):

1. **Assignment.** The consumer group on the inbox hands this worker some
   partitions. For each partition ``p`` it (a) appends a ``Claim`` with a fresh
   token to journal partition ``p`` (from here on, whatever an earlier owner
   writes is fenced off for every reader); (b) restores the newest snapshot it
   can verify and folds the journal after it, through the fence, up to its own
   claim; (c) appends the decisions the journal lacks for an input whose group
   a crash cut short; (d) resumes the inbox at the last journaled inbox
   offset + 1, whatever the group had committed.
2. **Records.** Each inbox record is handled only if its offset is the next one
   expected (otherwise: skip what was handled, seek back over a gap). The pure
   processor answers with journal records or a dead letter. A batch of inputs
   and their decisions is appended in order, acks=all, and awaited before the
   next batch; nothing is acknowledged to the group before that.
3. **Time.** The ticker signs a tick per owned cluster per interval; after
   inputs that may change the schedule the batch ends with a signed tick the
   worker journals itself (``cycle_in_batch``), or a signed nudge through the
   inbox follows at once.
4. **Snapshots** every N records or T seconds, written in the background. At
   start-up the newest snapshot of every partition is restored while the group
   joins (``snapshots.Prefetcher``); a claim uses its partition's only if it
   reflects offsets below the claim.
5. **Liveness** (``liveness``, the fast takeover; the rule is ``streams/liveness.py``).
   Every worker beats on ``allot.liveness``; a partition whose holder is silent for
   ``liveness_lapse_s`` is claimed by one live worker and consumed outside the
   group (a standby consumer) until the group assigns it; a worker that finds a
   newer claim (in a beat, or among the offsets between its own appends) stops
   writing there; the group's assignee reclaims from such a cover. A partition the
   group revokes is kept, outside the group, until its next holder claims it.

``Worker`` holds all of its state (no module globals), so tests and
``allot up`` can run several in one process. ``run()`` until ``stop()``.
An optional ``AfterJournalSend`` callback sees each journal record handed to
the producer (the crash tests' fault injection, tests/worker_faults.py, uses it).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import secrets
import signal
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import msgspec
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.partitioner import murmur2

import native
from events import ClockTicked, Event, encode, tag_of
from events.errors import AllotError
from events.limits import MAX_RECORD_BYTES
from identity.journal_seal import HEADER_SEAL, SealCheck, seal, seal_records, trusted_keys
from identity.keys import public_from_hex, public_of
from scheduler import Engine
from scheduler.admission import InputRefused
from streams import logs, processor, signing, snapshots, topics
from streams.batch_trace import BatchTrace
from streams.config import WorkerSettings, kafka_client_options
from streams.gc_freeze import GcFreezer
from streams.journal import begin_offset, journal_record, read_until, reader
from streams.liveness import Beat, Liveness, decode_beat, encode_beat, heard_at
from streams.metrics import MetricsServer, WorkerMetrics
from streams.processor import Accepted, Dead, InboxRecord, PartitionFold, Processor, Skipped
from streams.records import (
    DEADLETTER,
    HEADER_INBOX_OFFSET,
    HEADER_KIND,
    HEADER_OWNER,
    HEADER_SIGNATURE,
    INBOX,
    JOURNAL,
    KIND_CLAIM,
    KIND_DECISION,
    KIND_INPUT,
    SNAPSHOTS,
    BadJournalRecord,
    Claim,
    encode_claim,
    encode_dead_letter,
    header,
    journal_headers,
    topic,
)
from streams.signing import Keyring, signature_headers
from streams.ticker import VirtualClock, batch_cycle_id, make_tick, nudge_id
from streams.verify_pool import VerifyPool

# A nudge not seen back within this long is considered lost; another may be sent.
NUDGE_TIMEOUT_S = 1.0
# Consumer offsets are informative only (the journal says where to resume): commit this often.
COMMIT_EVERY_S = 5.0
# The liveness topic (heartbeats, the fast takeover path): one partition, short retention.
LIVENESS = "allot.liveness"
LIVENESS_RETENTION_MS = 3600 * 1000
# How far back from its end a starting worker reads the liveness topic (records).
LIVENESS_TAIL = 512
# Incarnations silent this long that hold nothing are forgotten.
LIVENESS_FORGET_S = 600.0
# The kind a beat's seal is computed under (never a journal record's kind).
BEAT_SEAL_KIND = "beat"
# After this many seeks back to the same expected offset, accept that the offsets between
# do not exist (a transactional producer's control records, a retention cut).
MAX_SEEKS_TO_SAME_OFFSET = 3


class FoldError(AllotError):
    """Rebuilding a partition from the journal did not end where it must."""


@functools.lru_cache(maxsize=1024)
def partition_for(cluster: str, partitions: int) -> int:
    """The inbox partition of ``cluster``'s key: murmur2 like the Java client and aiokafka.

    Cached: the processor asks once per input (murmur2 in Python is ~20 us).
    """
    return (murmur2(cluster.encode()) & 0x7FFFFFFF) % partitions


INSECURE_WARNING = ("INSECURE DEVELOPMENT MODE: unsigned inputs are accepted and no role is "
                    "checked; anyone who can write to the inbox can act as anyone (drop "
                    "--insecure-dev / require_signatures=false to require signatures)")


class PartitionState:
    """What the worker holds for one owned partition; rebuilt from the journal on every claim."""

    def __init__(self, partition: int, token: str, claim_offset: int,
                 engines: dict[str, Engine], next_offset: int, last_inbox_offset: int) -> None:
        self.partition = partition
        self.token = token
        self.claim_offset = claim_offset
        self.engines = engines
        self.next_offset = next_offset          # the next inbox offset to handle
        self.last_inbox_offset = last_inbox_offset
        self.own = snapshots.OwnWrites(claim_offset)
        self.records_since_snapshot = 0
        self.last_snapshot = time.monotonic()
        self.snapshot_task: asyncio.Task[None] | None = None
        self.slot = 0
        self.seek_target = -1
        self.seeks = 0
        self.nudges: dict[str, float] = {}      # cluster -> when the last nudge was sent
        # cycle_in_batch: cluster -> inbox offset of the last input since its last cycle that
        # may change the schedule (a cycle is due), and when the next batch cycle may run.
        self.cycle_due: dict[str, int] = {}
        # cycle_continue: cluster -> how many continuation cycles followed the batch cycle of
        # its cycle_due offset (each one's tick id names that count, so none repeats an id).
        self.cycle_again: dict[str, int] = {}
        self.cycle_not_before = 0.0
        self.broken = False                     # a produce failed: rebuild from the journal
        self.foreign_checked = 0                # how many of own.foreign were read for claims
        # (how, journal offset) of the snapshot this state was rebuilt from: "prefetch" (restored
        # while the group joined) or "claim" (after the claim); None: folded from the start.
        self.restored_from: tuple[str, int] | None = None


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, worker: Worker) -> None:
        self.worker = worker

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self.worker._revoked({tp.partition for tp in revoked})

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        await self.worker._assigned({tp.partition for tp in assigned})


class AfterJournalSend(Protocol):
    """Called after each journal record is handed to the producer (none by default).

    ``mid_group``: the next record of the batch continues this record's group (it is
    a decision of the same input), so stopping here leaves a group half written.
    ``flush`` sends what was handed over. The crash tests inject their faults here.
    """

    async def __call__(self, mid_group: bool, flush: Callable[[], Awaitable[None]]) -> None: ...


class Worker:
    """One scheduling worker. ``await run()``; ``stop()`` from anywhere in the same loop."""

    def __init__(self, settings: WorkerSettings, metrics: WorkerMetrics | None = None,
                 after_send: AfterJournalSend | None = None) -> None:
        self.settings = settings
        self._after_send = after_send
        self.name = settings.name
        self.metrics = metrics or WorkerMetrics()
        self.log = logs.logger(worker=self.name)
        self.inbox = topic(INBOX, settings.topic_prefix)
        self.journal = topic(JOURNAL, settings.topic_prefix)
        self.deadletter = topic(DEADLETTER, settings.topic_prefix)
        self.snapshot_topic = topic(SNAPSHOTS, settings.topic_prefix)
        self.liveness_topic = topic(LIVENESS, settings.topic_prefix)
        # A new incarnation per start: a restarted worker is not its dead predecessor.
        self.incarnation = f"{self.name}/{uuid.uuid4().hex[:8]}"
        self.liveness = Liveness(self.incarnation, settings.liveness_lapse_s,
                                 interval_s=settings.liveness_interval_s)
        self._fast: set[int] = set()            # partitions held outside the group (fast path)
        self._claimed: dict[int, int] = {}      # partition -> offset of this worker's claim
        self._beats_sent = 0
        self._standby: AIOKafkaConsumer | None = None
        self._beat_reader: AIOKafkaConsumer | None = None
        # SASL options of every Kafka client this worker opens (empty: plaintext).
        self._security = kafka_client_options(settings)
        key = settings.signing_key()
        if not key:
            key = secrets.token_hex(32).encode()
            self.log.warning("worker.random_tick_key",
                             detail="no tick_key configured: ticks from other workers will be "
                                    "dead-lettered; configure one key for every worker")
        self.key = key
        keyring = Keyring.from_file(settings.keyring_file) if settings.keyring_file else Keyring()
        self.keyring = keyring.with_key(settings.ticker_principal, public_of(key))
        if settings.admin_principal and settings.admin_public_key:
            # The first admin's key comes from configuration: nobody can register first.
            self.keyring = self.keyring.with_key(settings.admin_principal,
                                                 public_from_hex(settings.admin_public_key))
        # Seals on every journal record this worker writes, checked on every fold.
        # (Ed25519 under the workers' key; the secret also checks the HMAC seals of old journals.)
        self._seal_check = SealCheck(trusted_keys(self.keyring, settings.ticker_principal),
                                     secret=key) if settings.journal_seals else None
        self.clock = VirtualClock(settings.time_scale)
        self.partitions = 0
        self.owned: dict[int, PartitionState] = {}
        self.ready = asyncio.Event()            # set once the first assignment is rebuilt
        self.stopped = asyncio.Event()
        self._stop = asyncio.Event()
        self._lock = asyncio.Lock()
        self._to_take: set[int] = set()
        self._assigned_now: set[int] = set()
        # The group's first assignment has come (aiokafka's getmany waits for it: until then
        # the loop fetches only what the liveness fast path took).
        self._joined = False
        self._producer: AIOKafkaProducer | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._reader: AIOKafkaConsumer | None = None
        self._prefetch: snapshots.Prefetcher | None = None
        self._processor: Processor | None = None
        self._verify_pool: VerifyPool | None = None
        self._server: MetricsServer | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._last_commit = time.monotonic()
        self._children: dict[tuple[int, str, type], Any] = {}
        # A measuring aid (trace_file): each batch's stages, for bench_live_scale --trace.
        self._trace = BatchTrace(settings.trace_file) if settings.trace_file else None
        self._gc = GcFreezer() if settings.gc_freeze else None
        from streams.state_api import StateApi
        # The JSON state API (queue, hosts, budgets, explain, history) and what it records.
        self.state_api = StateApi(self)

    # -- public view (for the live view, the executor, tests) -------------------------------

    def engines(self) -> dict[str, Engine]:
        """cluster -> engine for every cluster this worker schedules now."""
        return {c: e for st in self.owned.values() for c, e in st.engines.items()}

    def owned_clusters(self) -> dict[str, int]:
        """cluster -> inbox partition, for the configured clusters of owned partitions."""
        owned = set(self.owned)
        return {c: p for c in self.settings.clusters
                if (p := partition_for(c, self.partitions)) in owned} if self.partitions else {}

    def partition_of(self, cluster: str) -> int:
        return partition_for(cluster, self.partitions)

    @property
    def metrics_address(self) -> tuple[str, int] | None:
        return self._server.address if self._server is not None else None

    def stop(self) -> None:
        """Ask the worker to finish its batch, leave the group and stop."""
        self._stop.set()

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        s = self.settings
        report = await topics.ensure_topics(s.bootstrap, s.topic_prefix, s.partitions,
                                            s.replication_factor, security=self._security)
        self.partitions = report.partitions[self.inbox]
        if report.created:
            self.log.info("topics.created", topics=report.created)
        if s.prefetch_snapshots:
            # Restore snapshots while the group join below waits on the broker (seconds).
            await self._start_prefetch()
        self._producer = AIOKafkaProducer(
            bootstrap_servers=s.bootstrap, acks="all", linger_ms=s.linger_ms,
            max_batch_size=1024 * 1024, max_request_size=4 * 1024 * 1024,
            enable_idempotence=False, request_timeout_ms=30000,
            client_id=f"allot-worker-{self.name}", **self._security)
        self._reader = reader(s.bootstrap, s.fold_fetch_wait_ms, f"allot-fold-{self.name}",
                              security=self._security)
        self._processor = Processor(
            clusters=s.clusters, partition_of=self.partition_of, keyring=self.keyring,
            ticker_principal=s.ticker_principal, require_signatures=not s.insecure,
            worker=self.name, max_bytes=MAX_RECORD_BYTES,
            admins=(s.admin_principal,) if s.admin_principal else (),
            # Accelerated time (demos, tests): producers stamping the wall clock lag the
            # cluster by more than the dedupe window, so the replay window is off there.
            replay_window=s.time_scale <= 1.0)
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=s.bootstrap, group_id=s.group,
            group_instance_id=s.instance_id or None, enable_auto_commit=False,
            auto_offset_reset="earliest", fetch_max_wait_ms=s.fetch_wait_ms,
            max_poll_records=s.max_batch, session_timeout_ms=s.session_timeout_ms,
            heartbeat_interval_ms=s.heartbeat_interval_ms,
            max_partition_fetch_bytes=4 * 1024 * 1024, client_id=f"allot-worker-{self.name}",
            **self._security)
        # Connect first, subscribe after: aiokafka's start() of a subscribed consumer waits
        # for the group's join (6 s on Tansu for a static member), and nothing would run
        # meanwhile. Subscribed after it, the join runs in the background while the loop
        # already runs, so a restarted worker takes the partitions its previous incarnation
        # held on the liveness fast path, as soon as that one's heartbeats lapse, instead of
        # waiting for the join (the group's assignment then joins the same claim; no fold).
        if s.verify_processes > 0 and not s.insecure:
            self._verify_pool = VerifyPool(s.verify_processes)
        await asyncio.gather(self._consumer.start(), self._producer.start(), self._reader.start(),
                             self._start_liveness(),
                             *([self._verify_pool.start()] if self._verify_pool else []))
        self._consumer.subscribe([self.inbox], listener=_Listener(self))
        if s.metrics_port >= 0:
            loop = asyncio.get_running_loop()

            def state() -> dict[str, Any]:
                report = asyncio.run_coroutine_threadsafe(self.state_report(), loop).result(10)
                # Every partition's entry says how its inputs are trusted (loud when not).
                return {p: {**v, **self.security()} for p, v in report.items()}

            from streams.state_api import http_routes

            async def under_lock(fn: Callable[[], Any]) -> Any:
                async with self._lock:
                    return fn()

            def on_loop(fn: Callable[[], Any]) -> Any:
                return asyncio.run_coroutine_threadsafe(under_lock(fn), loop).result(10)

            routes = http_routes(self.state_api, on_loop)
            self._server = MetricsServer(self.metrics, s.metrics_host, s.metrics_port,
                                         health=self._health, state=state,
                                         ready=self._readiness, routes=routes,
                                         non_loopback=s.metrics_non_loopback).start()
            self.log.info("metrics.listening", address=f"{s.metrics_host}:{self.metrics_address[1]}"
                          if self.metrics_address else None)
        if s.insecure:
            # Loud on purpose: in this mode `actor` is a claim anyone can forge.
            print(f"allot worker: WARNING: {INSECURE_WARNING}", file=sys.stderr, flush=True)
            self.log.warning("worker.insecure_dev", detail=INSECURE_WARNING)
        self.log.info("worker.started", bootstrap=s.bootstrap, group=s.group,
                      partitions=self.partitions, clusters=list(s.clusters),
                      core=native.status().name)

    async def _start_liveness(self) -> None:
        """The liveness topic, the standby consumer (partitions taken outside the group), the beat reader."""
        s = self.settings
        if not s.liveness:
            return
        try:
            await ensure_liveness_topic(s.bootstrap, self.liveness_topic, s.replication_factor,
                                        security=self._security)
            standby = AIOKafkaConsumer(
                bootstrap_servers=s.bootstrap, group_id=None, enable_auto_commit=False,
                auto_offset_reset="earliest", fetch_max_wait_ms=s.fetch_wait_ms,
                max_partition_fetch_bytes=4 * 1024 * 1024,
                client_id=f"allot-standby-{self.name}", **self._security)
            beats = AIOKafkaConsumer(
                bootstrap_servers=s.bootstrap, group_id=None, enable_auto_commit=False,
                auto_offset_reset="earliest", fetch_max_wait_ms=50,
                client_id=f"allot-liveness-{self.name}", **self._security)
            await asyncio.gather(standby.start(), beats.start())
            tp = TopicPartition(self.liveness_topic, 0)
            beats.assign([tp])
            # Only the recent past matters: the last beats of every worker. (Tansu's end
            # offset may be short of the true end by a batch: a few beats read twice.)
            end = (await beats.end_offsets([tp])).get(tp, 0)
            beats.seek(tp, max(0, end - LIVENESS_TAIL))
        except (KafkaError, AllotError) as exc:
            # No fast takeover (the topic cannot be created or read: ACLs, an old broker);
            # the group still moves partitions. Loud, not fatal.
            self.log.error("liveness.unavailable", topic=self.liveness_topic, detail=str(exc))
            self.settings = s.replace(liveness=False)
            return
        self._standby, self._beat_reader = standby, beats

    async def _beat_loop(self) -> None:
        """Write this worker's heartbeat every ``liveness_interval_s``: what it holds, by claim."""
        assert self._producer is not None
        interval = self.settings.liveness_interval_s
        while True:
            self._beats_sent += 1
            beat = Beat(worker=self.incarnation, name=self.name, seq=self._beats_sent,
                        at=time.time(), held=dict(self._claimed),
                        fast=sorted(p for p in self._fast if p in self._claimed))
            value = encode_beat(beat)
            # Sealed like the journal: a beat can fence a worker, so only the group may write one.
            headers = [seal(self.key, 0, BEAT_SEAL_KIND, self.incarnation, None, value)] \
                if self._seal_check is not None else None
            try:
                await self._producer.send(self.liveness_topic, value, headers=headers,
                                          key=self.incarnation.encode(), partition=0)
            except KafkaError as exc:
                self.log.warning("liveness.beat_failed", detail=str(exc))
            await asyncio.sleep(interval)

    async def _hear_loop(self) -> None:
        """Fold every worker's heartbeats into ``self.liveness``."""
        assert self._beat_reader is not None
        lapse = self.settings.liveness_lapse_s
        while True:
            try:
                got = await self._beat_reader.getmany(timeout_ms=200)
            except KafkaError as exc:
                self.log.warning("liveness.read_failed", detail=str(exc))
                await asyncio.sleep(0.2)
                continue
            now, wall = time.monotonic(), time.time()
            for msgs in got.values():
                for m in msgs:
                    try:
                        beat = decode_beat(m.value)
                    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
                        self.log.debug("liveness.bad_beat", offset=m.offset, detail=str(exc))
                        continue
                    if not self._beat_sealed(beat, m):
                        self.log.warning("liveness.forged_beat", offset=m.offset,
                                         worker=beat.worker[:80])
                        continue
                    # A beat of this worker's own previous incarnation (same name: a restart,
                    # on this machine's clock) is heard when it was written, not when it is
                    # read: the restarted worker takes what it held once that incarnation
                    # has been silent a lapse since its last beat, not a lapse after the
                    # start-up read. (Safe whatever the clocks say: a claim fences a holder
                    # still alive.)
                    own = beat.name == self.name and beat.worker != self.incarnation
                    self.liveness.heard(beat, heard_at(now, beat.at, wall,
                                                       0.0 if own else lapse))
            self.liveness.forget(now, LIVENESS_FORGET_S)

    def _beat_sealed(self, beat: Beat, msg: Any) -> bool:
        """True when seals are off, or ``msg`` carries a valid seal of ``beat``'s writer."""
        if self._seal_check is None:
            return True
        mac = next((v for k, v in (msg.headers or ()) if k == HEADER_SEAL), None)
        return mac is not None and self._seal_check(0, BEAT_SEAL_KIND, beat.worker, None,
                                                    msg.value, mac)

    async def _liveness_turn(self) -> None:
        """One turn of the fast path: give up what a newer claim fenced, claim the orphans."""
        if not self.settings.liveness:
            return
        d = self.liveness.decide(time.monotonic(), self._claimed, self._assigned_now,
                                 busy=self._to_take)
        for p in sorted(d.fenced):
            holder = self.liveness.holder.get(p)
            async with self._lock:
                self._drop_fenced(p, by=holder[1] if holder else None)
        for p in sorted(d.take):
            self.log.warning("liveness.takeover", partition=p, holder=d.orphans.get(p),
                             lapse_s=self.settings.liveness_lapse_s)
            self._fast.add(p)
            self._to_take.add(p)
        for p in sorted(d.reclaim):
            # The group gives p to this worker and a cover holds it (taken while this one
            # was silent): the group's word stands, claim p back; the cover is fenced.
            if p in self._assigned_now and p not in self._to_take:
                self.log.warning("liveness.reclaim", partition=p,
                                 cover=self.liveness.holder[p][1])
                self._to_take.add(p)

    def _drop_fenced(self, p: int, by: str | None) -> None:
        """A newer claim of another worker took ``p``: stop writing there (it counts for nobody).

        The partition is left to its new holder; if that is a fast-path cover and the
        group gives ``p`` to this worker, the next liveness turn reclaims it.
        """
        self._claimed.pop(p, None)
        st = self.owned.pop(p, None)
        if st is not None and st.snapshot_task is not None:
            st.snapshot_task.cancel()
        if p in self._fast:
            self._fast.discard(p)
            self._standby_assign()
        elif p in self._assigned_now and self._consumer is not None:
            with contextlib.suppress(KafkaError, AssertionError):
                self._consumer.pause(TopicPartition(self.inbox, p))
        self.metrics.owned.set(len(self.owned))
        self.log.warning("partition.fenced", partition=p, by=by)

    async def _check_foreign(self, st: PartitionState) -> None:
        """Read the records others appended between this owner's own writes; a claim fences it.

        Beats announce every claim, but a claimer may die before its first beat. The
        acknowledged offsets of this worker's own appends show every foreign record (the
        gaps), so a newer claim is found at the next append (a tick, within a second)
        whether it was announced or not.
        """
        assert self._reader is not None
        gaps = st.own.foreign[st.foreign_checked:]
        st.foreign_checked = len(st.own.foreign)
        if not gaps:
            return

        def foreign(offset: int) -> bool:
            return any(lo <= offset <= hi for lo, hi in gaps)

        # One read over all the new gaps (each fetch costs Tansu's fetch wait).
        try:
            async for batch in read_until(self._reader, self.journal, st.partition, gaps[0][0],
                                          gaps[-1][1], timeout_s=10.0):
                for msg in batch:
                    if not foreign(msg.offset):
                        continue
                    try:
                        rec = journal_record(msg)
                    except BadJournalRecord:
                        continue
                    if self._seal_check is not None and (rec.seal is None or not self._seal_check(
                            rec.partition, rec.kind, rec.owner, rec.inbox_offset, rec.value,
                            rec.seal)):
                        continue   # forged: it fences nothing (as in every fold)
                    if rec.kind == KIND_CLAIM and rec.owner != st.token:
                        if self.owned.get(st.partition) is st:
                            self._drop_fenced(st.partition, by=f"claim at {msg.offset}")
                        return
        except (KafkaError, AllotError) as exc:
            self.log.warning("journal.gap_check_failed", partition=st.partition,
                             detail=str(exc))

    def _consumer_of(self, p: int) -> AIOKafkaConsumer:
        """The consumer that fetches inbox partition ``p``: the standby for fast-path partitions."""
        if p in self._fast and self._standby is not None:
            return self._standby
        assert self._consumer is not None
        return self._consumer

    def _standby_assign(self) -> None:
        """Point the standby consumer at the fast-path partitions held, each at its next offset."""
        if self._standby is None:
            return
        tps = [TopicPartition(self.inbox, p) for p in sorted(self._fast) if p in self.owned]
        if not tps:
            # Pause, never unsubscribe: a consumer without a subscription waits in getmany()
            # for the next assignment whatever its timeout, and the loop may be calling it.
            self._standby.pause(*self._standby.assignment())
            return
        self._standby.assign(tps)   # positions are reset: set every one again
        for tp in tps:
            self._standby.seek(tp, self.owned[tp.partition].next_offset)

    async def _start_prefetch(self) -> None:
        s = self.settings
        consumer = reader(s.bootstrap, s.fold_fetch_wait_ms, f"allot-prefetch-{self.name}",
                          security=self._security)
        await consumer.start()
        mine = {partition_for(c, self.partitions) for c in s.clusters}
        # Partitions of the configured clusters first: the others hold no engine unless a
        # cluster was dropped from the configuration.
        order = sorted(range(self.partitions), key=lambda p: (p not in mine, p))

        def rejected(m: snapshots.Manifest, why: str) -> None:
            self.log.warning("snapshot.rejected", partition=m.partition,
                             journal_offset=m.journal_offset, token=m.token, reason=why)

        def failed(p: int, why: str) -> None:
            self.log.warning("snapshot.prefetch_failed", partition=p, detail=why)

        self._prefetch = snapshots.Prefetcher(consumer, self.snapshot_topic, self.journal, self.key,
                                              order, on_reject=rejected, on_error=failed).start()

    async def _close_prefetch(self) -> None:
        pre, self._prefetch = self._prefetch, None
        if pre is not None:
            await pre.close()
            if pre.dropped:
                self.log.info("snapshot.prefetch_dropped", partitions=sorted(pre.dropped),
                              reason="not assigned")

    async def run(self) -> None:
        """Start, schedule until ``stop()``, then shut down cleanly."""
        try:
            await self.start()
            self._tasks = [asyncio.create_task(self._tick_loop(), name="allot-ticker"),
                           asyncio.create_task(self._gauge_loop(), name="allot-gauges")]
            if self.settings.liveness:
                self._tasks += [asyncio.create_task(self._beat_loop(), name="allot-beats"),
                                asyncio.create_task(self._hear_loop(), name="allot-hear")]
            await self._loop()
        finally:
            await self.close()

    async def close(self) -> None:
        await self._close_prefetch()
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        for st in self.owned.values():
            if st.snapshot_task is not None:
                st.snapshot_task.cancel()
        if self._consumer is not None:
            with contextlib.suppress(Exception):
                await self._commit(force=True)
            with contextlib.suppress(Exception):
                await self._consumer.stop()
        if self._reader is not None:
            with contextlib.suppress(Exception):
                await self._reader.stop()
        for c in (self._standby, self._beat_reader):
            if c is not None:
                with contextlib.suppress(Exception):
                    await c.stop()
        if self._producer is not None:
            with contextlib.suppress(Exception):
                await self._producer.stop()
        if self._server is not None:
            self._server.stop()
        if self._verify_pool is not None:
            self._verify_pool.close()
        if self._trace is not None:
            self._trace.close()
        if self._gc is not None:
            self._gc.close()
        self.stopped.set()
        self.log.info("worker.stopped")

    async def state_report(self) -> dict[str, Any]:
        """Per owned partition: the journal offset the engines reflect, and their fingerprints.

        Taken under the loop's lock, so between two batches: the engines reflect
        exactly the journal up to ``journal_offset``.
        """
        async with self._lock:
            return {str(p): {"journal_offset": st.own.last, "claim_offset": st.claim_offset,
                             # Never the claim token: the journal's fence trusts it.
                             "next_inbox_offset": st.next_offset,
                             "clusters": {c: {"fingerprint": e.state.fingerprint(),
                                              "now": e.state.now, "position": e.state.position}
                                          for c, e in sorted(st.engines.items())}}
                    for p, st in sorted(self.owned.items())}

    def _readiness(self) -> dict[str, Any]:
        """Ready: the assignment is rebuilt and every owned cluster's clock has ticked."""
        owned = self.owned_clusters()
        engines = self.engines()
        unticked = sorted(c for c in owned if c not in engines or engines[c].state.now <= 0)
        ready = self.ready.is_set() and not self._to_take and bool(self.owned) and not unticked
        return {"ready": ready, "worker": self.name, "partitions": sorted(self.owned),
                "clusters": sorted(owned), "unticked": unticked}

    def _sealed(self, p: int, value: bytes,
                headers: list[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
        """``headers`` with this worker's seal of the record (identity.journal_seal)."""
        return self._sealed_all(p, [(value, headers)])[0]

    def _sealed_all(self, p: int, records: list[tuple[bytes, list[tuple[str, bytes]]]]
                    ) -> list[list[tuple[str, bytes]]]:
        """Each record's headers with its seal: one signature per chunk of records written together."""
        if self._seal_check is None:
            return [h for _, h in records]
        what = []
        for value, headers in records:
            h = dict(headers)
            inbox = h.get(HEADER_INBOX_OFFSET)
            what.append((h[HEADER_KIND].decode(), h[HEADER_OWNER].decode(),
                         int(inbox) if inbox is not None else None, value))
        seals = seal_records(self.key, p, what)
        return [[*headers, s] for (_, headers), s in zip(records, seals, strict=True)]

    def _health(self) -> dict[str, Any]:
        return {"worker": self.name, "partitions": sorted(self.owned),
                "clusters": sorted(self.owned_clusters()), **self.security()}

    def security(self) -> dict[str, Any]:
        """How inputs are trusted, for every status page (loud when they are not checked)."""
        if self.settings.insecure:
            return {"security": "INSECURE-DEV", "warning": INSECURE_WARNING}
        return {"security": "signed"}

    # -- the group ---------------------------------------------------------------------------

    async def _revoked(self, partitions: set[int]) -> None:
        self.log.debug("group.revoking", partitions=sorted(partitions))
        async with self._lock:
            self._assigned_now -= partitions
            self._to_take -= partitions
            with contextlib.suppress(Exception):
                await self._commit(force=True, only=partitions)
            if self._standby is not None:
                # Keep scheduling what the group took back, outside the group, until its
                # next holder claims it (that claim fences this worker, and its beats or the
                # gaps in its own appends tell it so) or the group gives it back (no claim,
                # no fold). A rebalance then stalls no partition that does not move.
                kept = {p for p in partitions if p in self.owned and not self.owned[p].broken}
                self._fast |= kept
                self._standby_assign()
                if kept:
                    self.log.info("partition.kept_outside_group", partitions=sorted(kept))
                partitions = partitions - kept
            for p in partitions:
                self._claimed.pop(p, None)
                st = self.owned.pop(p, None)
                if st is None:
                    continue
                if st.snapshot_task is not None:
                    st.snapshot_task.cancel()
                self.log.info("partition.revoked", partition=p)
            self.metrics.owned.set(len(self.owned))

    async def _assigned(self, partitions: set[int]) -> None:
        assert self._consumer is not None
        self.log.debug("group.assigned", partitions=sorted(partitions))
        self._joined = True
        self._assigned_now |= partitions
        if self._prefetch is not None:
            self._prefetch.restrict(self._assigned_now)
        for p in partitions:
            if p in self._fast:
                # Taken on the fast path, now the group's too: move it to the group consumer,
                # same claim, same state (no second claim, no fold).
                self._fast.discard(p)
                self._standby_assign()
                if p in self.owned:
                    self._consumer.seek(TopicPartition(self.inbox, p), self.owned[p].next_offset)
                    self.log.info("partition.joined_group", partition=p)
            if p not in self.owned:
                self._to_take.add(p)
                # Fetch nothing until the partition is rebuilt and the position set.
                self._consumer.pause(TopicPartition(self.inbox, p))

    def _take_order(self, p: int) -> tuple[bool, int]:
        """Partitions holding configured clusters first: they are the ones with work waiting."""
        return (all(partition_for(c, self.partitions) != p for c in self.settings.clusters), p)

    async def _take_pending(self) -> int | None:
        """Take one pending partition (which one, or None); the loop handles records before the next."""
        p: int | None = None
        async with self._lock:
            mine = self._assigned_now | self._fast
            pending = sorted((p for p in self._to_take if p in mine), key=self._take_order)
            self._to_take &= mine
            if pending:
                p = pending[0]
                self._to_take.discard(p)
                try:
                    await self._take(p)
                except (KafkaError, AllotError) as exc:
                    # The broker is unreachable or slow: keep the partition paused, try again.
                    self.log.error("partition.take_failed", partition=p, detail=str(exc))
                    self._to_take.add(p)
                    await asyncio.sleep(1.0)
        if not self._to_take:
            # The first assignment is rebuilt: a prefetched snapshot not taken by now is of a
            # partition this worker does not own, and a later takeover must read afresh.
            await self._close_prefetch()
        return p

    async def _take(self, p: int) -> None:
        """Claim partition ``p``, rebuild it from the journal, and set the inbox position."""
        assert self._producer is not None and self._consumer is not None
        assert self._reader is not None
        t0 = time.perf_counter()
        log = self.log.bind(partition=p)
        log.debug("partition.taking")
        token = uuid.uuid4().hex
        claim = Claim(token=token, worker=self.name, partition=p, at=time.time())
        md = await self._producer.send_and_wait(
            self.journal, encode_claim(claim), key=b"claim", partition=p,
            headers=self._sealed(p, encode_claim(claim), journal_headers(KIND_CLAIM, token)))
        claim_offset = int(md.offset)
        self._claimed[p] = claim_offset
        self.liveness.claimed(p, claim_offset)

        def rejected(m: snapshots.Manifest, why: str) -> None:
            log.warning("snapshot.rejected", journal_offset=m.journal_offset, token=m.token,
                        reason=why)

        restored = await self._prefetch.take(p) if self._prefetch is not None else None
        source = "prefetch"
        if restored is not None:
            why = snapshots.unusable(restored, p, claim_offset)
            if why is not None:
                log.warning("snapshot.prefetch_unused", journal_offset=restored.manifest.journal_offset,
                            reason=why)
                restored = None
        if restored is None:
            source = "claim"
            restored = await snapshots.restore_latest(
                self._reader, self.snapshot_topic, self.journal, p, claim_offset, self.key,
                on_reject=rejected)
        if restored is not None:
            m = restored.manifest
            fold = PartitionFold(p, engines=restored.engines, fence=restored.fence,
                                 last_inbox_offset=m.inbox_offset,
                                 on_anomaly=self._anomaly_logger(log),
                                 seal_check=self._seal_check)
            start = m.journal_offset + 1
        else:
            fold = PartitionFold(p, on_anomaly=self._anomaly_logger(log),
                                 seal_check=self._seal_check)
            start = 0
        t_snap = time.perf_counter()
        async for batch in read_until(self._reader, self.journal, p, start, claim_offset,
                                      timeout_s=120.0):
            for msg in batch:
                try:
                    fold.add(journal_record(msg))
                except BadJournalRecord as exc:
                    log.warning("journal.bad_record", offset=msg.offset, detail=str(exc))
        if fold.fence.token != token:  # the read ends at our own claim: cannot happen
            raise FoldError(f"partition {p}: the fold did not end at this worker's claim")
        # Complete every cluster's last group; decisions a crash cut off from their input
        # come back re-derived, and are appended now, under this claim.
        missing = fold.finish(recover=True)
        t_fold = time.perf_counter()
        st = PartitionState(p, token, claim_offset, fold.engines, 0, fold.last_inbox_offset)
        if restored is not None:
            st.restored_from = (source, restored.manifest.journal_offset)
        if missing:
            futs = []
            for cluster, decisions in missing.items():
                for d in decisions:
                    value = encode(d)
                    futs.append(await self._producer.send(
                        self.journal, value, key=cluster.encode(), partition=p,
                        headers=self._sealed(p, value, journal_headers(KIND_DECISION, token))))
                log.info("journal.recovered", cluster=cluster, decisions=[d.id for d in decisions])
            st.own.wrote([(await f).offset for f in futs])
        for c in self.settings.clusters:
            if partition_for(c, self.partitions) == p and c not in st.engines:
                st.engines[c] = processor.new_engine(c)
        for c, e in st.engines.items():
            self.clock.anchor(c, e.state.now)
        for c in self.settings.clusters:
            if partition_for(c, self.partitions) == p and st.engines[c].state.now <= 0:
                await self._first_tick(st, c)
        tp = TopicPartition(self.inbox, p)
        resume = fold.last_inbox_offset + 1
        first = await begin_offset(self._reader, self.inbox, p)
        if resume < first:
            log.warning("inbox.retention_gap", resume=resume, first=first)
            resume = first
        st.next_offset = resume
        self.owned[p] = st
        if p in self._fast:
            self._standby_assign()
        else:
            self._consumer.seek(tp, resume)
            self._consumer.resume(tp)
        self.metrics.owned.set(len(self.owned))
        self.metrics.claims.inc()
        dt = time.perf_counter() - t0
        self.metrics.fold_seconds.observe(dt)
        log.info("partition.claimed", token=token, claim_offset=claim_offset, resume=resume,
                 snapshot=None if restored is None else restored.manifest.journal_offset,
                 snapshot_source=None if restored is None else source,
                 snapshot_phases=None if restored is None else restored.phases,
                 folded=fold.stats.records, fenced=fold.stats.fenced,
                 duplicates=fold.stats.duplicates, seconds=round(dt, 3),
                 path="liveness" if p in self._fast else "group",
                 snapshot_s=round(t_snap - t0, 3), fold_s=round(t_fold - t_snap, 3),
                 clusters=sorted(st.engines))
        if self._gc is not None:
            self._gc.after_take()
        # A long fold is worth a snapshot at once: the next restart folds from here.
        st.records_since_snapshot = fold.stats.records - fold.stats.claims
        self._maybe_snapshot(st)
        for c in self.owned_clusters():
            if partition_for(c, self.partitions) == p:
                await self._send_tick(c, p)  # time starts now, not a tick interval later
        # The group may have assigned p while it was being taken: it is taken, under this claim.
        self._to_take.discard(p)
        if not self._to_take:
            self.ready.set()

    async def _first_tick(self, st: PartitionState, cluster: str) -> None:
        """Start a cluster that never ticked: journal a tick before any inbox record.

        Without it, inputs already waiting in the inbox of a newly claimed cluster
        are handled at clock 0 and rejected as ``future_time`` (the claim's own
        tick goes to the end of the inbox, behind them).
        """
        assert self._processor is not None and self._producer is not None
        tick = make_tick(cluster, self.clock.now(cluster), self.settings.ticker_principal,
                         self.key)
        rec = InboxRecord(topic=self.inbox, partition=st.partition, offset=-1, key=tick.key,
                          value=tick.value, headers=tuple(tick.headers))
        outcome = self._processor.handle(rec, st.engines)
        if not isinstance(outcome, Accepted):
            self.log.warning("clock.first_tick_refused", cluster=cluster)
            return
        futs = [await self._producer.send(
            self.journal, outcome.value, key=cluster.encode(), partition=st.partition,
            headers=self._sealed(st.partition, outcome.value,
                                 journal_headers(KIND_INPUT, st.token)))]
        for d in outcome.derived:
            value = encode(d)
            futs.append(await self._producer.send(
                self.journal, value, key=cluster.encode(), partition=st.partition,
                headers=self._sealed(st.partition, value,
                                     journal_headers(KIND_DECISION, st.token))))
        st.own.wrote([int((await f).offset) for f in futs])

    def _anomaly_logger(self, log: Any) -> Callable[[str, Any, str], None]:
        def report(kind: str, record: Any, detail: str) -> None:
            log.warning(f"fold.{kind}", offset=record.offset, detail=detail)
        return report

    async def _commit(self, force: bool = False, only: set[int] | None = None) -> None:
        if self._consumer is None or not self.owned:
            return
        now = time.monotonic()
        if not force and now - self._last_commit < COMMIT_EVERY_S:
            return
        self._last_commit = now
        # Only the group's partitions: a fast-path one is not this member's to commit.
        offsets = {TopicPartition(self.inbox, p): st.next_offset for p, st in self.owned.items()
                   if (only is None or p in only) and st.next_offset > 0
                   and p not in self._fast}
        if offsets:
            try:
                await self._consumer.commit(offsets)
            except KafkaError as exc:
                self.log.debug("commit.failed", detail=str(exc))

    # -- the loop ----------------------------------------------------------------------------

    async def _loop(self) -> None:
        assert self._consumer is not None
        while not self._stop.is_set():
            # (A batch cycle held back by cycle_busy_share runs when its time comes.)
            wait_ms = self._cycle_wait_ms(100)
            if self._to_take:
                taken = await self._take_pending()
                # Just took a partition with clusters: wait for its first records (its tick)
                # before the next take; otherwise only collect what is already fetched.
                if self._to_take and (taken is None or self._take_order(taken)[0]):
                    wait_ms = 0
            await self._liveness_turn()
            broken = [p for p, st in self.owned.items() if st.broken]
            for p in broken:
                async with self._lock:
                    st = self.owned.pop(p, None)
                    if st is not None and (p in self._assigned_now or p in self._fast):
                        self.log.warning("partition.rebuild", partition=p)
                        await self._take(p)
                    elif st is not None:
                        self._claimed.pop(p, None)
            self.metrics.beat()
            poll0 = time.perf_counter()
            try:
                extra: dict[TopicPartition, list[Any]] = {}
                standby = self._standby if any(p in self.owned for p in self._fast) else None
                if standby is not None:
                    extra = await standby.getmany(timeout_ms=0, max_records=self.settings.max_batch)
                if self._joined:
                    batch = await self._consumer.getmany(timeout_ms=0 if extra else wait_ms,
                                                         max_records=self.settings.max_batch)
                else:  # (getmany would block until the join: the fast path must not wait)
                    batch = {}
                    if not extra:
                        await asyncio.sleep(wait_ms / 1000)
                if standby is not None and not extra:
                    extra = await standby.getmany(timeout_ms=0, max_records=self.settings.max_batch)
                batch.update(extra)
            except KafkaError as exc:
                self.log.warning("inbox.fetch_failed", detail=str(exc))
                await asyncio.sleep(0.5)
                continue
            if batch or self._cycles_ready():
                poll1 = time.perf_counter()
                async with self._lock:
                    if self._trace is not None:
                        self._trace.begin(poll0, poll1)
                    await self._handle(batch)
                    if self._trace is not None:
                        self._trace.end()
                if self._gc is not None:
                    self._gc.after_batch()
            await self._commit()

    async def _handle(self, batch: dict[TopicPartition, list[Any]]) -> None:
        assert self._processor is not None and self._producer is not None
        assert self._consumer is not None
        t0 = time.perf_counter()
        proc = self._processor
        journal_out: dict[int, list[tuple[str, bytes, list[tuple[str, bytes]]]]] = {}
        dead_out: list[tuple[bytes, bytes]] = []
        nudge: dict[str, tuple[int, int]] = {}   # cluster -> (partition, triggering offset)
        journaled_inbox: dict[int, int] = {}
        in_batch = self.settings.nudge and self.settings.cycle_in_batch
        trace = self._trace
        checked = await self._check_ahead(batch) if self._verify_pool is not None else None
        for tp, msgs in batch.items():
            st = self.owned.get(tp.partition)
            if st is None or st.broken:
                continue
            out = journal_out.setdefault(tp.partition, [])
            due = st.cycle_due
            for m in msgs:
                if m.offset < st.next_offset:
                    continue
                if m.offset > st.next_offset:
                    if st.seek_target == st.next_offset and st.seeks >= MAX_SEEKS_TO_SAME_OFFSET:
                        self.log.warning("inbox.gap_accepted", partition=tp.partition,
                                         expected=st.next_offset, got=m.offset)
                        st.next_offset = m.offset
                    else:
                        st.seeks = st.seeks + 1 if st.seek_target == st.next_offset else 1
                        st.seek_target = st.next_offset
                        self.log.warning("inbox.seek_back", partition=tp.partition,
                                         expected=st.next_offset, got=m.offset)
                        # (KafkaError: a rebalance took the partition meanwhile.)
                        with contextlib.suppress(KafkaError):
                            self._consumer_of(tp.partition).seek(tp, st.next_offset)
                        break
                st.seeks = 0
                rec = InboxRecord(topic=m.topic, partition=m.partition, offset=m.offset,
                                  key=m.key, value=m.value, headers=tuple(m.headers or ()))
                t1 = time.perf_counter()
                c1 = time.thread_time() if trace is not None else 0.0
                outcome = proc.handle(rec, st.engines, checked)
                st.next_offset = m.offset + 1
                if isinstance(outcome, Accepted):
                    ev = outcome.event
                    if type(ev) is ClockTicked:
                        t2 = time.perf_counter()
                        self.metrics.cycle_seconds.labels(ev.cluster).observe(t2 - t1)
                        if trace is not None and ev.cycle:
                            trace.cycle("inbox", m.offset, t1, t2, len(outcome.derived),
                                        time.thread_time() - c1)
                        st.nudges.pop(ev.cluster, None)
                        if ev.cycle:
                            due.pop(ev.cluster, None)
                            st.cycle_again.pop(ev.cluster, None)
                    # The producer's signature stays with the exact bytes it signed,
                    # so `allot audit verify` can re-check it later.
                    self._journal(st, out, outcome, m.offset, signature_headers(m.headers))
                    journaled_inbox[tp.partition] = m.offset
                    if self.settings.nudge and processor.changes_schedule(outcome):
                        if in_batch and (type(ev) is not ClockTicked
                                         or self.settings.cycle_continue):
                            due[ev.cluster] = m.offset
                            st.cycle_again.pop(ev.cluster, None)
                        else:
                            nudge[ev.cluster] = (tp.partition, m.offset)
                elif isinstance(outcome, Dead):
                    dl = outcome.letter
                    dead_out.append((dl.id.encode(), encode_dead_letter(dl)))
                    self.metrics.dead_letters.labels(dl.reason).inc()
                    self.log.info("inbox.dead_letter", partition=dl.partition, offset=dl.offset,
                                  reason=dl.reason, detail=dl.detail[:200], key=dl.key)
                elif isinstance(outcome, Skipped):
                    self.metrics.duplicates.inc()
                    if type(outcome.event) is ClockTicked:
                        st.nudges.pop(outcome.event.cluster, None)
            if trace is not None and msgs:
                trace.records(tp.partition, msgs[0].offset, msgs[-1].offset, len(msgs))
        if trace is not None:
            trace.mark("inputs")
        now = time.monotonic()
        for p, st in self.owned.items():
            if not st.cycle_due or st.broken:
                continue
            if now < st.cycle_not_before:
                if trace is not None:
                    trace.batch["held"] = True
                continue
            out = journal_out.setdefault(p, [])
            t_cycles = time.perf_counter()
            again: dict[str, int] = {}
            for cluster, offset in st.cycle_due.items():
                t_c, c_c = time.perf_counter(), time.thread_time()
                n_again = st.cycle_again.get(cluster, 0)
                cycled = self._cycle_in_batch(st, out, cluster, offset, n_again)
                if trace is not None and cycled is not None:
                    trace.cycle("batch", st.next_offset - 1, t_c, time.perf_counter(),
                                len(cycled.derived), time.thread_time() - c_c)
                if cycled is not None and processor.changes_schedule(cycled):
                    if self.settings.cycle_continue:
                        # A cycle's work is bounded: run the next one as a batch cycle too,
                        # when cycle_busy_share lets it (joined by whatever arrives until
                        # then), not after an inbox nudge's broker round trip.
                        again[cluster] = offset
                        st.cycle_again[cluster] = n_again + 1
                    else:
                        nudge[cluster] = (p, offset)
                else:
                    st.cycle_again.pop(cluster, None)
            st.cycle_due.clear()
            st.cycle_due.update(again)
            # The next batch cycle waits until these cycles are at most cycle_busy_share of
            # the time from their start (t / share after it, so t * (1 / share - 1) after
            # their end): at 20,000 pending a cycle is ~8-13 ms of CPU. Wall time, not CPU:
            # on a loaded machine a cycle also costs the time the worker waited for a core.
            spent = time.perf_counter() - t_cycles
            st.cycle_not_before = time.monotonic() + spent * (1 / self.settings.cycle_busy_share - 1)
        if trace is not None:
            trace.mark("cycled")
        await self._publish(journal_out, dead_out, journaled_inbox)
        if trace is not None:
            trace.mark("acked")
        now = time.monotonic()
        for cluster, (p, offset) in nudge.items():
            st = self.owned.get(p)
            if st is None or st.broken:
                continue
            sent = st.nudges.get(cluster)
            if sent is not None and now - sent < NUDGE_TIMEOUT_S:
                continue
            st.nudges[cluster] = now
            tick = make_tick(cluster, self.clock.now(cluster), self.settings.ticker_principal,
                             self.key, event_id=nudge_id(cluster, offset))
            try:
                await self._producer.send(self.inbox, tick.value, key=tick.key, partition=p,
                                          headers=tick.headers)
            except KafkaError as exc:
                self.log.warning("nudge.failed", cluster=cluster, detail=str(exc))
        self.metrics.batch_seconds.observe(time.perf_counter() - t0)
        for st in self.owned.values():
            self._maybe_snapshot(st)

    def _cycles_ready(self) -> bool:
        """A batch cycle is due and its time has come (cycle_in_batch)."""
        now = time.monotonic()
        return any(st.cycle_due and not st.broken and now >= st.cycle_not_before
                   for st in self.owned.values())

    def _cycle_wait_ms(self, wait_ms: int) -> int:
        """``wait_ms``, or less: until the earliest batch cycle held back may run."""
        due = [st.cycle_not_before for st in self.owned.values() if st.cycle_due]
        if not due:
            return wait_ms
        return max(1, min(wait_ms, int(1000 * (min(due) - time.monotonic())) + 1))

    async def _check_ahead(self, batch: dict[TopicPartition, list[Any]]) -> signing.Checked:
        """The batch's signatures that hold, verified in the verify pool against the state now."""
        assert self._verify_pool is not None
        jobs = []
        # A batch signature (``allot-batch-proof``) is one job per root, not per record, and
        # none when the root cache already holds it (the processor then costs a few hashes).
        roots_seen: set[tuple[bytes, bytes]] = set()
        for tp, msgs in batch.items():
            st = self.owned.get(tp.partition)
            if st is None:
                continue
            for m in msgs:
                if m.value is None or m.key is None:
                    continue
                engine = st.engines.get(m.key.decode("utf-8", "replace"))
                headers = tuple(m.headers or ())
                job = signing.job(m.value, headers, self.keyring,
                                  engine.state.principals if engine is not None else None)
                sig_b = header(headers, HEADER_SIGNATURE)
                if job is None or sig_b is None:
                    continue
                if header(headers, signing.HEADER_BATCH_PROOF) is not None:
                    if (sig_b, job[2]) in roots_seen \
                            or signing.ROOTS.known(job[0], job[2], sig_b):
                        continue
                    roots_seen.add((sig_b, job[2]))
                jobs.append((sig_b, job))
        return await self._verify_pool.check(jobs)

    def _journal(self, st: PartitionState, out: list[tuple[str, bytes, list[tuple[str, bytes]]]],
                 accepted: Accepted, inbox_offset: int | None,
                 signature: list[tuple[str, bytes]]) -> None:
        """Queue an accepted input and its decisions for the journal; note them (runs, metrics)."""
        ev = accepted.event
        out.append((ev.cluster, accepted.value,
                    journal_headers(KIND_INPUT, st.token, inbox_offset) + signature))
        for d in accepted.derived:
            out.append((ev.cluster, encode(d), journal_headers(KIND_DECISION, st.token)))
        engine = st.engines.get(ev.cluster)
        if engine is not None:
            runs = self.state_api.runs
            runs.observe(ev, engine)
            for d in accepted.derived:
                runs.observe(d, engine)
        self._count(self.metrics.inputs, ev.cluster, type(ev))
        for d in accepted.derived:
            self._count(self.metrics.decisions, ev.cluster, type(d))

    def _cycle_in_batch(self, st: PartitionState,
                        out: list[tuple[str, bytes, list[tuple[str, bytes]]]],
                        cluster: str, offset: int, again: int = 0) -> Accepted | None:
        """Run ``cluster``'s cycle now: a signed tick of the worker's own, journaled after the batch.

        The tick is the trusted clock's (signed with ``tick_key``, the ticker's
        principal) and is journaled as an input with its signature, like a tick
        read from the inbox, but without an inbox offset: the journal, not the
        inbox, is what a replay reads. Its id comes from the trigger's inbox
        offset, so handling the same records again derives the same tick;
        ``again`` > 0 is the ``again``-th continuation cycle after that input's
        (``cycle_continue``), whose id adds that count.
        """
        engine = st.engines.get(cluster)
        if engine is None:
            return None
        tick = make_tick(cluster, self.clock.now(cluster), self.settings.ticker_principal,
                         self.key, event_id=batch_cycle_id(cluster, offset, again))
        t0 = time.perf_counter()
        try:
            derived = processor.process_input(engine, tick.event)
        except InputRefused as exc:   # (never for a well-formed tick of an owned cluster)
            self.log.warning("cycle.refused", cluster=cluster, reason=exc.reason,
                             detail=exc.detail)
            return None
        self.metrics.cycle_seconds.labels(cluster).observe(time.perf_counter() - t0)
        if derived is None:
            return None   # already taken (the same records handled again)
        accepted = Accepted(event=tick.event, value=tick.value, derived=derived)
        self._journal(st, out, accepted, None, tick.headers)
        return accepted

    def _count(self, counter: Any, cluster: str, kind: type) -> None:
        """``counter{cluster, type}`` += 1, with the labelled child cached (labels() is slow)."""
        key = (id(counter), cluster, kind)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = counter.labels(cluster, tag_of(kind))
        child.inc()

    async def _publish(self, journal_out: dict[int, list[tuple[str, bytes, list[tuple[str, bytes]]]]],
                       dead_out: list[tuple[bytes, bytes]], journaled_inbox: dict[int, int]) -> None:
        """Append the batch (journal records in order per partition, dead letters) and await all."""
        assert self._producer is not None
        producer = self._producer
        after_send = self._after_send
        futs: dict[int, list[asyncio.Future[Any]]] = {}
        try:
            for p, records in journal_out.items():
                if not records:
                    continue
                lst = futs.setdefault(p, [])
                sealed = self._sealed_all(p, [(value, headers) for _, value, headers in records])
                if self._trace is not None:
                    self._trace.mark("sealed")
                for i, (cluster, value, _) in enumerate(records):
                    lst.append(await producer.send(self.journal, value, key=cluster.encode(),
                                                   partition=p, headers=sealed[i]))
                    if after_send is not None:
                        mid_group = i + 1 < len(records) \
                            and records[i + 1][2][0][1] == KIND_DECISION.encode()
                        await after_send(mid_group, producer.flush)
            dead_futs = [await producer.send(self.deadletter, value, key=key)
                         for key, value in dead_out]
            if self._trace is not None:
                self._trace.mark("sent")
        except KafkaError as exc:
            self.log.error("journal.send_failed", detail=str(exc))
            for p in journal_out:
                if p in self.owned:
                    self.owned[p].broken = True
            return
        for p, lst in futs.items():
            st = self.owned.get(p)
            try:
                offsets = [int(md.offset) for md in await asyncio.gather(*lst)]
            except KafkaError as exc:
                self.log.error("journal.append_failed", partition=p, detail=str(exc))
                if st is not None:
                    st.broken = True
                continue
            if st is None:
                continue
            st.own.wrote(offsets)
            st.records_since_snapshot += len(offsets)
            self.metrics.journal_records.inc(len(offsets))
            if p in journaled_inbox:
                st.last_inbox_offset = max(st.last_inbox_offset, journaled_inbox[p])
            if len(st.own.foreign) > st.foreign_checked:
                await self._check_foreign(st)
        if dead_futs:
            try:
                await asyncio.gather(*dead_futs)
            except KafkaError as exc:
                # A lost dead letter is re-sent when the record is handled again after a
                # restart (its id is the record's position, so copies are exact).
                self.log.error("deadletter.append_failed", detail=str(exc))

    # -- snapshots ---------------------------------------------------------------------------

    def _maybe_snapshot(self, st: PartitionState) -> None:
        s = self.settings
        if st.broken or (st.snapshot_task is not None and not st.snapshot_task.done()):
            return
        due = (s.snapshot_every_records and st.records_since_snapshot >= s.snapshot_every_records) \
            or (s.snapshot_every_s and st.records_since_snapshot
                and time.monotonic() - st.last_snapshot >= s.snapshot_every_s)
        if not due:
            return
        blobs = {c: processor.snapshot_engine(e) for c, e in st.engines.items()}
        st.records_since_snapshot = 0
        st.last_snapshot = time.monotonic()
        st.slot ^= 1
        st.snapshot_task = asyncio.create_task(self._write_snapshot(
            st, blobs, st.own.last, list(st.own.foreign), st.last_inbox_offset, st.slot))

    async def _write_snapshot(self, st: PartitionState, blobs: dict[str, tuple[str, bytes]],
                              journal_offset: int, foreign: list[tuple[int, int]],
                              inbox_offset: int, slot: int) -> None:
        assert self._producer is not None
        t0 = time.perf_counter()
        try:
            off = await snapshots.write(
                self._producer, self.snapshot_topic, st.partition, token=st.token,
                claim_offset=st.claim_offset, journal_offset=journal_offset, foreign=foreign,
                inbox_offset=inbox_offset, engines=blobs, key=self.key,
                chunk_bytes=self.settings.snapshot_chunk_bytes, slot=slot, worker=self.name)
        except KafkaError as exc:
            self.log.warning("snapshot.failed", partition=st.partition, detail=str(exc))
            return
        self.metrics.snapshots.inc()
        self.log.info("snapshot.written", partition=st.partition, journal_offset=journal_offset,
                      manifest_offset=off, bytes=sum(len(b) for _, b in blobs.values()),
                      seconds=round(time.perf_counter() - t0, 3))

    # -- time --------------------------------------------------------------------------------

    async def _tick_loop(self) -> None:
        assert self._producer is not None
        interval = self.settings.tick_interval_s
        next_at = time.monotonic()
        while True:
            next_at += interval
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            if time.monotonic() - next_at > interval:  # fell behind (a long fold): skip ahead
                next_at = time.monotonic()
            for cluster, p in self.owned_clusters().items():
                if p in self.owned:
                    await self._send_tick(cluster, p)

    async def _send_tick(self, cluster: str, p: int) -> None:
        assert self._producer is not None
        tick = make_tick(cluster, self.clock.now(cluster), self.settings.ticker_principal,
                         self.key)
        try:
            await self._producer.send(self.inbox, tick.value, key=tick.key, partition=p,
                                      headers=tick.headers)
        except KafkaError as exc:
            self.log.warning("tick.failed", cluster=cluster, detail=str(exc))

    async def _gauge_loop(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            for cluster, engine in self.engines().items():
                wl = engine.state.workloads
                pending = {leaf: len(q) for leaf, q in wl.pending.items()}
                for leaf, q in wl.pending_free.items():
                    pending[f"{leaf}#free"] = len(q)
                running = sum(w.gpus for w in wl.running.values())
                self.metrics.set_leaves(cluster, pending, running)
            if self._consumer is not None:
                for p, st in self.owned.items():
                    hw = None
                    with contextlib.suppress(AssertionError):
                        hw = self._consumer_of(p).highwater(TopicPartition(self.inbox, p))
                    if hw is not None:
                        self.metrics.inbox_lag.labels(str(p)).set(max(0, hw - st.next_offset))


async def ensure_liveness_topic(bootstrap: str, name: str, replication_factor: int = 1,
                                security: dict[str, Any] | None = None) -> None:
    """Create the liveness topic (one partition, short retention) if it is missing."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000,
                                **(kafka_client_options() if security is None else security))
    try:
        await admin.start()
        if name in set(await admin.list_topics()):
            return
        configs = {"retention.ms": str(LIVENESS_RETENTION_MS), "cleanup.policy": "delete"}
        for attempt in (configs, {}):
            resp = await admin.create_topics([NewTopic(name, 1, replication_factor,
                                                       topic_configs=attempt)])
            code = resp.topic_errors[0][1]
            if code in (0, topics.ERR_TOPIC_EXISTS):
                return
        raise topics.TopicError(f"cannot create {name}: error {code}")
    finally:
        await admin.close()


def journal_event(msg: Any) -> Event | None:
    """Helper for readers: the event in a consumed journal record (None for claims)."""
    from events import decode

    rec = journal_record(msg)
    return None if rec.kind == KIND_CLAIM else decode(rec.value)


async def run_worker(settings: WorkerSettings, install_signals: bool = True,
                     after_send: AfterJournalSend | None = None) -> int:
    """Run one worker until SIGINT/SIGTERM (or ``stop()``); the exit status."""
    worker = Worker(settings, after_send=after_send)
    loop = asyncio.get_running_loop()
    if install_signals:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, worker.stop)
    await worker.run()
    return 0
