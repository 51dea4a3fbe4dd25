"""Benchmark: the DuckDB audit's summary() over a ten-million-event log.

The log is realistic in shape and consistent in every lifecycle because its
decisions come from the real engine: a driver feeds one segment (a 256-GPU
cluster, 15 teams, demand about 2-3x capacity, debug / training / eval /
interactive work with and without minimum runtimes, cancels, host faults and
repairs, a tick every five minutes and at every arrival and completion) through
``scheduler.Engine`` until the segment has drained. That segment is then
repeated back to back, shifted in time, with fresh ids (``~k`` appended to
every event id, cause and workload id) until the log holds the target number of
events. Only the first copy carries the policy, budget tree and hosts, which
the later copies reuse; every copy ends with all work ended and all hosts
healthy, so every lifecycle in the concatenation is complete and in order.
(A replay would not re-derive the later copies' decisions exactly: fair-share
usage carries over from one copy to the next. The audit does not care.)

The log is cached under /tmp (never in the repo). The script reports the load
time (which includes decoding every line with events.decode, on a thread beside
DuckDB's read, and deriving the run's derived_* tables, see docs/audit.md), how
much of it the derivation alone takes and how long the decoder takes alone, then
the median time of ``summary()`` against a baseline measured in the same run on
the same database: a plain ``SELECT count(*), max(at) FROM events``. Target:
summary() <= 5 s for 10M events. Wall times on a shared machine depend on what
else runs, so the script also prints the load average, the CPU seconds (all
DuckDB threads), and how many cores a CPU-bound probe query actually got.

``--before SRC`` compares loaders in the same run: each round loads the log
once with the audit package found under SRC (e.g. a checkout of main, before a
change) and once with this one, alternately, each in a fresh process and a
fresh database file, and prints the medians and their ratio.

Usage: python -m benchmarks.bench_audit [--events N] [--repeat N] [--fresh]
                                        [--before SRC [--rounds N]]
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import duckdb
import msgspec

from audit import load_log, open_db, summary
from audit.load import DERIVED_STATUS, refresh_derived
from benchmarks.common import machine, median_seconds
from events import Event, WorkloadPreempted, WorkloadStarted
from events.factory import Inputs
from scheduler import Engine

HOUR = 3600
CACHE = Path("/tmp/allot-bench-audit")
# The generator's version, in the cached log's folder name: a log an older generator wrote
# is not reused. 2: the clock reaches each delivery's time first (version 1's drain refused
# finishes and cancels as future_time, so every copy left work running for good and the
# occupancy grew with the number of copies).
LOG_VERSION = 2
HOSTS = 128
TICK_S = 60  # the simulated ticker; the live one ticks every second
# Marker for ids that get a per-copy suffix; not a character any id uses.
MARK = "\u00a7"

# (kind, weight, (hosts, gpus per host) choices, min runtime choices, duration range in s)
KINDS = (
    ("debug", 30, ((1, 1), (1, 2)), (900, 600), (300, 2400)),
    ("training", 35, ((1, 8), (2, 8), (4, 8), (1, 4)), (HOUR, 4 * HOUR, 8 * HOUR), (2 * HOUR, 20 * HOUR)),
    ("eval", 20, ((1, 1), (1, 2), (1, 4)), (0, 0, 1800), (600, 3 * HOUR)),
    ("interactive", 15, ((1, 1), (1, 2)), (0, 2 * HOUR), (1800, 6 * HOUR)),
)


def simulate_segment(seed: int = 11, hours: int = 24 * 7) -> list[Event]:
    """One segment of cluster life, decided by the real engine, ending with nothing running."""
    rng = random.Random(seed)
    mk = Inputs(prefix="s")
    eng = Engine()
    log: list[Event] = []
    # Future executor and owner events: (time, order, workload, attempt); attempt -1 = cancel.
    agenda: list[tuple[int, int, str, int]] = []
    remaining: dict[str, int] = {}  # work left per workload (resumable work keeps its progress)
    started_at: dict[str, int] = {}
    attempt: dict[str, int] = {}
    order = itertools.count()

    def feed(e: Event) -> None:
        out = eng.process(e)
        if out is None:
            return
        log.append(e)
        log.extend(out)
        for d in out:
            if isinstance(d, WorkloadStarted):
                attempt[d.workload] = attempt.get(d.workload, 0) + 1
                started_at[d.workload] = d.at
                heapq.heappush(agenda, (d.at + remaining[d.workload], next(order), d.workload,
                                        attempt[d.workload]))
            elif isinstance(d, WorkloadPreempted):
                remaining[d.workload] -= d.at - started_at[d.workload]

    feed(mk.policy())
    feed(mk.node("lab", managers=("admin",)))
    teams = []
    for p in range(3):
        feed(mk.node(f"lab/p{p}", shares=rng.randint(1, 4)))
        for q in range(5):
            feed(mk.node(f"lab/p{p}/t{q}", shares=rng.randint(1, 5)))
            teams.append(f"lab/p{p}/t{q}")
    for h in range(HOSTS):
        feed(mk.host(f"h{h:02d}", rack=f"r{h // 8}"))

    # Arrivals spread uniformly over the segment until demand is 2.5x capacity.
    end = hours * HOUR
    arrivals = []
    demand, budget_gpu_s = 0, 2.5 * HOSTS * 8 * end
    while demand < budget_gpu_s:
        kind, _, shapes, mins, (lo, hi) = rng.choices(KINDS, [k[1] for k in KINDS])[0]
        hosts, per = rng.choice(shapes)
        duration = rng.randint(lo, hi)
        arrivals.append((rng.randrange(end), kind, hosts, per, rng.choice(mins), duration))
        demand += hosts * per * duration
    arrivals.sort()
    faults = sorted(rng.sample(range(HOUR, end - 12 * HOUR, 600), k=hours // 12))

    next_tick = 0
    for n, (at, kind, hosts, per, mins, duration) in enumerate(arrivals):
        # Everything due before this arrival happens first, each with its cycle.
        while (agenda and agenda[0][0] < at) or next_tick < at:
            now = min(agenda[0][0] if agenda else at, next_tick)
            _settle(eng, mk, feed, agenda, attempt, rng, now)
            if now == next_tick:
                next_tick += TICK_S
            if faults and faults[0] <= now:
                feed(mk.fault(f"h{rng.randrange(HOSTS):02d}", at=now, reason="xid 79",
                              severity=rng.choice(("degraded", "degraded", "failed"))))
                faults.pop(0)
        wid = f"w{n}"
        remaining[wid] = duration
        feed(mk.submit(wid, rng.choice(teams), hosts * per, mins, at=at, hosts=hosts, kind=kind,
                       resumable=rng.random() < 0.6, priority=rng.choice((0, 0, 1)),
                       expected_duration_s=duration))
        if rng.random() < 0.03:
            heapq.heappush(agenda, (at + rng.randint(600, 4 * HOUR), next(order), wid, -1))
        feed(mk.tick(at))
    # Stop submitting; let the queue drain (cancelling what is still waiting after a day).
    now = arrivals[-1][0]
    deadline = now + 24 * HOUR
    while agenda or eng.state.workloads.pending_count():
        now = agenda[0][0] if agenda else now + TICK_S
        if now > deadline:
            break
        _settle(eng, mk, feed, agenda, attempt, rng, now)
    now += 300
    feed(mk.tick(now, cycle=False))   # (the clock first: see _settle)
    for name, host in eng.state.cluster_state.hosts.items():
        if host.health != "ok":
            feed(mk.repair(name, at=now))
    for wid, w in eng.state.workloads.all.items():
        if w.status in ("pending", "running"):
            feed(mk.cancel(wid, actor=w.user, at=now))
    feed(mk.tick(now))
    return log


def _settle(eng: Engine, mk: Inputs, feed: Callable[[Event], None],
            agenda: list[tuple[int, int, str, int]], attempt: dict[str, int],
            rng: random.Random, now: int) -> None:
    """Deliver what is due at ``now`` (finishes, cancels, repairs), then run a cycle.

    The clock reaches ``now`` first (a tick without a cycle): the engine refuses
    an input more than ``clock_skew_s`` ahead of its clock (``future_time``), and
    a refused finish would leave its workload running, and its GPUs busy, in
    every later copy of the segment.
    """
    feed(mk.tick(now, cycle=False))
    while agenda and agenda[0][0] <= now:
        _, _, wid, run = heapq.heappop(agenda)
        w = eng.state.workloads.all.get(wid)
        if w is None:
            continue  # ended and dropped from the live state: nothing left to cancel or finish
        if run == -1:
            if w.status in ("pending", "running"):
                feed(mk.cancel(wid, actor=w.user, at=now))
        elif w.status == "running" and attempt.get(wid) == run:
            feed(mk.finish(wid, at=now, outcome="failed" if rng.random() < 0.05 else "succeeded"))
    for name, host in eng.state.cluster_state.hosts.items():
        # Automated repair brings a drained host back (here: at the next cycle).
        if host.health == "repairing":
            feed(mk.repair(name, at=now))
    feed(mk.tick(now))


def _templates(log: list[Event]) -> tuple[list[tuple[str, int, str]], list[tuple[str, int, str]], int]:
    """Each event as (text before ``at``, at, text after) with id-like values marked.

    Returns the setup events (first copy only), the repeated events, and the segment span.
    """
    workloads = {getattr(e, "workload", None) for e in log} - {None}
    setup_types = {"policy.configured", "budget.node_defined", "host.added"}
    setup, body = [], []
    for e in log:
        d = msgspec.to_builtins(e)
        tag = d["type"]
        if tag not in setup_types:
            d["id"] += MARK
            if d.get("cause"):
                d["cause"] += MARK
            if d.get("workload"):
                d["workload"] += MARK
            if d.get("by") in workloads:
                d["by"] += MARK
        text = msgspec.json.encode(d).decode()
        at_key = f'"at":{e.at},'
        head, tail = text.split(at_key, 1)
        (setup if tag in setup_types else body).append((head + '"at":', e.at, "," + tail))
    span = log[-1].at - log[0].at + 300
    return setup, body, span


def build_log(path: Path, target: int, seed: int = 11) -> int:
    """Write a log of about ``target`` events to ``path``; returns the number written."""
    t0 = time.perf_counter()
    segment = simulate_segment(seed)
    print(f"engine segment: {len(segment):,} events in {time.perf_counter() - t0:.1f} s")
    setup, body, span = _templates(segment)
    copies = max(1, round((target - len(setup)) / len(body)))
    written = 0
    tmp = path.with_suffix(".partial")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write("".join(f"{h}{at}{tl}\n" for h, at, tl in setup).replace(MARK, ""))
        written += len(setup)
        for k in range(copies):
            shift = k * span
            text = "".join(f"{h}{at + shift}{tl}\n" for h, at, tl in body)
            fh.write(text.replace(MARK, f"~{k}"))
            written += len(body)
    tmp.replace(path)
    print(f"log: {written:,} events ({copies} copies of a {len(body):,}-event segment, "
          f"{copies * span / 86400:.0f} simulated days) in {time.perf_counter() - t0:.1f} s")
    return written


def parallel_speedup(con: duckdb.DuckDBPyConnection) -> float:
    """How many cores DuckDB really gets right now: a CPU-bound query on 1 thread vs all.

    The figure puts the timings in context on a shared machine (2.0 = two free cores).
    The probe scans a table: a scan of ``range()`` runs on one thread in DuckDB 2,
    so it would always report 1.0.
    """
    threads = con.execute("SELECT current_setting('threads')").fetchone()
    con.execute("CREATE OR REPLACE TEMP TABLE _probe AS SELECT i FROM range(30000000) AS r(i)")
    probe = "SELECT sum(hash(i)) FROM _probe"
    con.execute("SET threads = 1")
    one, _ = median_seconds(lambda: con.execute(probe).fetchall(), 5, warmup=1)
    con.execute(f"SET threads = {threads[0] if threads else 1}")
    many, _ = median_seconds(lambda: con.execute(probe).fetchall(), 5, warmup=1)
    con.execute("DROP TABLE _probe")
    return one / many


def cpu_and_wall(fn: Callable[[], object]) -> tuple[float, float]:
    """(wall, CPU) seconds of one call; CPU counts every DuckDB thread of this process."""
    c0, w0 = time.process_time(), time.perf_counter()
    fn()
    return time.perf_counter() - w0, time.process_time() - c0


_TIMED_LOAD = """
import json, sys, time, resource
sys.path.insert(0, sys.argv[1])
from audit.load import load_log, open_db
con = open_db(sys.argv[3])
c0, w0 = time.process_time(), time.perf_counter()
n = load_log(con, sys.argv[2], run="bench")
wall, cpu = time.perf_counter() - w0, time.process_time() - c0
con.close()
print(json.dumps({"events": n, "wall": wall, "cpu": cpu,
                  "rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6}))
"""


def timed_load(src: Path, log: Path, db: Path) -> dict[str, float]:
    """One load of ``log`` into a fresh ``db`` by the audit package under ``src``, in a child process."""
    for p in (db, db.with_suffix(".duckdb.wal")):
        p.unlink(missing_ok=True)
    out = subprocess.run([sys.executable, "-c", _TIMED_LOAD, str(src), str(log), str(db)],
                         check=True, capture_output=True, text=True, cwd="/")
    db.unlink(missing_ok=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def compare_loads(before: Path, log: Path, rounds: int) -> None:
    """Load ``log`` with the package under ``before`` and with this one, alternately."""
    here = Path(__file__).resolve().parent.parent
    db = CACHE / "compare.duckdb"
    got: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    for r in range(rounds):
        for name, src in (("before", before), ("after", here)):
            res = timed_load(src, log, db)
            got[name].append(res)
            print(f"  round {r + 1} {name:6s}: {res['events']:,.0f} events, {res['wall']:.1f} s wall, "
                  f"{res['cpu']:.1f} s CPU, peak {res['rss_gb']:.1f} GB; load average "
                  f"{os.getloadavg()[0]:.2f}")
    med = {k: (statistics.median(x["wall"] for x in v), statistics.median(x["cpu"] for x in v))
           for k, v in got.items()}
    print(f"load, median of {rounds}: before {med['before'][0]:.1f} s wall / {med['before'][1]:.1f} s "
          f"CPU; after {med['after'][0]:.1f} s wall / {med['after'][1]:.1f} s CPU; ratio "
          f"{med['after'][0] / med['before'][0]:.2f}x wall, {med['after'][1] / med['before'][1]:.2f}x CPU")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=10_000_000, help="target log size (default 10M)")
    ap.add_argument("--repeat", type=int, default=3, help="timed summary() runs (default 3)")
    ap.add_argument("--fresh", action="store_true", help="rebuild the cached log")
    ap.add_argument("--before", type=Path, metavar="SRC",
                    help="also compare load times with the audit package under SRC (e.g. main)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the --before comparison")
    args = ap.parse_args(argv)
    print(f"machine: {machine()}; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    CACHE.mkdir(parents=True, exist_ok=True)
    run_dir = CACHE / f"bench{args.events}-v{LOG_VERSION}"
    run_dir.mkdir(exist_ok=True)
    log_path = run_dir / "events.jsonl"
    if args.fresh or not log_path.exists():
        build_log(log_path, args.events)
    size = log_path.stat().st_size
    if args.before:
        compare_loads(args.before, log_path, args.rounds)
    from audit.records import scan

    decode_wall, decode_cpu = cpu_and_wall(lambda: scan(log_path))
    print(f"events.decode over every line alone (the loader's scan, one thread): "
          f"{decode_wall:.1f} s wall, {decode_cpu:.1f} s CPU")
    db_path = CACHE / "audit.duckdb"
    for p in (db_path, db_path.with_suffix(".duckdb.wal")):
        p.unlink(missing_ok=True)
    con = open_db(db_path)
    print(f"cores available to DuckDB now: {parallel_speedup(con):.2f} "
          f"(speed-up of a CPU-bound query on all threads over one)")
    n = 0

    def load() -> None:
        nonlocal n
        n = load_log(con, log_path, run="bench")

    load_wall, load_cpu = cpu_and_wall(load)
    con.execute("CHECKPOINT")
    print(f"load: {n:,} events ({size / 1e9:.2f} GB of JSON) in {load_wall:.1f} s wall, "
          f"{load_cpu:.1f} s CPU ({n / load_wall:,.0f} events/s), derived tables included; "
          f"database file {db_path.stat().st_size / 1e9:.2f} GB")

    def derive() -> None:
        # The same derivation load_log ran, alone: forget the run's status and refresh it.
        con.execute(f"DELETE FROM {DERIVED_STATUS} WHERE run = 'bench'")
        refresh_derived(con, ["bench"])

    derive_wall, derive_cpu = cpu_and_wall(derive)
    print(f"  of which deriving the tables: {derive_wall:.1f} s wall, {derive_cpu:.1f} s CPU "
          f"(measured again on its own)")

    def baseline() -> object:
        return con.execute('SELECT count(*), max("at") FROM events').fetchall()

    def report() -> object:
        return summary(con, "bench")

    base, _ = median_seconds(baseline, args.repeat, warmup=1)
    report()  # warm-up
    timed = [cpu_and_wall(report) for _ in range(args.repeat)]
    med = statistics.median(w for w, _ in timed)
    cpu = statistics.median(c for _, c in timed)
    result = summary(con, "bench")
    print(f"summary(): median {med:.2f} s wall over {args.repeat} runs "
          f"({', '.join(f'{w:.2f}' for w, _ in timed)}), median {cpu:.2f} s CPU; target <= 5 s "
          f"-> {'met' if med <= 5 else 'NOT met'}")
    print(f"baseline (count(*), max(at)): median {base * 1e3:.1f} ms; summary/baseline = {med / base:.0f}x")
    print(f"summary: occupancy {result['occupancy']:.3f}, unallocated share "
          f"{result['unallocated_share']:.3f}, owed/received {result['owed_received']['total']:.3f}, "
          f"{sum(result['preemptions'].values()):,} preemptions, "
          f"{result['wait_s']['all']['n']:,} workloads")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    print(f"peak memory (RSS) {peak:.1f} GB; load average now "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    con.close()


if __name__ == "__main__":
    main()
