"""The Python client and the command-line verbs, against a real broker and an in-process worker.

One worker schedules the module's clusters, time 20x faster than the wall
clock. Each test uses its own cluster.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from aiokafka.partitioner import DefaultPartitioner

from events import ClockTicked, Event, WorkloadStarted
from events.factory import Inputs
from events.limits import INPUT_ID_PATTERN
from streams.client import (
    Client,
    ClientError,
    SyncClient,
    check_id,
    new_id,
    partition_for,
)
from streams.journal_tail import JournalTail
from streams.records import KIND_DECISION, journal_headers
from streams.worker import partition_for as worker_partition_for
from tests.kafka import REPO, Live, unique_prefix

CLUSTERS = ("cl-accept", "cl-reject", "cl-retry", "cl-cli", "cl-fence", "cl-sync")


# -- pure -----------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["default", "demo", "cl-a", "c1", "c2", "gpu-east-7", "x" * 64])
@pytest.mark.parametrize("n", [1, 4, 8, 12])
def test_partitioning_is_murmur2_like_aiokafka_and_the_worker(key: str, n: int) -> None:
    want = DefaultPartitioner()(key.encode(), list(range(n)), list(range(n)))
    assert partition_for(key, n) == want == worker_partition_for(key, n)


def test_a_fresh_id_is_a_valid_input_id_and_never_repeats() -> None:
    import re

    ids = {new_id("submit"), new_id("a b/c"), new_id("")}
    assert len(ids) == 3
    assert all(re.fullmatch(INPUT_ID_PATTERN, i) for i in ids)


@pytest.mark.parametrize("bad", ["a/b", "has space", "é", "", "x" * 129])
def test_a_bad_id_is_refused_before_publishing(bad: str) -> None:
    with pytest.raises(ClientError):
        check_id(bad)


# -- against the broker ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def live(kafka: str) -> Iterator[Live]:
    lv = Live(kafka, unique_prefix()).start()
    lv.start_worker(CLUSTERS, time_scale=20.0, tick_interval_s=0.25)
    try:
        yield lv
    finally:
        lv.close()


def _setup(live: Live, cluster: str, hosts: int = 1) -> Inputs:
    live.wait_event(cluster, lambda e: isinstance(e, ClockTicked), what=f"{cluster}'s first tick")
    mk = Inputs(cluster=cluster, prefix=f"{cluster}-")
    now = int(time.time())
    events: list[Event] = [mk.node("lab", managers=("admin",), at=now), mk.node("lab/a", at=now)]
    events += [mk.host(f"h{i}", gpus=8, at=now) for i in range(hosts)]
    live.send_many(events)
    return mk


def _client(live: Live) -> Client:
    return Client(live.bootstrap, live.prefix)


@pytest.mark.kafka
def test_a_submission_is_accepted_then_followed_to_its_start(live: Live) -> None:
    mk = _setup(live, "cl-accept")
    sub = mk.submit("w1", "lab/a", gpus=4, min_runtime_s=60, at=int(time.time()))

    async def go() -> object:
        async with _client(live) as c:
            return await c.request(sub, timeout=30, follow=lambda d: isinstance(d, WorkloadStarted))

    res = live.bg.run(go(), timeout=60)
    assert res.status == "accepted" and res.decisions == []
    assert res.input["id"] == sub.id and res.journal_offset is not None
    [started] = res.followed
    assert started["type"] == "workload.started" and started["workload"] == "w1"
    assert started["placement"] == [{"host": "h0", "gpus": 4}]


@pytest.mark.kafka
def test_a_rejection_is_reported_with_its_reason(live: Live) -> None:
    mk = _setup(live, "cl-reject")
    sub = mk.submit("w1", "lab/nowhere", gpus=4, min_runtime_s=60, at=int(time.time()))

    async def go() -> object:
        async with _client(live) as c:
            return await c.request(sub, timeout=30)

    res = live.bg.run(go(), timeout=60)
    assert res.status == "rejected"
    [rej] = res.decisions
    assert rej["type"] == "workload.rejected" and rej["reason"] == "unknown_budget"
    assert rej["cause"] == sub.id


@pytest.mark.kafka
def test_an_input_for_a_cluster_nobody_schedules_comes_back_as_a_dead_letter(live: Live) -> None:
    e = Inputs(cluster="cl-nobody", prefix="n").node("lab", at=int(time.time()))

    async def go() -> object:
        async with _client(live) as c:
            return await c.request(e, timeout=30)

    res = live.bg.run(go(), timeout=60)
    assert res.status == "dead_letter" and res.dead_letter["reason"] == "unknown_cluster"


@pytest.mark.kafka
def test_a_retry_reuses_the_id_and_the_journal_keeps_one_copy(live: Live) -> None:
    mk = _setup(live, "cl-retry")
    sub = mk.submit("w1", "lab/a", gpus=1, min_runtime_s=60, at=int(time.time()))

    async def go() -> str:
        async with _client(live) as c:
            await c.publish(sub)
            await c.publish(sub)  # what a retry after a lost acknowledgement does
            # An input after both: once it is journaled, both copies were handled.
            return (await c.request(mk.node("lab/b", at=int(time.time())), timeout=30)).status

    assert live.bg.run(go(), timeout=60) == "accepted"
    copies = [e for e in live.events("cl-retry") if e.id == sub.id]
    raw = [r for r in live.admitted(live.partition_of("cl-retry")) if sub.id.encode() in r.value
           and r.kind == "input"]
    assert len(copies) == 1 and len(raw) == 1


@pytest.mark.kafka
def test_the_tail_ignores_records_of_a_fenced_owner(live: Live) -> None:
    mk = _setup(live, "cl-fence")
    forged = WorkloadStarted(id="forged/1", at=int(time.time()), cluster="cl-fence",
                             cause="forged", workload="x", placement=(), allocated=True,
                             protected_until=None)
    from events import encode

    async def go() -> list[str]:
        c = _client(live)
        await c.start()
        tail = await c.tail("cl-fence", start="end")
        try:
            p = tail.partition
            await c._producer.send_and_wait(  # type: ignore[union-attr]
                live.journal_topic, encode(forged), key=b"cl-fence", partition=p,
                headers=journal_headers(KIND_DECISION, "not-the-owner"))
            seen: list[str] = []
            await c.publish(mk.node("lab/b", at=int(time.time())))
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                seen += [i.event.id for i in await tail.poll(200)]
            return seen
        finally:
            await tail.stop()
            await c.close()

    seen = live.bg.run(go(), timeout=60)
    assert "forged/1" not in seen
    assert any(i.endswith(str(mk.n)) for i in seen)  # the real input of after it was read


@pytest.mark.kafka
def test_the_sync_client_serves_scripts(live: Live) -> None:
    mk = _setup(live, "cl-sync")
    with SyncClient(live.bootstrap, live.prefix) as c:
        assert c.clock("cl-sync", timeout=20) > 0
        res = c.request(mk.submit("w1", "lab/a", gpus=1, min_runtime_s=0, at=int(time.time())))
    assert res.ok


# -- the command line --------------------------------------------------------------------------


def _allot(live: Live, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("ALLOT_") and k != "KAFKA_BOOTSTRAP_SERVERS"}
    env.update(KAFKA_BOOTSTRAP_SERVERS=live.bootstrap, ALLOT_TOPIC_PREFIX=live.prefix,
               ALLOT_ACTOR="admin")
    return subprocess.run([sys.executable, "-m", "allot", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.kafka
def test_the_verbs_print_what_their_input_caused(live: Live) -> None:
    live.wait_event("cl-cli", lambda e: isinstance(e, ClockTicked), what="cl-cli's clock")
    c = ["--cluster", "cl-cli", "--json"]
    steps = [
        (["budget", "define", "lab", "--manager", "admin"], 0, None),
        (["budget", "define", "lab/a", "--shares", "3"], 0, None),
        (["budget", "define", "lab/b"], 0, None),
        (["budget", "shares", "lab", "a=2", "b=1"], 0, None),
        (["host", "add", "h0"], 0, None),
        (["submit", "--budget", "lab/a", "--gpus", "2", "--workload", "cli-w1", "--follow",
          "--resumable"], 0,
         "workload.started"),
        (["submit", "--budget", "lab/zz", "--gpus", "2"], 1, "workload.rejected"),
        (["host", "fault", "h0", "--severity", "failed"], 0, "workload.preempted"),
        (["host", "repair", "h0"], 0, None),
        (["cancel", "cli-w1"], 0, None),
        (["cancel", "cli-w1"], 1, "input.rejected"),
    ]
    for argv, code, decision in steps:
        proc = _allot(live, *argv, *c)
        assert proc.returncode == code, (argv, proc.stdout, proc.stderr)
        out = json.loads(proc.stdout)
        types = [d["type"] for d in out["decisions"] + out["followed"]]
        if decision is None:
            assert out["status"] == "accepted" and not types, (argv, out)
        else:
            assert decision in types, (argv, out)


@pytest.mark.kafka
def test_a_verb_explains_itself_in_text(live: Live) -> None:
    proc = _allot(live, "submit", "--budget", "lab/none", "--gpus", "1", "--cluster", "cl-cli")
    assert proc.returncode == 1
    assert "rejected" in proc.stdout and "unknown_budget" in proc.stdout


def test_no_broker_is_one_line_and_status_2() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALLOT_")}
    env["KAFKA_BOOTSTRAP_SERVERS"] = "127.0.0.1:1"
    proc = subprocess.run([sys.executable, "-m", "allot", "host", "repair", "h0", "--timeout", "3"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "error" in proc.stderr, proc.stderr


@pytest.mark.parametrize("verb", [["submit"], ["cancel"], ["budget"], ["budget", "define"],
                                  ["budget", "shares"], ["host"], ["host", "fault"],
                                  ["host", "repair"], ["host", "add"]])
def test_every_verb_has_help(verb: list[str]) -> None:
    proc = subprocess.run([sys.executable, "-m", "allot", *verb, "--help"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "usage" in proc.stdout


def test_a_tail_refuses_a_missing_topic(kafka: str) -> None:
    async def go() -> None:
        t = JournalTail(kafka, "no-such-topic-xyz", 0)
        try:
            await t.start()
        finally:
            await t.stop()

    with pytest.raises(ClientError):
        asyncio.run(go())
