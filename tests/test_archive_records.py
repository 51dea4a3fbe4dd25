"""archive_records: journal records in hand, archived with the archiver's files and commits."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from archive.events import write_events
from archive.manifest import ArchiveError, Manifest
from archive.writer import archive_records
from events import encode
from events.factory import Inputs
from streams.records import KIND_CLAIM, KIND_INPUT, Claim, encode_claim, journal_headers

T0_MS = 1_767_225_600_000


def _records(first: int, n: int) -> list[tuple[int, int, bytes, bytes, list[tuple[str, bytes]]]]:
    """A claim at offset 0 (when ``first`` is 0), then ticks, one a minute, a day apart every 10."""
    mk = Inputs(cluster="c1", prefix="t")
    out = []
    for offset in range(first, first + n):
        if offset == 0:
            value = encode_claim(Claim(token="tok", worker="w", partition=0, at=0.0))
            out.append((0, T0_MS, b"claim", value, journal_headers(KIND_CLAIM, "tok")))
            continue
        at = T0_MS // 1000 + offset * 60 + (offset // 10) * 86_400
        mk.n = offset
        value = encode(mk.tick(at))
        out.append((offset, T0_MS + offset, b"c1", value, journal_headers(KIND_INPUT, "tok", offset)))
    return out


def test_records_are_archived_in_batches_and_a_second_call_resumes(tmp_path: Path) -> None:
    stats = archive_records(tmp_path, _records(0, 25), flush_records=10)
    assert (stats.records, stats.batches) == (25, 3)
    stats = archive_records(tmp_path, _records(25, 5), flush_records=10)
    assert (stats.records, stats.batches) == (5, 1)
    manifest = Manifest(tmp_path)
    assert manifest.records() == 30
    assert manifest.next_offset(0) == 30
    # Days apart: one batch spans several day directories, and reads back in offset order.
    assert len({f.path.split("/")[2] for _, f in manifest.files(0) if f.path.startswith("journal/")}) == 3
    out = io.BytesIO()
    report = write_events(tmp_path, out)
    assert report.events == report.inputs == 29
    ids = [line.split(b'"id":"', 1)[1].split(b'"', 1)[0] for line in out.getvalue().splitlines()]
    assert ids == [f"t{i}".encode() for i in range(2, 31)]   # the factory counts from n + 1


def test_a_gap_in_the_offsets_is_refused_and_commits_nothing_of_its_batch(tmp_path: Path) -> None:
    archive_records(tmp_path, _records(0, 10), flush_records=100)
    with pytest.raises(ArchiveError, match="offset 12 after 9"):
        archive_records(tmp_path, _records(12, 5), flush_records=100)
    manifest = Manifest(tmp_path)
    assert manifest.records() == 10
    assert manifest.next_offset(0) == 10
