"""The Faust projections over a live journal equal the audit's figures, also after kill -9.

A worker (in-process, time 600x) schedules one cluster, the simulated executor
finishes its work, and ``allot projections`` (a Faust worker, a subprocess so
it can be killed) folds the journal. Half way the projection worker is killed
with SIGKILL and restarted. Once the scheduler is stopped (the journal no
longer grows) and the projection has applied every record, its windows must
equal the audit's over the exported journal, GPU-second for GPU-second.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from events import ClockTicked, Event, WorkloadFinished, WorkloadPreempted, WorkloadStarted
from events.factory import Inputs
from streams.broker import free_port
from streams.executor import SimulatedExecutor
from streams.export import export_journal
from streams.usage_windows import hopping, tumbling
from tests.kafka import REPO, Live, unique_prefix, wait_until
from tests.live_usage_helpers import (
    audit_host_seconds,
    audit_node_seconds,
    hop,
    load_audit,
    nonzero,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

CLUSTER = "pj"
DAILY = hopping(86400, 21600, "daily")
HOURLY = tumbling(3600, "hourly")


class Projections:
    """``allot projections`` as a child process."""

    def __init__(self, live: Live, log: Path) -> None:
        self.live = live
        self.port = free_port()
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> float:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("ALLOT_") and k != "KAFKA_BOOTSTRAP_SERVERS"}
        env.update(ALLOT_BOOTSTRAP=self.live.bootstrap, ALLOT_TOPIC_PREFIX=self.live.prefix)
        t0 = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "allot", "projections", "--port", str(self.port),
             "--window", "hourly=3600", "--window", "daily=86400/21600"],
            cwd=REPO, env=env, stdout=self.log.open("ab"), stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL)
        wait_until(lambda: self.get("/healthz", ok_only=True), 120, interval=0.25,
                   what="the projections to be live")
        return time.monotonic() - t0

    def get(self, path: str, ok_only: bool = False) -> dict | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
                return json.loads(r.read())
        except (OSError, ValueError):
            if ok_only:
                return None
            raise

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@pytest.fixture
def live(kafka: str) -> Iterator[Live]:
    lv = Live(kafka, unique_prefix()).start()
    try:
        yield lv
    finally:
        lv.close()


def _unallocated(mk: Inputs, now: int) -> list[Event]:
    return [mk.submit(f"b{i}", "lab/b", gpus=4, min_runtime_s=0, at=now,
                      expected_duration_s=2400 + 300 * i) for i in range(4)]


def _allocated(mk: Inputs, now: int) -> list[Event]:
    return [mk.submit(f"a{i}", "lab/a", gpus=4, min_runtime_s=600, at=now,
                      expected_duration_s=1800 + 600 * i, resumable=i % 2 == 0)
            for i in range(5)]


def _play(live: Live, prefix: str) -> None:
    """Unallocated work fills the cluster, then allocated work reclaims it."""
    mk = Inputs(cluster=CLUSTER, prefix=prefix)
    live.send_many(_unallocated(mk, int(time.time())))
    live.wait_event(CLUSTER, lambda e: isinstance(e, WorkloadStarted)
                    and e.workload.startswith("b"), what="unallocated work to start")
    live.send_many(_allocated(mk, int(time.time())))


def test_faust_projections_equal_the_audit_also_after_kill_9(live: Live, tmp_path: Path) -> None:
    def crash(proj: Projections) -> float:
        proj.kill()
        time.sleep(1)
        return proj.start()

    _projections_against_the_audit(live, tmp_path, crash)


def test_records_committed_past_lost_writes_are_read_back_from_the_journal(
        live: Live, tmp_path: Path) -> None:
    """Faust's flush can return early, so its committed offset can pass writes a kill -9 lost.

    Forced here: after the kill, the projections' group offset is moved to the
    journal's end, as if every record so far had been applied. The restarted
    projection must notice the gap between its stored position and where its
    consumer resumes, read those records from the journal, and still equal the
    audit.
    """
    def crash_and_commit_ahead(proj: Projections) -> float:
        proj.kill()
        p = live.partition_of(CLUSTER)
        end = live.raw(p)[-1].offset + 1
        # The dead member's session must expire before an outside commit is accepted.
        wait_until(lambda: _commit(live, p, end), 60, interval=1.0,
                   what="a commit of the projections' offset past the applied records")
        return proj.start()

    status = _projections_against_the_audit(live, tmp_path, crash_and_commit_ahead)
    assert status["gaps_filled"], "the forced gap was not read back"


def _commit(live: Live, partition: int, offset: int) -> bool:
    """Join the projections' group, commit ``offset`` on the journal partition, leave; False if refused."""
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from aiokafka.errors import KafkaError

    from streams.projections import app_id
    from streams.records import JOURNAL, topic

    class UnderFaustsName(RoundRobinPartitionAssignor):
        # The group keeps the protocol of Faust's assignor; a member must offer it to join.
        name = "faust"
        version = 4

    async def go() -> bool:
        journal = topic(JOURNAL, live.prefix)
        tp = TopicPartition(journal, partition)
        c = AIOKafkaConsumer(journal, bootstrap_servers=live.bootstrap,
                             group_id=app_id(live.prefix), enable_auto_commit=False,
                             session_timeout_ms=6000, heartbeat_interval_ms=1000,
                             partition_assignment_strategy=(UnderFaustsName,))
        try:
            await c.start()  # refused while the killed member still holds the group
            deadline = time.monotonic() + 30
            while tp not in c.assignment() and time.monotonic() < deadline:
                await c.getmany(timeout_ms=500)
            if tp not in c.assignment():
                return False
            await c.commit({tp: offset})
            return True
        except KafkaError:
            return False
        finally:
            await c.stop()

    return asyncio.run(go())


