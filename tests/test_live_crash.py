"""Crash safety: kill -9 the worker at random points while inputs stream in; nothing lost or doubled.

Ten seeded trials on one journal. Odd trials run the worker with a fault
armed (``tests.worker_faults``, ``--kill-after-sends K``): once the worker has
handed K journal records to the producer in that life, it flushes them and
SIGKILLs itself just before the next decision of a group, so it dies in the middle of publishing a cycle (or
of a rejection); the restart must append exactly the decisions that are
missing. Even trials are killed from outside at a
random moment (during the fold, a batch, a snapshot). Snapshots are taken
every 150 records, so restarts restore them. After a last, clean worker has
caught up, every journal partition must satisfy ``tests.kafka.check_journal``
(no inbox record lost, no input journaled twice, duplicates exact, the replay
check clean), and the live worker's state must equal a clean fold of the
journal and a fresh engine's run over the same inputs.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from events import ClockTicked, Event
from events.factory import Inputs
from streams.broker import free_port
from tests.kafka import (
    Live,
    WorkerProcess,
    check_journal,
    fingerprints,
    get_state,
    unique_prefix,
    wait_until,
    worker_settings,
)
from tests.worker_faults import faulty_worker

pytestmark = pytest.mark.kafka

SEED = 20261201
TRIALS = 10
CLUSTERS = ("crash-a", "crash-b")
PER_TRIAL = 100           # inputs per cluster per trial
LEAVES = ("a", "b", "c")


class Stream:
    """A seeded stream of inputs for one cluster: setup, then submissions, cancels, finishes, faults."""

    def __init__(self, cluster: str, rng: random.Random) -> None:
        self.cluster = cluster
        self.rng = rng
        self.mk = Inputs(cluster=cluster, prefix=f"{cluster}-")
        self.workloads: list[tuple[str, str]] = []   # (workload, user)
        self.n = 0

    def setup(self) -> list[Event]:
        at = int(time.time())
        mk = self.mk
        out: list[Event] = [mk.node("lab", managers=("admin",), at=at)]
        out += [mk.node(f"lab/{leaf}", at=at) for leaf in LEAVES]
        out += [mk.host(f"h{i}", gpus=8, rack=f"r{i // 4}", at=at) for i in range(8)]
        return out

    def next(self) -> Event:
        rng, mk, at = self.rng, self.mk, int(time.time())
        roll = rng.random()
        if roll < 0.1 and self.workloads:
            w, user = rng.choice(self.workloads)
            return mk.cancel(w, actor=user, at=at)
        if roll < 0.2 and self.workloads:
            w, _ = rng.choice(self.workloads)
            return mk.finish(w, at=at)
        if roll < 0.23:
            host = f"h{rng.randrange(8)}"
            if rng.random() < 0.5:
                return mk.repair(host, at=at)
            return mk.fault(host, severity=rng.choice(("degraded", "failed")), at=at)
        self.n += 1
        leaf = rng.choice(LEAVES)
        gpus = rng.choice((1, 2, 4, 8, 8, 16))
        w = f"w{self.n}"
        self.workloads.append((w, leaf))
        return mk.submit(w, f"lab/{leaf}", gpus=gpus, min_runtime_s=rng.choice((0, 5, 20)),
                         resumable=rng.random() < 0.7, hosts=2 if gpus == 16 else 1,
                         gpus_per_host=8 if gpus == 16 else None, at=at)


def _publish(live: Live, streams: list[Stream], n: int, seconds: float) -> None:
    """Publish ``n`` inputs per stream, spread over about ``seconds``."""
    steps = 10
    for _ in range(steps):
        batch = [s.next() for s in streams for _ in range(n // steps)]
        live.send_many(batch)
        time.sleep(seconds / steps)


def _wait_claimed(live: Live, w: WorkerProcess, before: dict[str, int], trial: int) -> None:
    """Until ``w`` has claimed both clusters' partitions in this life (or died trying)."""
    wait_until(lambda: not w.alive() or all(len(live.claims(live.partition_of(c))) > n
                                            for c, n in before.items()), 90,
               what=f"trial {trial}: the worker to claim")


