"""Decode throughput: the bounded decoder against the one before it, on the same log, in one process.

The decoder now checks each record's size and nesting depth before parsing,
and the field types carry bounds (int64, string and array lengths). This
measures what that costs on a real journal (a simulated ai2-month log by
default: inputs, starts of gangs up to 32 hosts, preemptions):

- ``events.decode`` of every line, this tree against ``--baseline`` (a git
  ref, default ``main``; its ``events`` package is loaded beside this one
  under another name), alternating passes in one process so machine noise
  hits both alike;
- the depth scan alone (exactly what decode runs before parsing), per path
  (flat records, counted, precise), and msgspec's typed decode alone;
- ``events.problem`` (the engine's value check for events built in Python)
  on every input of the log.

    python -m benchmarks.bench_codec                  # ai2-month log (simulated once, cached in /tmp)
    python -m benchmarks.bench_codec --scenario scenarios/demo.toml --passes 21
"""

from __future__ import annotations

import argparse
import importlib
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from io import BytesIO
from pathlib import Path

from benchmarks.common import machine

REPO = Path(__file__).resolve().parent.parent
BASELINE_PACKAGE = "events_baseline"


def build_log(scenario: Path) -> Path:
    """The scenario's allot log as JSON lines, simulated once and cached in /tmp."""
    cache = Path(tempfile.gettempdir()) / "allot-bench-codec" / f"{scenario.stem}.jsonl"
    if cache.exists():
        return cache
    from events import write_log
    from simulator.driver import Simulation
    from simulator.scenario import load_scenario

    cache.parent.mkdir(parents=True, exist_ok=True)
    result = Simulation(load_scenario(scenario), "allot", scenario.parent).run()
    write_log(cache, result.log)
    return cache


def load_baseline(ref: str, dest: Path) -> object:
    """The ``events`` package at git ``ref``, imported as ``events_baseline``."""
    data = subprocess.run(["git", "archive", ref, "events"], cwd=REPO, check=True,
                          capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        tar.extractall(dest, filter="data")
    package = dest / BASELINE_PACKAGE
    (dest / "events").rename(package)
    for path in package.glob("*.py"):
        text = re.sub(r"\b(from|import) events\b", rf"\1 {BASELINE_PACKAGE}", path.read_text())
        path.write_text(text)
    sys.path.insert(0, str(dest))
    return importlib.import_module(BASELINE_PACKAGE)


def seconds(fn: Callable[[bytes], object], lines: list[bytes]) -> float:
    t0 = time.perf_counter()
    for line in lines:
        fn(line)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", type=Path, default=REPO / "scenarios" / "ai2-month.toml")
    parser.add_argument("--baseline", default="main", help="git ref of the decoder to compare with")
    parser.add_argument("--passes", type=int, default=11, help="alternating passes of each")
    args = parser.parse_args(argv)

    import events
    from events import codec

    log = build_log(args.scenario)
    lines = [line for line in log.read_bytes().split(b"\n") if line]
    n = len(lines)
    print(machine())
    print(f"log: {log} ({n:,} records, {log.stat().st_size / 1e6:.1f} MB)")

    def scan(line: bytes) -> None:  # exactly the scan decode() runs before parsing
        if 91 in line or 123 in line[1:]:
            codec._check_brackets(line)

    with tempfile.TemporaryDirectory() as tmp:
        baseline = load_baseline(args.baseline, Path(tmp))
        old, old_msgspec = baseline.decode, baseline.codec._decoder.decode  # type: ignore[attr-defined]
        assert old(lines[0]) is not None
        runs: dict[str, Callable[[bytes], object]] = {
            "before": old, "after": events.decode, "msgspec_before": old_msgspec,
            "msgspec": codec._decoder.decode, "scan": scan}
        timings: dict[str, list[float]] = {k: [] for k in runs}
        for _ in range(args.passes):
            for key, fn in runs.items():
                timings[key].append(seconds(fn, lines))
    med = {k: statistics.median(v) for k, v in timings.items()}
    before, after = n / med["before"], n / med["after"]
    print(f"\nmedian of {args.passes} alternating passes over the whole log")
    print(f"  decode, baseline ({args.baseline}):       {before:10,.0f} events/s")
    print(f"  decode, this tree:               {after:10,.0f} events/s  ({after / before:.2f}x)")
    print(f"  msgspec typed decode alone, baseline types: {n / med['msgspec_before']:10,.0f} events/s")
    print(f"  msgspec typed decode alone, bounded types:  {n / med['msgspec']:10,.0f} events/s")
    print(f"  depth scan alone:                {med['scan'] / n * 1e9:10,.0f} ns per record "
          f"({med['scan'] / med['after']:.0%} of this tree's decode)")

    flat, rest = [], []
    for x in lines:
        (rest if codec._OPEN_SQUARE in x or codec._OPEN_CURLY in x[1:] else flat).append(x)
    counted = [x for x in rest if x.count(b"{") + x.count(b"[") <= codec.MAX_DEPTH]
    precise = [x for x in rest if x.count(b"{") + x.count(b"[") > codec.MAX_DEPTH]
    print("  by path (scan / msgspec decode, median of 5 passes):")
    for name, part in (("flat: no array, one object", flat), ("counted: <= 16 brackets", counted),
                       ("precise: > 16 brackets", precise)):
        if not part:
            continue
        s = statistics.median(seconds(scan, part) for _ in range(5)) / len(part) * 1e9
        d = statistics.median(seconds(codec._decoder.decode, part) for _ in range(5)) / len(part) * 1e9
        print(f"    {name:28s} {len(part):8,} records  {s:7,.0f} ns / {d:7,.0f} ns")

    inputs = [e for e in map(events.decode, lines) if e.cause is None]
    t = statistics.median(seconds(events.problem, inputs) for _ in range(3))  # type: ignore[arg-type]
    print(f"  events.problem on the {len(inputs):,} inputs: {t / len(inputs) * 1e6:.2f} us per input")


if __name__ == "__main__":
    main()
