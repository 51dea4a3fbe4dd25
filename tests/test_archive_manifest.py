"""The archive's manifest without a broker: what a crash leaves is finished or undone on open."""

from __future__ import annotations

from pathlib import Path

import pytest

from archive import layout
from archive.manifest import ArchiveError, Batch, FileEntry, Manifest


def _batch(p: int, first: int, last: int, path: str) -> Batch:
    return Batch(topic="allot.journal", partition=p, first=first, last=last,
                 records=last - first + 1, files=[FileEntry(path=path, records=last - first + 1)])


def _tmp_file(root: Path, rel: str) -> Path:
    tmp = layout.temp_of(root / rel)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    tmp.write_bytes(b"parquet bytes")
    return tmp


def test_commit_then_reopen_resumes_after_the_last_batch(tmp_path: Path) -> None:
    m = Manifest(tmp_path)
    rel = layout.journal_path("c1", "2026-01-01", 0, 0, 9)
    _tmp_file(tmp_path, rel)
    m.commit(_batch(0, 0, 9, rel))
    assert (tmp_path / rel).exists() and not layout.temp_of(tmp_path / rel).exists()
    again = Manifest(tmp_path)
    assert again.next_offset(0) == 10 and again.next_offset(1) == 0 and again.records() == 10


def test_a_torn_last_line_is_not_a_commit_and_is_cut(tmp_path: Path) -> None:
    m = Manifest(tmp_path)
    rel = layout.journal_path("c1", "2026-01-01", 0, 0, 9)
    _tmp_file(tmp_path, rel)
    m.commit(_batch(0, 0, 9, rel))
    with open(tmp_path / layout.MANIFEST, "ab") as fh:
        fh.write(b'{"topic": "allot.journal", "partition": 0, "fir')
    orphan = _tmp_file(tmp_path, layout.journal_path("c1", "2026-01-01", 0, 10, 19))
    m2 = Manifest(tmp_path)
    assert m2.next_offset(0) == 10 and m2.cut_bytes > 0
    assert m2.recover() == (0, 1)             # the uncommitted batch's file is deleted
    assert not orphan.exists()
    assert (tmp_path / layout.MANIFEST).read_bytes().endswith(b"\n")
    assert Manifest(tmp_path).cut_bytes == 0


def test_a_committed_batch_whose_files_were_not_renamed_is_finished(tmp_path: Path) -> None:
    m = Manifest(tmp_path)
    rel = layout.claims_path("2026-01-01", 2, 0, 4)
    tmp = _tmp_file(tmp_path, rel)
    def killed() -> None:
        raise KeyboardInterrupt      # stands in for SIGKILL after the line was written

    with pytest.raises(KeyboardInterrupt):
        m.commit(_batch(2, 0, 4, rel), after_line=killed)
    assert tmp.exists() and not (tmp_path / rel).exists()   # "killed" after the line
    assert Manifest(tmp_path).recover() == (1, 0)
    assert (tmp_path / rel).exists()


def test_a_hole_or_overlap_in_the_manifest_is_an_error(tmp_path: Path) -> None:
    m = Manifest(tmp_path)
    rel = layout.journal_path("c1", "2026-01-01", 0, 0, 9)
    _tmp_file(tmp_path, rel)
    m.commit(_batch(0, 0, 9, rel))
    with pytest.raises(ArchiveError, match="expected 10"):
        m.commit(_batch(0, 12, 20, "x"))
