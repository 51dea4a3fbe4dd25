"""The archive's manifest: which journal offsets are archived, and in which files.

``manifest.jsonl`` is an append-only commit log, one JSON line per committed
batch: a journal partition, the offsets ``first..last`` the batch covers (every
offset in between was read; the broker's log is dense), how many records it
held, and the files it wrote. A batch commits in two steps:

1. its files are written under temporary names (``*.parquet.tmp``, which no
   ``*.parquet`` glob sees) and flushed to disk;
2. its line is appended to the manifest and flushed to disk: **this is the
   commit**; then the files are renamed to their final names.

A crash before step 2 leaves temporary files no line names: ``recover``
deletes them and the archiver reads those offsets again. A crash after step 2
leaves temporary files a line names: ``recover`` renames them (finishing the
commit). A line cut by a crash while being appended is not a commit and is cut
off. So every offset is in exactly one committed batch, and an archiver that
reads a record twice (it restarts from the manifest, not from a consumer
group) writes it once.

The first batch of a partition (``first == 0``) stores ``origin``: a digest of
the partition's record at offset 0 (the first claim, which carries a random
token). An archiver checks it against the broker before appending, so one
archive is never fed from another journal.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable
from pathlib import Path

import msgspec

from archive import layout
from events.errors import AllotError

MANIFEST_VERSION = 1


class ArchiveError(AllotError):
    """The archive is unreadable, belongs to another journal, or is locked by another archiver."""


class FileEntry(msgspec.Struct, frozen=True, kw_only=True):
    path: str          # relative to the archive root
    records: int


class Batch(msgspec.Struct, frozen=True, kw_only=True):
    """One committed batch: offsets ``first..last`` of ``partition``."""

    v: int = MANIFEST_VERSION
    topic: str
    partition: int
    first: int
    last: int
    records: int
    files: list[FileEntry]
    origin: str | None = None       # with first == 0: digest of the record at offset 0
    written_at: float = 0.0         # wall clock, informative only


_decoder = msgspec.json.Decoder(Batch)


def origin_digest(value: bytes | None, headers: Iterable[tuple[str, bytes]]) -> str:
    """What identifies a journal partition: a digest of its first record (value and headers)."""
    h = hashlib.sha256(value or b"")
    for k, v in headers:
        h.update(b"\0" + k.encode() + b"\0" + v)
    return h.hexdigest()[:32]


class Manifest:
    """The committed batches of one archive root (read on open, appended by ``commit``)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.path = self.root / layout.MANIFEST
        self.batches: list[Batch] = []
        self.cut_bytes = 0                  # bytes of a torn last line found on open
        self._next: dict[int, int] = {}
        self._origin: dict[int, str] = {}
        self._topic: str | None = None
        self._read()

    def _read(self) -> None:
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        good = 0
        for n, line in enumerate(data.split(b"\n")):
            end = good + len(line) + 1
            if not line.strip():
                good = min(end, len(data))
                continue
            try:
                batch = _decoder.decode(line)
            except msgspec.DecodeError as exc:
                if end >= len(data):         # the last line, cut by a crash: not a commit
                    self.cut_bytes = len(data) - good
                    break
                raise ArchiveError(f"{self.path}: line {n + 1} is not a batch: {exc}") from None
            if end > len(data):              # no newline after it: the append was cut
                self.cut_bytes = len(data) - good
                break
            self._add(batch)
            good = end

    def _add(self, batch: Batch) -> None:
        expected = self._next.get(batch.partition, 0)
        if batch.first != expected:
            raise ArchiveError(
                f"{self.path}: partition {batch.partition} batch starts at {batch.first}, "
                f"expected {expected} (the manifest has a hole or an overlap)")
        if self._topic is None:
            self._topic = batch.topic
        self._next[batch.partition] = batch.last + 1
        if batch.origin is not None:
            self._origin[batch.partition] = batch.origin
        self.batches.append(batch)

    @property
    def topic(self) -> str | None:
        """The journal topic this archive was fed from (None while empty)."""
        return self._topic

    def next_offset(self, partition: int) -> int:
        """The first offset of ``partition`` not archived yet."""
        return self._next.get(partition, 0)

    def origin(self, partition: int) -> str | None:
        return self._origin.get(partition)

    def partitions(self) -> list[int]:
        return sorted(self._next)

    def records(self) -> int:
        return sum(b.records for b in self.batches)

    def files(self, partition: int | None = None) -> list[tuple[Batch, FileEntry]]:
        """Committed files (of one partition, or all) in commit order."""
        return [(b, f) for b in self.batches if partition is None or b.partition == partition
                for f in b.files]

    def recover(self) -> tuple[int, int]:
        """Finish or undo what a crash left: (temporary files renamed, deleted)."""
        if self.cut_bytes:
            with open(self.path, "r+b") as fh:
                fh.truncate(self.path.stat().st_size - self.cut_bytes)
                fh.flush()
                os.fsync(fh.fileno())
            self.cut_bytes = 0
        committed = {f.path for _, f in self.files()}
        renamed = deleted = 0
        for sub in (layout.JOURNAL_DIR, layout.CLAIMS_DIR):
            base = self.root / sub
            if not base.exists():
                continue
            for tmp in base.rglob("*" + layout.TMP_SUFFIX):
                final = tmp.with_name(tmp.name[: -len(layout.TMP_SUFFIX)])
                if str(final.relative_to(self.root)) in committed:
                    os.replace(tmp, final)
                    renamed += 1
                else:
                    tmp.unlink()
                    deleted += 1
        missing = [p for p in committed if not (self.root / p).exists()]
        if missing:
            raise ArchiveError(f"{self.root}: {len(missing)} committed file(s) are missing, "
                               f"e.g. {missing[0]}")
        return renamed, deleted

    def commit(self, batch: Batch, after_line: Callable[[], None] | None = None) -> None:
        """Append ``batch`` durably (the commit point), then rename its files into place."""
        self._add(batch)
        line = msgspec.json.encode(batch) + b"\n"
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.path, "ab") as fh:
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())
        if after_line is not None:
            after_line()
        for f in batch.files:
            final = self.root / f.path
            os.replace(layout.temp_of(final), final)


__all__ = ["ArchiveError", "Batch", "FileEntry", "Manifest", "origin_digest"]
