"""Snapshots: a partition's engines at a journal offset, so a restart folds only the tail.

A snapshot of journal partition ``p`` at offset ``J`` is, per cluster of the
partition, ``Engine`` state as bytes (versioned by the core), zlib-compressed
and cut into chunks under the broker's record size, on partition ``p`` of the
snapshot topic (chunk key ``<cluster>/<token>/<slot>/<n>``: two slots per
writer, so a crash while writing one never tears the last complete snapshot),
followed by one manifest record (key ``manifest/<p>/<token>``) naming the
chunks, their SHA-256, and what the state reflects:

- ``journal_offset`` J: every record of the partition up to J is folded in;
- ``token`` and ``claim_offset``: the claim the writer held (its own claim
  record in the journal);
- ``foreign``: the offsets in (claim_offset, J] the writer did not write
  itself (records of a fenced former owner, or a claim of a newer one);
- ``inbox_offset``: the last inbox offset journaled up to J (where to resume).

The manifest is signed (HMAC-SHA256 under the workers' key), so a record
nobody trusted wrote is never restored.

**Why a snapshot can be verified.** The state at J counts for readers only if
the writer's claim was still the latest one at J. A restarting owner checks
exactly that: the journal record at ``claim_offset`` is the writer's claim,
and none of the ``foreign`` records is a claim; every other offset in
(claim_offset, J] the writer appended itself, and a writer never appends a
claim after its first record. So the fence at J admits precisely the writer's
records, which is what the writer folded. A fenced former owner that keeps
writing lists the newer owner's claim among its foreign offsets, and its
snapshots fail the check. The reader takes the newest manifest (by J) that
passes, restores its engines, primes the fence with the claim, and folds the
journal from J + 1.

**Prefetch.** A restarting worker does not know its partitions until the
consumer group has assigned them (seconds on Tansu), but nothing in the check
above needs the restorer's own claim except the bound ``J < claim``. So a
``Prefetcher`` finds, verifies and restores the newest snapshot of each
partition while the group is joining; when the worker then claims partition
``p`` at ``C`` it uses the prefetched one only if ``J < C`` (otherwise it
restores again, bounded by ``C``). The prefetched snapshot may be older than
the newest one by then (another owner snapshotted meanwhile): that costs a
longer tail fold, never a wrong state, since any verified snapshot below the
claim is a true prefix. Each prefetched restore is used at most once, those
of partitions the group does not assign are dropped, and the prefetcher is
closed after the first assignment (a later takeover restores afresh).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import time
import zlib
from collections.abc import AsyncIterator, Callable

import msgspec
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaError

from events.errors import AllotError
from scheduler import Engine
from streams import processor
from streams.journal import ReadTimeout, end_offset, journal_record, read_until
from streams.records import KIND_CLAIM, BadJournalRecord, Fence, JournalRecord

MANIFEST_VERSION = 1
HEADER_SNAPSHOT = "allot-snapshot"   # "chunk" or "manifest"
# The bound a prefetch verifies against: the claim is not known yet (``usable`` checks it).
UNBOUNDED = 1 << 62


class ClusterSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """One cluster's engine in a snapshot."""

    cluster: str
    format: str          # the engine snapshot format (the core's version tag)
    chunks: list[int]    # offsets of the chunk records in the snapshot partition, in order
    size: int            # compressed bytes
    sha256: str          # of the compressed bytes


class Manifest(msgspec.Struct, frozen=True, kw_only=True):
    """What a snapshot holds and what it reflects. See the module docstring."""

    v: int = MANIFEST_VERSION
    partition: int
    token: str
    claim_offset: int
    journal_offset: int
    foreign: list[tuple[int, int]]     # inclusive ranges of offsets the writer did not write
    inbox_offset: int
    clusters: list[ClusterSnapshot]
    worker: str = ""
    written_at: float = 0.0            # wall clock, informative only
    signature: str = ""


class SnapshotInvalid(AllotError):
    """A manifest that does not verify (signature, claim, foreign records, chunks)."""


def _sign(m: Manifest, key: bytes) -> str:
    body = msgspec.json.encode(msgspec.structs.replace(m, signature=""))
    return hmac.new(key, body, hashlib.sha256).hexdigest()


def sign(m: Manifest, key: bytes) -> Manifest:
    return msgspec.structs.replace(m, signature=_sign(m, key))


def signature_ok(m: Manifest, key: bytes) -> bool:
    return hmac.compare_digest(m.signature, _sign(m, key))


