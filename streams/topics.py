"""allot's topics: create the missing ones, and check that the existing ones fit together.

Partition ``p`` of the journal (and of the snapshot topic) belongs to partition
``p`` of the inbox, so the three must have the same number of partitions; a
mismatch is a ``TopicError`` naming the counts (the worker refuses to start
rather than write a journal nobody can fold). The journal is kept forever
(``retention.ms=-1``); the snapshot topic is compacted where the broker
compacts (Tansu accepts the setting and never compacts). A broker that refuses
a topic setting gets the topic without it, and the report says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError

from events.errors import AllotError
from streams.config import kafka_client_options
from streams.records import DEADLETTER, INBOX, JOURNAL, SNAPSHOTS, topic

WEEK_MS = 7 * 24 * 3600 * 1000

# Topic settings per topic (Kafka names). The journal is the log of record.
TOPIC_CONFIGS: dict[str, dict[str, str]] = {
    INBOX: {"retention.ms": str(WEEK_MS), "cleanup.policy": "delete"},
    JOURNAL: {"retention.ms": "-1", "retention.bytes": "-1", "cleanup.policy": "delete"},
    DEADLETTER: {"retention.ms": str(4 * WEEK_MS), "cleanup.policy": "delete"},
    SNAPSHOTS: {"cleanup.policy": "compact", "retention.ms": "-1"},
}
# Topics whose partition counts must agree.
ALIGNED = (INBOX, JOURNAL, SNAPSHOTS)

ERR_TOPIC_EXISTS = 36


class TopicError(AllotError):
    """The topics cannot be created, or the existing ones do not fit together."""


class TopicReport(msgspec.Struct, kw_only=True):
    """What ``ensure_topics`` found and did."""

    created: list[str]
    existing: list[str]
    partitions: dict[str, int]
    dropped_configs: dict[str, list[str]] = {}


def names(prefix: str = "") -> dict[str, str]:
    """Contract name -> full topic name under ``prefix``."""
    return {n: topic(n, prefix) for n in (INBOX, JOURNAL, DEADLETTER, SNAPSHOTS)}


async def partition_counts(admin: AIOKafkaAdminClient, topics: list[str]) -> dict[str, int]:
    """Partitions per existing topic among ``topics``."""
    out: dict[str, int] = {}
    for t in await admin.describe_topics(topics):
        if t.get("error_code", 0) == 0 and t.get("partitions"):
            out[t["topic"]] = len(t["partitions"])
    return out


async def ensure_topics(bootstrap: str, prefix: str = "", partitions: int = 8,
                        replication_factor: int = 1, timeout_ms: int = 15000,
                        security: Mapping[str, Any] | None = None) -> TopicReport:
    """Create allot's missing topics; TopicError if inbox, journal and snapshots disagree.

    ``security``: the client's SASL options (``config.kafka_client_options``); by
    default read from the environment.
    """
    full = names(prefix)
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=timeout_ms,
                                **(kafka_client_options() if security is None else security))
    try:
        await admin.start()
    except KafkaError as exc:
        await admin.close()
        raise TopicError(f"cannot reach Kafka at {bootstrap}: {exc}") from exc
    try:
        existing = set(await admin.list_topics())
        created: list[str] = []
        dropped: dict[str, list[str]] = {}
        for name, full_name in full.items():
            if full_name in existing:
                continue
            configs = dict(TOPIC_CONFIGS[name])
            while True:
                resp = await admin.create_topics(
                    [NewTopic(full_name, partitions, replication_factor, topic_configs=configs)],
                    timeout_ms=timeout_ms)
                _, code, message = resp.topic_errors[0][:3]
                if code == 0 or code == ERR_TOPIC_EXISTS:
                    break
                refused_config = code in (40, 42) or "config" in (message or "").lower()
                if refused_config and configs:
                    # INVALID_CONFIG / INVALID_REQUEST: try without the optional settings.
                    dropped[full_name] = sorted(configs)
                    configs = {}
                    continue
                raise TopicError(f"cannot create {full_name}: error {code} {message}")
            if code == 0:
                created.append(full_name)
        counts = await partition_counts(admin, list(full.values()))
    except KafkaError as exc:
        raise TopicError(f"topic setup on {bootstrap} failed: {exc}") from exc
    finally:
        await admin.close()
    missing = [t for t in full.values() if t not in counts]
    if missing:
        raise TopicError(f"topics missing after creation: {', '.join(missing)}")
    aligned = {full[n]: counts[full[n]] for n in ALIGNED}
    if len(set(aligned.values())) != 1:
        raise TopicError("inbox, journal and snapshot topics must have the same number of "
                         "partitions (partition p of each belongs together): "
                         + ", ".join(f"{t}={n}" for t, n in aligned.items()))
    return TopicReport(created=created, existing=sorted(t for t in full.values() if t in existing),
                       partitions=counts, dropped_configs=dropped)
