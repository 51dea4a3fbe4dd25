"""Forecast benchmarks: latency of one forecast at 2,000 pending, and error on ai2-month.

    .venv/bin/python benchmarks/bench_forecast.py latency [--runs 5]   # 2,000 pending, 1,024 GPUs
    .venv/bin/python benchmarks/bench_forecast.py accuracy [SCENARIO] [--sample 0.02] [--out DIR]

latency: a 128-host cluster full of running work (expected durations 1-8 h),
2,000 pending workloads of 1-64 GPUs across 15 teams, under the default
``preemption_rule = "reclaim"`` and under ``"fair_share"``; the forecast of the
workload at the back of the queue, in the middle and near the front: the
median of ``--runs``, each run interleaved with one of the reference code
(``forecast/simulate.py`` as of ``REFERENCE``, from git) on the same engine,
so both see the same load; their ratio, and whether both answer the same.
accuracy: simulates SCENARIO (default ai2-month) under allot with the forecast
recorder on (forecast/record.py): at each submission in a seeded sample
(``--sample`` of them, chosen by a hash of the seed and the workload id) the
forecast of the new workload as of its submission, default assumptions. The
log and the records are loaded into DuckDB and scored by the audit's
``forecast_errors`` view (audit/forecasts.py): median and p90 absolute error
per kind, work that never started counted apart and at a lower bound.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import msgspec

from events.factory import Inputs
from forecast.simulate import forecast
from scheduler import Engine

T0 = 1_767_225_600


def build(pending: int = 2000, hosts: int = 128, seed: int = 1, rule: str = "reclaim") -> Engine:
    rng = random.Random(seed)
    eng = Engine("bench")
    mk = Inputs(cluster="bench", prefix="b")
    eng.process(mk.tick(T0, cycle=False))
    for e in (mk.policy(at=T0, preemption_rule=rule), mk.node("lab", managers=("admin",), at=T0)):
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


# The forecast code latency is compared with, timed in the same run (the load varies).
REFERENCE = "5fa6efe"


def reference_module(commit: str = REFERENCE) -> ModuleType | None:
    """``forecast/simulate.py`` as of ``commit`` (from git), importable beside today's; None without git."""
    try:
        src = subprocess.run(["git", "show", f"{commit}:forecast/simulate.py"], check=True,
                             capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    path = Path(tempfile.mkdtemp()) / "forecast_simulate_reference.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("forecast_simulate_reference", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _timed(fn: Callable[..., object], *args: object) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t0, out


def latency(runs: int = 5) -> dict[str, object]:
    """Median of ``runs`` forecasts per target and rule, today's code and the reference interleaved."""
    ref = reference_module()
    out: dict[str, object] = {"runs": runs, "reference": REFERENCE if ref else None}
    for rule, names in (("reclaim", ("p1999", "p1000", "p10")), ("fair_share", ("p1999", "p1000"))):
        eng = build(rule=rule)
        n = len([w for w in eng.state.workloads.all.values() if w.status == "pending"])
        doc: dict[str, object] = {"pending": n, "running": len(eng.state.workloads.running)}
        for name in names:
            new_s: list[float] = []
            old_s: list[float] = []
            f = old = None
            for _ in range(runs):
                dt, f = _timed(forecast, eng, name)
                new_s.append(dt)
                if ref is not None:
                    dt, old = _timed(ref.forecast, eng, name)
                    old_s.append(dt)
            assert f is not None
            row: dict[str, object] = {
                "seconds": round(statistics.median(new_s), 3), "status": f.status,  # type: ignore[attr-defined]
                "wait_h": None if f.wait_s is None else round(f.wait_s / 3600, 2),  # type: ignore[attr-defined]
                "cycles": f.cycles}  # type: ignore[attr-defined]
            if ref is not None:
                row["reference_seconds"] = round(statistics.median(old_s), 3)
                row["ratio"] = round(statistics.median(new_s) / statistics.median(old_s), 3)
                # The same answer as the reference, field by field.
                row["same_answer"] = msgspec.to_builtins(f) == msgspec.to_builtins(old)
            doc[name] = row
        out[rule] = doc
    return out


def accuracy(scenario_path: str, rate: float, seed: int, out_dir: str,
             progress: bool = True) -> dict[str, object]:
    """Simulate ``scenario_path`` under allot with the forecast recorder on; score in the audit."""
    from audit.database import open_db
    from audit.forecasts import load_forecasts, summary
    from audit.load import load
    from events import write_log
    from forecast.record import SubmissionForecasts, write_records
    from simulator.driver import Simulation
    from simulator.scenario import load_scenario

    sc = load_scenario(scenario_path)
    rec = SubmissionForecasts(rate=rate, seed=seed)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    bar = None
    if progress:
        from rich.progress import Progress

        bar = Progress(transient=True)
        bar.start()
        task = bar.add_task("simulating with forecasts", total=sc.horizon_s)
    try:
        res = Simulation(sc, "allot", Path(scenario_path).parent, on_submit=rec).run(
            None if bar is None else (lambda done, _h: bar.update(task, completed=done)))
    finally:
        if bar is not None:
            bar.stop()
    wall = time.perf_counter() - t0
    write_log(out / "events.jsonl", res.log)
    write_records(out / "forecasts.jsonl", rec.records)
    db = out / "audit.duckdb"
    db.unlink(missing_ok=True)
    con = open_db(db)
    try:
        load(con, out / "events.jsonl", "allot")
        load_forecasts(con, out / "forecasts.jsonl", "allot")
        figures = summary(con, "allot")
    finally:
        con.close()
    return {"scenario": sc.name, "sample_rate": rate, "sample_seed": seed,
            "submissions": rec.submissions, "forecasts": len(rec.records),
            "seconds_with_forecasts": round(wall, 1), "out": str(out), "score": figures}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="what", required=True)
    lat = sub.add_parser("latency", help="one forecast at 2,000 pending, against the reference")
    lat.add_argument("--runs", type=int, default=5, help="forecasts per target (median; default 5)")
    a = sub.add_parser("accuracy", help="forecast error at submission on a simulated scenario")
    a.add_argument("scenario", nargs="?", default="scenarios/ai2-month.toml")
    a.add_argument("--sample", type=float, default=0.02, metavar="RATE",
                   help="forecast this share of submissions (seeded sample; default 0.02)")
    a.add_argument("--seed", type=int, default=26, help="the sample's seed (default 26)")
    a.add_argument("--out", default="out/bench_forecast", metavar="DIR",
                   help="events.jsonl, forecasts.jsonl and audit.duckdb go here")
    args = p.parse_args(argv)
    doc = latency(args.runs) if args.what == "latency" else accuracy(args.scenario, args.sample, args.seed,
                                                           args.out)
    json.dump(doc, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