class OwnWrites:
    """The journal offsets one owner appended since its claim: the ``foreign`` gaps between them."""

    __slots__ = ("claim_offset", "foreign", "last", "next")

    def __init__(self, claim_offset: int) -> None:
        self.claim_offset = claim_offset
        self.next = claim_offset + 1       # the next offset if nobody else writes
        self.last = claim_offset           # the last offset this owner wrote
        self.foreign: list[tuple[int, int]] = []

    def wrote(self, offsets: list[int]) -> None:
        """Record acknowledged offsets (any order)."""
        for off in sorted(offsets):
            if off < self.next:
                continue  # a duplicate acknowledgement
            if off > self.next:
                self.foreign.append((self.next, off - 1))
            self.next = off + 1
            self.last = off


def encode_blob(data: bytes) -> bytes:
    return zlib.compress(data, 1)


def chunks_of(blob: bytes, size: int) -> list[bytes]:
    return [blob[i:i + size] for i in range(0, len(blob), size)] or [b""]


async def write(producer: AIOKafkaProducer, topic: str, partition: int, *, token: str,
                claim_offset: int, journal_offset: int, foreign: list[tuple[int, int]],
                inbox_offset: int, engines: dict[str, tuple[str, bytes]], key: bytes,
                chunk_bytes: int, slot: int, worker: str = "") -> int:
    """Write the chunks, then the manifest; return the manifest's offset in the snapshot topic.

    ``engines`` maps cluster -> (format, raw state bytes), taken at ``journal_offset``.
    """
    clusters: list[ClusterSnapshot] = []
    for cluster, (fmt, raw) in sorted(engines.items()):
        blob = encode_blob(raw)
        futs = []
        for i, chunk in enumerate(chunks_of(blob, chunk_bytes)):
            futs.append(await producer.send(
                topic, chunk, key=f"{cluster}/{token}/{slot}/{i}".encode(), partition=partition,
                headers=[(HEADER_SNAPSHOT, b"chunk")]))
        offsets = [(await f).offset for f in futs]
        clusters.append(ClusterSnapshot(cluster=cluster, format=fmt, chunks=offsets,
                                        size=len(blob), sha256=hashlib.sha256(blob).hexdigest()))
    m = sign(Manifest(partition=partition, token=token, claim_offset=claim_offset,
                      journal_offset=journal_offset, foreign=foreign, inbox_offset=inbox_offset,
                      clusters=clusters, worker=worker, written_at=time.time()), key)
    md = await producer.send_and_wait(topic, msgspec.json.encode(m),
                                      key=f"manifest/{partition}/{token}".encode(),
                                      partition=partition, headers=[(HEADER_SNAPSHOT, b"manifest")])
    return int(md.offset)


class Restored(msgspec.Struct, kw_only=True):
    """A verified snapshot, restored: the fold resumes from ``manifest.journal_offset + 1``."""

    manifest: Manifest
    engines: dict[str, Engine]
    fence: Fence
    read_s: float
    # Where the time went: finding manifests, checking the journal, reading chunks, restoring.
    phases: dict[str, float] = msgspec.field(default_factory=dict)


def _kind(headers: tuple[tuple[str, bytes], ...] | list[tuple[str, bytes]]) -> bytes | None:
    for k, v in headers or ():
        if k == HEADER_SNAPSHOT:
            return v
    return None


async def _journal_records(consumer: AIOKafkaConsumer, journal: str, partition: int,
                           first: int, last: int, timeout_s: float) -> list[JournalRecord]:
    out: list[JournalRecord] = []
    async for batch in read_until(consumer, journal, partition, first, last, timeout_s):
        for msg in batch:
            try:
                out.append(journal_record(msg))
            except BadJournalRecord:
                continue
    return out


async def verify(consumer: AIOKafkaConsumer, journal: str, m: Manifest, before: int,
                 timeout_s: float = 30.0) -> Fence:
    """Check ``m`` against the journal; return a fence primed with its claim. SnapshotInvalid if not."""
    if m.v != MANIFEST_VERSION:
        raise SnapshotInvalid(f"manifest version {m.v} unknown")
    if not m.claim_offset <= m.journal_offset < before:
        raise SnapshotInvalid(f"offsets out of order: claim {m.claim_offset}, J {m.journal_offset}, "
                              f"before {before}")
    claim = await _journal_records(consumer, journal, m.partition, m.claim_offset,
                                   m.claim_offset, timeout_s)
    if not claim or claim[0].offset != m.claim_offset or claim[0].kind != KIND_CLAIM:
        raise SnapshotInvalid(f"journal offset {m.claim_offset} is not a claim")
    fence = Fence()
    fence.admit(claim[0])
    if fence.token != m.token:
        raise SnapshotInvalid(f"the claim at {m.claim_offset} is not {m.token}'s")
    for a, b in m.foreign:
        if not (m.claim_offset < a <= b <= m.journal_offset):
            raise SnapshotInvalid(f"foreign range {a}-{b} outside the snapshot's span")
        for r in await _journal_records(consumer, journal, m.partition, a, b, timeout_s):
            if r.kind == KIND_CLAIM:
                raise SnapshotInvalid(f"another owner claimed the partition at {r.offset}")
    return fence


