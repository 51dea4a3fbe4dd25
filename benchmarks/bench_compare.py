"""Benchmark: this tree against another checkout, side by side, in the same run.

A speed figure on a shared machine means little alone; a ratio against a
baseline measured in the same minutes does. This script measures the same
things in two source trees (this one, and BEFORE, a checkout of the commit to
compare with, e.g. ``git worktree add --detach /tmp/before main``), round by
round, alternating which tree goes first, each measurement in a fresh
subprocess whose imports resolve to that tree. The measuring code and the
scenario file are this tree's (``bench_core.build`` / ``steady_cycles``, and
``--scenario``), so both trees run exactly the same workload.

Figures per round: decide() on the bench_core state (burst: median of
``--repeat`` runs; steady: median over 200 successive cycles), and, unless
``--skip-sim``, the simulation of ``--scenario`` (default: the shipped
ai2-month) under ``--policy`` (default allot). A tree older than a scenario's
format may not parse it: compare such a tree on a scenario it knows (the
pre-calibration ai2-month is ``scenarios/ai2-month-light.toml``). With
``--scale``, also bench_scale's steady decide() at 10,000 GPUs and 20,000
pending (``bench_scale.build`` / ``steady``: each measurement simulates
``--scale-days`` of scale-10k in its tree, then times ``--scale-cycles``
cycles; ``--skip-core`` leaves bench_core's cycles out). Times are the
process's CPU time by default (``--clock wall`` for wall time): on a machine
shared with other work, CPU time moves far less with the load. Do not edit
either tree while it runs. Printed: each round, then the medians and the
after/before ratios.

Usage: python -m benchmarks.bench_compare BEFORE [--rounds N] [--repeat N] [--skip-sim]
       [--scenario FILE] [--policy allot|baseline] [--clock cpu|wall]
       [--scale [--scale-days D] [--scale-cycles N]] [--skip-core]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from benchmarks.common import machine

HERE = Path(__file__).resolve().parent.parent

CORE = """
import importlib.util, json, statistics, time, types
clock = time.{clock}
spec = importlib.util.spec_from_file_location("bench_core_here", {bench!r})
bc = importlib.util.module_from_spec(spec); spec.loader.exec_module(bc)
bc.time = types.SimpleNamespace(perf_counter=clock)  # steady_cycles times with our clock
from scheduler import decide
eng, log = bc.build()
st = eng.state
for _ in range(2):
    decide(st, "bench")
times = []
for _ in range({repeat}):
    t0 = clock(); decide(st, "bench"); times.append(clock() - t0)
steady, _ = bc.steady_cycles(log)
print(json.dumps({{"burst_ms": statistics.median(times) * 1e3, "steady_ms": steady * 1e3}}))
"""

SCALE = """
import importlib.util, json, statistics, time
spec = importlib.util.spec_from_file_location("bench_scale_here", {bench!r})
bs = importlib.util.module_from_spec(spec); spec.loader.exec_module(bs)
bs.CLOCK = time.{clock}
eng, _ = bs.build({days!r})
times, decided = bs.steady(eng, {cycles!r})
print(json.dumps({{"scale_ms": statistics.median(times) * 1e3}}))
"""

SIM = """
import json, time, types
import simulator.driver as driver
driver.time = types.SimpleNamespace(perf_counter=time.{clock})  # wall_seconds on our clock
from pathlib import Path
from simulator.scenario import load_scenario
path = Path({scenario!r})
sc = load_scenario(path)
src = driver.load_sources(sc, path.parent)
r = driver.Simulation(sc, {policy!r}, path.parent, src).run()
print(json.dumps({{"sim_s": r.wall_seconds, "sim_events": len(r.log)}}))
"""


def _measure(tree: Path, code: str) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"}
    out = subprocess.run([sys.executable, "-c", code], cwd=tree, env=env, check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("before", type=Path, help="a checkout of the commit to compare with")
    ap.add_argument("--rounds", type=int, default=5, help="rounds, alternating the order")
    ap.add_argument("--repeat", type=int, default=50, help="burst decide() runs per round")
    ap.add_argument("--skip-sim", action="store_true", help="skip the simulation")
    ap.add_argument("--scenario", type=Path, default=HERE / "scenarios" / "ai2-month.toml",
                    help="the scenario to simulate (default: scenarios/ai2-month.toml)")
    ap.add_argument("--policy", choices=("allot", "baseline"), default="allot",
                    help="the policy to simulate (default: allot)")
    ap.add_argument("--scale", action="store_true",
                    help="also bench_scale's decide() at 10,000 GPUs and 20,000 pending")
    ap.add_argument("--scale-days", type=float, default=1.0,
                    help="simulated days before bench_scale's top-up (default 1)")
    ap.add_argument("--scale-cycles", type=int, default=30,
                    help="bench_scale's timed cycles per measurement (default 30)")
    ap.add_argument("--skip-core", action="store_true", help="skip bench_core's two cycles")
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                    help="process CPU time (default: steadier on a shared machine) or wall time")
    args = ap.parse_args(argv)
    before = args.before.resolve()
    trees = {"before": before, "after": HERE}
    clock = "process_time" if args.clock == "cpu" else "perf_counter"
    core = CORE.format(bench=str(HERE / "benchmarks" / "bench_core.py"), repeat=args.repeat,
                       clock=clock)
    sim = SIM.format(scenario=str(args.scenario.resolve()), clock=clock, policy=args.policy)
    scale = SCALE.format(bench=str(HERE / "benchmarks" / "bench_scale.py"), clock=clock,
                         days=args.scale_days, cycles=args.scale_cycles)
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.2f}")
    print(f"before: {before}\nafter:  {HERE}\nclock: {args.clock}")
    if not args.skip_sim:
        print(f"simulation: {args.scenario} under {args.policy}")
    if args.scale:
        print(f"scale: bench_scale after {args.scale_days:g} days, {args.scale_cycles} cycles")
    results: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    for r in range(args.rounds):
        order = ("before", "after") if r % 2 == 0 else ("after", "before")
        for name in order:
            fig = {} if args.skip_core else _measure(trees[name], core)
            if not args.skip_sim:
                fig.update(_measure(trees[name], sim))
            if args.scale:
                fig.update(_measure(trees[name], scale))
            results[name].append(fig)
            print(f"round {r + 1} {name:6s}: " + ", ".join(f"{k} {v:,.2f}" for k, v in fig.items()),
                  flush=True)
    # Noise on a shared machine only ever adds time, and drifts with the load: so
    # besides the medians, the ratio of the minima, and the median of the ratios
    # of the two measurements of each round (taken minutes apart, in turn).
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")
    print("after / before:       median before    median after   ratio   min ratio   paired ratio")
    for key in results["after"][0]:
        bs = [f[key] for f in results["before"]]
        as_ = [f[key] for f in results["after"]]
        b, a = statistics.median(bs), statistics.median(as_)
        paired = statistics.median(x / y for x, y in zip(as_, bs, strict=True))
        print(f"  {key:12s} {b:16,.3f} {a:15,.3f} {a / b:7.3f} {min(as_) / min(bs):11.3f} "
              f"{paired:14.3f}")


if __name__ == "__main__":
    main()
