"""Benchmark: the second lab's scale, about 10,000 GPUs (scenarios/scale-10k.toml).

Two figures, both on the scale scenario's own cluster, tree and workload classes:

- **decide() with 20,000 pending.** The state is a simulation of the scenario
  run for ``--days`` (default 2) and folded from its log, so hosts, usage,
  running work and protections are what the scenario produces; then the
  scenario's later submissions are submitted at that moment until 20,000
  workloads are pending. Timed as in bench_core's steady case: before each
  timed cycle one running workload finishes and one new one arrives, 30 s
  apart; the median over ``--cycles`` (default 50) cycles is reported, target
  <= 20 ms. The same run's baseline is the cost of the fair-share order alone
  on that state, so the ratio is machine-independent.
- **Fragmentation as stranded GPUs / capacity**, from a full run's log
  (``--log``: an events.jsonl of scale-10k, e.g. from ``allot simulate``),
  through the audit's views: next to the second lab's 8 % (15 % before).

Usage: python -m benchmarks.bench_scale [--days D] [--cycles N] [--clock wall|cpu]
       [--log LOG --run NAME]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from pathlib import Path

import msgspec

from benchmarks.common import machine
from events.factory import Inputs
from scheduler import Engine, decide
from scheduler.index.fair_share_order import Ranking, commitments
from scheduler.replay import fold_log
from simulator.driver import Simulation, load_sources
from simulator.scenario import load_scenario

CLOCK = time.perf_counter  # what cycles are timed with (--clock)
SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "scale-10k.toml"
PENDING = 20_000


def build(days: float) -> tuple[Engine, int]:
    """The scenario's state after ``days``, topped up to 20,000 pending. Returns it and the epoch."""
    scenario = load_scenario(SCENARIO)
    full = load_sources(scenario, SCENARIO.parent)
    short = msgspec.structs.replace(scenario, horizon_days=days)
    result = Simulation(short, "allot", SCENARIO.parent, full).run()
    eng = fold_log(result.log)
    st = eng.state
    mk = Inputs(cluster=scenario.cluster.id, prefix="top", source="bench")
    now = st.now
    later = [w for w in full.workloads if w.submit_at > short.horizon_s]
    for w in later:
        if st.workloads.pending_count() >= PENDING:
            break
        eng.process(mk.submit(w.workload, w.budget, w.gpus, w.min_runtime_s, at=now, user=w.user,
                              hosts=w.hosts, resumable=w.resumable, priority=w.priority,
                              kind=w.kind))
    return eng, scenario.epoch


def steady(eng: Engine, cycles: int, seed: int = 1) -> tuple[list[float], int]:
    """decide() times over ``cycles`` production-like cycles, run on ``eng`` itself (it moves on:
    a deep copy would not do under the compiled core, whose objects cannot be copied that way)."""
    e2 = eng
    st = e2.state
    mk = Inputs(cluster=st.cluster, prefix="st", source="bench")
    rng = random.Random(seed)
    t = st.now
    leaves = st.budget.leaves()
    # Settle the top-up first: cycles a second apart until one decides almost
    # nothing (each cycle's preemption searches are bounded, so a burst of
    # 20,000 arrivals takes several cycles to absorb).
    for _ in range(200):
        t += 1
        out = e2.process(mk.tick(t))
        if out is not None and len(out) <= 2:
            break
    times, decided = [], 0
    for step in range(cycles):
        t += 30
        e2.process(mk.tick(t, cycle=False))
        running = sorted(st.workloads.running)
        e2.process(mk.finish(rng.choice(running), at=t))
        e2.process(mk.submit(f"st{step}", rng.choice(leaves), rng.choice([1, 2, 4, 8]),
                             rng.choice([0, 900, 3600]), at=t))
        t0 = CLOCK()
        out = decide(st, "bench")
        times.append(CLOCK() - t0)
        decided += len(out)
        e2.process(mk.tick(t))
    return times, decided


def fragmentation(log: Path, run: str) -> None:
    from audit.load import load_log, open_db
    from audit.report import summary

    con = open_db(":memory:")
    load_log(con, log, run=run)
    s = summary(con, run)
    stranded = s.get("stranded_share", s.get("fragmentation"))
    print(f"fragmentation ({run}): {stranded if stranded is None else f'{100 * stranded:.1f} %'} "
          f"of capacity stranded (second lab: 8 %, 15 % before); occupancy "
          f"{100 * s['occupancy']:.1f} %")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--days", type=float, default=2.0, help="simulated days before the top-up")
    ap.add_argument("--cycles", type=int, default=50, help="timed cycles (median reported)")
    ap.add_argument("--log", type=Path, help="a scale-10k events.jsonl for the fragmentation figure")
    ap.add_argument("--run", default="allot", help="run name for --log")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="time cycles by wall clock (default) or process CPU time (steadier when shared)")
    args = ap.parse_args(argv)
    global CLOCK
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.2f}; clock {args.clock}")
    t0 = time.perf_counter()
    eng, _ = build(args.days)
    st = eng.state
    free = sum(h.free for h in st.cluster_state.hosts.values())
    print(f"state after {args.days:g} simulated days (built in {time.perf_counter() - t0:.0f} s): "
          f"{len(st.cluster_state.hosts)} hosts, {st.cluster_state.capacity} GPUs, "
          f"{len(st.budget.leaves())} leaves, {st.workloads.pending_count()} pending, "
          f"{len(st.workloads.running)} running, {free} GPUs free")
    # (The baseline first: the steady cycles move the engine on.)
    base = statistics.median(_timed(lambda: Ranking(st, commitments(st)).leaf_order())
                             for _ in range(max(5, args.cycles // 5)))
    times, decided = steady(eng, args.cycles)
    med = statistics.median(times)
    print(f"decide(), steady cycle with {PENDING:,} pending: median {med * 1e3:.1f} ms over "
          f"{args.cycles} cycles (p90 {sorted(times)[int(0.9 * (len(times) - 1))] * 1e3:.1f} ms, "
          f"{decided / args.cycles:.1f} decisions per cycle; target <= 20 ms)")
    print(f"baseline (fair-share order only): median {base * 1e3:.2f} ms; ratio {med / base:.1f}x")
    if args.log:
        fragmentation(args.log, args.run)


def _timed(fn: object) -> float:
    t0 = CLOCK()
    fn()  # type: ignore[operator]
    return CLOCK() - t0


if __name__ == "__main__":
    main()
