"""Two workers, four clusters: one owner per cluster, takeover after kill -9, a frozen owner fenced.

The four clusters are chosen so each has an inbox partition of its own (4
partitions), so the group splits them between the workers. These tests run
the consumer group alone (``liveness`` off), the slow path;
tests/test_live_failover_fast.py runs the same faults with the fast takeover. Inputs stream in
the whole time; afterwards every partition must pass ``check_journal`` and
the owner's state must equal a clean fold of the journal.
"""

from __future__ import annotations

import itertools
import random
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from events import ClockTicked, Event
from events.factory import Inputs
from streams.broker import free_port
from streams.records import Claim
from streams.worker import partition_for
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

PARTITIONS = 4


def _four_clusters() -> tuple[str, ...]:
    by_partition: dict[int, str] = {}
    for i in itertools.count():
        name = f"fo-{i}"
        by_partition.setdefault(partition_for(name, PARTITIONS), name)
        if len(by_partition) == PARTITIONS:
            return tuple(by_partition[p] for p in range(PARTITIONS))
    raise AssertionError("unreachable")


CLUSTERS = _four_clusters()


class Feed:
    """Publishes setup and then a steady stream of submissions to every cluster, in a thread."""

    def __init__(self, live: Live, rate_per_cluster: float = 25.0) -> None:
        self.live = live
        self.rate = rate_per_cluster
        self.stop = threading.Event()
        self.sent = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.mk = {c: Inputs(cluster=c, prefix=f"{c}-") for c in CLUSTERS}
        self.rng = random.Random(7)

    def setup(self) -> None:
        at = int(time.time())
        events: list[Event] = []
        for mk in self.mk.values():
            # Nothing here ever finishes: under time slicing (the policy before
            # 2026-12-04) the full cluster keeps producing preemption and start
            # groups, the decisions these tests crash workers in the middle of.
            # Under the default reclaim rule it goes quiet once each side holds
            # its guarantee.
            events += [mk.policy(at=at, preemption_rule="fair_share", borrowed_protection_s=None)]
            events += [mk.node("lab", managers=("admin",), at=at), mk.node("lab/a", at=at),
                       mk.node("lab/b", at=at)]
            events += [mk.host(f"h{i}", gpus=8, at=at) for i in range(4)]
        self.live.send_many(events)

    def _run(self) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            at = int(time.time())
            batch = [mk.submit(f"w{n}", self.rng.choice(("lab/a", "lab/b")),
                               gpus=self.rng.choice((1, 2, 4, 8)), at=at,
                               min_runtime_s=self.rng.choice((0, 5, 30)), resumable=True)
                     for mk in self.mk.values()]
            self.live.send_many(batch)
            self.sent += len(batch)
            time.sleep(1 / self.rate)

    def start(self) -> Feed:
        self.thread.start()
        return self

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(30)


def owner_tokens(live: Live) -> dict[int, Claim]:
    """The latest claim of every partition."""
    return {p: cl[-1] for p in range(PARTITIONS) if (cl := live.claims(p))}


def worker_of(live: Live, names: dict[str, str]) -> dict[int, str]:
    """partition -> the name of the worker whose claim is the latest."""
    return {p: c.worker for p, c in owner_tokens(live).items() if c.worker in names.values()}


def settle(live: Live, alive: set[str], quiet_s: float = 8.0, timeout: float = 120.0) -> dict[int, str]:
    """Wait until every partition's latest claim is by a live worker and no claim came for a while.

    Tansu sometimes forgets a member right after a join ("member_id was not
    recognized"), which starts another rebalance; the group settles after a few.
    """
    deadline = time.monotonic() + timeout
    last = None
    since = time.monotonic()
    while time.monotonic() < deadline:
        now = {p: (c.token, c.worker) for p, c in owner_tokens(live).items()}
        if now != last:
            last, since = now, time.monotonic()
        elif len(now) == PARTITIONS and {w for _, w in now.values()} <= alive \
                and time.monotonic() - since >= quiet_s:
            return {p: w for p, (_, w) in now.items()}
        time.sleep(0.2)
    raise AssertionError(f"the group did not settle: {last}")


def verify(live: Live, ports: dict[str, int], owners: dict[int, str]) -> dict[str, int]:
    """Each partition through its owner: caught up with the inbox, journal checks, state equality."""
    totals = {"fenced": 0, "inputs": 0}
    for cluster in CLUSTERS:
        p = live.partition_of(cluster)
        port = ports[owners[p]]
        last_sent = max((r.offset for r in live.inbox_of(p)), default=-1)

        def caught_up(p: int = p, port: int = port, last_sent: int = last_sent) -> dict | None:
            try:
                ps = get_state(port).get(str(p))
            except OSError:
                return None
            if ps and ps["next_inbox_offset"] > last_sent and len(live.raw(p)) > ps["journal_offset"]:
                return ps
            return None

        ps = wait_until(caught_up, 60, what=f"partition {p}'s owner to catch up")
        check = check_journal(live, p, ps["journal_offset"], ps["next_inbox_offset"] - 1)
        folded, fresh = fingerprints(check.events[cluster], cluster)
        assert ps["clusters"][cluster]["fingerprint"] == folded == fresh, cluster
        totals["fenced"] += check.fenced
        totals["inputs"] += check.inputs
    return totals


