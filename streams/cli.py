"""``allot worker`` and ``allot journal export``: the live pipeline's commands.

``register(subparsers)`` adds both to the ``allot`` command line. Settings
come from the defaults, ``--config FILE`` (TOML), the environment
(``ALLOT_<SETTING>``, ``KAFKA_BOOTSTRAP_SERVERS``) and the flags, later ones
winning; docs/live.md lists every setting. Errors are one line on stderr and
exit status 2.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from events.errors import AllotError
from streams import config

EXIT_ERROR = 2

# Settings that get a flag of their own (every setting is in the config file and env).
WORKER_FLAGS: dict[str, tuple[str, type | None]] = {
    "bootstrap": ("Kafka bootstrap servers HOST:PORT", str),
    "topic_prefix": ("prefix of every topic name", str),
    "group": ("the consumer group of the workers", str),
    "worker_name": ("this worker's name (default: host-pid)", str),
    "instance_id": ("static group membership id", str),
    "partitions": ("partitions of topics the worker creates", int),
    "time_scale": ("virtual seconds per wall second", float),
    "tick_interval_s": ("wall seconds between ticks", float),
    "tick_key_file": ("file with the key ticker and workers share", str),
    "keyring_file": ("TOML [keys] of producer principals", str),
    "metrics_port": ("port of /healthz and /metrics (0: any, -1: off)", int),
    "metrics_host": ("address of /healthz and /metrics", str),
    "log_format": ("json, console or auto", str),
    "log_level": ("debug, info, warning or error", str),
    "snapshot_every_records": ("snapshot after this many journal records", int),
    "session_timeout_ms": ("consumer group session timeout", int),
    "liveness_interval_s": ("seconds between two heartbeats on allot.liveness (fast takeover)",
                            float),
    "liveness_lapse_s": ("a holder silent this long is taken over at once (>= 2 intervals)",
                         float),
}


def _settings_flags(p: argparse.ArgumentParser, flags: dict[str, tuple[str, type | None]]) -> None:
    p.add_argument("--config", metavar="FILE", type=Path,
                   help="a TOML settings file (keys as in docs/live.md)")
    for name, (help_text, kind) in flags.items():
        p.add_argument(f"--{name.replace('_', '-')}", dest=name, type=kind, default=None,
                       help=help_text)


def _collect(args: argparse.Namespace, flags: dict[str, Any]) -> dict[str, Any]:
    return {name: getattr(args, name, None) for name in flags}


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``worker`` and ``journal`` (with ``export``) to the allot command line."""
    p = subparsers.add_parser(
        "worker", help="run the live scheduling worker on Kafka",
        description="Consume allot.inbox, schedule with the pure core, append every input and "
                    "decision to allot.journal, tick each owned cluster, dead-letter what cannot "
                    "be taken. Several workers form one consumer group; each cluster is "
                    "scheduled by exactly one. Settings: docs/live.md.")
    _settings_flags(p, WORKER_FLAGS)
    p.add_argument("--cluster", dest="clusters", action="append", metavar="ID",
                   help="a cluster to schedule (repeatable; default: the setting `clusters`)")
    p.add_argument("--require-signatures", dest="require_signatures", action="store_const",
                   const=True, default=None,
                   help="dead-letter every unsigned input (the default; see --insecure-dev)")
    p.add_argument("--insecure-dev", dest="insecure_dev", action="store_const", const=True,
                   default=None,
                   help="DEVELOPMENT ONLY: accept unsigned inputs and check no roles (said "
                        "loudly at start and on /healthz and /state)")
    p.set_defaults(func=_guard(_worker))

    j = subparsers.add_parser("journal", help="read the live journal",
                              description="Commands over the journal topic.")
    j.set_defaults(func=lambda _a: _usage(j))
    jsub = j.add_subparsers(title="journal commands", metavar="COMMAND")
    e = jsub.add_parser(
        "export", help="write the journal as a JSON-lines log (fenced, deduplicated)",
        description="Read every partition of the journal up to its end, keep the records that "
                    "count (the fence: only those written under the latest claim), drop "
                    "duplicate event ids, and write the events as JSON lines, one group (an "
                    "input and its decisions) at a time, ordered by event time. The file "
                    "passes `allot audit replay` and loads with `allot audit load`.")
    _settings_flags(e, {"bootstrap": WORKER_FLAGS["bootstrap"],
                        "topic_prefix": WORKER_FLAGS["topic_prefix"]})
    e.add_argument("--out", "-o", type=Path, required=True, metavar="FILE",
                   help="the JSON-lines file to write")
    e.add_argument("--cluster", dest="only_clusters", action="append", metavar="ID",
                   help="only this cluster (repeatable)")
    e.add_argument("--keep-incomplete", action="store_true",
                   help="also write a last input whose decisions are still missing")
    e.set_defaults(func=_guard(_export))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return EXIT_ERROR


def _guard(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except AllotError as exc:
            print(f"allot {args.command}: error: {exc}", file=sys.stderr)
            return EXIT_ERROR
        except KeyboardInterrupt:
            return 130
    return run


def _worker(args: argparse.Namespace) -> int:
    from streams import logs
    from streams.worker import run_worker

    flags = _collect(args, WORKER_FLAGS)
    if args.clusters:
        flags["clusters"] = tuple(args.clusters)
    flags["require_signatures"] = args.require_signatures
    flags["insecure_dev"] = args.insecure_dev
    settings = config.load(args.config, flags=flags)
    logs.configure(settings.log_format, settings.log_level)
    return asyncio.run(run_worker(settings))


def _export(args: argparse.Namespace) -> int:
    from rich.console import Console

    from identity import journal_seal
    from streams.commands import discovered_settings
    from streams.export import export_journal

    settings = discovered_settings(args)  # the running ``allot up``'s broker if none is named
    seals = journal_seal.reader_check(settings.keyring_file, settings.signing_key() or None,
                                      settings.ticker_principal)
    report = asyncio.run(export_journal(settings.bootstrap, args.out, prefix=settings.topic_prefix,
                                        clusters=args.only_clusters,
                                        complete_only=not args.keep_incomplete,
                                        fetch_wait_ms=settings.fold_fetch_wait_ms,
                                        seal_check=seals))
    journal_seal.say_export_seals(report)
    Console(stderr=True).print(
        f"wrote {report.events:,} events ({report.inputs:,} inputs, {report.decisions:,} "
        f"decisions) from {report.partitions} partition(s) to {args.out}; skipped "
        f"{report.fenced:,} fenced and {report.duplicates:,} duplicate record(s)"
        + (f", held back {report.withheld:,} record(s) of an incomplete last group"
           if report.withheld else ""))
    return 0
