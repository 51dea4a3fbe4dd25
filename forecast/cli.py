"""``allot forecast WORKLOAD --log JOURNAL``: when will it start, and what it waits on."""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import msgspec
from rich.console import Console
from rich.markup import escape

from events import MalformedEvent
from events.errors import AllotError
from forecast.simulate import Assumptions, ForecastError, forecast_many


class ForecastCliError(AllotError):
    """A forecast command that cannot run (no journal, an unreadable one)."""


def _seconds(text: str) -> int:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86_400}
    t = text.strip().lower()
    try:
        return int(float(t[:-1]) * units[t[-1]]) if t and t[-1] in units else int(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a duration such as 600, 10m, 4h, 7d, "
                                         f"got {text!r}") from None


def _when(t: int) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _run(args: argparse.Namespace) -> int:
    from scheduler.replay import fold_log, numbered

    if not args.log.is_file():
        raise ForecastCliError(f"{args.log}: no such journal file")
    try:
        engine = fold_log((e for _, e in numbered(str(args.log))), until=args.at)
    except MalformedEvent as exc:
        raise ForecastCliError(f"{args.log}: {exc}") from exc
    a = Assumptions(assumed_runtime_s=args.assume_runtime, overrun_s=args.overrun,
                    horizon_s=args.horizon)
    w = engine.state.workloads.all.get(args.workload)
    kind = w.kind if w is not None else ""
    t0 = time.perf_counter()
    try:
        # The folded engine is this command's own: simulate on it rather than on a copy
        # (a month's state takes a second to copy), so it is consumed here.
        f = forecast_many(engine.state, (args.workload,), None, a, copy=False)[args.workload]
    except ForecastError as exc:
        raise ForecastCliError(str(exc)) from None
    dt = time.perf_counter() - t0
    if args.record is not None and f.status != "running":  # (already started: not a forecast)
        from forecast.record import record_of, write_records

        write_records(args.record, [record_of(f, kind, "cli")], append=True)
    if args.json:
        sys.stdout.write(msgspec.json.format(msgspec.json.encode(f)).decode() + "\n")
        return 0
    con = Console()
    if f.status == "running":
        con.print(f"[bold]{escape(f.workload)}[/] is running (started {_when(f.start or 0)})")
        return 0
    if f.status == "beyond_horizon":
        con.print(f"[bold]{escape(f.workload)}[/]: does not start within "
                  f"{a.horizon_s / 86_400:g} days under these assumptions"
                  + (f"; blocked by {escape(f.blocked_by)}" if f.blocked_by else "")
                  + (f" ({escape(f.unplaceable)})" if f.unplaceable else ""))
        return 0
    con.print(f"[bold]{escape(f.workload)}[/]: estimated start {_when(f.start or 0)}, in "
              f"{(f.wait_s or 0) / 3600:.1f} h, on {escape(', '.join(f.placement))}")
    if f.blocked_by:
        con.print(f"waits on: {escape(f.blocked_by)}")
    if f.waits_for:
        con.print(f"its hosts are freed by: {escape(', '.join(f.waits_for))}")
    con.print(f"{f.ahead} workload(s) start before it; {f.cycles} cycles simulated in "
              f"{dt * 1000:.0f} ms. Assumes: running work ends at its expected duration "
              f"(else {a.assumed_runtime_s // 3600} h; overdue work {a.overrun_s} s from now), "
              f"no new submissions, cancels or faults.")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``allot forecast``."""
    p = subparsers.add_parser(
        "forecast", help="when will a pending workload start, and what it waits on",
        description="Fold JOURNAL (a journal export or simulation log, up to --at) and "
                    "simulate forward with the same core: running work ends at its expected "
                    "duration (or the stated assumption), nothing new arrives. Prints the "
                    "estimated start, its hosts and what it waits on. See docs/forecast.md.")
    p.add_argument("workload", help="workload id")
    p.add_argument("--log", type=Path, required=True, metavar="JOURNAL",
                   help="event log (JSON lines)")
    p.add_argument("--at", type=int, help="forecast as of this trusted time (Unix seconds)")
    p.add_argument("--assume-runtime", type=_seconds, default=4 * 3600, metavar="DURATION",
                   help="run time of work with no expected duration (default 4h)")
    p.add_argument("--overrun", type=_seconds, default=600, metavar="DURATION",
                   help="work past its expected duration ends this long from now (default 10m)")
    p.add_argument("--horizon", type=_seconds, default=14 * 86_400, metavar="DURATION",
                   help="look this far ahead at most (default 14d)")
    p.add_argument("--record", type=Path, metavar="FILE",
                   help="append the forecast to FILE (JSON lines) to score it later "
                        "(allot audit forecasts; not for work already running)")
    p.add_argument("--json", action="store_true", help="print the forecast as JSON")
    p.set_defaults(func=_run)


__all__ = ["register"]
