"""``allot archive``: copy the journal into Parquet, restore it, or say what an archive holds.

``allot archive`` runs the archiver until SIGINT/SIGTERM (then it reads every
partition to its end, commits and exits); ``--once`` archives up to the end as
of the start and exits. ``allot archive restore`` puts an archived journal back
into a broker whose journal is empty. ``allot archive status`` prints what an
archive holds. Settings (bootstrap, topic prefix) are read as the worker reads
them (docs/live.md). Errors are one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from events.errors import AllotError
from streams import config

EXIT_ERROR = 2
DEFAULT_DIR = Path("archive-data")


def _common(p: argparse.ArgumentParser, kafka: bool = True) -> None:
    p.add_argument("--dir", type=Path, default=DEFAULT_DIR, metavar="DIR",
                   help=f"the archive's root directory (default {DEFAULT_DIR})")
    if kafka:
        p.add_argument("--config", type=Path, metavar="FILE", help="a TOML settings file")
        p.add_argument("--bootstrap", default=None, help="Kafka bootstrap servers HOST:PORT")
        p.add_argument("--topic-prefix", dest="topic_prefix", default=None,
                       help="prefix of every topic name")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``archive`` (with ``restore`` and ``status``) to the allot command line."""
    a = subparsers.add_parser(
        "archive", help="copy the journal into Parquet files (partitioned by cluster and day)",
        description="Consume allot.journal from where the archive's manifest ends and write "
                    "Parquet files partitioned by cluster and day, each batch committed in the "
                    "manifest (a record read twice is written once; a crash loses nothing). "
                    "Runs until Ctrl-C/SIGTERM, then archives up to the end and exits. The "
                    "layout is documented in docs/archive.md; DuckDB, Spark or Trino read it.")
    _common(a)
    a.add_argument("--once", action="store_true",
                   help="archive up to the journal's end as of now, then exit")
    a.add_argument("--flush-s", type=float, default=5.0, metavar="SECONDS",
                   help="commit a partition's batch at least this often (default 5)")
    a.add_argument("--flush-records", type=int, default=200_000, metavar="N",
                   help="commit once this many records are buffered (default 200000)")
    a.set_defaults(func=_guard(_run))
    sub = a.add_subparsers(title="archive commands", metavar="COMMAND")
    r = sub.add_parser("restore", help="put an archived journal back into an empty journal topic",
                       description="Produce every archived record again, exact bytes, headers "
                                   "and timestamps, at its own offset, into each journal "
                                   "partition that is empty (a fresh broker), and fill the "
                                   "inbox up to the offsets the journal names. Partitions "
                                   "that hold records already are left as they are.")
    _common(r)
    r.set_defaults(func=_guard(_restore))
    s = sub.add_parser("status", help="what an archive holds",
                       description="Partitions, offsets, records and files of an archive, from "
                                   "its manifest.")
    _common(s, kafka=False)
    s.set_defaults(func=_guard(_status))


def _guard(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except AllotError as exc:
            print(f"allot archive: error: {exc}", file=sys.stderr)
            return EXIT_ERROR
        except KeyboardInterrupt:
            return 130
    return run


def _settings(args: argparse.Namespace) -> Any:
    return config.load(getattr(args, "config", None),
                       flags={"bootstrap": args.bootstrap, "topic_prefix": args.topic_prefix})


def _run(args: argparse.Namespace) -> int:
    from archive.writer import Archiver
    from streams import logs

    s = _settings(args)
    logs.configure(s.log_format, s.log_level)
    archiver = Archiver(s.bootstrap, args.dir, s.topic_prefix, flush_records=args.flush_records,
                        flush_s=args.flush_s, fetch_wait_ms=s.fold_fetch_wait_ms)

    async def main() -> Any:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, archiver.stop)
        return await archiver.run(once=args.once)

    stats = asyncio.run(main())
    out = {"dir": str(args.dir), "records": stats.records, "batches": stats.batches,
           "files": stats.files, "bytes": stats.bytes, "seconds": round(stats.seconds, 3),
           "records_per_s": round(stats.rate), "recovered": list(stats.recovered)}
    if args.json:
        print(json.dumps(out))
    else:
        print(f"archived {stats.records:,} records in {stats.batches:,} batches "
              f"({stats.files:,} files, {stats.bytes / 1e6:.1f} MB) to {args.dir} in "
              f"{stats.seconds:.1f} s", file=sys.stderr)
    return 0


def _restore(args: argparse.Namespace) -> int:
    from archive.restore import restore

    s = _settings(args)
    report = asyncio.run(restore(s.bootstrap, args.dir, s.topic_prefix))
    if args.json:
        print(json.dumps({"restored": report.restored, "inbox_filled": report.filled,
                          "kept": report.kept, "seconds": round(report.seconds, 3)}))
    else:
        print(f"restored {report.records:,} journal records into "
              f"{len(report.restored)} partition(s) in {report.seconds:.1f} s"
              + (f"; left {len(report.kept)} partition(s) that hold records"
                 if report.kept else ""), file=sys.stderr)
    return 0


def _status(args: argparse.Namespace) -> int:
    from archive.manifest import ArchiveError, Manifest

    if not (args.dir / "manifest.jsonl").is_file():
        raise ArchiveError(f"{args.dir}: no archive here (no manifest.jsonl)")
    m = Manifest(args.dir)
    parts = {p: {"next_offset": m.next_offset(p), "files": len(m.files(p)),
                 "records": sum(b.records for b in m.batches if b.partition == p)}
             for p in m.partitions()}
    if args.json:
        print(json.dumps({"dir": str(args.dir), "topic": m.topic, "records": m.records(),
                          "batches": len(m.batches), "partitions": parts}))
    else:
        print(f"{args.dir}: {m.records():,} records of {m.topic} in {len(m.batches):,} batches")
        for p, row in parts.items():
            print(f"  partition {p}: offsets 0..{row['next_offset'] - 1}, "
                  f"{row['records']:,} records, {row['files']:,} files")
    return 0

