"""Benchmark: the live stack's client side on the embedded broker, measured in one run.

What it measures (docs/live-clients.md quotes the figures):

1. **Client round trip**: ``Client.request`` of an input until its group is
   complete in the journal (the decisions it caused are known), sequentially,
   against the broker's own produce -> consume round trip of a same-size
   record measured in the same run (the baseline: Tansu makes every fetch wait
   its whole ``fetch_max_wait_ms``).
2. **The demo through Kafka**: ``scenarios/demo.toml`` for ``--days`` of
   scheduler time at ``--time-scale``, with the worker, the simulated executor
   and the Faust projections (``streams.demo.play``: audit, replay, projections
   against the audit); its wall time and the projections' lag (append ->
   applied) while it plays.
3. **Executor finish latency**, from the journal it left: for every run the
   executor reported, the wall time from the append of the tick that made the
   run due to the append of its ``workload.finished`` (and the part of it spent
   waiting for that tick's group to close), and the lateness in scheduler
   seconds.
4. **Faust restart-to-ready** over the changelogs the demo left: a new
   projections process after ``kill -9`` of the running one, with the fetch
   waits ``allot projections`` uses (long while recovering, short once live),
   with a short wait throughout, and with Faust's own 1,500 ms; seconds from
   spawn to ``/healthz`` and to having applied the whole journal.
5. **Recovery of a long changelog** (``--changelog-batches N``, on a broker of
   its own): N single-record batches in the projections' window changelog, the
   shape a long-lived projection leaves on a broker that never compacts; seconds
   from spawn to live with each of the same three wait settings (a graceful
   stop between runs, so no session timeout is in the figure).

Usage: python -m benchmarks.bench_live_clients [--days 1] [--time-scale 3600]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from benchmarks.common import machine

REPO = Path(__file__).resolve().parent.parent


def _pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * q))]


async def client_round_trips(bootstrap: str, prefix: str, cluster: str, n: int) -> dict[str, Any]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    from events import encode
    from events.factory import Inputs
    from streams.client import Client

    # The baseline: produce one ~300-byte record, consume it with the client's tail wait.
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    await admin.create_topics([NewTopic(f"{prefix}bench.rtt", 1, 1)])
    await admin.close()
    prod = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=1)
    await prod.start()
    cons = AIOKafkaConsumer(bootstrap_servers=bootstrap, fetch_max_wait_ms=20,
                            enable_auto_commit=False, auto_offset_reset="earliest")
    await cons.start()
    tp = TopicPartition(f"{prefix}bench.rtt", 0)
    cons.assign([tp])
    raw = []
    for i in range(n):
        t0 = time.perf_counter()
        md = await prod.send_and_wait(tp.topic, b"x" * 300, partition=0)
        while True:
            got = await cons.getmany(tp, timeout_ms=1000)
            if any(m.offset == md.offset for m in got.get(tp, [])):
                break
        raw.append((time.perf_counter() - t0) * 1000)
        del i
    await cons.stop()
    await prod.stop()
    mk = Inputs(cluster=cluster, prefix="bench-")
    rtt = []
    setup = []
    async with Client(bootstrap, prefix) as c:
        await c.clock(cluster)
        await c.request(mk.node("lab", managers=("admin",), at=int(time.time())))
        for i in range(n):
            res = await c.request(mk.node(f"lab/n{i}", at=int(time.time())))
            assert res.ok, res
            rtt.append(res.seconds * 1000)
            setup.append(res.setup_seconds * 1000)
        size = len(encode(mk.node("lab/x", at=0)))
    return {"n": n, "record_bytes": size,
            "broker_round_trip_ms": {"p50": statistics.median(raw), "p99": _pct(raw, 0.99)},
            "publish_to_group_complete_ms": {"p50": statistics.median(rtt),
                                             "p99": _pct(rtt, 0.99)},
            "opening_the_tail_ms": {"p50": statistics.median(setup), "p99": _pct(setup, 0.99)}}


async def executor_latency(bootstrap: str, prefix: str, cluster: str) -> dict[str, Any]:
    """Finish latency from the frozen journal (record append times) and the executor's own rule."""
    from events import ClockTicked, WorkloadFinished
    from streams.client import Client
    from streams.executor import EXECUTOR_SOURCE, ExecutorBook, feed, finish_id

    book = ExecutorBook(cluster)
    tick_ts: int | None = None
    decided: dict[str, tuple[int, int, int]] = {}   # finish id -> (due tick ts, closing ts, late)
    appended: dict[str, int] = {}
    async with Client(bootstrap, prefix, client_id="bench-exec") as c:
        tail = await c.tail(cluster, start="begin")
        try:
            quiet = 0
            while quiet < 3:
                items = await tail.poll(300)
                quiet = 0 if items else quiet + 1
                for it in items:
                    e = it.event
                    for f in feed(book, [e]):
                        decided[finish_id(cluster, f.workload, f.run)] = (
                            tick_ts or it.timestamp_ms, it.timestamp_ms, book.now - f.due_at)
                    if type(e) is ClockTicked:
                        tick_ts = it.timestamp_ms
                    elif type(e) is WorkloadFinished and e.source == EXECUTOR_SOURCE:
                        appended.setdefault(e.id, it.timestamp_ms)
        finally:
            await tail.stop()
    total = [appended[i] - d[0] for i, d in decided.items() if i in appended]
    waiting = [d[1] - d[0] for i, d in decided.items() if i in appended]
    late = [d[2] for i, d in decided.items() if i in appended]
    return {"finishes": len(total),
            "due_tick_to_finish_ms": {"p50": _pct(total, 0.5), "p99": _pct(total, 0.99)},
            "of_which_waiting_for_the_group_ms": {"p50": _pct(waiting, 0.5),
                                                  "p99": _pct(waiting, 0.99)},
            "lateness_scheduler_s": {"p50": _pct(late, 0.5), "p99": _pct(late, 0.99)}}


