"""bench_audit's generated log: each segment copy ends with nothing running, so copies add no load."""

from __future__ import annotations

from pathlib import Path

from audit import open_db, summary
from audit.load import load
from benchmarks.bench_audit import build_log, simulate_segment
from events import (
    InputRejected,
    WorkloadCancelled,
    WorkloadFinished,
    WorkloadPreempted,
    WorkloadStarted,
)


def test_a_segment_drains_and_the_engine_refuses_none_of_its_inputs() -> None:
    log = simulate_segment(seed=3, hours=24)
    # (Version 1 delivered finishes before the clock reached them: refused as future_time,
    # they left their work running for good.)
    assert not [e for e in log if isinstance(e, InputRejected)]
    # Every run ends: a workload's last run event is never a start.
    last: dict[str, type] = {}
    for e in log:
        if isinstance(e, WorkloadStarted | WorkloadFinished | WorkloadCancelled | WorkloadPreempted):
            last[e.workload] = type(e)
    assert last and WorkloadStarted not in set(last.values())


def test_occupancy_does_not_grow_with_the_number_of_copies(tmp_path: Path,
                                                          monkeypatch: object) -> None:
    import benchmarks.bench_audit as ba

    segment = simulate_segment(seed=3, hours=24)
    monkeypatch.setattr(ba, "simulate_segment", lambda seed=11: segment)  # type: ignore[attr-defined]
    occupancy = []
    for copies in (1, 4):
        path = tmp_path / f"log{copies}.jsonl"
        build_log(path, target=len(segment) * copies)
        con = open_db(tmp_path / f"a{copies}.duckdb")
        load(con, path, "bench")
        occupancy.append(summary(con, "bench")["occupancy"])
    one, four = occupancy
    assert abs(four - one) < 0.05 * one, occupancy
