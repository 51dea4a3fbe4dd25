"""Benchmark: the worker's snapshot and restart cost against history length, live work held constant.

The log is synthetic, deterministic (seeded) and made by the engine itself, so
every decision in it is a real one: one cluster of 32 hosts x 8 GPUs, a budget
tree of 8 leaves with unequal shares, the default policy (fair-share window 7
days, dedupe window 1 day: ended workloads leave after 7 days). Every 30
trusted seconds: the executor reports the runs whose duration is up
(``workload.finished`` with its run number), researchers top the queue up to
200 pending workloads (1-8 GPUs, minimum runtime 0 to 1 h, duration the
minimum plus an exponential of mean 20 min, half resumable), now and then
one cancels a pending workload, and the signed clock ticks a cycle. So live
work is constant (the cluster full: about 80 running, 200 pending) while the
history grows: about 2,450 workloads and 11,700 journal records per simulated
day (1,000,000 records are 85 days).

At each checkpoint (``--records``) it measures what a restart costs: the
snapshot the worker would write (bytes, seconds to write), ``Engine.restore``
of it, and the fold of the next ``--tail`` records on the restored engine
(the journal since the snapshot: the worker snapshots every 20,000 records),
plus the workloads held and the process's resident memory. The generation
rate is the cold fold's: a worker with no snapshot folds the whole journal.

Before and after in one run: the same generator runs twice, in two
processes, once on this tree (ended workloads leave the state: the lapse
rule) and once on the core of ``--before-root`` (a checkout of the commit
before it, where the worker keeps every workload ever seen). Both run the
pure-Python core unless ``--core native`` (the before tree has no compiled
build). Decisions are the same in both (the lapse rule changes none:
tests/test_core_lapse.py; the generator reads only live work).

Usage: python -m benchmarks.bench_snapshot_history [--records 1000000,2000000,5000000]
       [--tail 20000] [--seed 1] [--before-root DIR] [--core pure|native] [--json]
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
REPO = HERE.parent.parent
START = 1_767_225_600  # 2026-01-01 00:00 UTC
STEP_S = 30
LEAVES = (("t0", 4), ("t1", 3), ("t2", 2), ("t3", 2), ("t4", 1), ("t5", 1), ("t6", 1), ("t7", 1))


def _rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


class Lab:
    """The generator: one engine fed a steady lab; ``sink`` sees every journal record."""

    def __init__(self, seed: int, hosts: int = 32, pending: int = 200,
                 sink: Any = None) -> None:
        from events.factory import Inputs
        from scheduler import Engine

        self.rng = random.Random(seed)
        self.mk = Inputs(cluster="bench", prefix="s")
        self.engine = Engine("bench")
        self.pending_target = pending
        self.records = 0
        self.submitted = 0
        self.t = START
        self.ends: list[tuple[int, str, int]] = []  # (end time, workload, run)
        self.duration: dict[str, int] = {}
        self.sink = sink  # called with every journal record, in journal order
        mk = self.mk
        self.feed(mk.tick(START, cycle=False))  # the trusted clock first: inputs are stamped now
        self.feed(mk.node("lab", shares=1, managers=("admin",), at=START))
        for leaf, shares in LEAVES:
            self.feed(mk.node(f"lab/{leaf}", shares=shares, at=START))
        for i in range(hosts):
            self.feed(mk.host(f"h{i:03d}", gpus=8, at=START))
        self.feed(mk.tick(START))

    def feed(self, e: Any) -> None:
        out = self.engine.process(e)
        if out is None:
            return
        self.records += 1 + len(out)
        if self.sink is not None:
            self.sink(e)
            for d in out:
                self.sink(d)
        running = self.engine.state.workloads.running
        for d in out:
            if type(d).__name__ == "WorkloadStarted":
                w = running[d.workload]
                heapq.heappush(self.ends, (self.t + self.duration[w.id], w.id, w.runs))

    def step(self) -> None:
        """One 30-second moment: finishes, cancels, submissions (stamped now), then the tick."""
        rng, mk, st = self.rng, self.mk, self.engine.state
        at = st.now
        while self.ends and self.ends[0][0] <= self.t:
            _, wid, run = heapq.heappop(self.ends)
            w = st.workloads.running.get(wid)
            if w is not None and w.runs == run:
                self.feed(mk.finish(wid, at=at, run_number=run))
                del self.duration[wid]
        if rng.random() < 0.05:  # an impatient researcher
            queues = [q for q in st.workloads.pending.values()] + \
                [q for q in st.workloads.pending_free.values()]
            if queues:
                q = rng.choice(queues)
                wid = q[rng.randrange(len(q))][1].id
                self.feed(mk.cancel(wid, "admin", at=at))
                self.duration.pop(wid, None)
        for _ in range(max(0, self.pending_target - st.workloads.pending_count())):
            self.submitted += 1
            wid = f"w{self.submitted}"
            leaf = rng.choice(LEAVES)[0]
            min_rt = rng.choice((0, 600, 1800, 3600))
            self.duration[wid] = min_rt + int(rng.expovariate(1 / 1200)) + 60
            self.feed(mk.submit(wid, f"lab/{leaf}", rng.choice((1, 1, 2, 4, 8)), min_rt, at=at,
                                user=f"u{rng.randrange(150)}", resumable=rng.random() < 0.5))
        self.t += STEP_S
        self.feed(mk.tick(self.t))


def generate(path: Path, records: int, seed: int) -> None:
    """Write the lab's journal, about ``records`` records (a complete group last), as JSON lines."""
    from events import encode

    tmp = path.with_suffix(".tmp")
    with tmp.open("wb") as fh:
        def sink(e: Any) -> None:
            fh.write(encode(e))
            fh.write(b"\n")
        lab = Lab(seed, sink=sink)
        t0 = time.perf_counter()
        while lab.records < records:
            lab.step()
        print(json.dumps({"generated": lab.records, "seconds": round(time.perf_counter() - t0, 1),
                          "days": round((lab.engine.state.now - START) / 86_400, 1),
                          "submitted": lab.submitted}), flush=True)
    tmp.rename(path)


