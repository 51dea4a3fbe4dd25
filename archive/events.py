"""The archive as an event log: the records that count, each once, group by group.

The same reading as ``allot journal export`` (streams/export.py), over the
archive instead of the topic: per journal partition, in offset order, a data
record counts only under the latest claim before it (``streams.records.Fence``),
then an event id already kept is dropped (at-least-once publishing). What
remains is written one *group* at a time (an input, then the decisions it
caused), groups of different partitions interleaved by the input's event time,
each partition's own order kept. The lines are the journal's exact value
bytes (re-encoded only when a producer's bytes span lines), so the audit's
loader decodes each with ``events.decode``, the one decoder.

Unlike the export, a last input whose decisions a crash cut short is written
as it is (the archive is read at rest; the next owner's recovery appends the
missing decisions, and the archive then holds them too).
"""

from __future__ import annotations

import heapq
import os
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pyarrow as pa
import pyarrow.parquet as pq

from archive.manifest import Manifest
from events import decode, encode
from streams.records import KIND_CLAIM, KIND_INPUT, Fence, JournalRecord

COLUMNS = ["offset", "kind", "owner", "value", "id", "cause", "at"]


@dataclass
class EventsReport:
    """What reading the archive as events found."""

    partitions: int = 0
    records: int = 0
    events: int = 0
    inputs: int = 0
    decisions: int = 0
    fenced: int = 0
    duplicates: int = 0
    unreadable: int = 0


def is_archive(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is an archive root (a directory with a manifest)."""
    from archive import layout

    p = Path(path)
    return p.is_dir() and (p / layout.MANIFEST).is_file()


def partition_batches(root: Path, manifest: Manifest, p: int,
                      columns: list[str] = COLUMNS) -> Iterator[pa.Table]:
    """Partition ``p``'s rows (``columns``) one committed batch at a time, in offset order.

    A batch's files (one per cluster and day) interleave its offsets, so each
    batch is sorted; batches of a partition cover consecutive offset ranges.
    Batch by batch keeps memory to one batch, and keeps every array far below
    the 2 GiB a ``binary`` column can address (a whole partition of a ten-
    million-event journal is over that).
    """
    by_batch: dict[int, list[str]] = {}
    for batch, f in manifest.files(p):
        by_batch.setdefault(batch.first, []).append(str(root / f.path))
    for first in sorted(by_batch):
        table = pa.concat_tables([pq.read_table(path, columns=columns)
                                  for path in by_batch[first]])
        offsets = table.column("offset").to_numpy()
        # Files are concatenated by day: usually already in offset order (then no sort).
        yield table if bool((offsets[1:] > offsets[:-1]).all()) else table.sort_by("offset")


def _spool(tables: Iterable[pa.Table], p: int, fh: IO[bytes],
           report: EventsReport) -> list[tuple[int, int, int]]:
    """Write partition ``p``'s kept events to ``fh``; its groups as (at, start, length)."""
    fence = Fence()
    seen: set[str] = set()
    groups: list[tuple[int, int, int]] = []
    # Kept values go to ``out`` (written to ``fh`` in large pieces); ``pos`` is the spool
    # position after ``out``, ``start`` where the open group began.
    out = bytearray()
    pos = start = 0
    group_at: int | None = None
    group_input: str | None = None

    def close() -> None:
        nonlocal group_at, out
        if group_at is not None and pos > start:
            groups.append((group_at, start, pos - start))
        group_at = None
        if len(out) >= 1 << 22:
            fh.write(out)
            out = bytearray()

    for table in tables:
        cols = {name: table.column(name).to_pylist() for name in COLUMNS}
        offsets, kinds, owners, values = cols["offset"], cols["kind"], cols["owner"], cols["value"]
        ids, causes, ats = cols["id"], cols["cause"], cols["at"]
        for i in range(len(offsets)):
            report.records += 1
            kind, owner = kinds[i], owners[i]
            if kind is None or owner is None:
                report.unreadable += 1
                continue
            rec = JournalRecord(partition=p, offset=offsets[i], kind=kind, owner=owner,
                                value=values[i] or b"")
            if not fence.admit(rec):
                if kind != KIND_CLAIM:
                    report.fenced += 1
                continue
            eid, at = ids[i], ats[i]
            if eid is None or at is None:
                report.unreadable += 1
                continue
            if eid in seen:
                report.duplicates += 1
                continue
            seen.add(eid)
            value = values[i] or b""
            if b"\n" in value or b"\r" in value:
                try:
                    value = encode(decode(value))
                except Exception:  # MalformedEvent: the loader names the line
                    value = value.replace(b"\n", b" ").replace(b"\r", b" ")
            if kind == KIND_INPUT:
                close()
                group_at, group_input, start = at, eid, pos
                report.inputs += 1
            else:
                if group_at is None or causes[i] != group_input:
                    close()   # a decision outside its input's group: kept in place
                    group_at, group_input, start = at, causes[i], pos
                report.decisions += 1
            out += value
            out += b"\n"
            pos += len(value) + 1
            report.events += 1
    close()
    fh.write(out)
    return groups


def write_events(root: str | Path, out: IO[bytes]) -> EventsReport:
    """Write the archive at ``root`` to ``out`` as JSON lines (see the module docstring)."""
    root = Path(root)
    manifest = Manifest(root)
    report = EventsReport()
    with tempfile.TemporaryDirectory(prefix="allot-archive-events-") as tmp:
        spools: list[tuple[Path, list[tuple[int, int, int]]]] = []
        for p in manifest.partitions():
            report.partitions += 1
            path = Path(tmp) / f"p{p}.jsonl"
            with open(path, "wb") as fh:
                groups = _spool(partition_batches(root, manifest, p), p, fh, report)
            spools.append((path, groups))
        handles = [open(path, "rb") for path, _ in spools]  # noqa: SIM115 - closed below
        try:
            def keyed(i: int, groups: list[tuple[int, int, int]]) -> Iterator[tuple[int, int, int, int]]:
                for at, start, length in groups:
                    yield at, i, start, length

            for _, i, start, length in heapq.merge(
                    *(keyed(i, g) for i, (_, g) in enumerate(spools)), key=lambda x: (x[0], x[1])):
                h = handles[i]
                h.seek(start)
                out.write(h.read(length))
        finally:
            for h in handles:
                h.close()
    return report


__all__ = ["EventsReport", "is_archive", "write_events"]
