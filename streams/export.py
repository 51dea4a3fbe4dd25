"""The journal as a JSON-lines log: what ``allot audit replay`` and ``allot audit load`` read.

Every partition is read to its end and kept through the reader's rule: only
records under the latest claim count (the ``Fence``), then duplicates (an event
id already kept) are dropped. What remains is written one *group* at a time (an
input, then the decisions it caused, which the worker journals together), so a
replay sees each input followed by exactly its decisions. Groups of different
partitions are interleaved by the input's event time; each partition's own
order is kept.

A live journal may end in the middle of a group (the worker is writing it, or
crashed while writing it and has not recovered yet). By default the export
re-runs each partition through the engine (the fold a restarting worker does)
and holds back a last input whose decisions are not all there yet, so the file
always replays clean; ``complete_only=False`` writes it anyway.

Every record's worker seal is checked first (``identity.journal_seal``) when a
``seal_check`` is given: a record no worker signed (a decision forged under
the owner's token, an input with a far-ahead inbox offset) is left out before
the fence and counted (``forged``), as the restarted worker's fold does.
"""

from __future__ import annotations

import heapq
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

import msgspec

from events import decode, encode
from identity.journal_seal import SealCheck, SealGate
from streams.journal import end_offset, journal_record, read_to_end, reader
from streams.processor import PartitionFold
from streams.records import JOURNAL, KIND_CLAIM, KIND_INPUT, BadJournalRecord, Fence, topic


class ExportReport(msgspec.Struct, kw_only=True):
    """What an export read and wrote."""

    partitions: int = 0
    records: int = 0
    events: int = 0
    inputs: int = 0
    decisions: int = 0
    fenced: int = 0
    duplicates: int = 0
    withheld: int = 0
    unreadable: int = 0
    # Worker seals (identity.journal_seal): checked records by outcome; None when not checked.
    seals_checked: bool = False
    sealed: int = 0
    legacy: int = 0
    unsealed: int = 0
    forged: int = 0
    forged_at: list[str] = msgspec.field(default_factory=list)


class _Group(msgspec.Struct, kw_only=True):
    at: int
    cluster: str
    start: int       # byte position in the partition's spool file
    length: int
    records: int
    input_id: str


