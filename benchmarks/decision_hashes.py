"""Guard for performance work: sha256 of the event logs of a fixed set of runs.

A speed change to the core must change no decision. This script simulates a
fixed set of cases (the shipped scenarios, some at a shorter horizon or another
capacity, both policies), hashes each event log (``events.encode_lines``, the
bytes ``allot simulate`` writes) and either records the hashes (``--record
FILE``) or compares them with a recorded file (``--check FILE``, exit 1 on any
difference). Each case runs in a worker process (``--workers``); wall and CPU
seconds per case are printed, a rough speed figure on the side.

The recorded hashes of the current policy are checked in
(``benchmarks/decision_hashes.json``, the default of ``--check``);
``tests/test_decision_hashes.py`` re-derives the demo's in the suite.

Usage: python -m benchmarks.decision_hashes (--record FILE | --check [FILE])
       [--workers N] [--only SUBSTR] [--policy allot|baseline]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
# The hashes of the current policy, checked in: a policy change re-records them.
RECORDED = Path(__file__).resolve().parent / "decision_hashes.json"

# name -> (scenario file, horizon days override or None, hosts override or None)
CASES: dict[str, tuple[str, float | None, int | None]] = {
    "demo": ("demo", None, None),
    "ai2-month-light": ("ai2-month-light", None, None),
    "ai2-month": ("ai2-month", None, None),
    "philly-20d": ("philly", 20, None),
    "philly-20d-64h": ("philly", 20, 64),
    "philly-50d": ("philly", 50, None),
    "philly-50d-24h": ("philly", 50, 24),
    "scale-10k-2d": ("scale-10k", 2, None),
}
POLICIES = ("allot", "baseline")


def run_case(name: str, policy: str) -> tuple[str, str, str, float, float, int]:
    """(name, policy, sha256 of the log, wall seconds, CPU seconds, events)."""
    from benchmarks.common import scenario_at
    from events import encode_lines
    from simulator.driver import Simulation

    file, days, hosts = CASES[name]
    scenario = scenario_at(SCENARIOS / f"{file}.toml", days, hosts)
    t0, c0 = time.perf_counter(), time.process_time()
    log = Simulation(scenario, policy, SCENARIOS).run().log
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return name, policy, hashlib.sha256(encode_lines(log)).hexdigest(), wall, cpu, len(log)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--record", type=Path, help="write the hashes to FILE")
    mode.add_argument("--check", type=Path, nargs="?", const=RECORDED,
                      help=f"compare with the hashes in FILE (default: {RECORDED.name})")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--only", default="", help="only cases whose name contains SUBSTR")
    ap.add_argument("--policy", choices=POLICIES, help="only this policy's cases (default: both)")
    args = ap.parse_args(argv)
    jobs = [(n, p) for n in CASES for p in POLICIES
            if args.only in n and args.policy in (None, p)]
    if not jobs:  # (a check of nothing would say "all identical")
        ap.error(f"no case's name contains {args.only!r}; the cases: {', '.join(CASES)}")
    # Longest first, so the pool finishes together.
    jobs.sort(key=lambda j: j[0] not in ("ai2-month", "scale-10k-2d", "philly-50d-24h"))
    got: dict[str, str] = {}
    with ProcessPoolExecutor(args.workers) as pool:
        for name, policy, digest, wall, cpu, n in pool.map(run_case, *zip(*jobs, strict=True)):
            got[f"{name}/{policy}"] = digest
            print(f"{name + '/' + policy:28s} {digest[:16]}  {wall:7.1f} s wall  {cpu:7.1f} s CPU  "
                  f"{n:,} events", flush=True)
    if args.record:
        args.record.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
        return 0
    want = json.loads(args.check.read_text())
    # (With --only or --policy, only the cases run are compared.)
    bad = [k for k in got if want.get(k) != got[k]]
    for k in bad:
        print(f"DIFFERENT: {k}")
    print("all identical" if not bad else f"{len(bad)} of {len(got)} differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
