"""Snapshots restored while the group joins (``snapshots.Prefetcher``), against a real broker.

A restarting worker restores every partition's newest snapshot before it knows
its assignment. What must hold: a prefetched snapshot seeds a partition only
if it reflects offsets below that partition's claim; one of a partition the
group does not assign is dropped, never used later; each is used at most once;
and a partition rebuilt from a prefetched snapshot equals a clean fold of its
journal.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import msgspec
import pytest

from events import ClockTicked
from events.factory import Inputs
from scheduler import Engine
from streams import snapshots
from streams.journal import reader
from streams.records import JOURNAL, SNAPSHOTS, Fence, topic
from streams.worker import Worker
from tests.kafka import (
    TICK_KEY,
    Live,
    check_journal,
    fingerprints,
    unique_prefix,
    wait_until,
    worker_settings,
)

pytestmark = pytest.mark.kafka


@pytest.fixture
def live(kafka: str) -> Iterator[Live]:
    lv = Live(kafka, unique_prefix()).start()
    try:
        yield lv
    finally:
        lv.close()


def two_clusters(live: Live) -> tuple[str, str]:
    """Two cluster ids on different partitions."""
    names = [f"pf{i}" for i in range(40)]
    first = names[0]
    second = next(n for n in names if live.partition_of(n) != live.partition_of(first))
    return first, second


def write_snapshots(live: Live, clusters: tuple[str, ...]) -> dict[str, int]:
    """Run a worker over some inputs until every cluster's partition has a snapshot; stop it.

    Returns each cluster's snapshot journal offset (the newest manifest).
    """
    w = live.start_worker(clusters, snapshot_every_records=15)
    for c in clusters:
        live.wait_event(c, lambda e: isinstance(e, ClockTicked), what=f"{c}'s first tick")
        mk = Inputs(cluster=c, prefix=f"{c}-")
        now = int(time.time())
        events = [mk.node("lab", managers=("admin",), at=now), mk.node("lab/a", at=now)]
        events += [mk.host(f"h{i}", gpus=8, at=now) for i in range(2)]
        events += [mk.submit(f"w{i}", "lab/a", 1, 600, at=now) for i in range(12)]
        live.send_many(events)

    def newest() -> dict[str, int] | None:
        found = {c: manifest_offset(live, live.partition_of(c)) for c in clusters}
        return found if all(v >= 0 for v in found.values()) else None

    offsets = wait_until(newest, 60, what="a snapshot of every partition")
    live.stop_worker(w)
    return offsets


def manifest_offset(live: Live, partition: int) -> int:
    async def go() -> int:
        c = reader(live.bootstrap)
        await c.start()
        try:
            async for window in snapshots.manifest_windows(
                    c, topic(SNAPSHOTS, live.prefix), partition):
                return window[0].journal_offset
            return -1
        finally:
            await c.stop()
    return live.bg.run(go())


def caught_up_state(live: Live, worker: Worker, cluster: str) -> dict[str, Any]:
    """The worker's state report once the watcher has its journal up to the reported offset."""
    p = live.partition_of(cluster)

    def ready() -> dict[str, Any] | None:
        state = live.bg.run(worker.state_report())
        ps = state.get(str(p))
        return ps if ps is not None and len(live.raw(p)) > ps["journal_offset"] else None

    return wait_until(ready, 30, what="the journal watcher")


def assert_exact(live: Live, worker: Worker, cluster: str) -> None:
    ps = caught_up_state(live, worker, cluster)
    check = check_journal(live, live.partition_of(cluster), ps["journal_offset"],
                          ps["next_inbox_offset"] - 1)
    folded, fresh = fingerprints(check.events[cluster], cluster)
    assert ps["clusters"][cluster]["fingerprint"] == folded == fresh


def test_a_restart_uses_the_prefetched_snapshot_and_equals_a_clean_fold(live: Live) -> None:
    a, _ = two_clusters(live)
    written = write_snapshots(live, (a,))
    w = live.start_worker((a,))
    st = w.owned[live.partition_of(a)]
    assert st.restored_from == ("prefetch", written[a])
    assert w._prefetch is None  # closed once the first assignment was rebuilt
    assert_exact(live, w, a)


