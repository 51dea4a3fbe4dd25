"""The batch trace, its join with a benchmark's clocks, the GC freezer, continuation tick ids."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

from benchmarks.live_breakdown import STAGES, Trace, breakdown, split
from streams import batch_trace
from streams.gc_freeze import GcFreezer
from streams.ticker import batch_cycle_id


def _batch(h0: float, first: int, last: int, cycles: list[list[float]], acked: float) -> dict:
    return {"poll0": h0 - 0.001, "poll1": h0, "h0": h0, "recs": {"3": [first, last, last - first + 1]},
            "cycles": cycles, "held": False, "inputs": h0 + 0.001, "cycled": acked - 0.004,
            "sealed": acked - 0.003, "sent": acked - 0.002, "acked": acked, "end": acked,
            "gc_s": 0.0, "gc_n": [0, 0, 0], "cpu_s": 0.0}


def test_a_submission_splits_into_stages_that_add_up() -> None:
    # Batch 0 (offsets 0-4) runs from 1.000 to 1.020; the submission at offset 7 was sent at
    # 1.010, waits for it, lands in batch 1 (5-9) at 1.021, whose cycle runs 1.025-1.033.
    batches = [_batch(1.000, 0, 4, [["batch", 4, 1.005, 1.012, 1, 0.007]], 1.020),
               _batch(1.021, 5, 9, [["batch", 9, 1.025, 1.033, 2, 0.008]], 1.040)]
    r = split(Trace(batches, 3), 1.010, 7, 1.043)
    assert r is not None
    assert abs(r["worker_busy"] - 0.010) < 1e-9      # 1.010 -> 1.020, batch 0 in progress
    assert abs(r["batch_inputs"] - 0.004) < 1e-9
    assert abs(r["cycle"] - 0.008) < 1e-9
    assert abs(r["observe"] - 0.003) < 1e-9
    assert abs(sum(r[k] for k in STAGES) - r["total"]) < 1e-9
    out = breakdown(batches, 3, [(1.010, 7, 1.043)])
    # The phase: batches that began between the first send and the last read (batch 1 only).
    assert out["joined"] == 1 and out["batches"] == 1 and out["cycles"] == 1


def test_a_cycle_in_a_later_batch_counts_as_held(tmp_path: Path) -> None:
    batches = [_batch(1.000, 0, 4, [], 1.010),
               _batch(1.011, 5, 6, [["batch", 6, 1.012, 1.020, 0, 0.008]], 1.025)]
    r = split(Trace(batches, 3), 0.999, 2, 1.030)
    assert r is not None and r["batch_inputs"] == 0 and abs(r["cycle_held"] - 0.012) < 1e-9
    # The trace file round-trips (a torn last line is dropped).
    path = tmp_path / "t.jsonl"
    t = batch_trace.BatchTrace(str(path))
    t.begin(0.0, 0.1)
    t.records(3, 0, 4, 5)
    t.cycle("batch", 4, 0.2, 0.3, 1, 0.1)
    t.mark("acked")
    t.end()
    t.close()
    with path.open("a") as fh:
        fh.write('{"torn')
    [b] = batch_trace.read(str(path))
    assert b["recs"] == {"3": [0, 4, 5]} and b["cycles"][0][0] == "batch" and "cpu_s" in b


def test_the_freezer_freezes_after_a_full_collection_only() -> None:
    f = GcFreezer()
    try:
        f.after_batch()
        assert f.freezes == 0
        gc.collect()
        f.after_batch()
        assert f.freezes == 1 and gc.get_freeze_count() > 0
        f.after_batch()
        assert f.freezes == 1
    finally:
        f.close()
        gc.unfreeze()


class _Node:
    """A plain object that can sit in a reference cycle (and be weakly referenced)."""

    def __init__(self) -> None:
        self.other: object = None


def test_a_cycle_that_died_frozen_is_collected_at_the_next_thaw() -> None:
    now = [0.0]
    f = GcFreezer(thaw_every_s=600, clock=lambda: now[0])
    try:
        a, b = _Node(), _Node()
        a.other, b.other = b, a
        gc.collect()
        f.after_batch()  # a and b are alive now: frozen with the rest
        assert f.freezes == 1 and f.thaws == 0
        dead = weakref.ref(a)
        del a, b  # a cycle: only a collection that reaches it frees it
        gc.collect()
        f.after_batch()
        assert dead() is not None and f.thaws == 0  # frozen: the collection skipped it
        now[0] = 601.0
        gc.collect()
        f.after_batch()
        assert dead() is None and f.thaws == 1 and f.freezes == 3
    finally:
        f.close()
        gc.unfreeze()


def test_continuation_ticks_have_ids_of_their_own() -> None:
    ids = {batch_cycle_id("c1", 41, n) for n in range(3)}
    assert ids == {"nudge:c1:41:batch", "nudge:c1:41:batch:1", "nudge:c1:41:batch:2"}
