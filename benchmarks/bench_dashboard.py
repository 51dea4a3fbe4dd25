"""Dashboard benchmark: page-ready time with 2,000 pending workloads and 10,000 GPUs (target <= 1 s).

    nice -n 10 .venv/bin/python -m benchmarks.bench_dashboard            # 2,000 pending, 10,000 GPUs
    nice -n 10 .venv/bin/python -m benchmarks.bench_dashboard --json --loads 5

The state is built in-process the way a worker holds it: one core
``scheduler.Engine`` fed generated inputs (a budget tree of 3 programs x 5
teams, 1,250 hosts of 8 GPUs, six hours of history in which work of 1-64 GPUs
starts, runs its expected duration and ends, then 2,000 pending workloads),
and a ``RunLog`` fed every input and decision as the worker feeds it (usage
samples, the Gantt's runs). ``StateApi`` and the dashboard are served by the
worker's own HTTP server (``streams.metrics.MetricsServer`` with
``streams.state_api.http_routes``) on a loopback port.

Measured:

- page ready: Debian's headless Chromium (``/usr/bin/chromium`` through
  Playwright) loads ``/dashboard/`` in a fresh browser context, cold; the time
  from navigation start until the queue table is rendered (the first animation
  frame after the page filled it, ``performance.now()``), median of ``--loads``
  loads; also until every panel (queue, usage, hosts, Gantt) is drawn;
- each API the page reads, alone (median of ``--loads`` requests), and
  ``/api/queue?forecast=1`` (the first 20 rows forecast by one simulation).

Nothing is timed inside a test; this is the reference figure of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from benchmarks.common import machine
from events import Event, WorkloadStarted
from events.factory import Inputs
from scheduler import Engine
from streams.metrics import MetricsServer, WorkerMetrics
from streams.state_api import RunLog, StateApi, http_routes

T0 = 1_767_225_600
CHROMIUM = Path("/usr/bin/chromium")
C = "bench"


class _Source:
    """What ``StateApi`` reads: the engines of one (in-process) worker."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def engines(self) -> dict[str, Engine]:
        return {C: self.engine}


