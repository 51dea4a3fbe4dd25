"""Benchmark: simulation speed, replay speed, on the shipped scenarios.

Targets (issue 3): ai2-month in <= 10 s wall for one policy (>= 250,000x real
time); the Philly trace in <= 30 s; replay >= 200,000 events/s.

Two replays are measured on the ai2-month allot log:
- *fold*: rebuild the state from the log (State.apply on every event): what a
  restarted processor or an analyst's replay does;
- *verify*: re-derive every decision from the inputs and compare (allot audit
  replay), which re-runs every scheduling cycle and so costs about as much as
  the simulation itself.
The fold is also this run's baseline: simulate/fold is a machine-independent ratio.

Usage: python -m benchmarks.bench_sim [--repeat N] [--skip-philly]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from benchmarks.common import machine
from scheduler.replay import fold_log, verify_log
from simulator.driver import Simulation, load_sources
from simulator.scenario import load_scenario

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


def sim_times(name: str, policy: str, repeat: int) -> tuple[float, list, int]:
    scenario = load_scenario(SCENARIOS / f"{name}.toml")
    sources = load_sources(scenario, SCENARIOS)
    walls, log = [], []
    for _ in range(repeat):
        result = Simulation(scenario, policy, SCENARIOS, sources).run()
        walls.append(result.wall_seconds)
        log = result.log
    return statistics.median(walls), log, scenario.horizon_s


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement (median)")
    ap.add_argument("--skip-philly", action="store_true", help="skip the 110-day Philly trace")
    args = ap.parse_args(argv)
    print(f"machine: {machine()}")
    log = []
    for policy in ("allot", "baseline"):
        wall, plog, horizon = sim_times("ai2-month", policy, args.repeat)
        if policy == "allot":
            log = plog
        print(f"ai2-month {policy:8s}: median {wall:5.1f} s wall over {args.repeat} runs, "
              f"{len(plog):,} events, {horizon / wall:,.0f}x real time "
              f"(target <= 10 s, >= 250,000x)")

    def fold() -> float:
        t0 = time.perf_counter()
        fold_log(log)
        return time.perf_counter() - t0

    fold_s = statistics.median(fold() for _ in range(args.repeat))
    t0 = time.perf_counter()
    result = verify_log(enumerate(log, 1))
    verify_s = time.perf_counter() - t0
    assert result.ok, result.divergence
    print(f"replay, fold only      : {len(log) / fold_s:,.0f} events/s (median of {args.repeat}; "
          f"target >= 200,000)")
    print(f"replay, verify all     : {len(log) / verify_s:,.0f} events/s "
          f"(re-derives {result.decisions:,} decisions; re-runs every cycle)")
    sim_allot = sim_times("ai2-month", "allot", 1)[0]
    print(f"ratio simulate / fold  : {sim_allot / fold_s:.1f}x (machine-independent)")
    if not args.skip_philly:
        for policy in ("allot", "baseline"):
            wall, plog, horizon = sim_times("philly", policy, 1)
            print(f"philly   {policy:8s}: {wall:5.1f} s wall, {len(plog):,} events, "
                  f"{horizon / wall:,.0f}x real time (target <= 30 s)")


if __name__ == "__main__":
    main()
