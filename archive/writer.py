"""The archiver: the journal topic, read from where the manifest ends, written as Parquet.

``Archiver.run`` assigns itself every partition of ``allot.journal`` (no
consumer group: the manifest, not a committed offset, says where each
partition resumes), buffers what it reads per partition, and commits a batch
per partition every ``flush_records`` records or ``flush_s`` seconds
(``archive.manifest`` says how a batch commits and why a crash at any point
loses nothing and doubles nothing). ``stop()`` (SIGTERM for ``allot
archive``) reads every partition to its end as of the stop, commits, and
returns: an ``allot up`` that stops its worker first and the archiver last
leaves the whole journal archived.

The per-record work is small on purpose (the archive should keep up with the
raw consume rate): the headers are parsed for the three allot ones, the value
is read for its envelope only (a struct of five fields; the audit decodes every
event with ``events.decode`` when it loads the archive), and rows are kept as
column lists until the batch is written.

An optional ``AtCommit`` callback sees each batch's two commit points (the
crash tests' fault injection, tests/archiver_faults.py, uses it).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal, Protocol

import msgspec
import pyarrow as pa
import pyarrow.parquet as pq
from aiokafka import AIOKafkaConsumer, TopicPartition

from archive import layout
from archive.manifest import ArchiveError, Batch, FileEntry, Manifest, origin_digest
from events.limits import CLUSTER_ID_PATTERN
from streams import logs
from streams.journal import begin_offset, end_offset, reader
from streams.records import (
    HEADER_INBOX_OFFSET,
    HEADER_KIND,
    HEADER_OWNER,
    JOURNAL,
    KIND_CLAIM,
    topic,
)

_CLUSTER = re.compile(CLUSTER_ID_PATTERN)
DAY_S = 86_400


class _Envelope(msgspec.Struct):
    """The envelope fields of an event (unknown fields ignored): what the archive indexes."""

    type: str | None = None
    id: str | None = None
    cluster: str | None = None
    cause: str | None = None
    at: int | None = None


_envelope = msgspec.json.Decoder(_Envelope)


class _Columns:
    """One output file's rows, column by column (appended per record, written per batch)."""

    __slots__ = ("at", "cause", "hkeys", "hoffs", "hvals", "id", "inbox", "key", "kind",
                 "offset", "owner", "timestamp", "type", "value")

    def __init__(self) -> None:
        self.offset: list[int] = []
        self.timestamp: list[int] = []
        self.key: list[bytes | None] = []
        self.value: list[bytes | None] = []
        self.hoffs: list[int] = [0]
        self.hkeys: list[str] = []
        self.hvals: list[bytes] = []
        self.kind: list[str | None] = []
        self.owner: list[str | None] = []
        self.inbox: list[int | None] = []
        self.type: list[str | None] = []
        self.id: list[str | None] = []
        self.cause: list[str | None] = []
        self.at: list[int | None] = []

    def table(self, partition: int) -> pa.Table:
        n = len(self.offset)
        headers = pa.ListArray.from_arrays(
            pa.array(self.hoffs, pa.int32()),
            pa.StructArray.from_arrays([pa.array(self.hkeys, pa.string()),
                                        pa.array(self.hvals, pa.binary())],
                                       fields=list(layout.HEADER)))
        return pa.Table.from_arrays([
            pa.array([partition] * n, pa.int32()), pa.array(self.offset, pa.int64()),
            pa.array(self.timestamp, pa.int64()), pa.array(self.key, pa.binary()),
            pa.array(self.value, pa.binary()), headers, pa.array(self.kind, pa.string()),
            pa.array(self.owner, pa.string()), pa.array(self.inbox, pa.int64()),
            pa.array(self.type, pa.string()), pa.array(self.id, pa.string()),
            pa.array(self.cause, pa.string()), pa.array(self.at, pa.int64()),
        ], schema=layout.SCHEMA)


class _Pending:
    """What has been read of one partition since its last commit."""

    __slots__ = ("by_dir", "first", "last", "records", "since")

    def __init__(self, first: int) -> None:
        self.first = first
        self.last = first - 1
        self.records = 0
        self.since = time.monotonic()
        self.by_dir: dict[tuple[str, str], _Columns] = {}


@dataclass
class ArchiveStats:
    """What one ``run`` archived."""

    records: int = 0
    batches: int = 0
    files: int = 0
    bytes: int = 0
    seconds: float = 0.0
    recovered: tuple[int, int] = (0, 0)     # temporary files renamed, deleted on start
    resumed: dict[int, int] = field(default_factory=dict)   # partition -> first offset read

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0


