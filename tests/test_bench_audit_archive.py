"""bench_audit_archive's archive builder: an archive of a log reads back as that log."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from archive.manifest import Manifest
from audit import open_db, summary
from audit.load import load
from benchmarks.bench_audit_archive import build_archive

GOLDEN = Path(__file__).parent / "golden"


def test_an_archive_built_from_a_log_loads_as_the_same_events_and_report(tmp_path: Path) -> None:
    log = GOLDEN / "gang_reservation.jsonl"
    lines = [x for x in log.read_bytes().splitlines() if x.strip()]
    root = tmp_path / "archive"
    assert build_archive(log, root, batch=7) == len(lines) + 1   # the claim, then every event
    manifest = Manifest(root)
    assert manifest.partitions() == [0]
    assert manifest.records() == len(lines) + 1
    con = open_db(tmp_path / "a.duckdb")
    assert load(con, log, "json").events == len(lines)
    assert load(con, root, "archive").events == len(lines)
    same = con.execute(
        "SELECT count(*) FROM (SELECT seq, type, id, \"at\" FROM events WHERE run = 'json' "
        "EXCEPT SELECT seq, type, id, \"at\" FROM events WHERE run = 'archive')").fetchone()
    assert same == (0,)
    # The same figures (sums of floats may differ in the last bit: DuckDB adds in parallel).
    assert _rounded({**summary(con, "archive"), "run": ""}) == _rounded({**summary(con, "json"),
                                                                      "run": ""})


def _rounded(x: Any) -> Any:
    if isinstance(x, float):
        return float(f"{x:.9g}")
    if isinstance(x, dict):
        return {k: _rounded(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_rounded(v) for v in x]
    return x
