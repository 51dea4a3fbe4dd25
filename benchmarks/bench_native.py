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
GPUs each) for both policies: the range between the two ends the issue names;
``--philly-hosts 16-64`` every host count from 128 to 512 GPUs.

Usage: python -m benchmarks.bench_native [--rounds N] [--only SUBSTR] [--skip-pure]
       [--philly-hosts N,N,...|A-B] [--clock cpu|wall] [--json FILE] [--plot PNG]
       python -m benchmarks.bench_native --from-json FILE [--plot PNG]   (report saved runs)
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


def host_counts(text: str) -> list[int]:
    """``24,32,40`` or ranges ``16-64`` (every host count in it, both ends included), mixed."""
    counts: list[int] = []
    try:
        for part in (p.strip() for p in text.split(",")):
            if not part:
                continue
            low, dash, high = part.partition("-")
            if not dash:
                counts.append(int(part))
            elif int(low) > int(high):
                raise ValueError(part)
            else:
                counts.extend(range(int(low), int(high) + 1))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected host counts like 24,32,40 or a range like 16-64: {text!r}") from None
    return list(dict.fromkeys(counts))  # (each once, in the order given)


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


Runs = dict[str, dict[str, list[dict[str, object]]]]  # case -> form -> one dict per run


def _median(runs: Runs, name: str, form: str, clock: str) -> float:
    return statistics.median(float(x[clock]) for x in runs[name][form])  # type: ignore[arg-type]


def measure(names: list[str], forms: list[str], rounds: int, clock: str) -> Runs:
    """Every case under every form, ``rounds`` times, the forms alternating which goes first."""
    runs: Runs = {n: {f: [] for f in forms} for n in names}
    for r in range(rounds):
        order = forms if r % 2 == 0 else forms[::-1]
        for name in names:
            for form in order:
                res = run_case(name, form)
                runs[name][form].append(res)
                print(f"round {r + 1} {name:22s} {form:6s} {res[clock]:7.1f} s "
                      f"({res['cycles']:,} cycles)", flush=True)
    return runs


def report(runs: Runs, clock: str) -> None:
    """The table: per case the medians, the ratio, the target, and whether every log was the same."""
    print(f"{'case':22s} {'pure':>8s} {'native':>8s} {'ratio':>6s} {'target':>7s}  met  same log")
    for name, by_form in runs.items():
        med = {f: _median(runs, name, f, clock) for f in by_form}
        shas = {str(x["sha"]) for f in by_form for x in by_form[f]}
        target = _target(name)
        pure = f"{med['pure']:7.1f}s" if "pure" in med else "       -"
        ratio = f"{med['native'] / med['pure']:5.2f}x" if "pure" in med else "     -"
        print(f"{name:22s} {pure} {med['native']:7.1f}s {ratio} {target:6.0f}s  "
              f"{'yes' if med['native'] <= target else 'NO ':3s}  "
              f"{'yes' if len(shas) == 1 else 'NO: ' + ', '.join(sorted(shas))}")
    philly = [n for n in runs if n.startswith("philly-")]
    if len(philly) > 1:  # the target is "any capacity": say which was slowest
        slowest = max(philly, key=lambda n: _median(runs, n, "native", clock))
        print(f"slowest Philly case (compiled): {slowest} at "
              f"{_median(runs, slowest, 'native', clock):.1f} s of {len(philly)} cases")


def _target(name: str) -> float:
    if name in CASES:
        return CASES[name][4]
    return 30.0 if name.startswith("philly-") else 10.0  # (a --from-json file's own sizes)


def plot_philly(runs: Runs, clock: str, png: Path, machine_text: str) -> None:
    """Compiled-core time against capacity for each policy, with the 30 s target."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 4.2), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for policy, style in (("allot", "o-"), ("baseline", "s--")):
        points = sorted((int(n.split("/")[0].removeprefix("philly-")), _median(runs, n, "native", clock))
                        for n in runs if n.startswith("philly-") and n.endswith("/" + policy))
        if points:
            ax.plot([g for g, _ in points], [t for _, t in points], style, label=policy, markersize=3)
    ax.axhline(30.0, color="tab:red", linewidth=1, label="target (30 s)")
    ax.set_xlabel("capacity (GPUs, 8 per host)")
    ax.set_ylabel(f"simulation, {clock} time (s)")
    ax.set_ylim(bottom=0)
    n = max((len(v.get("native", [])) for k, v in runs.items() if k.startswith("philly-")), default=0)
    each = "one run" if n == 1 else f"median of {n} runs"
    ax.set_title(f"Philly trace, 110 days, compiled core, {each} per point\n{machine_text}",
                 fontsize=9)
    ax.legend(loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(png)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="runs per case and form (median)")
    ap.add_argument("--only", default="", help="only the cases whose name contains this")
    ap.add_argument("--skip-pure", action="store_true", help="the compiled core only")
    ap.add_argument("--philly-hosts", type=host_counts, default=[],
                    help="also the Philly trace at these host counts (8 GPUs each), "
                         "e.g. 24,32,40,48 or 16-64 (every count from 16 to 64)")
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    ap.add_argument("--json", type=Path, default=None, help="also write every run here")
    ap.add_argument("--from-json", type=Path, default=None, metavar="FILE",
                    help="run nothing: report (and --plot) the runs a previous --json wrote")
    ap.add_argument("--plot", type=Path, default=None, metavar="PNG",
                    help="draw the Philly cases' compiled time against capacity here")
    args = ap.parse_args(argv)
    if args.from_json:
        try:
            saved = json.loads(args.from_json.read_text())
            runs: Runs = saved["runs"]
            machine_text = str(saved["machine"])
        except (OSError, ValueError, KeyError) as e:
            raise SystemExit(f"--from-json {args.from_json}: not a bench_native --json file ({e})") from None
        clock = str(saved.get("clock", "cpu"))
        runs = {n: v for n, v in runs.items() if args.only in n}
    else:
        add_philly_sizes(args.philly_hosts)
        machine_text = machine()
        clock = args.clock
        print(f"machine: {machine_text}")
        forms = ["native"] if args.skip_pure else ["pure", "native"]
        runs = measure([n for n in CASES if args.only in n], forms, args.rounds, clock)
        print()
    report(runs, clock)
    if args.json and not args.from_json:
        args.json.write_text(json.dumps({"machine": machine_text, "clock": clock, "runs": runs},
                                        indent=1))
    if args.plot:
        plot_philly(runs, clock, args.plot, machine_text)
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
