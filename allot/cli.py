"""The ``allot`` command line.

    allot simulate SCENARIO   run a scenario under allot and/or the baseline; logs, audit, plots
    allot audit ...           load a log into DuckDB, report, query, replay-check
    allot explain LOG ID      why a workload is where it is (rank, position, what blocks it)
    allot demo                the embedded default: a small scenario end to end
    allot schema              write (or --check) the published JSON Schema of every event

The live system on Kafka (``streams/``; docs/live.md, docs/live-clients.md):

    allot up                  a whole live allot here: broker, topics, worker, ticker, executor
    allot worker              the scheduling worker (one consumer group schedules every cluster)
    allot submit / cancel / budget / host   publish an input and print what it caused
    allot policy show / set   the live cluster's policy knobs; change some (an admin's verb)
    allot executor            the simulated executor: runs started work, reports finishes
    allot executor local      run real commands on one host's GPUs (like slurmd; docs/executor.md)
    allot monitor             watch one host's GPUs (nvidia-smi), report faults and repairs
    allot keys / sign         local Ed25519 keys, principals on the log; sign a record for kcat
    allot projections         the Faust usage projections and their loopback endpoint
    allot top                 the live queue, ranked with its sort metric, and the running set
    allot queue / hosts / history / budget show / explain ID   the live state (squeue, sinfo,
                              sacct, sshare), with --json
    allot wait ID --for STATE until a workload runs, waits, is preempted or ends (kubectl wait)
    allot whatif HISTORY      re-simulate a recorded period under another policy, side by side
    allot forecast WORKLOAD   when will a pending workload start, and what it waits on
    allot journal ...         read the live journal (export it for the audit)

Every command has ``--help``. Errors print one line and exit with status 2:
every deliberate error of allot is an ``events.errors.AllotError`` (a bad
scenario, a malformed log line, a bad option), and a file that cannot be read
(missing, a directory, no permission, not UTF-8) is reported the same way.
Anything else escaping is a bug, and shows its traceback.

Values from files (workload ids, budget paths, reasons) are printed through
rich with their markup escaped, so an id such as ``a[/]train`` prints as is.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import msgspec
from rich.console import Console
from rich.markup import escape

import native
from allot.errors import CliError
from events.errors import AllotError

REPO = Path(__file__).resolve().parent.parent
DEMO_SCENARIO = REPO / "scenarios" / "demo.toml"
EXIT_ERROR = 2

__all__ = ["CliError", "build_parser", "main"]


def _knob(text: str) -> tuple[str, Any]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected KNOB=VALUE, got {text!r}")
    key, raw = text.split("=", 1)
    try:
        value: Any = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return key.strip(), value


def _simulate(args: argparse.Namespace) -> int:
    from allot.simulate import POLICIES, apply_overrides, run_scenario
    from simulator.scenario import load_scenario

    policies = POLICIES if args.policy == "both" else (args.policy,)
    if args.seeds is not None:
        from allot.seeds import run_multi_seed

        if args.seeds < 1 or (args.workers is not None and args.workers < 1):
            raise CliError("--seeds and --workers must be at least 1")
        scenario = apply_overrides(load_scenario(args.scenario), dict(args.set or []),
                                   args.horizon_days, args.seed)
        run_multi_seed(args.scenario, scenario, policies, args.out, args.seeds,
                       workers=args.workers)
        return 0
    run_scenario(args.scenario, policies, args.out, plots=not args.no_plots,
                 knobs=dict(args.set or []), horizon_days=args.horizon_days, seed=args.seed,
                 warmup_s=args.warmup_s,
                 over_cap="reject" if args.reject_over_cap else "clamp")
    return 0


def _explain(args: argparse.Namespace) -> int:
    from events import MalformedEvent
    from scheduler.explain import UnknownWorkload, explain
    from scheduler.replay import fold_log, numbered

    try:
        engine = fold_log((e for _, e in numbered(args.log)), until=args.at)
    except MalformedEvent as exc:
        raise CliError(f"{args.log}: {exc}") from exc
    if engine.state.position == 0:
        raise CliError(f"{args.log}: the log is empty")
    from streams.state_cli import when
    try:
        exp = explain(engine.state, args.workload)
    except UnknownWorkload:
        # Never submitted, or it ended longer than the lapse before --at (the fold forgot it).
        from scheduler.time_text import duration_text
        st = engine.state
        raise CliError(f"no workload {args.workload!r} in {args.log}"
                       + (f" before {when(args.at)} UTC" if args.at is not None else "")
                       + f" (or it ended before {when(max(0, st.forgotten_before()))} UTC: an "
                       f"ended workload leaves the state {duration_text(st.lapse_s())} after it "
                       "ends; an --at within that shows it)") from None
    if args.json:
        sys.stdout.write(msgspec.json.format(msgspec.json.encode(exp)).decode() + "\n")
        return 0
    con = Console()
    con.print(f"[bold]{escape(exp.workload)}[/] ({escape(exp.kind)}, {exp.gpus} GPUs as "
              f"{escape(exp.shape)}, min runtime {exp.min_runtime_s} s, "
              f"{'resumable' if exp.resumable else 'not resumable'}) in "
              f"[bold]{escape(exp.budget)}[/]: [bold]{escape(exp.status)}[/] at "
              f"{when(exp.now)} UTC")
    if exp.blocked_by:
        con.print(f"blocked by: [bold red]{escape(exp.blocked_by)}[/]"
                  + (f" until {when(exp.until)} UTC" if exp.until else ""))
    for line in exp.summary:
        con.print(f"- {escape(line)}")
    return 0


def _explain_any(args: argparse.Namespace) -> int:
    """``explain LOG ID`` folds a log; ``explain ID`` asks the live state API."""
    given = args.log_and_workload
    if len(given) > 2:
        raise CliError("explain takes [LOG] WORKLOAD")
    if len(given) == 1:
        from streams.state_cli import live_explain

        args.workload = given[0]
        return live_explain(args)
    args.log, args.workload = Path(given[0]), given[1]
    return _explain(args)


def _replay(args: argparse.Namespace) -> int:
    import time

    from scheduler.replay import verify_file as replay_file

    if not args.log.exists():
        raise CliError(f"{args.log}: no such file")
    con = Console(stderr=True)
    t0 = time.perf_counter()
    with con.status("replaying") as status:
        result = replay_file(args.log, lambda n: status.update(f"replaying: {n:,} events"))
    dt = time.perf_counter() - t0
    if args.json:
        sys.stdout.write(msgspec.json.format(msgspec.json.encode(result)).decode() + "\n")
    elif result.divergence is not None and result.divergence.kind == "malformed":
        # Not a log at all from that line on: an error, though the status stays replay's 1.
        print(f"allot: {args.log}: {_one_line(result.divergence.detail)}", file=sys.stderr)
    elif result.ok:
        Console().print(f"[green]identical[/]: {result.inputs:,} inputs re-derive all "
                        f"{result.decisions:,} recorded decisions ({result.events:,} events, "
                        f"{result.duplicates:,} duplicate records skipped, {dt:.1f} s)")
    else:
        d = result.divergence
        assert d is not None
        Console().print(f"[red]diverged[/] at line {d.line} ({escape(d.kind)}"
                        + (f", event {escape(d.event_id)}" if d.event_id else "")
                        + f"): {escape(d.detail)}")
    return 0 if result.ok else 1


def _schema(args: argparse.Namespace) -> int:
    from events.schema import main as schema_main

    return schema_main(["--check"] if args.check else [])


def _demo(args: argparse.Namespace) -> int:
    """Simulate the demo scenario under both policies, explain a few decisions, replay-check."""
    from allot.simulate import run_scenario
    from scheduler.replay import verify_file as replay_file

    con = Console()
    out = Path(args.out)
    con.rule("[bold]allot demo: the same workloads under allot and under the old scheduler")
    from allot.live_audit import DEMO_WARMUP_S

    run_scenario(DEMO_SCENARIO, ("allot", "baseline"), out, plots=not args.no_plots,
                 warmup_s=DEMO_WARMUP_S)
    log = out / "allot" / "events.jsonl"
    con.rule("[bold]decisions, explained")
    _show_decisions(log, con)
    con.rule("[bold]replay: re-derive every decision from the log")
    result = replay_file(log)
    verdict = ("[green]identical[/]" if result.ok
               else f"[red]diverged: {escape(str(result.divergence))}[/]")
    con.print(f"{result.inputs:,} inputs re-derive {result.decisions:,} decisions: {verdict}")
    con.print(escape(f"\nNext: open {out / 'report.html'}, or query the audit with\n"
                     f"  allot audit sql --db {out / 'sim.duckdb'} \"SELECT * FROM preemptions\""))
    return 0 if result.ok else 1


def _show_decisions(log: Path, con: Console) -> None:
    """Print one decision of each interesting kind, with the reason it carries."""
    from events import read_log

    events = read_log(log)
    subs = {e.workload: e for e in events if type(e).__struct_config__.tag == "workload.submitted"}
    shown: set[str] = set()
    for e in events:
        tag = type(e).__struct_config__.tag
        key = tag if tag != "workload.preempted" else f"{tag}:{e.reason}"
        if key in shown or tag not in ("workload.preempted", "workload.reserved", "host.drained",
                                       "workload.rejected"):
            continue
        shown.add(key)
        if tag == "workload.preempted":
            s = subs[e.workload]
            con.print(f"- {escape(e.workload)} ({escape(s.kind)}, {s.gpus} GPUs, "
                      f"{escape(s.budget)}) preempted: [bold]{escape(e.reason)}[/] by "
                      f"{escape(str(e.by))}; "
                      f"{'requeued' if e.requeued else 'ended (not resumable)'}")
        elif tag == "workload.reserved":
            con.print(f"- {escape(e.workload)} reserved {len(e.hosts)} host(s) until {e.until} "
                      f"so it cannot starve behind protected work")
        elif tag == "host.drained":
            con.print(f"- host {escape(e.host)} drained for automated repair")
        else:
            con.print(escape(f"- {e.workload} rejected: {e.reason} ({e.detail})"))


Subcommands = argparse._SubParsersAction  # type: ignore[type-arg]


def _add_simulate(sub: Subcommands) -> None:
    from audit.cli import seconds_value

    p = sub.add_parser("simulate", help="run a scenario through the scheduler in virtual time",
                       description="Simulate SCENARIO (a TOML file, see docs/scenarios.md) with "
                                   "the same core as production; write the event log per "
                                   "policy, a DuckDB audit database, summary.json, plots and "
                                   "an HTML report.")
    p.add_argument("scenario", type=Path, help="scenario file (TOML)")
    p.add_argument("--policy", choices=("allot", "baseline", "both"), default="both",
                   help="which scheduler(s) to run (default: both, side by side)")
    p.add_argument("--out", type=Path, default=Path("out/sim"), help="output directory")
    p.add_argument("--no-plots", action="store_true", help="skip plots and the HTML report")
    p.add_argument("--set", type=_knob, action="append", metavar="KNOB=VALUE",
                   help="override a policy knob, e.g. --set window_s=259200 (repeatable)")
    p.add_argument("--horizon-days", type=float, help="override the simulated span")
    p.add_argument("--seed", type=int, help="override the scenario seed (with --seeds: the first)")
    p.add_argument("--warmup-s", type=seconds_value, metavar="SECONDS",
                   help="the start of each run left out of every figure (default: one "
                        "lookback window, window_s)")
    p.add_argument("--seeds", type=int, metavar="N",
                   help="run N seeds (from the scenario's, in parallel processes) and report "
                        "each figure's mean and 95 %% t-interval; writes OUT/seeds.json, no logs")
    p.add_argument("--workers", type=int, help="with --seeds: processes (default: one per core)")
    p.add_argument("--reject-over-cap", action="store_true",
                   help="send contracts longer than min_runtime_cap_s as they are (the scheduler "
                        "refuses them) instead of clamping them to the cap as their owner would "
                        "resubmit them (the default); the run says how many either way")
    p.set_defaults(func=_simulate)


def _add_audit(sub: Subcommands) -> None:
    from audit.cli import register as register_audit

    audit_sub = register_audit(sub)
    p = audit_sub.add_parser(
        "replay", help="re-derive every decision in a log and report the first divergence",
        description="Fold LOG through the pure core in log order, re-derive every scheduler "
                    "decision from the inputs, and compare value by value with what the log "
                    "records. Exit status 0: identical; 1: the first divergence is printed "
                    "(a tampered, missing or extra decision, named by line).")
    p.add_argument("log", type=Path, help="event log (JSON lines)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=_replay)
    from identity.audit_verify import add_parser as add_audit_verify

    add_audit_verify(audit_sub)  # allot audit verify: re-check journaled inputs' signatures


def _add_worker(sub: Subcommands) -> None:
    from streams.cli import register as register_streams

    register_streams(sub)  # allot worker, allot journal export


def _add_client(sub: Subcommands) -> None:
    from streams.commands import register as register_client

    register_client(sub)  # allot submit, cancel, budget define|shares, host fault|repair|add


def _add_keys(sub: Subcommands) -> None:
    from identity.keys_cli import register as register_keys

    register_keys(sub)  # allot keys create|list|register|rotate|revoke, allot sign


def _add_executor(sub: Subcommands) -> None:
    from executor.cli import register as register_local_executor
    from streams.executor import register as register_executor

    register_executor(sub)  # allot executor
    register_local_executor(sub.choices["executor"])  # allot executor local


def _add_up(sub: Subcommands) -> None:
    from allot import live_audit
    from streams.up import register as register_up

    register_up(sub, auditor=live_audit.audit_runs)  # allot up (--demo is make demo)


def _add_top(sub: Subcommands) -> None:
    from streams.view import register as register_top

    register_top(sub)  # allot top


def _add_state(sub: Subcommands) -> None:
    from streams.state_cli import register as register_state

    register_state(sub)  # allot queue, hosts, history, wait (the worker's state API)


def _add_projections(sub: Subcommands) -> None:
    from streams.projections import register as register_projections

    register_projections(sub)  # allot projections


def _add_whatif(sub: Subcommands) -> None:
    from whatif.cli import register as register_whatif

    register_whatif(sub)  # allot whatif


def _add_forecast(sub: Subcommands) -> None:
    from forecast.cli import register as register_forecast

    register_forecast(sub)  # allot forecast


def _add_archive(sub: Subcommands) -> None:
    from archive.cli import register as register_archive

    register_archive(sub)  # allot archive, archive restore, archive status


def _add_monitor(sub: Subcommands) -> None:
    from monitor.cli import register as register_monitor

    register_monitor(sub)  # allot monitor --host NAME


def _add_explain(sub: Subcommands) -> None:
    p = sub.add_parser("explain", help="why a workload is where it is",
                       description="Fold LOG (up to --at) and explain WORKLOAD: its fair-share "
                                   "key level by level, its place in line, and what blocks it.")
    p.add_argument("log_and_workload", nargs="+", metavar="[LOG] WORKLOAD",
                   help="an event log (JSON lines) and a workload id; the id alone explains it "
                        "on the running allot (its state API)")
    from streams.state_cli import time_value

    p.add_argument("--at", type=time_value, metavar="TIME",
                   help="with LOG: explain as of this event time (2026-01-16T10:00 UTC, or Unix "
                        "seconds)")
    p.add_argument("--url", default=None, help="without LOG: the state API (default: allot up's)")
    p.add_argument("--cluster", default=None, help="without LOG: the cluster")
    p.add_argument("--json", action="store_true", help="print the explanation as JSON")
    p.set_defaults(func=_explain_any)


def _add_demo(sub: Subcommands) -> None:
    p = sub.add_parser("demo", help="the embedded default: a small scenario end to end",
                       description="Simulate scenarios/demo.toml under allot and the baseline, "
                                   "print the comparison, explain a few decisions, and check "
                                   "that replaying the log re-derives every decision.")
    p.add_argument("--out", type=Path, default=Path("out/demo"), help="output directory")
    p.add_argument("--no-plots", action="store_true", help="skip plots and the HTML report")
    p.set_defaults(func=_demo)


def _add_schema(sub: Subcommands) -> None:
    p = sub.add_parser("schema", help="write the JSON Schema of every event to docs/",
                       description="Write docs/events.schema.json, or --check that it is current.")
    p.add_argument("--check", action="store_true", help="exit 1 if the published schema is stale")
    p.set_defaults(func=_schema)


class CommandGroup(NamedTuple):
    """Top-level commands one module adds, and the function that adds them."""

    names: tuple[str, ...]
    add: Callable[[Subcommands], None]


# Every command, in the order ``allot --help`` lists them. Each group imports its
# modules only when it is added, and a command line adds only the group it names:
# ``allot worker`` does not import DuckDB, Faust or matplotlib (the walkthrough and the
# live stack start a process per command, each paying every import). ``allot --help``
# and a name no group declares add every group. tests/test_cli_groups.py checks that
# each group adds exactly its names and that a lone group parses as the whole parser.
COMMAND_GROUPS: tuple[CommandGroup, ...] = (
    CommandGroup(("simulate",), _add_simulate),
    CommandGroup(("audit",), _add_audit),
    CommandGroup(("worker", "journal"), _add_worker),
    CommandGroup(("submit", "cancel", "budget", "host", "policy"), _add_client),
    CommandGroup(("keys", "sign"), _add_keys),
    CommandGroup(("executor",), _add_executor),
    CommandGroup(("up",), _add_up),
    CommandGroup(("top",), _add_top),
    CommandGroup(("queue", "hosts", "history", "wait"), _add_state),
    CommandGroup(("projections",), _add_projections),
    CommandGroup(("whatif",), _add_whatif),
    CommandGroup(("forecast",), _add_forecast),
    CommandGroup(("archive",), _add_archive),
    CommandGroup(("monitor",), _add_monitor),
    CommandGroup(("explain",), _add_explain),
    CommandGroup(("demo",), _add_demo),
    CommandGroup(("schema",), _add_schema),
)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or only of the group that declares ``command``."""
    parser = argparse.ArgumentParser(
        prog="allot", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    groups = [g for g in COMMAND_GROUPS if command in g.names] or COMMAND_GROUPS
    for group in groups:
        group.add(sub)
    return parser


def _command_named(argv: list[str]) -> str | None:
    """The command a command line names: its first word, unless that is an option."""
    return argv[0] if argv and not argv[0].startswith("-") else None


def _one_line(text: str) -> str:
    """The first line of ``text``, printable (a message from a file may hold anything)."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in line)


def _os_message(exc: OSError) -> str:
    """``PATH: what is wrong`` for a file that cannot be opened or read."""
    what = {FileNotFoundError: "no such file", IsADirectoryError: "is a directory",
            NotADirectoryError: "a part of the path is not a directory",
            PermissionError: "permission denied"}.get(type(exc))
    what = what or (exc.strerror or str(exc)).lower()
    return f"{exc.filename}: {what}" if exc.filename else what


def _fail(message: str) -> int:
    print(f"allot: {_one_line(message) or 'error'}", file=sys.stderr)
    return EXIT_ERROR


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit status (errors: one line on stderr, status 2)."""
    try:
        # The core's form is chosen when it is first imported (here, or by a verb):
        # ALLOT_CORE=native without a current build is a clear error, not a traceback.
        native.status()
    except native.NativeCoreUnavailable as exc:
        return _fail(str(exc))
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(_command_named(argv)).parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except AllotError as exc:
        return _fail(str(exc))
    except BrokenPipeError:
        # The reader of our output went away (``allot ... | head``): not an error of ours.
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - so the final flush cannot fail
        return 1
    except OSError as exc:
        return _fail(_os_message(exc))
    except UnicodeDecodeError as exc:
        return _fail(f"a file is not UTF-8 text ({exc.reason} at byte {exc.start})")
    except KeyboardInterrupt:
        return 130
