"""Where a submission's latency goes: the benchmark's clocks joined with the worker's batch trace.

Each submission is published at ``sent`` (the client's clock), lands at inbox
offset ``o``, and its decision (the first scheduling cycle that covers ``o``)
is read back from the journal at ``read``. The worker's trace
(``streams.batch_trace``, setting ``trace_file``) says which batch handled
``o`` and which cycle covered it, with the times of their stages on the same
machine-wide monotonic clock. The latency then splits into stages that add up
exactly:

- ``broker_fetch``: publish -> the worker's batch took it, minus the time the
  worker was busy with earlier batches (producer linger, the broker, the
  consumer's fetch wait);
- ``worker_busy``: of that, the time the worker was handling earlier batches;
- ``batch_inputs``: the batch's start -> the cycle's start, when the cycle ran
  in the same batch (decoding, verifying and applying the batch's records);
- ``cycle_held``: the same, when the cycle ran in a later batch
  (``cycle_busy_share`` held it back; later batches' handling included);
- ``cycle``: the scheduling cycle itself;
- ``seal``: the cycle's end -> the journal records sealed (other cycles of the
  batch included);
- ``produce_acks``: sealed -> every record of the batch acknowledged (acks=all);
- ``observe``: acknowledged -> read back by the benchmark (its consumer's fetch
  wait: a measuring cost, not the worker's).

``gc`` is the collector's time inside the batches from the submission's to its
cycle's (already inside the stages above).
"""

from __future__ import annotations

import bisect
import statistics
from typing import Any

STAGES = ("worker_busy", "broker_fetch", "batch_inputs", "cycle_held", "cycle", "seal",
          "produce_acks", "observe")


class Trace:
    """The worker's batches for one partition, indexed for the join."""

    def __init__(self, batches: list[dict[str, Any]], partition: int) -> None:
        key = str(partition)
        self.batches = sorted((b for b in batches if "acked" in b), key=lambda b: b["h0"])
        self.with_p = [(b["recs"][key][0], b["recs"][key][1], i)
                       for i, b in enumerate(self.batches) if key in b["recs"]]
        self.firsts = [x[0] for x in self.with_p]
        # (start, end, covers, batch index, decided) of every cycle, in time order.
        self.cycles = sorted((c[2], c[3], c[1], i, c[4]) for i, b in enumerate(self.batches)
                             for c in b["cycles"])
        self.cycle_starts = [c[0] for c in self.cycles]
        self.ends = [b["end"] for b in self.batches]

    def batch_of(self, offset: int) -> int | None:
        j = bisect.bisect_right(self.firsts, offset) - 1
        if j < 0 or offset > self.with_p[j][1]:
            return None
        return self.with_p[j][2]

    def cycle_after(self, b: int, offset: int) -> tuple[float, float, int, int, int] | None:
        j = bisect.bisect_left(self.cycle_starts, self.batches[b]["h0"])
        while j < len(self.cycles):
            c = self.cycles[j]
            if c[2] >= offset:
                return c
            j += 1
        return None

    def busy(self, t0: float, t1: float, before: int) -> float:
        """Time within [t0, t1] the worker spent handling batches before index ``before``."""
        total = 0.0
        i = bisect.bisect_left(self.ends, t0)
        while i < before:
            b = self.batches[i]
            total += max(0.0, min(t1, b["end"]) - max(t0, b["h0"]))
            i += 1
        return total


def split(trace: Trace, sent: float, offset: int, read: float) -> dict[str, float] | None:
    """One submission's latency by stage (seconds), or None if the trace lacks it."""
    b = trace.batch_of(offset)
    if b is None:
        return None
    c = trace.cycle_after(b, offset)
    if c is None:
        return None
    t_c0, t_c1, _, cb, _ = c
    B, C = trace.batches[b], trace.batches[cb]
    to_worker = B["h0"] - sent
    busy = trace.busy(sent, B["h0"], b)
    sealed = C.get("sealed", C["cycled"])
    out = {"worker_busy": busy, "broker_fetch": to_worker - busy,
           "batch_inputs": t_c0 - B["h0"] if cb == b else 0.0,
           "cycle_held": t_c0 - B["h0"] if cb != b else 0.0,
           "cycle": t_c1 - t_c0, "seal": sealed - t_c1, "produce_acks": C["acked"] - sealed,
           "observe": read - C["acked"],
           "gc": sum(trace.batches[i]["gc_s"] for i in range(b, cb + 1)),
           "total": read - sent}
    return out


def breakdown(batches: list[dict[str, Any]], partition: int,
              subs: list[tuple[float, int, float]], tail: float = 0.02) -> dict[str, Any]:
    """Mean stage times (ms) over all submissions and over the slowest ``tail`` of them.

    ``subs``: (sent, inbox offset, decision read) per submission. Means, not
    medians, so that the stages add up to the mean total.
    """
    trace = Trace(batches, partition)
    rows = [r for s in subs if (r := split(trace, *s)) is not None]
    if not rows:
        return {"joined": 0}
    rows.sort(key=lambda r: r["total"])
    slow = rows[max(0, int(len(rows) * (1 - tail))):]

    def mean_ms(rs: list[dict[str, float]]) -> dict[str, float]:
        return {k: round(1000 * statistics.fmean(r[k] for r in rs), 1)
                for k in (*STAGES, "gc", "total")}

    # The batches of the phase: their sizes and how often a cycle was held back.
    t0, t1 = min(s[0] for s in subs), max(s[2] for s in subs)
    phase = [x for x in trace.batches if t0 <= x["h0"] <= t1]
    sizes = [sum(r[2] for r in x["recs"].values()) for x in phase]
    cycles = [c for x in phase for c in x["cycles"]]
    cpu = [c[5] for c in cycles if len(c) > 5]
    wall = sum(x["end"] - x["h0"] for x in phase)
    acked = sorted(r["total"] - r["observe"] for r in rows)
    return {"joined": len(rows), "all_mean_ms": mean_ms(rows),
            # Publish -> the decision acknowledged by the broker (the journal holds it): the
            # latency without the benchmark's own read back.
            "acked_p50_ms": round(1000 * acked[len(acked) // 2], 1),
            "acked_p99_ms": round(1000 * acked[min(len(acked) - 1, int(0.99 * len(acked)))], 1),
            f"slowest_{tail:.0%}_mean_ms": mean_ms(slow),
            "batches": len(phase), "records_per_batch_median": statistics.median(sizes or [0]),
            "records_per_batch_max": max(sizes or [0]),
            "cycles": len(cycles), "cycle_ms_median": round(1000 * statistics.median(
                [c[3] - c[2] for c in cycles] or [0]), 1),
            "cycle_ms_max": round(1000 * max([c[3] - c[2] for c in cycles] or [0]), 1),
            "cycle_cpu_ms_median": round(1000 * statistics.median(cpu), 1) if cpu else None,
            # The loop thread's CPU over the wall time of its batches: below 1, it waited
            # for a core (other processes), and every stage above stretched by as much.
            "batch_cpu_per_wall": round(sum(x.get("cpu_s", 0.0) for x in phase) / wall, 2)
            if wall else None,
            "held_batches": sum(1 for x in phase if x["held"]),
            "gc_ms_total": round(1000 * sum(x["gc_s"] for x in phase), 1),
            "gc_gen2": sum(x["gc_n"][2] for x in phase)}
