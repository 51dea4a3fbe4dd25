"""The archive against a real broker: archive, archive again, restore into a fresh broker, fold.

A worker schedules a small cluster; the journal is archived (twice: the second
run must add nothing), DuckDB reads the layout straight from the directory,
the audit loads the archive and finds the same events as the journal export,
and a fresh broker restored from the archive holds the same journal, byte for
byte at the same offsets, and a worker started on it comes back with the same
state and then schedules new inputs.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
from aiokafka import AIOKafkaConsumer

from archive import layout
from archive.manifest import Manifest
from archive.restore import restore
from archive.writer import archive_once
from audit.load import load
from events import WorkloadStarted
from events.factory import Inputs
from streams.broker import TansuBroker
from streams.export import export_journal
from streams.processor import PartitionFold
from streams.records import INBOX, JOURNAL, parse_journal, topic
from tests.kafka import BackgroundLoop, Live, unique_prefix, wait_until

pytestmark = pytest.mark.kafka

CLUSTER = "arch-a"


@pytest.fixture
def live(kafka: str) -> Iterator[Live]:
    lv = Live(kafka, unique_prefix()).start()
    try:
        yield lv
    finally:
        lv.close()


def _setup(mk: Inputs, at: int) -> list:
    out = [mk.node("lab", managers=("admin",), at=at), mk.node("lab/a", at=at),
           mk.node("lab/b", at=at)]
    out += [mk.host(f"h{i}", gpus=8, at=at) for i in range(2)]
    out += [mk.submit(f"w{i}", "lab/a" if i % 2 else "lab/b", gpus=4, min_runtime_s=0, at=at)
            for i in range(6)]
    return out


async def _raw(bootstrap: str, prefix: str, name: str, partitions: int) -> dict[int, list[tuple]]:
    """Every record of topic ``name``: (offset, key, value, headers, timestamp) per partition."""
    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                         auto_offset_reset="earliest", fetch_max_wait_ms=100)
    await c.start()
    out: dict[int, list[tuple]] = {}
    try:
        from streams.journal import end_offset, read_to_end

        for p in range(partitions):
            out[p] = []
            if await end_offset(c, topic(name, prefix), p) == 0:
                continue
            async for batch in read_to_end(c, topic(name, prefix), p):
                out[p] += [(m.offset, m.key, m.value, list(m.headers or ()), m.timestamp)
                           for m in batch]
    finally:
        await c.stop()
    return out


def _fold(records: list[tuple], p: int) -> str:
    """The fingerprint of CLUSTER after folding raw journal records the way a worker does."""
    fold = PartitionFold(p)
    for offset, _key, value, headers, _ts in records:
        fold.add(parse_journal(p, offset, value, headers))
    fold.finish()
    return fold.engines[CLUSTER].state.fingerprint()


def test_archive_restore_and_fold(live: Live, tmp_path: Path) -> None:
    mk = Inputs(cluster=CLUSTER, prefix="a-")
    worker = live.start_worker((CLUSTER,), time_scale=60.0, tick_interval_s=0.2)
    live.send_many(_setup(mk, int(time.time())))
    wait_until(lambda: sum(isinstance(e, WorkloadStarted) for e in live.events(CLUSTER)) >= 4,
               30, what="four starts")
    live.stop_worker(worker)
    p = live.partition_of(CLUSTER)
    # The state the worker stopped with: the fold of the whole journal it wrote.
    state_before = worker.owned[p].engines[CLUSTER].state.fingerprint()
    root = tmp_path / "archive"
    stats = live.bg.run(archive_once(live.bootstrap, root, live.prefix), timeout=60)
    total = sum(len(live.raw(p)) for p in range(live.partitions))
    assert stats.records == total > 0
    again = live.bg.run(archive_once(live.bootstrap, root, live.prefix), timeout=60)
    assert again.records == 0                      # archived twice: written once
    m = Manifest(root)
    assert m.records() == total
    for p in range(live.partitions):
        assert m.next_offset(p) == len(live.raw(p))

    # Any engine reads the layout from the directory: cluster and day come from the path.
    con = duckdb.connect()
    rows = con.execute(
        f"SELECT cluster, count(*), count(DISTINCT (\"partition\", \"offset\")) FROM "
        f"read_parquet('{layout.glob(root)}', hive_partitioning = true) GROUP BY cluster"
    ).fetchall()
    data = sum(1 for p in range(live.partitions) for r in live.raw(p) if r.kind != "claim")
    assert rows == [(CLUSTER, data, data)]

    # The audit loads the archive through the one decoder: the same events as the export.
    export = tmp_path / "export" / "journal.jsonl"
    live.bg.run(export_journal(live.bootstrap, export, live.prefix))
    db = duckdb.connect(str(tmp_path / "audit.duckdb"))
    from_archive = load(db, root, "archived")
    from_export = load(db, export, "exported")
    assert from_archive.events == from_export.events > 0
    q = "SELECT type, id, \"at\" FROM events WHERE run = ? ORDER BY seq"
    assert db.execute(q, ["archived"]).fetchall() == db.execute(q, ["exported"]).fetchall()
    db.close()

    # A fresh broker restored from the archive holds the same journal at the same offsets.
    with TansuBroker() as fresh:
        bg = BackgroundLoop()
        try:
            from streams.topics import ensure_topics

            bg.run(ensure_topics(fresh.bootstrap, live.prefix, live.partitions))
            report = bg.run(restore(fresh.bootstrap, root, live.prefix), timeout=60)
            assert report.records == total
            old = live.bg.run(_raw(live.bootstrap, live.prefix, JOURNAL, live.partitions))
            new = bg.run(_raw(fresh.bootstrap, live.prefix, JOURNAL, live.partitions))
            assert new == old
            inbox = bg.run(_raw(fresh.bootstrap, live.prefix, INBOX, live.partitions))
            assert len(inbox[p]) == max(r.inbox_offset or 0 for r in live.raw(p)) + 1
            # A restore into a journal that holds records leaves it alone.
            assert bg.run(restore(fresh.bootstrap, root, live.prefix)).kept == \
                sorted(m.partitions())

            relive = Live(fresh.bootstrap, live.prefix).start()
            try:
                # The restored journal folds to the state the old worker stopped with.
                assert _fold(new[p], p) == state_before
                w2 = relive.start_worker((CLUSTER,), time_scale=60.0, tick_interval_s=0.2)
                # Its claim comes right after the restored records: nothing was renumbered.
                assert relive.claims(p) and relive.raw(p)[len(new[p])].kind == "claim"
                # It goes on scheduling: a new submission is taken (not skipped as an old offset).
                relive.send(mk.submit("late", "lab/a", gpus=1, min_runtime_s=0,
                                      at=int(time.time())))
                relive.wait_event(CLUSTER, lambda e: getattr(e, "workload", None) == "late",
                                  what="the late submission in the journal")
                relive.stop_worker(w2)
                final = bg.run(_raw(fresh.bootstrap, live.prefix, JOURNAL, live.partitions))
                assert _fold(final[p], p) == w2.owned[p].engines[CLUSTER].state.fingerprint()
            finally:
                relive.close()
        finally:
            bg.close()