def _get(port: int, path: str) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=3) as r:
        return json.loads(r.read())


def restart(stack: Any, log_dir: Path, partition: str, last: int, waits: tuple[int, int],
            timeout_s: float = 120.0) -> dict[str, Any]:
    """Start a projections process with (recovery, tail) waits; seconds to ready and caught up."""
    from streams.broker import free_port
    from streams.up import child_env

    port = free_port()
    env = child_env(stack.settings)
    t0 = time.monotonic()
    with open(log_dir / f"projections-{waits[0]}-{waits[1]}.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "allot", "projections", "--port",
                                 str(port), "--recovery-wait-ms", str(waits[0]),
                                 "--tail-wait-ms", str(waits[1])], env=env, stdout=log,
                                stderr=subprocess.STDOUT)
    ready = caught = None
    st: dict[str, Any] = {}
    while time.monotonic() - t0 < timeout_s:
        try:
            st = _get(port, "/status")
        except (OSError, ValueError):
            time.sleep(0.2)
            continue
        if ready is None and st.get("live_at"):
            ready = time.monotonic() - t0
        if st.get("offsets", {}).get(partition, -1) >= last:
            caught = time.monotonic() - t0
            break
        time.sleep(0.2)
    return {"proc": proc, "recovery_wait_ms": waits[0], "tail_wait_ms": waits[1],
            "ready_s": ready, "caught_up_s": caught, "records": st.get("records"),
            "timed_out": caught is None}