def _follow(path: Path) -> Any:
    """The events of the journal at ``path``, waiting for more while its generator still writes it."""
    from events import decode

    with path.open("rb") as fh:
        while True:
            at = fh.tell()
            line = fh.readline()
            if line.endswith(b"\n"):
                yield decode(line)
            elif path.exists():  # (a partial last line: the generator is writing it)
                fh.seek(at)
                time.sleep(0.5)
            else:
                return


def measure(path: Path, records: list[int], tail: int) -> None:
    """Fold the journal at ``path``; at each checkpoint print a JSON line of what a restart costs.

    A ``.tmp`` path is a journal still being generated: it is followed as it grows.
    """
    import gc

    from benchmarks.common import machine
    from scheduler import Engine
    from scheduler.replay import JournalFold, numbered

    print(json.dumps({"machine": machine()}), flush=True)
    fold: Any = None
    restored: Any = None
    n = 0
    fold_cpu = 0.0
    checkpoints = list(records)
    row: dict[str, Any] = {}
    c0 = time.process_time()
    events = _follow(path) if path.suffix == ".tmp" else (e for _, e in numbered(str(path)))
    for e in events:
        if fold is None:
            fold = JournalFold(Engine(e.cluster))
        is_input = e.cause is None
        if is_input and restored is not None and n >= row["records"] + tail:
            t0 = time.perf_counter()
            restored.add(e)  # (folds the group before it; this input is left pending)
            row["tail_fold_s"] += time.perf_counter() - t0
            c = time.process_time()
            fold.flush()
            same = restored.engine.state.fingerprint() == fold.engine.state.fingerprint()
            row.update(tail_records=n - row["records"], tail_fold_s=round(row["tail_fold_s"], 3),
                       rebuild_s=round(row["restore_s"] + row["tail_fold_s"], 3),
                       tail_state_exact=same)
            print(json.dumps(row), flush=True)
            restored = None
            gc.collect()
            c0 += time.process_time() - c
            if not checkpoints:
                break
        if is_input and checkpoints and n >= checkpoints[0] and restored is None:
            checkpoints.pop(0)
            fold.flush()  # the state through the last complete group
            fold_cpu += time.process_time() - c0
            st = fold.engine.state
            row = {"records": n, "days": round((st.now - START) / 86_400, 1),
                   "held": len(st.workloads.all), "pending": st.workloads.pending_count(),
                   "running": len(st.workloads.running), "rss_mb": round(_rss_mb(), 1),
                   "fold_rate": round(n / fold_cpu)}
            gc.collect()
            t0 = time.perf_counter()
            data = fold.engine.snapshot()
            row["snapshot_s"] = round(time.perf_counter() - t0, 3)
            row["snapshot_bytes"] = len(data)
            t0 = time.perf_counter()
            restored = JournalFold(Engine.restore(data))
            row["restore_s"] = round(time.perf_counter() - t0, 3)
            row["tail_fold_s"] = 0.0
            del data
            c0 = time.process_time()
        if restored is not None:
            t0 = time.perf_counter()
            restored.add(e)
            row["tail_fold_s"] += time.perf_counter() - t0
        fold.add(e)
        n += 1
    if checkpoints:
        print(json.dumps({"short": f"the journal ends at {n:,} records, before "
                                   f"{checkpoints[0]:,}"}), flush=True)