async def export_journal(bootstrap: str, out: str | Path, prefix: str = "",
                         clusters: Iterable[str] | None = None, complete_only: bool = True,
                         fetch_wait_ms: int = 200,
                         seal_check: SealCheck | None = None) -> ExportReport:
    """Write the journal on ``bootstrap`` (topic prefix ``prefix``) to ``out`` as JSON lines.

    ``seal_check``: refuse records whose worker seal does not verify (None: unchecked).
    """
    journal = topic(JOURNAL, prefix)
    wanted = set(clusters) if clusters else None
    report = ExportReport(seals_checked=seal_check is not None)
    consumer = reader(bootstrap, fetch_wait_ms, "allot-export")
    await consumer.start()
    out_path = Path(out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    spool_dir = tempfile.mkdtemp(prefix="allot-export-", dir=out_path.parent)
    spools: list[tuple[Path, list[_Group]]] = []
    try:
        await consumer.topics()  # loads the metadata of every topic
        parts = sorted(consumer.partitions_for_topic(journal) or ())
        for p in parts:
            report.partitions += 1
            spool = Path(spool_dir) / f"p{p}.jsonl"
            groups = await _spool_partition(consumer, journal, p, spool, wanted, complete_only,
                                            report, seal_check)
            spools.append((spool, groups))
    finally:
        await consumer.stop()
    try:
        tmp = out_path.with_suffix(out_path.suffix + ".part")
        with open(tmp, "wb") as fh:
            handles = [open(path, "rb") for path, _ in spools]  # noqa: SIM115 - closed below
            try:
                streams = [_keyed(i, groups) for i, (_, groups) in enumerate(spools)]
                for _, i, g in heapq.merge(*streams, key=lambda x: x[0]):
                    h = handles[i]
                    h.seek(g.start)
                    fh.write(h.read(g.length))
            finally:
                for h in handles:
                    h.close()
        os.replace(tmp, out_path)
    finally:
        for path, _ in spools:
            path.unlink(missing_ok=True)
        os.rmdir(spool_dir)
    return report


def _keyed(i: int, groups: list[_Group]) -> Iterator[tuple[int, int, _Group]]:
    for g in groups:
        yield g.at, i, g


async def _spool_partition(consumer: object, journal: str, p: int, spool: Path,
                           wanted: set[str] | None, complete_only: bool,
                           report: ExportReport,
                           seal_check: SealCheck | None = None) -> list[_Group]:
    """Write partition ``p``'s kept records to ``spool`` group by group; return the groups."""
    fence = Fence()
    gate = SealGate(seal_check) if seal_check is not None else None
    fold = PartitionFold(p) if complete_only else None
    seen: set[str] = set()
    groups: list[_Group] = []
    last_group: dict[str, int] = {}        # cluster -> index of its last group
    current: _Group | None = None
    buf = bytearray()
    pos = 0
    with open(spool, "wb") as fh:

        def close_group() -> None:
            nonlocal current, pos, buf
            if current is not None:
                fh.write(buf)
                current.length = len(buf)
                pos += len(buf)
                groups.append(current)
                last_group[current.cluster] = len(groups) - 1
            current = None
            buf = bytearray()

        if await end_offset(consumer, journal, p) > 0:  # type: ignore[arg-type]
            async for batch in read_to_end(consumer, journal, p):  # type: ignore[arg-type]
                for msg in batch:
                    report.records += 1
                    try:
                        rec = journal_record(msg)
                    except BadJournalRecord:
                        report.unreadable += 1
                        continue
                    if gate is not None and not gate.admit(p, rec.kind, rec.owner,
                                                           rec.inbox_offset, rec.value, rec.seal):
                        # Before the fence and the fold: a forged claim moves neither.
                        report.forged += 1
                        if len(report.forged_at) < 20:
                            report.forged_at.append(f"{p}:{rec.offset}")
                        continue
                    if fold is not None:
                        fold.add(rec)
                    if not fence.admit(rec):
                        if rec.kind != KIND_CLAIM:
                            report.fenced += 1
                        continue
                    try:
                        event = decode(rec.value)
                    except Exception:  # MalformedEvent: allot never journals such bytes
                        report.unreadable += 1
                        continue
                    if event.id in seen:
                        report.duplicates += 1
                        continue
                    seen.add(event.id)
                    if wanted is not None and event.cluster not in wanted:
                        continue
                    line = encode(event) + b"\n"
                    if rec.kind == KIND_INPUT:
                        close_group()
                        current = _Group(at=event.at, cluster=event.cluster, start=pos, length=0,
                                         records=0, input_id=event.id)
                        report.inputs += 1
                    else:
                        if current is None or event.cause != current.input_id:
                            # A decision outside its input's group: keep it in place.
                            close_group()
                            current = _Group(at=event.at, cluster=event.cluster, start=pos,
                                             length=0, records=0, input_id=event.cause or "")
                        report.decisions += 1
                    current.records += 1
                    buf += line
                    report.events += 1
        close_group()
    if gate is not None:
        report.sealed += gate.verified
        report.legacy += gate.legacy
        report.unsealed += gate.unsealed_before
    if fold is not None:
        drop: list[int] = []
        for cluster, missing in fold.finish().items():
            i = last_group.get(cluster)
            if i is None or not missing or (wanted is not None and cluster not in wanted):
                continue
            drop.append(i)
        for i in sorted(drop, reverse=True):
            # The group a crash (or a write in progress) cut short: hold it back.
            g = groups.pop(i)
            report.withheld += g.records
            report.events -= g.records
            report.inputs -= 1
            report.decisions -= g.records - 1
    return groups