@pytest.fixture
def live(kafka: str) -> Iterator[Live]:
    lv = Live(kafka, unique_prefix(), partitions=PARTITIONS, watch_inbox=True).start()
    try:
        yield lv
    finally:
        lv.close()


def pair(live: Live, kafka: str, tmp_path: Path,
          argv: dict[str, list[str]] | None = None,
          liveness: bool = True) -> tuple[dict[str, WorkerProcess], dict[str, int]]:
    """Workers "wa" and "wb", each on its own command line in ``argv`` if named there."""
    procs: dict[str, WorkerProcess] = {}
    ports: dict[str, int] = {}
    for name in ("wa", "wb"):
        ports[name] = free_port()
        s = worker_settings(kafka, live.prefix, CLUSTERS, worker_name=name,
                            metrics_port=ports[name], log_level="debug", time_scale=5.0,
                            snapshot_every_records=300, partitions=PARTITIONS,
                            liveness=liveness)
        procs[name] = WorkerProcess(s, tmp_path / f"{name}.log",
                                    argv=(argv or {}).get(name)).start()
    names = {n: n for n in procs}
    wait_until(lambda: sorted(set(worker_of(live, names).values())) == ["wa", "wb"]
               and len(worker_of(live, names)) == PARTITIONS, 90,
               what="both workers to own partitions")
    for c in CLUSTERS:
        live.wait_event(c, lambda e: isinstance(e, ClockTicked), what=f"{c}'s clock")
    return procs, ports


def test_each_cluster_has_one_owner_and_a_killed_workers_clusters_move(live: Live, kafka: str,
                                                                        tmp_path: Path) -> None:
    procs, ports = pair(live, kafka, tmp_path, liveness=False)
    try:
        owners = worker_of(live, {n: n for n in procs})
        # One owner per cluster: the group split the four partitions between the two.
        assert sorted(owners.values()).count("wa") == 2 and len(owners) == PARTITIONS
        feed = Feed(live)
        feed.setup()
        feed.start()
        time.sleep(2)
        victim = owners[0]
        survivor = "wb" if victim == "wa" else "wa"
        t_kill = time.monotonic()
        procs[victim].kill()
        wait_until(lambda: set(worker_of(live, {n: n for n in procs}).values()) == {survivor},
                   60, what="the survivor to claim all four partitions")
        takeover = time.monotonic() - t_kill
        time.sleep(2)
        feed.finish()
        owners_now = settle(live, {survivor})
        totals = verify(live, ports, owners_now)
        assert totals["inputs"] >= feed.sent
        print(f"takeover after kill -9: {takeover:.1f} s")
    finally:
        for p in procs.values():
            p.kill()


def test_a_frozen_owner_is_fenced_and_the_journals_stay_exact(live: Live, kafka: str,
                                                               tmp_path: Path) -> None:
    # "wa" freezes itself (SIGSTOP) in the middle of a batch, after its 400th journal record,
    # so it holds a half-written batch while "wb" takes its partitions over.
    procs, ports = pair(live, kafka, tmp_path, argv={"wa": faulty_worker(stop_after_sends=400)},
                         liveness=False)
    try:
        feed = Feed(live, rate_per_cluster=40.0)
        feed.setup()
        feed.start()
        wait_until(lambda: procs["wa"].proc is not None and stopped(procs["wa"].pid), 60,
                   what="wa to freeze itself mid-batch")
        wait_until(lambda: set(worker_of(live, {n: n for n in procs}).values()) == {"wb"},
                   60, what="wb to take over wa's partitions")
        procs["wa"].signal(signal.SIGCONT)
        # It wakes with the rest of a batch in hand, writes it under its old claim, then
        # learns it lost the group and rejoins, or first finds the newer claim among the
        # offsets of its own appends (``partition.fenced``) and stops writing there.
        wait_until(lambda: any(e in procs["wa"].log_text()
                               for e in ("partition.revoked", "partition.fenced")), 60,
                   what="wa to notice")
        time.sleep(3)
        feed.finish()
        owners_now = settle(live, {"wa", "wb"})
        fenced = verify(live, ports, owners_now)["fenced"]
        assert fenced > 0, "wa wrote nothing after the takeover"
    finally:
        for p in procs.values():
            p.signal(signal.SIGCONT)
            p.kill()


def stopped(pid: int) -> bool:
    """True when process ``pid`` is stopped (state T in /proc)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "T"
    except OSError:
        return False