def long_changelog(n: int, log_dir: Path, timeout_s: float = 180.0,
                   per_batch: int = 1) -> list[dict[str, Any]]:
    """Seconds to live for a projections process recovering ``n`` batches of ``per_batch``."""
    from aiokafka import AIOKafkaProducer

    from streams.broker import TansuBroker, free_port
    from streams.projections import TABLE, app_id
    from streams.topics import ensure_topics

    out = []
    with TansuBroker(log_path=log_dir / "tansu-changelog.log") as b:
        asyncio.run(ensure_topics(b.bootstrap, "", 1))
        changelog = f"{app_id('')}-{TABLE}-changelog"

        async def fill() -> None:
            from aiokafka.admin import AIOKafkaAdminClient, NewTopic

            a = AIOKafkaAdminClient(bootstrap_servers=b.bootstrap)
            await a.start()
            await a.create_topics([NewTopic(changelog, 1, 1)])
            await a.close()
            p = AIOKafkaProducer(bootstrap_servers=b.bootstrap, acks="all", linger_ms=0)
            await p.start()
            for i in range(n):  # each batch awaited before the next: one batch each
                # Keys and values as Faust writes them for a str-keyed JSON table.
                futs = [await p.send(changelog, json.dumps([3600, 0, i]).encode(),
                                     key=json.dumps(f"w|c|hourly|node|lab/t{(i * per_batch + j) % 500}"
                                                    f"|{i * per_batch + j}").encode(),
                                     partition=0)
                        for j in range(per_batch)]
                await asyncio.gather(*futs)
            await p.stop()

        t0 = time.monotonic()
        asyncio.run(fill())
        fill_s = time.monotonic() - t0
        env = {k: v for k, v in os.environ.items() if not k.startswith("ALLOT_")}
        env["ALLOT_BOOTSTRAP"] = b.bootstrap
        for waits in ((200, 50), (20, 20), (1500, 1500)):
            port = free_port()
            t0 = time.monotonic()
            with open(log_dir / f"recovery-{waits[0]}-{waits[1]}.log", "wb") as log:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "allot", "projections", "--port", str(port),
                     "--recovery-wait-ms", str(waits[0]), "--tail-wait-ms", str(waits[1])],
                    env=env, stdout=log, stderr=subprocess.STDOUT)
            live = None
            keys = None
            while time.monotonic() - t0 < timeout_s:
                try:
                    st = _get(port, "/status")
                except (OSError, ValueError):
                    time.sleep(0.2)
                    continue
                if st.get("live_at"):
                    live = time.monotonic() - t0
                    keys = st["keys"]["windows"]
                    break
                time.sleep(0.2)
            proc.terminate()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
            out.append({"batches": n, "records_per_batch": per_batch, "fill_s": round(fill_s, 1), "recovery_wait_ms": waits[0],
                        "tail_wait_ms": waits[1], "live_s": live, "window_keys": keys,
                        "timed_out": live is None})
    return out


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console

    from allot.live_audit import audit_runs
    from simulator.scenario import load_scenario
    from streams import config
    from streams.broker import free_port
    from streams.demo import _last_offset, play
    from streams.up import Stack

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--days", type=float, default=1.0, help="scheduler days of the demo")
    ap.add_argument("--time-scale", type=float, default=3600.0)
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--out", type=Path, default=REPO / "out" / "bench")
    ap.add_argument("--changelog-batches", type=int, default=0,
                    help="also time recovery of a changelog of this many batches (0: skip)")
    ap.add_argument("--changelog-records-per-batch", type=int, default=1)
    ap.add_argument("--only-changelog", action="store_true", help="run only that part")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    sc = load_scenario(REPO / "scenarios" / "demo.toml")
    settings = config.load(environ={}, flags={
        "clusters": (sc.cluster.id, "bench"), "time_scale": args.time_scale,
        "tick_interval_s": 0.1, "log_format": "json",
        # Its clients publish unsigned records (bench_live has the signed steps).
        "insecure_dev": True})
    port = free_port()
    stack = Stack(settings, embedded=True, log_dir=args.out / "logs", projections_port=port)
    out: dict[str, Any] = {"machine": machine(), "load_avg": os.getloadavg()}
    con = Console(file=io.StringIO(), width=120)
    if args.changelog_batches:
        (args.out / "logs").mkdir(parents=True, exist_ok=True)
        out["long_changelog"] = long_changelog(args.changelog_batches, args.out / "logs",
                                               per_batch=args.changelog_records_per_batch)
        if args.only_changelog:
            print(json.dumps(out, indent=2, default=str))
            return 0
    stack.start()
    try:
        s = stack.settings
        out["client"] = asyncio.run(client_round_trips(s.bootstrap, s.topic_prefix, "bench",
                                                       args.requests))
        t0 = time.monotonic()
        ok = play(stack, sc, str(REPO / "scenarios" / "demo.toml"), args.out / "demo", con,
                  horizon_days=args.days, view=False, projections_port=port,
                  auditor=audit_runs)
        rep = json.loads((args.out / "demo" / "report.json").read_text())
        out["demo"] = {"passed": ok, "days": args.days, "time_scale": args.time_scale,
                       "wall_s": round(time.monotonic() - t0, 1),
                       "journal_events": rep["journal_events"],
                       "projections_equal_audit": rep["projections_ok"],
                       "projections_lag_while_playing": rep["projections_lag"]}
        out["executor"] = asyncio.run(executor_latency(s.bootstrap, s.topic_prefix,
                                                       sc.cluster.id))
        p, last = asyncio.run(_last_offset(s.bootstrap, s.topic_prefix, sc.cluster.id))
        st = _get(port, "/status")
        out["changelog_keys"] = st["keys"]
        child = stack.child("projections")
        assert child is not None and child.proc is not None
        child.proc.send_signal(signal.SIGKILL)
        child.wait(10)
        stack.children.remove(child)
        runs = []
        for waits in ((200, 50), (20, 20), (1500, 1500)):
            r = restart(stack, args.out / "logs", str(p), last, waits)
            proc = r.pop("proc")
            runs.append(r)
            proc.send_signal(signal.SIGKILL)  # each run recovers from the changelogs alone
            proc.wait(10)
        out["projections_restart_after_kill_9"] = runs
    finally:
        stack.stop()
    text = json.dumps(out, indent=2, default=str)
    (args.out / "live_clients.json").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