def test_a_prefetch_of_an_unassigned_partition_is_dropped_and_each_is_taken_once(
        live: Live) -> None:
    a, b = two_clusters(live)
    pa, pb = live.partition_of(a), live.partition_of(b)
    write_snapshots(live, (a, b))

    async def go() -> tuple[Any, ...]:
        c = reader(live.bootstrap)
        await c.start()
        pre = snapshots.Prefetcher(c, topic(SNAPSHOTS, live.prefix), topic(JOURNAL, live.prefix),
                                   TICK_KEY.encode(), [pa, pb]).start()
        while pre.pending():
            await asyncio.sleep(0.05)
        pre.restrict({pa})                   # the group assigned pa only
        got_b = await pre.take(pb)
        got_a = await pre.take(pa)
        again = await pre.take(pa)
        dropped = list(pre.dropped)
        await pre.close()
        return got_a, got_b, again, dropped

    got_a, got_b, again, dropped = live.bg.run(go())
    assert got_a is not None and set(got_a.engines) == {a}
    assert got_b is None and dropped == [pb]
    assert again is None


class _Injected:
    """A prefetcher holding one given result, to put a bad candidate in front of ``_take``."""

    def __init__(self, partition: int, restored: snapshots.Restored) -> None:
        self.results = {partition: restored}
        self.dropped: list[int] = []
        self.taken: list[int] = []

    def restrict(self, partitions: set[int]) -> None:
        pass

    async def take(self, partition: int) -> snapshots.Restored | None:
        self.taken.append(partition)
        return self.results.pop(partition, None)

    async def close(self) -> None:
        pass


def test_a_prefetched_snapshot_not_below_the_claim_is_not_used(live: Live) -> None:
    a, _ = two_clusters(live)
    p = live.partition_of(a)
    write_snapshots(live, (a,))
    # A signed-looking candidate at an offset past any claim the new worker can get, holding
    # an engine that differs from the journal (an empty one): using it would be visible.
    manifest = snapshots.Manifest(partition=p, token="x", claim_offset=0,
                                  journal_offset=10**9, foreign=[], inbox_offset=10**9,
                                  clusters=[])
    bogus = snapshots.Restored(manifest=manifest, engines={a: Engine(a)}, fence=Fence(),
                               read_s=0.0)
    injected = _Injected(p, bogus)
    settings = worker_settings(live.bootstrap, live.prefix, (a,), prefetch_snapshots=False)

    async def make() -> Worker:
        w = Worker(settings)
        w._prefetch = injected  # type: ignore[assignment]
        return w

    w = live.bg.run(make())
    fut = live.bg.spawn(w.run())
    live.workers.append((w, fut))
    wait_until(lambda: w.ready.is_set() or fut.done(), 60, what="the worker to claim")
    assert p in injected.taken
    assert w.owned[p].restored_from is not None and w.owned[p].restored_from[0] == "claim"
    assert w.owned[p].restored_from[1] < w.owned[p].claim_offset
    assert_exact(live, w, a)


@pytest.mark.parametrize(("partition", "journal_offset", "claim", "usable"), [
    (1, 99, 100, True),     # below the claim
    (1, 100, 100, False),   # at the claim: cannot be the state the claim fences
    (1, 150, 100, False),   # past the claim (written by another owner after it)
    (2, 50, 100, False),    # another partition's snapshot
])
def test_unusable_accepts_only_snapshots_below_the_claim_of_the_same_partition(
        partition: int, journal_offset: int, claim: int, usable: bool) -> None:
    m = snapshots.Manifest(partition=partition, token="t", claim_offset=0,
                           journal_offset=journal_offset, foreign=[], inbox_offset=0, clusters=[])
    r = snapshots.Restored(manifest=m, engines={}, fence=Fence(), read_s=0.0)
    assert (snapshots.unusable(r, 1, claim) is None) is usable


def test_the_manifest_is_unchanged_by_the_prefetch_work() -> None:
    # Old manifests must still verify: no field was added to what the signature covers.
    fields = [f.name for f in msgspec.structs.fields(snapshots.Manifest)]
    assert fields == ["v", "partition", "token", "claim_offset", "journal_offset", "foreign",
                      "inbox_offset", "clusters", "worker", "written_at", "signature"]