def build(pending: int = 2000, gpus: int = 10_000, history_h: int = 6,
          seed: int = 1) -> tuple[Engine, RunLog]:
    """A cluster of ``gpus`` GPUs kept full for ``history_h`` hours, then ``pending`` waiting."""
    rng = random.Random(seed)
    eng = Engine(C)
    runs = RunLog()
    mk = Inputs(cluster=C, prefix="d")

    def feed(e: Event) -> list[Event]:
        out = eng.process(e) or []
        runs.observe(e, eng)
        for d in out:
            runs.observe(d, eng)
        return out

    feed(mk.tick(T0, cycle=False))
    feed(mk.policy(at=T0))
    feed(mk.node("lab", managers=("admin",), at=T0))
    teams = []
    for p in range(3):
        feed(mk.node(f"lab/p{p}", shares=rng.randint(1, 3), at=T0))
        for t in range(5):
            teams.append(f"lab/p{p}/t{t}")
            feed(mk.node(teams[-1], shares=rng.randint(1, 5), at=T0))
    for h in range(gpus // 8):
        feed(mk.host(f"h{h:05d}", at=T0))
    n = 0

    def submit(at: int, short: bool) -> None:
        nonlocal n
        n += 1
        g = rng.choice([1, 2, 4, 8, 8, 16, 32, 64])
        feed(mk.submit(f"w{n:06d}", rng.choice(teams), g, rng.choice([0, 900, 1800, 7200]),
                       at=at, hosts=max(1, g // 8),
                       expected_duration_s=rng.randint(1800, 4 * 3600) if short
                       else rng.randint(3600, 8 * 3600)))

    # History: demand a little above capacity, every 10 minutes; work ends when expected.
    ends: dict[str, int] = {}
    t = T0
    while t < T0 + history_h * 3600:
        t += 600
        feed(mk.tick(t, cycle=False))
        for wid in [w for w, e in ends.items() if e <= t]:
            del ends[wid]
            if wid in eng.state.workloads.running:
                feed(mk.finish(wid, at=t))
        free = sum(h.free for h in eng.state.cluster_state.hosts.values())
        queued = eng.state.workloads.pending_count()
        while free > 0 and queued < 200:
            submit(t, short=True)
            free -= 16
            queued += 1
        for d in feed(mk.tick(t)):
            if type(d) is WorkloadStarted:
                w = eng.state.workloads.all[d.workload]
                ends[w.id] = t + (w.expected_duration_s or 3600)
    # The queue: ``pending`` workloads still waiting after the cycle that saw them arrive.
    while eng.state.workloads.pending_count() < pending:
        t += 1
        while eng.state.workloads.pending_count() < pending:
            submit(t, short=False)
        feed(mk.tick(t))
    return eng, runs


def _serve(engine: Engine, runs: RunLog) -> tuple[MetricsServer, str]:
    api = StateApi(_Source(engine), runs)
    lock = threading.Lock()

    def on_loop(fn: Any) -> Any:  # the worker runs each call between batches; here, one at a time
        with lock:
            return fn()

    server = MetricsServer(WorkerMetrics(), "127.0.0.1", 0, routes=http_routes(api, on_loop)).start()
    host, port = server.address
    return server, f"http://{host}:{port}"


def _api_times(url: str, loads: int, explain: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for route in ("/api/queue?limit=300", "/api/queue?limit=2000", "/api/usage", "/api/hosts",
                  "/api/gantt", "/api/queue?forecast=1",
                  *[f"/api/explain/{w}" for w in explain]):
        times, size, body = [], 0, b""
        for _ in range(loads):
            t0 = time.perf_counter()
            with urllib.request.urlopen(url + route, timeout=120) as r:
                body = r.read()
            times.append(time.perf_counter() - t0)
            size = len(body)
        out[route] = {"median_s": round(statistics.median(times), 3),
                      "times_s": [round(x, 3) for x in times], "bytes": size}
        if route.startswith("/api/explain/"):
            f = json.loads(body).get("forecast") or {}
            out[route]["forecast"] = {"status": f.get("status"), "ahead": f.get("ahead"),
                                      "cycles": f.get("cycles")}
        if "forecast=1" in route:
            fc = json.loads(body)["forecast"]
            out[route]["forecast"] = {"rows": fc.get("rows"), "seconds": fc.get("seconds"),
                                      "error": fc.get("error")}
    return out


def _page_times(url: str, loads: int, shot: Path | None) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    table, ready, wall, shown = [], [], [], 0
    warmup: dict[str, float] = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            for i in range(-1, loads):  # load -1: the browser's own start-up, reported apart
                ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
                page = ctx.new_page()
                t0 = time.perf_counter()
                page.goto(f"{url}/dashboard/", wait_until="commit")
                page.wait_for_selector("#queue tbody[data-rendered-ms]", timeout=60_000)
                wall.append(time.perf_counter() - t0)
                page.wait_for_selector("body[data-ready-at-ms]", timeout=60_000)
                t_ms = float(page.get_attribute("#queue tbody", "data-rendered-ms") or 0)
                r_ms = float(page.get_attribute("body", "data-ready-at-ms") or 0)
                if i < 0:
                    warmup = {"queue_table_rendered_s": t_ms / 1000,
                              "wall_until_table_s": round(wall.pop(), 3)}
                    ctx.close()
                    continue
                table.append(t_ms)
                ready.append(r_ms)
                shown = page.locator("#queue tbody tr").count()
                if shot is not None and i == loads - 1:
                    page.screenshot(path=str(shot), full_page=False)
                ctx.close()
        finally:
            browser.close()
    return {"queue_table_rendered_s": {"median": round(statistics.median(table) / 1000, 3),
                                       "loads": [round(x / 1000, 3) for x in table]},
            "all_panels_ready_s": {"median": round(statistics.median(ready) / 1000, 3),
                                   "loads": [round(x / 1000, 3) for x in ready]},
            "wall_until_table_s": {"median": round(statistics.median(wall), 3)},
            "first_load_unmeasured": warmup, "rows_shown": shown}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pending", type=int, default=2000, help="pending workloads (default 2000)")
    p.add_argument("--gpus", type=int, default=10_000, help="GPUs, 8 per host (default 10000)")
    p.add_argument("--loads", type=int, default=5, help="page loads and API requests measured, "
                                                       "the median reported (default 5)")
    p.add_argument("--screenshot", type=Path, default=None, metavar="PNG",
                   help="save the last load's page here")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = p.parse_args(argv)
    if not CHROMIUM.exists():
        print("bench_dashboard: error: /usr/bin/chromium is missing "
              "(apt-get install -y chromium)", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    eng, runs = build(args.pending, args.gpus)
    st = eng.state
    doc: dict[str, Any] = {
        "machine": machine(), "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "pending": st.workloads.pending_count(), "running": len(st.workloads.running),
        "gpus": sum(h.gpus for h in st.cluster_state.hosts.values()),
        "hosts": len(st.cluster_state.hosts), "runs_in_gantt_log": len(runs.runs.get(C, ())),
        "build_s": round(time.perf_counter() - t0, 1)}
    server, url = _serve(eng, runs)
    try:
        order = [r["workload"] for r in StateApi(_Source(eng), runs).queue(limit=300,
                                                                           reasons=False)["rows"]]
        doc["api"] = _api_times(url, args.loads, [order[0], order[-1]] if order else [])
        doc["page"] = _page_times(url, args.loads, args.screenshot)
    finally:
        server.stop()
    doc["target_s"] = 1.0
    if args.json:
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    pg = doc["page"]
    print(f"{doc['pending']} pending, {doc['running']} running on {doc['gpus']} GPUs "
          f"({doc['hosts']} hosts); state built in {doc['build_s']} s; {doc['machine']}")
    print(f"page ready (queue table rendered), median of {args.loads}: "
          f"{pg['queue_table_rendered_s']['median']:.3f} s (target <= 1 s); every panel: "
          f"{pg['all_panels_ready_s']['median']:.3f} s; {pg['rows_shown']} rows shown")
    for route, r in doc["api"].items():
        extra = (f"; {r['forecast']['rows']} rows forecast in {r['forecast']['seconds']} s"
                 if "forecast=1" in route else "")
        if route.startswith("/api/explain/") and r.get("forecast"):
            extra = (f"; forecast {r['forecast']['status']}, {r['forecast']['ahead']} ahead, "
                     f"{r['forecast']['cycles']} cycles")
        print(f"  {route:<28} {r['median_s']:.3f} s  ({r['bytes'] / 1e6:.2f} MB){extra}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
