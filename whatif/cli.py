"""``allot whatif``: a recorded period re-simulated under another policy, both sides audited."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from audit.formatting import format_duration, format_percent
from audit.report import render
from whatif.history import format_moment, parse_duration, parse_moment, read_history
from whatif.rerun import Change, WhatIfError, rerun


def _pair(text: str) -> tuple[str, Any]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    key, raw = text.split("=", 1)
    try:
        value: Any = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return key.strip(), value


def _run(args: argparse.Namespace) -> int:
    err = Console(stderr=True)
    events = read_history(args.history, args.run)
    if not events:
        raise WhatIfError(f"{args.history}: the journal is empty")
    ticks = [e.at for e in events if type(e).__struct_config__.tag == "clock.ticked"]
    start, end = (min(ticks), max(ticks)) if ticks else (events[0].at, events[-1].at)
    t1 = parse_moment(args.from_, start, end)
    t2 = parse_moment(args.to, start, end)
    if t2 < t1:
        raise WhatIfError(f"--to {args.to!r} is before --from {args.from_!r}")
    knobs = dict(args.set or [])
    for k, v in list(knobs.items()):
        if isinstance(v, str) and k.endswith("_s"):
            knobs[k] = parse_duration(v)
    shares = {}
    for path, n in args.shares or []:
        if not isinstance(n, int) or n < 0:
            raise WhatIfError(f"--shares {path}={n}: shares must be a whole number >= 0")
        shares[path] = n
    change = Change(knobs=knobs, shares=shares,
                    over_cap="reject" if args.reject_over_cap else "clamp",
                    assumed_runtime_s=args.assume_runtime)
    err.print(f"re-simulating {format_moment(t1)} .. {format_moment(t2)} "
              f"({format_duration(t2 - t1)}) of {escape(str(args.history))}: "
              f"{len(events):,} recorded events")
    w0 = time.perf_counter()
    with Progress(TextColumn("what-if"), BarColumn(), TextColumn("{task.fields[day]}"),
                  TimeElapsedColumn(), console=err, transient=True,
                  disable=args.json or not err.is_terminal) as bar:
        task = bar.add_task("whatif", total=max(1, t2 - t1), day="")

        def tick(done: int, total: int) -> None:
            bar.update(task, completed=done, day=f"day {done / 86_400:5.1f}")

        result = rerun(events, t1, t2, change, cluster=args.cluster, progress=tick)
    wall = time.perf_counter() - w0
    from whatif.compare import compare

    with err.status("auditing both sides"):
        doc = compare(result, Path(args.out), wall_seconds=wall)
    counts = {k: getattr(result, k) for k in (
        "inputs", "clamped", "refused_over_cap", "assumed_runtime", "injected_finishes",
        "dropped_cancels", "dropped_resubmissions", "preempted_not_resubmitted")}
    counts["refused_over_cap_gpu_h"] = round(result.refused_over_cap_gpu_s / 3600, 1)
    doc.update({"from": t1, "to": t2, "change": {"knobs": knobs, "shares": shares,
                "over_cap": change.over_cap}, "replay": counts, "wall_seconds": round(wall, 2)})
    (Path(args.out) / "whatif.json").write_text(json.dumps(doc, indent=2, default=str) + "\n")
    if args.json:
        sys.stdout.write(json.dumps(doc, indent=2, default=str) + "\n")
        return 0
    con = Console()
    con.print(render({"recorded": doc["recorded"], "whatif": doc["whatif"]}))
    table = Table(title="per team: received / owed (funded), first waits, preemption losses",
                  title_justify="left")
    table.add_column("team", no_wrap=True)
    for col in ("recv/owed", "what-if", "change", "p90 wait", "what-if", "lost GPU-h",
                "what-if"):
        table.add_column(col, justify="right", no_wrap=True)
    for row in doc["teams"]:
        a, b = row["recorded"], row["whatif"]
        ch = row["ratio_change"]
        table.add_row(escape(row["team"]), format_percent(a.get("ratio")),
                      format_percent(b.get("ratio")),
                      "-" if ch is None else f"{ch * 100:+.1f} pt",
                      format_duration(a.get("wait_p90_s")), format_duration(b.get("wait_p90_s")),
                      f"{a.get('lost_gpu_h', 0):,.1f}", f"{b.get('lost_gpu_h', 0):,.1f}")
    con.print(table)
    worst = {side: min(((r[side].get("ratio"), r["team"]) for r in doc["teams"]
                        if r[side].get("ratio") is not None), default=(None, "-"))
             for side in ("recorded", "whatif")}
    con.print(f"worst team: recorded {escape(worst['recorded'][1])} "
              f"({format_percent(worst['recorded'][0])}), what-if {escape(worst['whatif'][1])} "
              f"({format_percent(worst['whatif'][0])})")
    cap_line = (f"contracts over the new cap: {result.clamped:,} clamped (replayed as their owners "
                f"would resubmit them), {result.refused_over_cap:,} refused "
                f"({counts['refused_over_cap_gpu_h']:,} GPU-hours of work refused)")
    con.print(cap_line)
    con.print(f"re-derived: {result.injected_finishes:,} finishes at new times, "
              f"{result.dropped_cancels:,} give-ups dropped (started earlier), "
              f"{result.dropped_resubmissions:,} resubmissions dropped (first run not preempted), "
              f"{result.preempted_not_resubmitted:,} non-resumable runs preempted, "
              f"{result.assumed_runtime:,} run times assumed "
              f"({format_duration(change.assumed_runtime_s)}); {wall:.1f} s")
    con.print(escape(f"journals, {Path(doc['database']).name} and whatif.json in {args.out}"))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``allot whatif``."""
    p = subparsers.add_parser(
        "whatif", help="re-simulate a recorded period under another policy",
        description="Fold HISTORY (a journal export or simulation log in JSON lines, a .parquet "
                    "log, or an audit .duckdb with --run) up to --from, apply the change "
                    "(--set KNOB=VALUE, --shares PATH=N), re-simulate every recorded input up "
                    "to --to with the same core, and print both sides audited the same way, "
                    "with the differences per team. With no change it reproduces the recorded "
                    "decisions. Contracts the new cap would refuse are clamped to it by default "
                    "(--reject-over-cap refuses them); both are counted. See docs/whatif.md.")
    p.add_argument("history", type=Path, metavar="HISTORY",
                   help="journal (.jsonl, .jsonl.gz, .parquet) or audit database (.duckdb)")
    p.add_argument("--from", dest="from_", default="start", metavar="WHEN",
                   help="period start: ISO date/date-time (UTC), Unix seconds, start, +7d, "
                        "'day 3' (default: start)")
    p.add_argument("--to", default="end", metavar="WHEN", help="period end (default: end)")
    p.add_argument("--set", type=_pair, action="append", metavar="KNOB=VALUE",
                   help="a policy knob for the period, e.g. --set window_s=3d (repeatable)")
    p.add_argument("--shares", type=_pair, action="append", metavar="PATH=N",
                   help="a budget node's shares under its parent, e.g. --shares lab/llm=50")
    p.add_argument("--reject-over-cap", action="store_true",
                   help="feed contracts over a lowered cap as recorded (refused) instead of "
                        "clamped to it")
    p.add_argument("--assume-runtime", type=parse_duration, default=4 * 3600, metavar="DURATION",
                   help="run time of a workload the journal never saw finish and that states "
                        "no expected duration (default 4h)")
    p.add_argument("--run", help="with a .duckdb: the run to read")
    p.add_argument("--cluster", help="the cluster to re-simulate (default: the journal's first)")
    p.add_argument("--out", type=Path, default=Path("out/whatif"), help="output directory")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    p.set_defaults(func=_run)


__all__ = ["register"]
