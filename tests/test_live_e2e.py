"""End to end over Kafka: inputs on the inbox, decisions on the journal, one in-process worker.

One worker schedules several clusters for the whole module (each test uses its
own cluster, so they cannot see each other's work); time runs 20x faster than
the wall clock so minimum runtimes of a minute pass in seconds.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from events import ClockTicked, Event, WorkloadStarted
from events.factory import Inputs
from tests.kafka import Live, unique_prefix

pytestmark = pytest.mark.kafka

CLUSTERS = ("e2e-start",)


@pytest.fixture(scope="module")
def live(kafka: str) -> Iterator[Live]:
    lv = Live(kafka, unique_prefix()).start()
    lv.start_worker(CLUSTERS, time_scale=20.0, tick_interval_s=0.25)
    try:
        yield lv
    finally:
        lv.close()


def setup(live: Live, cluster: str, hosts: int = 1, leaves: tuple[str, ...] = ("a", "b")) -> Inputs:
    """Wait for the cluster's clock, then define a budget tree and hosts; return the factory."""
    live.wait_event(cluster, lambda e: isinstance(e, ClockTicked), what=f"{cluster}'s first tick")
    mk = Inputs(cluster=cluster, prefix=f"{cluster}-")
    now = int(time.time())
    events: list[Event] = [mk.node("lab", managers=("admin",), at=now)]
    events += [mk.node(f"lab/{leaf}", at=now) for leaf in leaves]
    events += [mk.host(f"h{i}", gpus=8, at=now) for i in range(hosts)]
    live.send_many(events)
    return mk


def started(workload: str) -> callable:
    return lambda e: isinstance(e, WorkloadStarted) and e.workload == workload


def test_a_submission_is_started_over_kafka(live: Live) -> None:
    cluster = "e2e-start"
    mk = setup(live, cluster)
    live.send(mk.submit("w1", "lab/a", gpus=4, min_runtime_s=60, at=int(time.time())))
    start = live.wait_event(cluster, started("w1"), what="w1 to start")
    assert start.placement[0].gpus == 4
    assert start.cause is not None  # a decision, caused by the tick (or nudge) that ran the cycle
