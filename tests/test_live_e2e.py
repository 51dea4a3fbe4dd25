"""End to end over Kafka: inputs on the inbox, decisions on the journal, one in-process worker.

One worker schedules several clusters for the whole module (each test uses its
own cluster, so they cannot see each other's work); time runs 20x faster than
the wall clock so minimum runtimes of a minute pass in seconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest

from events import ClockTicked, Event, HostDrained, WorkloadPreempted, WorkloadStarted
from events.factory import Inputs
from streams.records import DeadLetter
from tests.kafka import Live, unique_prefix, wait_until

pytestmark = pytest.mark.kafka

CLUSTERS = ("e2e-start", "e2e-reclaim", "e2e-protect", "e2e-fault", "e2e-dead")


@pytest.fixture(scope="module")
def live(kafka: str) -> Iterator[Live]:
    lv = Live(kafka, unique_prefix()).start()
    lv.start_worker(CLUSTERS, time_scale=20.0, tick_interval_s=0.25)
    try:
        yield lv
    finally:
        lv.close()


# The policy before 2026-12-04: every funded start protected for its minimum
# runtime, and fair-share time slicing between leaves.
TIME_SLICING = {"preemption_rule": "fair_share", "borrowed_protection_s": None}


def setup(live: Live, cluster: str, hosts: int = 1, leaves: tuple[str, ...] = ("a", "b"),
          policy: dict[str, object] | None = None) -> Inputs:
    """Wait for the cluster's clock, then define a budget tree and hosts; return the factory."""
    live.wait_event(cluster, lambda e: isinstance(e, ClockTicked), what=f"{cluster}'s first tick")
    mk = Inputs(cluster=cluster, prefix=f"{cluster}-")
    now = int(time.time())
    events: list[Event] = [mk.policy(at=now, **policy)] if policy else []
    events += [mk.node("lab", managers=("admin",), at=now)]
    events += [mk.node(f"lab/{leaf}", at=now) for leaf in leaves]
    events += [mk.host(f"h{i}", gpus=8, at=now) for i in range(hosts)]
    live.send_many(events)
    return mk


def started(workload: str) -> Callable[[Event], bool]:
    return lambda e: isinstance(e, WorkloadStarted) and e.workload == workload


def preempted(workload: str) -> Callable[[Event], bool]:
    return lambda e: isinstance(e, WorkloadPreempted) and e.workload == workload


def now() -> int:
    return int(time.time())


def test_a_submission_is_started_over_kafka(live: Live) -> None:
    cluster = "e2e-start"
    mk = setup(live, cluster)
    live.send(mk.submit("w1", "lab/a", gpus=4, min_runtime_s=60, at=int(time.time())))
    start = live.wait_event(cluster, started("w1"), what="w1 to start")
    assert start.placement[0].gpus == 4
    assert start.cause is not None  # a decision, caused by the tick (or nudge) that ran the cycle


def test_a_better_ranked_arrival_reclaims_an_unallocated_workload(live: Live) -> None:
    cluster = "e2e-reclaim"
    mk = setup(live, cluster)
    live.send(mk.submit("free", "lab/a", gpus=8, min_runtime_s=0, resumable=True, at=now()))
    lent = live.wait_event(cluster, started("free"), what="the unallocated workload to start")
    assert not lent.allocated
    live.send(mk.submit("funded", "lab/b", gpus=8, min_runtime_s=60, at=now()))
    stop = live.wait_event(cluster, preempted("free"), what="the reclaim")
    start = live.wait_event(cluster, started("funded"), what="the funded workload to start")
    assert (stop.reason, stop.by, stop.requeued) == ("reclaim_unallocated", "funded", True)
    assert start.allocated and start.at == stop.at


def test_protection_holds_until_the_minimum_runtime_then_time_slicing(live: Live) -> None:
    cluster = "e2e-protect"
    mk = setup(live, cluster, policy=TIME_SLICING)
    live.send(mk.submit("long", "lab/a", gpus=8, min_runtime_s=60, resumable=True, at=now()))
    first = live.wait_event(cluster, started("long"), what="the first workload to start")
    assert first.protected_until == first.at + 60
    live.send(mk.submit("newcomer", "lab/b", gpus=8, min_runtime_s=30, resumable=True, at=now()))
    stop = live.wait_event(cluster, preempted("long"), timeout=60, what="the time slice")
    second = live.wait_event(cluster, started("newcomer"), what="the newcomer to start")
    assert (stop.reason, stop.by, stop.requeued) == ("fair_share", "newcomer", True)
    assert second.at == stop.at >= first.protected_until
    # Protected until then: nothing preempted "long" earlier.
    assert [e for e in live.events(cluster) if preempted("long")(e)] == [stop]


def test_a_host_fault_drains_at_minimum_runtime(live: Live) -> None:
    cluster = "e2e-fault"
    mk = setup(live, cluster)
    live.send(mk.submit("job", "lab/a", gpus=8, min_runtime_s=60, resumable=True, at=now()))
    start = live.wait_event(cluster, started("job"), what="the job to start")
    live.send(mk.fault("h0", severity="degraded", reason="ecc errors", at=now()))
    stop = live.wait_event(cluster, preempted("job"), timeout=60, what="the drain")
    drained = live.wait_event(cluster, lambda e: isinstance(e, HostDrained), what="host.drained")
    assert stop.reason == "host_drain" and stop.requeued
    assert stop.at >= start.protected_until
    assert drained.host == "h0" and drained.at == stop.at


def test_garbage_and_unknown_tags_are_dead_lettered_and_scheduling_goes_on(live: Live) -> None:
    cluster = "e2e-dead"
    mk = setup(live, cluster)
    garbage = live.send(b"\x00\x01 not an event", cluster=cluster)
    unknown = live.send(b'{"type":"workload.teleported","id":"x1","at":1,"cluster":"e2e-dead"}',
                        cluster=cluster)
    live.send(mk.submit("after", "lab/a", gpus=1, min_runtime_s=60, at=now()))
    live.wait_event(cluster, started("after"), what="the valid submission to start")
    p = live.partition_of(cluster)

    def both() -> dict[int, DeadLetter] | None:
        found = {d.offset: d for d in live.dead_letters()
                 if d.partition == p and d.offset in (garbage, unknown)}
        return found if len(found) == 2 else None

    letters = wait_until(both, what="two dead letters")
    assert letters[garbage].reason == "malformed"
    assert letters[unknown].reason == "unknown_type"
    for d in letters.values():
        assert d.topic == live.inbox and d.key == cluster and d.detail
    # Neither reached the journal.
    assert not any(e.id == "x1" for e in live.events(cluster))
