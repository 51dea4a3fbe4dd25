"""docker-compose.yml, the production shape, checked without a Docker engine.

The file is parsed and its structure asserted: the worker service exists and is
configured with real settings, nothing binds every interface, every published
port is on the host's loopback, and the topics are created the way the worker
needs them (the journal kept forever, the snapshots compacted, inbox, journal
and snapshots with the same partition count). docs/live.md also records a
``docker-compose config`` run (the schema check of Compose itself).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from streams import config
from streams.records import DEADLETTER, INBOX, JOURNAL, SNAPSHOTS
from streams.worker import LIVENESS

COMPOSE = Path(__file__).resolve().parent.parent / "docker-compose.yml"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def _init_script(compose: dict[str, Any]) -> str:
    return "\n".join(compose["services"]["kafka-init"]["command"])


def test_nothing_binds_every_interface() -> None:
    assert "0.0.0.0" not in COMPOSE.read_text()
    assert "[::]" not in COMPOSE.read_text()


def test_every_published_port_is_on_loopback(compose: dict[str, Any]) -> None:
    for name, svc in compose["services"].items():
        for port in svc.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), (name, port)


def test_the_worker_service_runs_allot_worker_with_real_settings(compose: dict[str, Any]) -> None:
    for name in ("worker", "worker-2"):
        svc = compose["services"][name]
        assert svc["command"] == ["worker"]
        env = svc["environment"]
        assert env["KAFKA_BOOTSTRAP_SERVERS"] == "kafka:19092"
        for key in env:
            if key.startswith(config.ENV_PREFIX):
                assert key[len(config.ENV_PREFIX):].lower() in config.FIELDS, key
        # Settings the worker would refuse are caught here too.
        settings = config.load(environ={k: str(v) for k, v in env.items()})
        assert settings.metrics_host == svc["hostname"]
        assert settings.instance_id == name
        assert "allot_tick_key" in svc["secrets"]
    assert compose["services"]["worker-2"]["profiles"] == ["ha"]


def test_topics_are_created_as_the_worker_needs(compose: dict[str, Any]) -> None:
    script = _init_script(compose)
    lines = {m.group(1): m.group(2) for m in re.finditer(r"create (\S+) \"([^\"]*)\"", script)}
    assert set(lines) == {INBOX, JOURNAL, DEADLETTER, SNAPSHOTS, LIVENESS}
    assert "retention.ms=-1" in lines[JOURNAL] and "cleanup.policy=delete" in lines[JOURNAL]
    assert "cleanup.policy=compact" in lines[SNAPSHOTS]
    # One create() for all, its partitions a default every topic but the heartbeats takes:
    # partition p of inbox, journal and snapshots belongs together.
    defaults = set(re.findall(r"--partitions \"\$\$\{3:-(\d+)\}\"", script))
    workers_partitions = compose["services"]["worker"]["environment"]["ALLOT_PARTITIONS"]
    assert defaults == {str(workers_partitions)}
    counts = {m.group(1): m.group(2) for m in
              re.finditer(r"create (\S+) \"[^\"]*\"(?: (\d+))?\n", script)}
    assert counts[LIVENESS] == "1"  # the worker reads one partition of heartbeats
    assert all(counts[t] is None for t in (INBOX, JOURNAL, DEADLETTER, SNAPSHOTS))


def test_kafka_takes_snapshot_chunks(compose: dict[str, Any]) -> None:
    env = compose["services"]["kafka"]["environment"]
    limit = int(env["KAFKA_MESSAGE_MAX_BYTES"])
    assert limit > config.WorkerSettings().snapshot_chunk_bytes + 64 * 1024