async def _read_chunks(consumer: AIOKafkaConsumer, topic: str, partition: int,
                       cs: ClusterSnapshot, timeout_s: float) -> bytes:
    want = set(cs.chunks)
    got: dict[int, bytes] = {}
    first, last = min(cs.chunks), max(cs.chunks)
    async for batch in read_until(consumer, topic, partition, first, last, timeout_s):
        for msg in batch:
            if msg.offset in want and msg.value is not None:
                got[msg.offset] = msg.value
    if len(got) != len(want):
        raise SnapshotInvalid(f"{cs.cluster}: {len(want) - len(got)} chunk(s) gone")
    blob = b"".join(got[o] for o in cs.chunks)
    if len(blob) != cs.size or hashlib.sha256(blob).hexdigest() != cs.sha256:
        raise SnapshotInvalid(f"{cs.cluster}: chunks do not match the manifest's digest")
    return blob


async def manifest_windows(consumer: AIOKafkaConsumer, topic: str, partition: int,
                           window: int = 64,
                           limit: int = 1 << 16) -> AsyncIterator[list[Manifest]]:
    """Manifests scanning back from the partition's end, one window at a time, newest first.

    Windows grow four-fold (up to ``limit`` records) so the usual case, a
    manifest among the last few records, reads little.
    """
    hi = await end_offset(consumer, topic, partition)  # exclusive
    while hi > 0:
        lo = max(0, hi - window)
        found: list[tuple[int, Manifest]] = []
        async for batch in read_until(consumer, topic, partition, lo, hi - 1):
            for msg in batch:
                if _kind(msg.headers) != b"manifest" or msg.value is None or msg.offset >= hi:
                    continue
                try:
                    found.append((msg.offset, msgspec.json.decode(msg.value, type=Manifest)))
                except msgspec.DecodeError:
                    continue
        if found:
            found.sort(key=lambda x: (-x[1].journal_offset, -x[0]))
            yield [m for _, m in found]
        hi = lo
        window = min(window * 4, limit)


async def restore_latest(consumer: AIOKafkaConsumer, snapshot_topic: str, journal_topic: str,
                         partition: int, before: int, key: bytes,
                         on_reject: Callable[[Manifest, str], None] | None = None,
                         timeout_s: float = 30.0) -> Restored | None:
    """The newest snapshot of ``partition`` that verifies and reflects offsets below ``before``.

    ``before`` is the restoring owner's own claim offset. Returns None when no
    snapshot verifies (the caller folds from the journal's start).
    """
    t0 = time.perf_counter()
    phases = {"scan_s": 0.0, "verify_s": 0.0, "chunks_s": 0.0, "restore_s": 0.0}
    try:
        t_scan = time.perf_counter()
        async for window in manifest_windows(consumer, snapshot_topic, partition):
            phases["scan_s"] += time.perf_counter() - t_scan
            restored = await _first_valid(consumer, snapshot_topic, journal_topic, partition,
                                          before, key, window, on_reject, timeout_s, phases)
            if restored is not None:
                restored.read_s = time.perf_counter() - t0
                restored.phases = {k: round(v, 3) for k, v in phases.items()}
                return restored
            t_scan = time.perf_counter()
    except ReadTimeout:
        return None
    return None


