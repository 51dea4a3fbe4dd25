"""Benchmark: the audit over ten million *archived* events (issue 25).

The events are bench_audit's log (a week of a 256-GPU cluster decided by the
real engine, repeated with fresh ids and shifted in time to about 10 million
events, cached in /tmp/allot-bench-audit). They are written as an archive
(docs/archive.md) exactly as the archiver writes a journal one worker owned:
partition 0, a claim at offset 0, then every event in log order as a journal
record (inputs with ``allot-kind: input`` and their inbox offset, decisions with
``allot-kind: decision``, all under the claim's token), in batches of
``--batch`` records through ``archive.writer.archive_records`` (the archiver's
own files, manifest lines and commits, without a broker), cached beside the log.

Timed on that archive, in one process, each figure next to a baseline of the
same run:

- **engine scan**: DuckDB reading the Parquet directly
  (``read_parquet(.../journal/*/*/*.parquet, hive_partitioning = true)``), a
  count of events by type: what any engine pays to read the archive;
- **load**: ``allot audit load DIR`` (``audit.load.load``: the records that
  count, decoded by events.decode, into the events table, then the derived
  tables), with the time ``archive.events.write_events`` alone takes;
- **report**: ``summary()`` (every figure of ``allot audit report``) on the
  loaded archive, median of ``--repeat``; target <= 5 s;
- **load + report**: the two together, what a first report of an archive costs.

Usage: python -m benchmarks.bench_audit_archive [--events N] [--repeat N] [--fresh] [--clean]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb

from archive import layout
from archive.writer import archive_records
from audit import open_db, summary
from audit.load import load
from benchmarks.bench_audit import CACHE, LOG_VERSION, build_log, cpu_and_wall
from benchmarks.common import machine
from streams import records as rec

TOKEN = "bench-owner"
PARTITION = 0
# Broker timestamps of the records: a fixed start, a millisecond apart (only claims/ uses them).
T0_MS = 1_796_000_000_000


def journal_records(log: Path) -> Iterator[tuple[int, int, bytes, bytes, list[tuple[str, bytes]]]]:
    """``log`` as one owner's journal partition: its claim at offset 0, then every event."""
    claim = rec.encode_claim(rec.Claim(token=TOKEN, worker="bench", partition=PARTITION,
                                       at=T0_MS / 1000))
    yield 0, T0_MS, b"claim", claim, rec.journal_headers(rec.KIND_CLAIM, TOKEN)
    offset, inbox = 1, 0
    decision = rec.journal_headers(rec.KIND_DECISION, TOKEN)
    with open(log, "rb") as fh:
        for line in fh:
            value = line.rstrip(b"\n")
            if not value.strip():
                continue
            if b'"cause":null' in value:
                headers = rec.journal_headers(rec.KIND_INPUT, TOKEN, inbox)
                inbox += 1
            else:
                headers = decision
            yield offset, T0_MS + offset, b"default", value, headers
            offset += 1


def build_archive(log: Path, root: Path, batch: int = 200_000) -> int:
    """Write ``log`` to the archive ``root`` as one owner's journal partition; return its records."""
    t0 = time.perf_counter()
    tmp = root.with_name(root.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    stats = archive_records(tmp, journal_records(log), partition=PARTITION, flush_records=batch)
    shutil.rmtree(root, ignore_errors=True)
    tmp.rename(root)
    size = sum(p.stat().st_size for p in root.rglob("*.parquet"))
    print(f"archive: {stats.records:,} records, {stats.files:,} files, {size / 1e9:.2f} GB, "
          f"built in {time.perf_counter() - t0:.0f} s")
    return stats.records


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--events", type=int, default=10_000_000, help="target log size (default 10M)")
    ap.add_argument("--repeat", type=int, default=3, help="timed summary() runs (default 3)")
    ap.add_argument("--batch", type=int, default=200_000, help="records per archive batch")
    ap.add_argument("--fresh", action="store_true", help="rebuild the cached log and archive")
    ap.add_argument("--clean", action="store_true", help="delete the cached archive afterwards")
    args = ap.parse_args(argv)
    print(f"machine: {machine()}; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    run_dir = CACHE / f"bench{args.events}-v{LOG_VERSION}"
    run_dir.mkdir(parents=True, exist_ok=True)
    log = run_dir / "events.jsonl"
    if args.fresh or not log.exists():
        build_log(log, args.events)
    root = run_dir / "archive"
    if args.fresh or not (root / layout.MANIFEST).exists():
        build_archive(log, root, args.batch)
    db_path = run_dir / "audit-archive.duckdb"
    try:
        for p in (db_path, db_path.with_suffix(".duckdb.wal")):
            p.unlink(missing_ok=True)
        con = open_db(db_path)
        scan_sql = (f"SELECT type, count(*) FROM read_parquet('{layout.glob(root)}', "
                    f"hive_partitioning = true) GROUP BY ALL")
        scans = [cpu_and_wall(lambda: con.execute(scan_sql).fetchall()) for _ in range(3)]
        scan_wall = statistics.median(w for w, _ in scans)
        print(f"engine scan (DuckDB over the Parquet, count by type): median {scan_wall:.2f} s "
              f"wall, {statistics.median(c for _, c in scans):.2f} s CPU")

        from archive.events import write_events

        with open(os.devnull, "wb") as sink:
            spool_wall, spool_cpu = cpu_and_wall(lambda: write_events(root, sink))
        print(f"archive.events.write_events alone (the records that count, as lines): "
              f"{spool_wall:.1f} s wall, {spool_cpu:.1f} s CPU")
        got: dict[str, int] = {}

        def do_load() -> None:
            got["events"] = load(con, root, "archive").events

        load_wall, load_cpu = cpu_and_wall(do_load)
        print(f"load (allot audit load DIR): {got['events']:,} events in {load_wall:.1f} s wall, "
              f"{load_cpu:.1f} s CPU ({got['events'] / load_wall:,.0f} events/s), derived tables "
              f"included; load average {os.getloadavg()[0]:.2f}")
        summary(con, "archive")  # warm-up
        timed = [cpu_and_wall(lambda: summary(con, "archive")) for _ in range(args.repeat)]
        med = statistics.median(w for w, _ in timed)
        print(f"report (summary()): median {med:.2f} s wall over {args.repeat} runs "
              f"({', '.join(f'{w:.2f}' for w, _ in timed)}); target <= 5 s -> "
              f"{'met' if med <= 5 else 'NOT met'}")
        total = load_wall + med
        print(f"load + report: {total:.1f} s ({total / scan_wall:.0f}x the engine scan); target "
              f"<= 5 s -> {'met' if total <= 5 else 'NOT met'}")
        r = summary(con, "archive")
        print(f"summary: occupancy {r['occupancy']:.3f}, {sum(r['preemptions'].values()):,} "
              f"preemptions, {r['wait_s']['all']['n']:,} workloads; load average now "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        con.close()
    except duckdb.Error:
        raise
    finally:
        for p in (db_path, db_path.with_suffix(".duckdb.wal")):
            p.unlink(missing_ok=True)
        if args.clean:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
