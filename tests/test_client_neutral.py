"""The wire contract without allot's Python: librdkafka (confluent-kafka) in, librdkafka out.

Inputs are built from the published JSON Schema alone (docs/events.schema.json:
the required fields of each type and their JSON types), produced with
confluent-kafka's librdkafka producer, key = cluster id and
``partitioner=murmur2_random`` as docs/live-clients.md tells non-Java
producers; the decisions are read back from the journal with a librdkafka
consumer, keeping records under the partition's latest claim (the
``allot-kind`` and ``allot-owner`` headers) and dropping copies by id.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.kafka import Live, unique_prefix

confluent_kafka = pytest.importorskip("confluent_kafka")
pytestmark = pytest.mark.kafka

SCHEMA = json.loads((Path(__file__).resolve().parent.parent / "docs" / "events.schema.json")
                    .read_text())
CLUSTER = "neutral-a"
JSON_TYPES = {"string": str, "integer": int, "boolean": bool, "array": list, "object": dict}


def from_schema(tag: str, **values: Any) -> dict[str, Any]:
    """An event of type ``tag`` with ``values``, checked against the schema's shape."""
    (name,) = [n for n, d in SCHEMA["$defs"].items()
               if d.get("properties", {}).get("type", {}).get("enum") == [tag]]
    d = SCHEMA["$defs"][name]
    event = {"type": tag, **values}
    missing = [f for f in d["required"] if f not in event]
    assert not missing, f"{tag}: the schema requires {missing}"
    for field, value in event.items():
        assert field in d["properties"], f"{tag} has no field {field!r}"
        spec = d["properties"][field]
        allowed = [s.get("type") for s in spec.get("anyOf", [spec])]
        if "enum" in spec:
            assert value in spec["enum"]
            continue
        ok = any((t == "null" and value is None) or
                 (t in JSON_TYPES and isinstance(value, JSON_TYPES[t])
                  and not (t == "integer" and isinstance(value, bool)))
                 for t in allowed)
        assert ok, f"{tag}.{field}={value!r} is not {allowed}"
    return event


def envelope(**kw: Any) -> dict[str, Any]:
    return {"id": f"neutral:{uuid.uuid4().hex}", "at": int(time.time()), "cluster": CLUSTER,
            "actor": "admin", "source": "librdkafka-test", **kw}


@pytest.fixture(scope="module")
def live(kafka: str) -> Iterator[Live]:
    lv = Live(kafka, unique_prefix()).start()
    lv.start_worker((CLUSTER,), time_scale=20.0, tick_interval_s=0.25)
    try:
        yield lv
    finally:
        lv.close()


def _producer(bootstrap: str, partitioner: str = "murmur2_random") -> Any:
    return confluent_kafka.Producer({"bootstrap.servers": bootstrap, "partitioner": partitioner,
                                     "acks": "all", "linger.ms": 1})


def _read_decisions(live: Live, want: set[str], timeout: float = 60) -> dict[str, dict]:
    """Read every journal partition with librdkafka until a start of each of ``want``."""
    c = confluent_kafka.Consumer({"bootstrap.servers": live.bootstrap,
                                  "group.id": f"neutral-{uuid.uuid4().hex}",
                                  "enable.auto.commit": False,
                                  "auto.offset.reset": "earliest", "fetch.wait.max.ms": 50})
    parts = [confluent_kafka.TopicPartition(live.journal_topic, p, 0)
             for p in range(live.partitions)]
    c.assign(parts)
    token: dict[int, str] = {}
    seen: set[str] = set()
    started: dict[str, dict] = {}
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and not want <= set(started):
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            h = dict(m.headers() or [])
            kind, owner = h.get("allot-kind", b"").decode(), h.get("allot-owner", b"").decode()
            if kind == "claim":
                claim = json.loads(m.value())
                if claim["token"] == owner:
                    token[m.partition()] = owner
                continue
            if token.get(m.partition()) != owner:
                continue  # written under a claim that is not the latest: ignored by every reader
            e = json.loads(m.value())
            if e["id"] in seen:
                continue
            seen.add(e["id"])
            if e["type"] == "workload.started" and e["workload"] in want:
                started[e["workload"]] = e
    finally:
        c.close()
    return started


def test_librdkafka_producer_and_consumer_speak_the_contract(live: Live) -> None:
    from events import ClockTicked

    live.wait_event(CLUSTER, lambda e: isinstance(e, ClockTicked), what="the cluster's clock")
    events = [from_schema("budget.node_defined", **envelope(path="lab", managers=["admin"])),
              from_schema("budget.node_defined", **envelope(path="lab/a")),
              from_schema("host.added", **envelope(host="h0", gpus=8)),
              from_schema("host.added", **envelope(host="h1", gpus=8))]
    work = [from_schema("workload.submitted", **envelope(
        workload=f"nw{i}", budget="lab/a", user="alice", actor="alice", gpus=4,
        min_runtime_s=60)) for i in range(4)]
    p = _producer(live.bootstrap)
    for e in events + work:
        p.produce(live.inbox, json.dumps(e).encode(), key=CLUSTER.encode())
    assert p.flush(30) == 0
    started = _read_decisions(live, {w["workload"] for w in work})
    assert set(started) == {"nw0", "nw1", "nw2", "nw3"}
    for e in started.values():
        assert sum(s["gpus"] for s in e["placement"]) == 4
        assert e["cause"] and e["id"].startswith(e["cause"] + "/")


def test_without_murmur2_random_librdkafka_puts_keys_elsewhere(kafka: str) -> None:
    """Why the docs insist: librdkafka's default partitioner is not the Java client's."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    from streams.client import partition_for
    from tests.kafka import BackgroundLoop

    name = f"{unique_prefix()}partitions"
    bg = BackgroundLoop()

    async def create() -> None:
        a = AIOKafkaAdminClient(bootstrap_servers=kafka)
        await a.start()
        try:
            await a.create_topics([NewTopic(name, 8, 1)])
        finally:
            await a.close()

    try:
        bg.run(create())
    finally:
        bg.close()
    keys = [f"cluster-{i}" for i in range(16)]
    where: dict[str, dict[str, int]] = {"murmur2_random": {}, "consistent_random": {}}
    for partitioner, got in where.items():
        p = _producer(kafka, partitioner)

        def report(err: Any, msg: Any, got: dict[str, int] = got) -> None:
            assert err is None
            got[msg.key().decode()] = msg.partition()

        for k in keys:
            p.produce(name, b"{}", key=k.encode(), on_delivery=report)
        assert p.flush(30) == 0
    assert where["murmur2_random"] == {k: partition_for(k, 8) for k in keys}
    assert where["consistent_random"] != where["murmur2_random"]