async def _first_valid(consumer: AIOKafkaConsumer, snapshot_topic: str, journal_topic: str,
                       partition: int, before: int, key: bytes, window: list[Manifest],
                       on_reject: Callable[[Manifest, str], None] | None,
                       timeout_s: float, phases: dict[str, float]) -> Restored | None:
    for m in window:
        if m.partition != partition:
            continue
        try:
            if not signature_ok(m, key):
                raise SnapshotInvalid("bad signature")
            t = time.perf_counter()
            fence = await verify(consumer, journal_topic, m, before, timeout_s)
            phases["verify_s"] += time.perf_counter() - t
            engines: dict[str, Engine] = {}
            for cs in m.clusters:
                t = time.perf_counter()
                blob = await _read_chunks(consumer, snapshot_topic, partition, cs, timeout_s)
                t_read = time.perf_counter()
                phases["chunks_s"] += t_read - t
                try:
                    raw = zlib.decompress(blob)
                except zlib.error as exc:
                    raise SnapshotInvalid(f"{cs.cluster}: {exc}") from None
                try:
                    engines[cs.cluster] = processor.restore_engine(cs.format, raw)
                except processor.SnapshotError as exc:
                    raise SnapshotInvalid(f"{cs.cluster}: {exc}") from None
                finally:
                    phases["restore_s"] += time.perf_counter() - t_read
        except (SnapshotInvalid, ReadTimeout) as exc:
            if on_reject is not None:
                on_reject(m, str(exc))
            continue
        return Restored(manifest=m, engines=engines, fence=fence, read_s=0.0)
    return None


def unusable(restored: Restored, partition: int, claim_offset: int) -> str | None:
    """Why a prefetched snapshot must not seed ``partition`` claimed at ``claim_offset`` (or None).

    A prefetch was verified without knowing the claim; the state is a true
    prefix of what the claim fences only if it reflects offsets below it.
    """
    m = restored.manifest
    if m.partition != partition:
        return f"the snapshot is of partition {m.partition}"
    if m.journal_offset >= claim_offset:
        return f"the snapshot reflects offset {m.journal_offset}, not below the claim {claim_offset}"
    return None


class Prefetcher:
    """Restores each partition's newest snapshot before the group assigns any (module docstring).

    One task works through ``partitions`` in order with its own consumer;
    ``restrict`` (the assignment is known) skips and drops the others;
    ``take`` hands a partition's result over once, waiting if it is being
    restored right now, or None (not prefetched: the caller restores it).
    """

    def __init__(self, consumer: AIOKafkaConsumer, snapshot_topic: str, journal_topic: str,
                 key: bytes, partitions: list[int],
                 on_reject: Callable[[Manifest, str], None] | None = None,
                 on_error: Callable[[int, str], None] | None = None,
                 timeout_s: float = 30.0) -> None:
        self._consumer = consumer
        self._snapshot_topic = snapshot_topic
        self._journal_topic = journal_topic
        self._key = key
        self._queue = list(partitions)
        self._on_reject = on_reject
        self._on_error = on_error
        self._timeout_s = timeout_s
        self._results: dict[int, Restored | None] = {}
        self._current: int | None = None
        self._current_done = asyncio.Event()
        self._wanted: set[int] | None = None
        self._task: asyncio.Task[None] | None = None
        self.dropped: list[int] = []        # partitions whose restored snapshot went unused
        self.closed = False

    def start(self) -> Prefetcher:
        self._task = asyncio.create_task(self._run(), name="allot-snapshot-prefetch")
        return self

    async def _run(self) -> None:
        while self._queue:
            p = self._queue.pop(0)
            if self._wanted is not None and p not in self._wanted:
                continue
            self._current, self._current_done = p, asyncio.Event()
            try:
                self._results[p] = await restore_latest(
                    self._consumer, self._snapshot_topic, self._journal_topic, p, UNBOUNDED,
                    self._key, on_reject=self._on_reject, timeout_s=self._timeout_s)
            except (KafkaError, AllotError) as exc:
                self._results[p] = None
                if self._on_error is not None:
                    self._on_error(p, str(exc))
            finally:
                self._current = None
                self._current_done.set()
            if self._wanted is not None and p not in self._wanted:
                self._drop(p)

    def _drop(self, p: int) -> None:
        if self._results.pop(p, None) is not None:
            self.dropped.append(p)

    def restrict(self, partitions: set[int]) -> None:
        """The group assigned ``partitions``: drop the others' results and skip their restores."""
        self._wanted = set(partitions)
        for p in list(self._results):
            if p not in self._wanted:
                self._drop(p)

    def pending(self) -> bool:
        return self._task is not None and not self._task.done()

    async def take(self, partition: int) -> Restored | None:
        """The prefetched restore of ``partition``, once; None when there is none (or not yet)."""
        if self.closed:
            return None
        if self._current == partition:
            await self._current_done.wait()
        if partition in self._queue:
            self._queue.remove(partition)   # not started: the caller restores it itself
        return self._results.pop(partition, None)

    async def close(self) -> None:
        """Stop restoring, drop every result not taken, stop the consumer."""
        self.closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        for p in list(self._results):
            self._drop(p)
        with contextlib.suppress(Exception):
            await self._consumer.stop()