def add_record(pending: _Pending, offset: int, timestamp: int, key: bytes | None,
               value: bytes | None, headers: Iterable[tuple[str, bytes]],
               days: dict[int, str]) -> None:
    """Append one journal record to the partition's pending batch (in its file's columns)."""
    kind = owner = None
    inbox: int | None = None
    hk: list[str] = []
    hv: list[bytes] = []
    for k, v in headers:
        hk.append(k)
        hv.append(v)
        if k == HEADER_KIND:
            kind = v.decode("utf-8", "replace")
        elif k == HEADER_OWNER:
            owner = v.decode("utf-8", "replace")
        elif k == HEADER_INBOX_OFFSET:
            try:
                inbox = int(v)
            except ValueError:
                inbox = None
    env = None
    if kind != KIND_CLAIM and value:
        try:
            env = _envelope.decode(value)
        except (msgspec.DecodeError, msgspec.ValidationError):
            env = None
    if env is not None and env.cluster is not None and env.at is not None \
            and _CLUSTER.fullmatch(env.cluster):
        d = env.at // DAY_S
        day = days.get(d)
        if day is None:
            day = days[d] = layout.day_of(d * DAY_S)
        where = (env.cluster, day)
    else:
        d = timestamp // (DAY_S * 1000)
        day = days.get(-1 - d)
        if day is None:
            day = days[-1 - d] = layout.day_of(d * DAY_S)
        where = ("", day)          # claims/: claims, and records of no readable cluster
    cols = pending.by_dir.get(where)
    if cols is None:
        cols = pending.by_dir[where] = _Columns()
    cols.offset.append(offset)
    cols.timestamp.append(timestamp)
    cols.key.append(key)
    cols.value.append(value)
    cols.hkeys.extend(hk)
    cols.hvals.extend(hv)
    cols.hoffs.append(len(cols.hkeys))
    cols.kind.append(kind)
    cols.owner.append(owner)
    cols.inbox.append(inbox)
    if env is not None:
        cols.type.append(env.type)
        cols.id.append(env.id)
        cols.cause.append(env.cause)
        cols.at.append(env.at)
    else:
        cols.type.append(None)
        cols.id.append(None)
        cols.cause.append(None)
        cols.at.append(None)
    pending.last = offset
    pending.records += 1


def _fsync_write(table: pa.Table, path: Path, compression: str) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        pq.write_table(table, fh, compression=compression)
        fh.flush()
        os.fsync(fh.fileno())
    return path.stat().st_size


CommitPoint = Literal["before_commit", "after_commit"]


class AtCommit(Protocol):
    """Called at each batch's commit points (none by default).

    ``before_commit``: the batch's files are written, its manifest line is not;
    ``after_commit``: the line is durable, the files are not renamed yet. The
    crash tests kill the archiver here.
    """

    def __call__(self, where: CommitPoint) -> None: ...