def _run(root: Path, path: Path, args: argparse.Namespace) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(root), "ALLOT_CORE": args.core}
    cmd = [sys.executable, str(HERE), "--measure", str(path), "--records", args.records,
           "--tail", str(args.tail)]
    return subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.PIPE, text=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", default="1000000,2000000,5000000",
                    help="checkpoints: journal records folded (comma-separated)")
    ap.add_argument("--tail", type=int, default=20_000,
                    help="records folded after the snapshot (the worker snapshots every 20,000)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--before-root", type=Path,
                    help="a checkout without the lapse rule, measured side by side on the same "
                         "journal (e.g. git archive 5fa6efe | tar -x -C DIR)")
    ap.add_argument("--core", choices=("pure", "native"), default="pure",
                    help="the core the folds run (the journal is generated with the fastest)")
    ap.add_argument("--out", type=Path, default=Path("/tmp/allot-bench-history"))
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    ap.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--generate", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    records = sorted(int(x) for x in args.records.split(","))
    if args.generate:
        generate(args.generate, records[-1] + args.tail + 1_000, args.seed)
        return 0
    if args.measure:
        measure(args.measure, records, args.tail)
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"journal-seed{args.seed}-{records[-1] + args.tail + 1_000}.jsonl"
    if not path.exists():
        print(f"generating {path} ...", flush=True)
        subprocess.run([sys.executable, str(HERE), "--generate", str(path), "--records",
                        args.records, "--tail", str(args.tail), "--seed", str(args.seed)],
                       cwd=REPO, check=True)
    runs = {"after": _run(REPO, path, args)}
    if args.before_root is not None:
        runs["before"] = _run(args.before_root.resolve(), path, args)
    rows: dict[str, list[dict[str, Any]]] = {k: [] for k in runs}
    load = [os.getloadavg()[0]]
    for label, proc in runs.items():
        assert proc.stdout is not None
        for line in proc.stdout:
            row = json.loads(line)
            row["load"] = round(os.getloadavg()[0], 1)
            load.append(row["load"])
            rows[label].append(row)
            if not args.json and "records" in row:
                print(f"{label:6s} {row['records']:>10,} records {row['days']:6.1f} d  "
                      f"held {row['held']:>9,}  snapshot {row['snapshot_bytes'] / 1e6:7.2f} MB "
                      f"written {row['snapshot_s']:6.2f} s  restore {row['restore_s']:6.2f} s  "
                      f"tail {row['tail_fold_s']:5.2f} s ({row['tail_records']:,})  "
                      f"rss {row['rss_mb']:6.0f} MB  fold {row['fold_rate']:,}/s  "
                      f"exact {row['tail_state_exact']}  load {row['load']}", flush=True)
            elif not args.json:
                print(f"{label}: {row}", flush=True)
        if proc.wait() != 0:
            print(f"{label}: exit {proc.returncode}", file=sys.stderr)
            return 1
    if args.json:
        print(json.dumps({"journal": str(path), "rows": rows, "load": load}, indent=1))
    return 0


if __name__ == "__main__":
    if "--measure" in sys.argv:  # run by path in another tree: import from PYTHONPATH, not here
        sys.path[0] = os.environ.get("PYTHONPATH", str(REPO)).split(os.pathsep)[0]
    sys.exit(main())
