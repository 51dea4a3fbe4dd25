"""Restoring a journal from its archive into a broker that lost it (a fresh embedded Tansu).

For each archived partition ``p`` whose journal partition is empty, every
archived record is produced again to journal partition ``p``, in offset order,
with its exact key, value, headers and timestamp, and each lands at the offset
it had (checked: the restore fails rather than renumber a journal, since
snapshots, manifests and the archive itself name offsets). The worker then
folds the very log it wrote.

The inbox is not archived: an input lives on in the journal (its exact bytes,
and its inbox offset in ``allot-inbox-offset``), and a worker resumes the inbox
at the last journaled inbox offset + 1. A fresh broker's inbox starts at 0, so
the restore also fills inbox partition ``p`` up to that offset with empty
records marked ``allot-filler`` (a worker skips every offset below its resume
point without reading it). New inputs then get offsets above what the journal
names, as they would have on the old broker. An input that was in the old
inbox but not yet journaled when the broker stopped is lost (its producer saw
no decision for it); ``allot up`` stops its worker only after it has
journaled what it fetched.

A partition whose journal already holds records is left alone (a Kafka that
kept its log needs no restore), after checking that it is the archived one.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from aiokafka import AIOKafkaProducer

from archive import layout
from archive.events import partition_batches
from archive.manifest import ArchiveError, Manifest, origin_digest
from archive.writer import first_record
from streams import logs
from streams.config import kafka_client_options
from streams.journal import end_offset, reader
from streams.records import INBOX, JOURNAL, topic

HEADER_FILLER = "allot-filler"
SEND_WINDOW = 20_000


@dataclass
class RestoreReport:
    """What a restore did, per partition."""

    restored: dict[int, int] = field(default_factory=dict)      # partition -> journal records
    filled: dict[int, int] = field(default_factory=dict)        # partition -> inbox fillers
    kept: list[int] = field(default_factory=list)               # partitions already present
    seconds: float = 0.0

    @property
    def records(self) -> int:
        return sum(self.restored.values())


RESTORE_COLUMNS = ["offset", "timestamp", "key", "value", "headers", "kind", "inbox_offset"]


def partition_tables(root: Path, manifest: Manifest, p: int) -> Iterator[pa.Table]:
    """Partition ``p``'s archived records one committed batch at a time, in offset order.

    A restore streams a partition batch by batch (``archive.events.partition_batches``):
    memory holds one batch, not the whole partition (a ten-million-event journal's is
    several GB, and over the 2 GiB a ``binary`` column can address).
    """
    return partition_batches(root, manifest, p, RESTORE_COLUMNS)


def partition_table(root: Path, manifest: Manifest, p: int) -> pa.Table:
    """Every archived record of partition ``p``, sorted by offset, in one table (small archives).

    Values are ``large_binary`` (64-bit offsets), so a table over 2 GiB still concatenates.
    """
    tables = [t.set_column(t.schema.get_field_index("value"), "value",
                           t.column("value").cast(pa.large_binary()))
              for t in partition_tables(root, manifest, p)]
    if not tables:
        return layout.SCHEMA.empty_table()
    return pa.concat_tables(tables)


async def restore(bootstrap: str, root: str | Path, prefix: str = "") -> RestoreReport:
    """Restore every archived partition of the journal on ``bootstrap`` that is empty."""
    t0 = time.perf_counter()
    root = Path(root)
    log = logs.logger(component="archive.restore")
    report = RestoreReport()
    manifest = Manifest(root)
    if not manifest.batches:
        return report
    manifest.recover()
    journal = topic(JOURNAL, prefix)
    inbox = topic(INBOX, prefix)
    if manifest.topic not in (None, journal):
        raise ArchiveError(f"{root} archives {manifest.topic}, not {journal}")
    consumer = reader(bootstrap, 200, "allot-restore")
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5,
                                max_batch_size=1024 * 1024, max_request_size=4 * 1024 * 1024,
                                enable_idempotence=False, client_id="allot-restore",
                                **kafka_client_options())
    await consumer.start()
    await producer.start()
    try:
        await consumer.topics()
        parts = consumer.partitions_for_topic(journal) or set()
        missing = [p for p in manifest.partitions() if p not in parts]
        if missing:
            raise ArchiveError(f"{journal} on {bootstrap} lacks partitions {missing} that "
                               f"{root} holds; create the topics with as many partitions")
        for p in manifest.partitions():
            if await end_offset(consumer, journal, p) > 0:
                want = manifest.origin(p)
                first = await first_record(consumer, journal, p)
                if want is not None and origin_digest(first.value, first.headers or ()) != want:
                    raise ArchiveError(f"{journal}[{p}] holds another journal than {root}")
                report.kept.append(p)
                continue
            restored, top = 0, None
            for table in partition_tables(root, manifest, p):
                restored += await _produce_journal(producer, journal, p, table, restored)
                col_top = pc.max(table.column("inbox_offset")).as_py() if len(table) else None
                if col_top is not None and (top is None or col_top > top):
                    top = col_top
            report.restored[p] = restored
            report.filled[p] = await _fill_inbox(consumer, producer, inbox, p, top)
            log.info("archive.restored", partition=p, records=report.restored[p],
                     inbox_filled=report.filled[p])
    finally:
        await producer.stop()
        await consumer.stop()
    report.seconds = time.perf_counter() - t0
    return report


async def _produce_journal(producer: AIOKafkaProducer, journal: str, p: int,
                           table: pa.Table, first: int = 0) -> int:
    """Produce ``table``'s records (offsets ``first``, ``first`` + 1, ...) at those offsets."""
    offsets = table.column("offset").to_pylist()
    if offsets and offsets != list(range(first, first + len(offsets))):
        gap = next(i for i, o in enumerate(offsets) if o != first + i)
        raise ArchiveError(f"partition {p}: the archive is not dense from offset 0 (offset "
                           f"{offsets[gap]} at position {first + gap}); it cannot be restored "
                           f"as it was")
    stamps = table.column("timestamp").to_pylist()
    keys = table.column("key").to_pylist()
    values = table.column("value").to_pylist()
    headers = table.column("headers").to_pylist()
    futs = []
    for i, off in enumerate(offsets):
        futs.append(await producer.send(journal, values[i], key=keys[i], partition=p,
                                        timestamp_ms=stamps[i],
                                        headers=[(h["key"], h["value"]) for h in headers[i]]))
        if len(futs) >= SEND_WINDOW or i + 1 == len(offsets):
            base = off - len(futs) + 1
            for j, f in enumerate(futs):
                got = (await f).offset
                if got != base + j:
                    raise ArchiveError(f"{journal}[{p}]: record {base + j} landed at offset "
                                       f"{got}; the partition was written to during the restore")
            futs = []
    return len(offsets)


async def _fill_inbox(consumer: object, producer: AIOKafkaProducer, inbox: str, p: int,
                      top: int | None) -> int:
    """Fill inbox partition ``p`` with fillers up to ``top``, the highest journaled inbox offset."""
    if top is None:
        return 0
    have = await end_offset(consumer, inbox, p)  # type: ignore[arg-type]
    if have > 0:
        raise ArchiveError(f"{inbox}[{p}] already holds records, but its journal was empty: "
                           f"restore before anything writes to the inbox")
    futs = []
    headers = [(HEADER_FILLER, b"restore")]
    for _ in range(top + 1):
        futs.append(await producer.send(inbox, b"", partition=p, headers=headers))
        if len(futs) >= SEND_WINDOW:
            await futs[-1]
            futs = []
    last = None
    for f in futs:
        last = await f
    if last is not None and last.offset != top:
        raise ArchiveError(f"{inbox}[{p}]: the fill ended at offset {last.offset}, not {top}")
    return top + 1


__all__ = ["HEADER_FILLER", "RestoreReport", "partition_table", "partition_tables", "restore"]