def _projections_against_the_audit(live: Live, tmp_path: Path,
                                   crash: Callable[[Projections], float]) -> dict:
    """Play work through a live worker, ``crash`` the projections half way, compare with the audit."""
    worker = live.start_worker((CLUSTER,), time_scale=600.0, tick_interval_s=0.25)
    live.wait_event(CLUSTER, lambda e: isinstance(e, ClockTicked), what="the first tick")

    async def make() -> SimulatedExecutor:
        return SimulatedExecutor(live.bootstrap, live.prefix, (CLUSTER,))

    ex = live.bg.run(make())
    ex_fut = live.bg.spawn(ex.run())
    proj = Projections(live, tmp_path / "projections.log")
    first_ready = proj.start()
    try:
        mk = Inputs(cluster=CLUSTER, prefix="pj-")
        now = int(time.time())
        live.send_many([mk.node("lab", managers=("admin",), at=now), mk.node("lab/a", shares=3,
                        at=now), mk.node("lab/b", at=now), mk.host("h0", at=now),
                        mk.host("h1", at=now)])
        _play(live, "pj1-")
        live.wait_event(CLUSTER, lambda e: isinstance(e, WorkloadFinished), timeout=60,
                        what="a first finish")
        # Lag while records flow: the status endpoint's append -> applied figures.
        lag_live = proj.get("/status")["lag"]
        restart_ready = crash(proj)
        live.wait_event(CLUSTER, lambda e: isinstance(e, WorkloadFinished)
                        and e.workload.startswith("a"), timeout=60, what="allocated finishes")
        time.sleep(8)
        live.bg.loop.call_soon_threadsafe(ex.stop)
        ex_fut.result(30)
        live.stop_worker(worker)
        p = live.partition_of(CLUSTER)
        last = live.raw(p)[-1].offset
        wait_until(lambda: (proj.get("/status")["offsets"].get(str(p), -1) >= last), 120,
                   interval=0.5, what="the projections to apply the whole journal")
        status = proj.get("/status")
        got = {(w, d): proj.get(f"/usage?cluster={CLUSTER}&window={w}&dim={d}")
               for w in ("hourly", "daily") for d in ("node", "host")}
        teams = proj.get(f"/teams?cluster={CLUSTER}&window=hourly&depth=2")
    finally:
        proj.stop()
    journal = tmp_path / "journal.jsonl"
    asyncio.run(export_journal(live.bootstrap, journal, prefix=live.prefix, clusters=[CLUSTER]))
    from events import read_log

    events = read_log(journal)
    assert any(isinstance(e, WorkloadPreempted) for e in events), "no preemption: a weak test"
    assert sum(isinstance(e, WorkloadStarted) for e in events) >= 8
    con = load_audit(events, tmp_path)
    nodes, hosts = audit_node_seconds(con), audit_host_seconds(con)

    def cells(body: dict) -> dict:
        return nonzero({k: {c["start"]: (c["alloc_gpu_s"], c["unalloc_gpu_s"]) for c in v}
                        for k, v in body["usage"].items()})

    # On a mismatch, say what the projection did (records, skips, gaps read back).
    why = json.dumps({k: status[k] for k in ("records", "skipped_redelivered", "fenced",
                                             "unreadable", "offsets", "gaps_filled", "clusters")})
    assert cells(got[("hourly", "node")]) == nodes, why
    assert cells(got[("hourly", "host")]) == hosts, why
    assert cells(got[("daily", "node")]) == hop(nodes, DAILY), why
    assert cells(got[("daily", "host")]) == hop(hosts, DAILY), why
    assert teams["capacity_gpus"] == 16 and set(teams["teams"]) == {"lab/a", "lab/b"}
    assert teams["teams"]["lab/a"]["entitlement"] == pytest.approx(0.75)
    print(f"\nprojections: first ready {first_ready:.1f} s, ready after kill -9 "
          f"{restart_ready:.1f} s; lag while live {lag_live}; final lag {status['lag']}; "
          f"records {status['records']}, re-delivered and skipped "
          f"{status['skipped_redelivered']}, gaps read back {status['gaps_filled']}")
    return status