class Archiver:
    """Archive one journal topic into one directory. ``await run()``; ``stop()`` to finish."""

    def __init__(self, bootstrap: str, root: str | Path, prefix: str = "", *,
                 flush_records: int = 200_000, flush_s: float = 5.0, fetch_wait_ms: int = 200,
                 compression: str = "zstd", wait_for_topic_s: float = 60.0,
                 at_commit: AtCommit | None = None) -> None:
        self.bootstrap = bootstrap
        self.root = Path(root)
        self.journal = topic(JOURNAL, prefix)
        self.flush_records = flush_records
        self.flush_s = flush_s
        self.fetch_wait_ms = fetch_wait_ms
        self.compression = compression
        self.wait_for_topic_s = wait_for_topic_s
        self.stats = ArchiveStats()
        self.log = logs.logger(component="archiver")
        self.ready = asyncio.Event()       # set once positioned (the manifest read and checked)
        self._stop = asyncio.Event()
        self._lock: IO[bytes] | None = None
        self._at_commit = at_commit
        self.manifest: Manifest | None = None

    def stop(self) -> None:
        """Read every partition to its end as of now, commit, and return from ``run``."""
        self._stop.set()

    def _take_lock(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        fh = open(self.root / layout.LOCK, "ab")  # noqa: SIM115 - held until run() ends
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.close()
            raise ArchiveError(f"{self.root} is being written by another archiver "
                               f"(lock {layout.LOCK})") from None
        self._lock = fh

    def _release_lock(self) -> None:
        if self._lock is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock.fileno(), fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None

    async def run(self, once: bool = False) -> ArchiveStats:
        """Archive until ``stop()`` (or, with ``once``, up to the end as of the start)."""
        self._take_lock()
        t0 = time.perf_counter()
        consumer = reader(self.bootstrap, self.fetch_wait_ms, "allot-archiver")
        try:
            self.manifest = manifest = Manifest(self.root)
            self.stats.recovered = manifest.recover()
            if manifest.topic is not None and manifest.topic != self.journal:
                raise ArchiveError(f"{self.root} archives {manifest.topic}, not {self.journal}")
            await consumer.start()
            parts = await self._partitions(consumer)
            await self._check_origin(consumer, manifest, parts)
            tps = [TopicPartition(self.journal, p) for p in parts]
            consumer.assign(tps)
            pending: dict[int, _Pending] = {}
            for p in parts:
                nxt = manifest.next_offset(p)
                consumer.seek(TopicPartition(self.journal, p), nxt)
                pending[p] = _Pending(nxt)
                self.stats.resumed[p] = nxt
            self.log.info("archive.started", root=str(self.root), topic=self.journal,
                          partitions=len(parts), records=manifest.records(),
                          recovered=self.stats.recovered)
            self.ready.set()
            targets: dict[int, int] | None = None
            if once:
                targets = await self._ends(consumer, parts)
            days: dict[int, str] = {}
            while True:
                if targets is None and self._stop.is_set():
                    targets = await self._ends(consumer, parts)
                if targets is not None and all(pending[p].last >= t for p, t in targets.items()):
                    # Every partition reached the record at end_offsets - 1; the batch that held
                    # it came whole: take what is fetched already, then commit everything.
                    more = await consumer.getmany(timeout_ms=0, max_records=100_000)
                    self._add(more, pending, days)
                    for p in parts:
                        self._flush(p, pending)
                    break
                got = await consumer.getmany(timeout_ms=200, max_records=100_000)
                self._add(got, pending, days)
                now = time.monotonic()
                total = sum(pb.records for pb in pending.values())
                for p, pb in pending.items():
                    if pb.records and (total >= self.flush_records or pb.records >= self.flush_records
                                       or now - pb.since >= self.flush_s):
                        self._flush(p, pending)
        finally:
            self.stats.seconds = time.perf_counter() - t0
            with contextlib.suppress(Exception):
                await consumer.stop()
            self._release_lock()
        self.log.info("archive.stopped", records=self.stats.records, batches=self.stats.batches,
                      seconds=round(self.stats.seconds, 3))
        return self.stats

    def _add(self, got: dict[TopicPartition, list[Any]], pending: dict[int, _Pending],
             days: dict[int, str]) -> None:
        for tp, msgs in got.items():
            pb = pending[tp.partition]
            for m in msgs:
                if m.offset <= pb.last:
                    continue                  # already read (a refetch): never twice
                if pb.records == 0:
                    pb.since = time.monotonic()
                add_record(pb, m.offset, m.timestamp, m.key, m.value, m.headers or (), days)

    async def _partitions(self, consumer: AIOKafkaConsumer) -> list[int]:
        deadline = time.monotonic() + self.wait_for_topic_s
        while True:
            await consumer.topics()
            parts = consumer.partitions_for_topic(self.journal)
            if parts:
                break
            if time.monotonic() > deadline:
                raise ArchiveError(f"no topic {self.journal} on {self.bootstrap} after "
                                   f"{self.wait_for_topic_s:.0f} s")
            await asyncio.sleep(0.5)
        assert self.manifest is not None
        parts_sorted = sorted(parts)
        beyond = [p for p in self.manifest.partitions() if p not in parts]
        if beyond:
            raise ArchiveError(f"{self.root} holds partitions {beyond} that {self.journal} "
                               f"does not have ({len(parts_sorted)} partitions)")
        return parts_sorted

    async def _check_origin(self, consumer: AIOKafkaConsumer, manifest: Manifest,
                            parts: list[int]) -> None:
        for p in parts:
            have = manifest.next_offset(p)
            if have == 0:
                continue
            if await end_offset(consumer, self.journal, p) == 0:
                raise ArchiveError(
                    f"{self.journal}[{p}] is empty but {self.root} holds its offsets 0..{have - 1}: "
                    f"restore the journal first (allot archive restore)")
            want = manifest.origin(p)
            if want is None or await begin_offset(consumer, self.journal, p) > 0:
                continue
            first = await first_record(consumer, self.journal, p)
            if origin_digest(first.value, first.headers or ()) != want:
                raise ArchiveError(f"{self.root} was archived from another journal than "
                                   f"{self.journal} on {self.bootstrap} (partition {p} differs "
                                   f"at offset 0)")

    async def _ends(self, consumer: AIOKafkaConsumer, parts: list[int]) -> dict[int, int]:
        """Per partition, the offset the read must reach (Tansu: the last batch's first record)."""
        out = {}
        for p in parts:
            end = await end_offset(consumer, self.journal, p)
            out[p] = end - 1
        return out

    def _flush(self, p: int, pending: dict[int, _Pending]) -> None:
        pb = pending[p]
        if not pb.records:
            return
        assert self.manifest is not None
        files: list[FileEntry] = []
        origin = None
        written = 0
        for (cluster, day), cols in sorted(pb.by_dir.items()):
            rel = (layout.journal_path(cluster, day, p, pb.first, pb.last) if cluster
                   else layout.claims_path(day, p, pb.first, pb.last))
            table = cols.table(p)
            if pb.first == 0 and cols.offset[0] == 0:
                hv = table.column("headers")[0].as_py()
                origin = origin_digest(cols.value[0], [(h["key"], h["value"]) for h in hv])
            written += _fsync_write(table, layout.temp_of(self.root / rel), self.compression)
            files.append(FileEntry(path=rel, records=len(cols.offset)))
        batch = Batch(topic=self.journal, partition=p, first=pb.first, last=pb.last,
                      records=pb.records, files=files, origin=origin, written_at=time.time())
        at_commit = self._at_commit
        if at_commit is not None:
            at_commit("before_commit")
        self.manifest.commit(batch, after_line=None if at_commit is None
                             else lambda: at_commit("after_commit"))
        self.stats.records += pb.records
        self.stats.batches += 1
        self.stats.files += len(files)
        self.stats.bytes += written
        self.log.debug("archive.committed", partition=p, first=pb.first, last=pb.last,
                       records=pb.records, files=len(files))
        pending[p] = _Pending(pb.last + 1)


async def first_record(consumer: AIOKafkaConsumer, journal: str, p: int) -> Any:
    """The record at offset 0 of ``journal``/``p`` (the consumer is re-assigned afterwards)."""
    from streams.journal import read_until

    async for batch in read_until(consumer, journal, p, 0, 0, timeout_s=30.0):
        if batch:
            return batch[0]
    raise ArchiveError(f"{journal}[{p}]: no record at offset 0")


def archive_records(root: str | Path, records: Iterable[tuple[int, int, bytes | None, bytes | None,
                                                           Iterable[tuple[str, bytes]]]],
                    prefix: str = "", *, partition: int = 0, flush_records: int = 200_000,
                    compression: str = "zstd") -> ArchiveStats:
    """Archive journal records already in hand, without a broker: the same files and commits.

    ``records`` are one journal partition's (offset, timestamp, key, value,
    headers), in offset order from where the archive ends (``Manifest.next_offset``),
    with no gap. For tools and benchmarks that build an archive from a log
    (benchmarks/bench_audit_archive.py); the archiver itself reads Kafka.
    Raises ArchiveError on an offset out of sequence (nothing of its batch is committed).
    """
    arch = Archiver("", root, prefix, flush_records=flush_records, compression=compression)
    arch._take_lock()
    try:
        arch.manifest = manifest = Manifest(arch.root)
        arch.stats.recovered = manifest.recover()
        pending = {partition: _Pending(manifest.next_offset(partition))}
        days: dict[int, str] = {}
        for offset, timestamp, key, value, headers in records:
            pb = pending[partition]
            if offset != pb.last + 1:
                raise ArchiveError(f"partition {partition}: offset {offset} after {pb.last} "
                                   f"(records must follow the archive's end without a gap)")
            add_record(pb, offset, timestamp, key, value, headers, days)
            if pb.records >= flush_records:
                arch._flush(partition, pending)
        arch._flush(partition, pending)
    finally:
        arch._release_lock()
    return arch.stats


async def archive_once(bootstrap: str, root: str | Path, prefix: str = "", **kw: Any) -> ArchiveStats:
    """Archive the journal up to its end as of now, and return."""
    return await Archiver(bootstrap, root, prefix, **kw).run(once=True)


__all__ = ["ArchiveStats", "Archiver", "add_record", "archive_once", "archive_records",
           "first_record"]