@pytest.fixture
def live(kafka: str) -> Iterator[Live]:
    lv = Live(kafka, unique_prefix(), watch_inbox=True).start()
    try:
        yield lv
    finally:
        lv.close()


def test_kill_9_at_random_points_loses_and_doubles_nothing(live: Live, kafka: str,
                                                           tmp_path: Path) -> None:
    rng = random.Random(SEED)
    port = free_port()
    settings = worker_settings(kafka, live.prefix, CLUSTERS, time_scale=10.0,
                               tick_interval_s=0.25, snapshot_every_records=150,
                               instance_id="crash-worker", metrics_port=port, log_level="info")
    streams = [Stream(c, random.Random(f"{SEED}:{c}")) for c in CLUSTERS]
    log = tmp_path / "worker.log"
    kills = {"self": 0, "outside": 0}
    for trial in range(TRIALS + 1):
        final = trial == TRIALS
        argv = None
        if trial % 2 == 1 and not final:
            argv = faulty_worker(kill_after_sends=rng.randint(1, 500))
        before = {c: len(live.claims(live.partition_of(c))) for c in CLUSTERS}
        w = WorkerProcess(settings, log, argv=argv).start()
        _wait_claimed(live, w, before, trial)
        if trial == 0:
            for c in CLUSTERS:
                live.wait_event(c, lambda e: isinstance(e, ClockTicked), what=f"{c}'s clock")
            live.send_many([e for s in streams for e in s.setup()])
        if final:
            _publish(live, streams, PER_TRIAL, 1.0)
            break
        pub = threading.Thread(target=_publish, args=(live, streams, PER_TRIAL, 2.0))
        pub.start()
        if argv:
            # The hook kills the worker itself; if it wrote fewer records than K, do it.
            deadline = time.monotonic() + 5
            while w.alive() and time.monotonic() < deadline:
                time.sleep(0.05)
            kills["self" if not w.alive() else "outside"] += 1
        else:
            time.sleep(rng.uniform(0.0, 2.5))
            kills["outside"] += 1
        w.kill()
        pub.join()

    # The last worker runs clean: wait until it has handled every inbox record we sent.
    last_sent = {live.partition_of(c): max(r.offset for r in live.inbox_of(live.partition_of(c)))
                 for c in CLUSTERS}

    def caught_up() -> dict | None:
        try:
            state = get_state(port)
        except OSError:
            return None
        ok = all(str(p) in state and state[str(p)]["next_inbox_offset"] > off
                 for p, off in last_sent.items())
        if ok and all(len(live.raw(int(p))) > s["journal_offset"] for p, s in state.items()):
            return state
        return None

    state = wait_until(caught_up, 120, what="the last worker to catch up")
    w.terminate()
    total_inputs = 0
    for cluster in CLUSTERS:
        p = live.partition_of(cluster)
        ps = state[str(p)]
        check = check_journal(live, p, ps["journal_offset"], ps["next_inbox_offset"] - 1)
        events = check.events[cluster]
        total_inputs += sum(1 for e in events if e.cause is None)
        folded, fresh = fingerprints(events, cluster)
        assert ps["clusters"][cluster]["fingerprint"] == folded == fresh, cluster
    assert total_inputs >= 2 * PER_TRIAL * TRIALS  # a few thousand inputs went through
    assert kills["self"] >= 3 and kills["outside"] >= 5, kills
    recovered = log.read_text().count('"journal.recovered"')
    assert recovered >= 3, "too few kills landed between an input and its decisions"
    claimed = [json.loads(line) for line in log.read_text().splitlines()
               if line.startswith("{") and '"partition.claimed"' in line]
    assert any(c.get("snapshot") is not None for c in claimed), "no restart used a snapshot"
    # Restarts restore the snapshot while the group joins (the prefetch), and stay exact.
    assert any(c.get("snapshot_source") == "prefetch" for c in claimed), \
        "no restart used a prefetched snapshot"
