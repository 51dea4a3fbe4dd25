"""Forecast benchmarks: latency of one forecast at 2,000 pending, and error on ai2-month.

    .venv/bin/python benchmarks/bench_forecast.py latency            # 2,000 pending, 1,024 GPUs
    .venv/bin/python benchmarks/bench_forecast.py accuracy LOG [--every N]

latency: a 128-host cluster full of running work (expected durations 1-8 h),
2,000 pending workloads of 1-64 GPUs across 15 teams; the forecast of the
workload at the back of the queue and of one in the middle, best of 3.
accuracy: the journal LOG (``allot simulate scenarios/ai2-month.toml --policy
allot``) is folded; at every N-th submission the engine is forecast for that
workload as of its submission, and the forecast scored against the simulated
start (forecast/score.py): median and p90 absolute error per kind.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time

from events import DECISION_TYPES, WorkloadSubmitted, read_log
from events.factory import Inputs
from forecast.score import ForecastRecord, first_starts, score
from forecast.simulate import Assumptions, forecast
from scheduler import Engine
from scheduler.replay import JournalFold

T0 = 1_767_225_600


def build(pending: int = 2000, hosts: int = 128, seed: int = 1) -> Engine:
    rng = random.Random(seed)
    eng = Engine("bench")
    mk = Inputs(cluster="bench", prefix="b")
    eng.process(mk.tick(T0, cycle=False))
    for e in (mk.policy(at=T0), mk.node("lab", managers=("admin",), at=T0)):
        eng.process(e)
    teams = [f"lab/t{i:02d}" for i in range(15)]
    for t in teams:
        eng.process(mk.node(t, shares=rng.randint(1, 5), at=T0))
    for h in range(hosts):
        eng.process(mk.host(f"h{h:04d}", at=T0))
    for h in range(hosts):  # fill the cluster
        eng.process(mk.submit(f"run{h}", rng.choice(teams), 8, 3600, at=T0,
                              expected_duration_s=rng.randint(3600, 8 * 3600)))
    eng.process(mk.tick(T0 + 1))
    for i in range(pending):
        gpus = rng.choice([1, 2, 4, 8, 8, 16, 32, 64])
        eng.process(mk.submit(f"p{i}", rng.choice(teams), gpus, rng.choice([0, 1800, 7200]),
                              at=T0 + 2, hosts=max(1, gpus // 8),
                              expected_duration_s=rng.randint(600, 6 * 3600)))
    eng.process(mk.tick(T0 + 3))
    return eng


def latency() -> dict[str, object]:
    eng = build()
    n = len([w for w in eng.state.workloads.all.values() if w.status == "pending"])
    out: dict[str, object] = {"pending": n, "running": len(eng.state.workloads.running)}
    for name in ("p1999", "p1000", "p10"):
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            f = forecast(eng, name)
            best = min(best, time.perf_counter() - t0)
        out[name] = {"seconds": round(best, 3), "status": f.status, "wait_h":
                     None if f.wait_s is None else round(f.wait_s / 3600, 2), "cycles": f.cycles}
    return out


def accuracy(log_path: str, every: int, out: str | None = None) -> dict[str, object]:
    events = read_log(log_path)
    actual = first_starts(events)
    fold = JournalFold(Engine(events[0].cluster))
    records: list[ForecastRecord] = []
    pending_sub: list[WorkloadSubmitted] = []
    n = 0
    t0 = time.perf_counter()
    for e in events:
        if type(e) not in DECISION_TYPES and pending_sub:
            fold.flush()  # the submission's group is complete: forecast as of it
            for s in pending_sub:
                w = fold.engine.state.workloads.all.get(s.workload)
                if w is not None and w.status == "pending":
                    f = forecast(fold.engine, s.workload, assumptions=Assumptions(horizon_s=30 * 86_400))
                    records.append(ForecastRecord(workload=s.workload, kind=s.kind,
                                                  made_at=fold.engine.state.now, start=f.start))
            pending_sub = []
        fold.add(e)
        if type(e) is WorkloadSubmitted:
            n += 1
            if n % every == 0:
                pending_sub.append(e)
    fold.finish()
    if out is not None:
        import msgspec

        with open(out, "wb") as fh:
            fh.write(b"".join(msgspec.json.encode(r) + b"\n" for r in records))
    return {"forecasts": len(records), "seconds": round(time.perf_counter() - t0, 1),
            "score": score(records, actual)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="what", required=True)
    sub.add_parser("latency")
    a = sub.add_parser("accuracy")
    a.add_argument("log")
    a.add_argument("--every", type=int, default=100)
    a.add_argument("--out", help="write the forecast records here (JSON lines)")
    args = p.parse_args(argv)
    doc = latency() if args.what == "latency" else accuracy(args.log, args.every, args.out)
    json.dump(doc, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
