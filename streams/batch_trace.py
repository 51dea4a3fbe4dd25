"""The batch trace: when each stage of each worker batch began and ended (``trace_file``).

A measuring aid, off by default. With ``trace_file`` set, the worker appends one
JSON line per handled batch: the poll that fetched it, the inbox offsets it
held per partition, the time spent on its records, each scheduling cycle it
ran (a batch cycle or an inbox tick: its start, end and the last inbox offset
it covers), whether a due cycle was held back (``cycle_busy_share``), sealing,
produce and acks, and the garbage collector's pauses during it. Times are
``time.perf_counter()``: on Linux that is ``CLOCK_MONOTONIC``, one clock for
every process of the machine, so a benchmark joins them with its own send and
receive times (benchmarks/bench_live_scale.py, ``--trace``) and splits each
submission's latency into stages.

Cost: a few clock reads per batch and per cycle, one JSON line per batch,
and a ``gc.callbacks`` hook (two clock reads per collection). ``cpu_s`` (the
batch's) and each cycle's last field are the loop thread's CPU time
(``time.thread_time``): against wall time, how long it waited for a core.
"""

from __future__ import annotations

import gc
import json
import time
from typing import IO, Any


class BatchTrace:
    """One worker's trace file, and the stages of the batch being handled."""

    def __init__(self, path: str) -> None:
        self._fh: IO[str] = open(path, "a", buffering=1)  # noqa: SIM115 (line-buffered: read while running)
        self.batch: dict[str, Any] = {}
        self._gc_t0 = 0.0
        self._gc_s = 0.0
        self._gc_n = [0, 0, 0]
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_t0 = time.perf_counter()
        else:
            self._gc_s += time.perf_counter() - self._gc_t0
            self._gc_n[int(info.get("generation", 0))] += 1

    def begin(self, poll0: float, poll1: float) -> None:
        """A batch fetched between ``poll0`` and ``poll1`` is about to be handled."""
        self.batch = {"poll0": poll0, "poll1": poll1, "h0": time.perf_counter(), "recs": {},
                      "cycles": [], "held": False, "cpu0": time.thread_time()}
        self._gc_s = 0.0
        self._gc_n = [0, 0, 0]

    def records(self, partition: int, first: int, last: int, n: int) -> None:
        self.batch["recs"][str(partition)] = [first, last, n]

    def cycle(self, kind: str, covers: int, t0: float, t1: float, decided: int,
              cpu_s: float) -> None:
        """A cycle (``batch``: the worker's own tick; ``inbox``: a tick read from the inbox).

        ``cpu_s``: the loop thread's CPU time during it (against ``t1 - t0``: how
        long it waited for a core).
        """
        self.batch["cycles"].append([kind, covers, t0, t1, decided, cpu_s])

    def mark(self, stage: str) -> None:
        self.batch[stage] = time.perf_counter()

    def end(self) -> None:
        b = self.batch
        b["end"] = time.perf_counter()
        b["cpu_s"] = time.thread_time() - b.pop("cpu0")
        b["gc_s"] = self._gc_s
        b["gc_n"] = list(self._gc_n)
        self._fh.write(json.dumps(b, separators=(",", ":")) + "\n")

    def close(self) -> None:
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        self._fh.close()


def read(path: str) -> list[dict[str, Any]]:
    """The batches of a trace file, in order (a line cut short by a kill is dropped)."""
    out = []
    with open(path) as fh:
        for line in fh:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out
