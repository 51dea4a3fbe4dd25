"""Benchmark: the issue-9 simulation targets, each run under both forms of the core, same run.

Targets (issue 9): the calibrated ai2-month in <= 10 s for one policy and seed;
the Philly trace (110 days) in <= 30 s for one policy at any capacity from 128
to 512 GPUs. Each case runs in a fresh subprocess under ``ALLOT_CORE=pure``
and under ``ALLOT_CORE=native`` (the compiled core, ``make native``), the two
forms alternating which goes first, for ``--rounds`` rounds. Printed: per case
and form the median process CPU time (on this shared 2-core machine CPU time
moves far less with other load than wall time; ``--clock wall`` for wall time),
the native/pure ratio (the machine-independent figure), the target, and
whether the two forms wrote the same log (sha256): a benchmark that also
checks it measured the same thing.

``--philly-hosts 24,32,40,48`` adds the Philly trace at those host counts (8
GPUs each) for both policies: the range between the two ends the issue names.

Usage: python -m benchmarks.bench_native [--rounds N] [--only SUBSTR] [--skip-pure]
       [--philly-hosts N,N,...] [--clock cpu|wall] [--json FILE]
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

# name -> (scenario, policy, days or None, hosts or None, target seconds)
CASES: dict[str, tuple[str, str, float | None, int | None, float]] = {
    "ai2-month/allot": ("ai2-month", "allot", None, None, 10.0),
    "ai2-month/baseline": ("ai2-month", "baseline", None, None, 10.0),
    "philly-128/allot": ("philly", "allot", None, 16, 30.0),
    "philly-128/baseline": ("philly", "baseline", None, 16, 30.0),
    "philly-512/allot": ("philly", "allot", None, 64, 30.0),
    "philly-512/baseline": ("philly", "baseline", None, 64, 30.0),
}

RUN = """
import hashlib, json, time
from pathlib import Path
import native
from benchmarks.common import scenario_at
from events import encode_lines
from simulator.driver import Simulation, load_sources
scenarios = Path({scenarios!r})
sc = scenario_at(scenarios / "{scenario}.toml", {days!r}, {hosts!r})
sources = load_sources(sc, scenarios)
sim = Simulation(sc, {policy!r}, scenarios, sources)
c0, w0 = time.process_time(), time.perf_counter()
result = sim.run()
cpu, wall = time.process_time() - c0, time.perf_counter() - w0
print(json.dumps({{"cpu": cpu, "wall": wall, "core": native.status().name,
                  "events": len(result.log), "cycles": result.cycles,
                  "sha": hashlib.sha256(encode_lines(result.log)).hexdigest()}}))
"""


def add_philly_sizes(hosts: list[int]) -> None:
    """Add the Philly trace at each of ``hosts`` (8-GPU hosts), both policies, to CASES."""
    for n in hosts:
        if n < 16:
            raise SystemExit(f"--philly-hosts: {n} hosts cannot run the trace's 128-GPU gangs (>= 16)")
        for policy in ("allot", "baseline"):
            CASES[f"philly-{8 * n}/{policy}"] = ("philly", policy, None, n, 30.0)


def _host_counts(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected host counts like 24,32,40: {text!r}") from None


def run_case(name: str, form: str) -> dict[str, object]:
    scenario, policy, days, hosts, _ = CASES[name]
    code = RUN.format(scenarios=str(HERE / "scenarios"), scenario=scenario, policy=policy,
                      days=days, hosts=hosts)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALLOT_CORE")}
    env["ALLOT_CORE"] = form
    out = subprocess.run([sys.executable, "-c", code], cwd=HERE, env=env, capture_output=True,
                         text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{name} ({form}) failed:\n{out.stderr[-2000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if result["core"] != form:
        raise SystemExit(f"{name}: asked for the {form} core, ran {result['core']}")
    return result


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="runs per case and form (median)")
    ap.add_argument("--only", default="", help="only the cases whose name contains this")
    ap.add_argument("--skip-pure", action="store_true", help="the compiled core only")
    ap.add_argument("--philly-hosts", type=_host_counts, default=[],
                    help="also the Philly trace at these host counts (8 GPUs each), e.g. 24,32,40,48")
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    ap.add_argument("--json", type=Path, default=None, help="also write every run here")
    args = ap.parse_args(argv)
    add_philly_sizes(args.philly_hosts)
    print(f"machine: {machine()}")
    forms = ["native"] if args.skip_pure else ["pure", "native"]
    names = [n for n in CASES if args.only in n]
    runs: dict[str, dict[str, list[dict[str, object]]]] = {n: {f: [] for f in forms} for n in names}
    for r in range(args.rounds):
        order = forms if r % 2 == 0 else forms[::-1]
        for name in names:
            for form in order:
                res = run_case(name, form)
                runs[name][form].append(res)
                print(f"round {r + 1} {name:22s} {form:6s} {res[args.clock]:7.1f} s "
                      f"({res['cycles']:,} cycles)", flush=True)
    print()
    print(f"{'case':22s} {'pure':>8s} {'native':>8s} {'ratio':>6s} {'target':>7s}  met  same log")
    for name in names:
        med = {f: statistics.median(float(x[args.clock]) for x in runs[name][f]) for f in forms}  # type: ignore[arg-type]
        shas = {str(x["sha"]) for f in forms for x in runs[name][f]}
        target = CASES[name][4]
        pure = f"{med['pure']:7.1f}s" if "pure" in med else "       -"
        ratio = f"{med['native'] / med['pure']:5.2f}x" if "pure" in med else "     -"
        print(f"{name:22s} {pure} {med['native']:7.1f}s {ratio} {target:6.0f}s  "
              f"{'yes' if med['native'] <= target else 'NO ':3s}  "
              f"{'yes' if len(shas) == 1 else 'NO: ' + ', '.join(sorted(shas))}")
    if args.json:
        args.json.write_text(json.dumps({"machine": machine(), "clock": args.clock, "runs": runs},
                                        indent=1))


if __name__ == "__main__":
    main()
