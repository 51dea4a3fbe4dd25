"""Crash safety of the archiver: kill -9 in a loop while the journal grows; every record once.

Journal records stream into a real broker while ``allot archive`` runs as a
child process and is killed with SIGKILL again and again: at random moments
(from outside), and at the two points inside a commit where a crash is worst
(run through ``tests.archiver_faults``: the batch's files written but not its
manifest line, and the line written but the files not renamed). A last ``--once`` run then archives to
the end. Every offset of every partition must be in exactly one committed
file, with its exact bytes and headers; no temporary file may be left; and a
DuckDB glob over the directory must see each record once too.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import msgspec
import pyarrow.parquet as pq
import pytest

from archive import layout
from archive.manifest import Manifest
from streams.records import JOURNAL, journal_headers, topic
from tests.kafka import REPO, Live, unique_prefix

pytestmark = pytest.mark.kafka

SEED = 20261204
CLUSTERS = ("kc-a", "kc-b", "kc-c")
RECORDS = 12_000
KILLS = 8


@pytest.fixture
def live(kafka: str) -> Iterator[Live]:
    lv = Live(kafka, unique_prefix()).start()
    try:
        yield lv
    finally:
        lv.close()


def _value(cluster: str, n: int) -> bytes:
    # Two days of event time, so files split by day as well as by cluster.
    return msgspec.json.encode({"type": "clock.ticked", "id": f"{cluster}:{n}", "v": 1,
                                "at": 1_767_225_600 + n * 15, "cluster": cluster,
                                "actor": "ticker", "source": "test", "cause": None})


def _feed(live: Live, sent: dict[int, list[bytes]], done: threading.Event,
          stop: threading.Event) -> None:
    """Produce journal records in bursts: at least RECORDS, and on until ``stop``.

    Feeding until the kill loop ends (not a fixed count) keeps every archiver
    of the loop busy with new records, so its fault hook fires at a commit
    however slowly a loaded machine starts it.
    """
    journal = topic(JOURNAL, live.prefix)
    rng = random.Random(SEED)

    async def burst(values: list[tuple[str, bytes]]) -> None:
        futs = []
        for cluster, value in values:
            p = live.partition_of(cluster)
            futs.append((p, value, await live._producer.send(  # type: ignore[union-attr]
                journal, value, key=cluster.encode(), partition=p,
                headers=journal_headers("input", "tok", len(futs)))))
        for p, value, f in futs:
            md = await f
            sent.setdefault(p, []).append(value)
            assert md.offset == len(sent[p]) - 1

    n = 0
    while n < RECORDS or not stop.is_set():
        size = rng.randint(50, 600)
        live.bg.run(burst([(CLUSTERS[(n + i) % 3], _value(CLUSTERS[(n + i) % 3], n + i))
                           for i in range(size)]))
        n += size
        time.sleep(rng.uniform(0.0, 0.05))
    done.set()


def _archiver(live: Live, root: Path, *extra: str, kill_at: str | None = None,
              stdout: int = subprocess.DEVNULL) -> subprocess.Popen[bytes]:
    """``allot archive``, or with ``kill_at`` (WHERE:N) the archiver of tests.archiver_faults."""
    e = {**os.environ, "ALLOT_LOG_LEVEL": "warning"}
    command = ["allot", "archive"] if kill_at is None else \
        ["tests.archiver_faults", "--kill-at", kill_at]
    return subprocess.Popen(
        [sys.executable, "-m", *command, "--dir", str(root), "--bootstrap",
         live.bootstrap, "--topic-prefix", live.prefix, "--flush-s", "0.1",
         "--flush-records", "700", *extra],
        cwd=REPO, env=e, stdout=stdout, stderr=subprocess.PIPE)


def test_kill_9_in_a_loop_archives_every_record_once(live: Live, tmp_path: Path) -> None:
    rng = random.Random(SEED)
    root = tmp_path / "archive"
    sent: dict[int, list[bytes]] = {}
    done = threading.Event()
    stop = threading.Event()
    feeder = threading.Thread(target=_feed, args=(live, sent, done, stop), daemon=True)
    feeder.start()
    faults = ["before_commit", "after_commit"]
    kills = {"outside": 0, "before_commit": 0, "after_commit": 0}
    for i in range(KILLS):
        fault = faults[i % 2] if i % 3 != 2 else None
        proc = _archiver(live, root, kill_at=f"{fault}:{rng.randint(1, 4)}" if fault else None)
        try:
            proc.wait(timeout=60.0 if fault else rng.uniform(1.0, 3.0))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            kills["outside"] += 1
        else:
            assert proc.returncode == -9, proc.stderr.read().decode() if proc.stderr else ""
            assert fault is not None
            kills[fault] += 1
    stop.set()
    feeder.join(120)
    assert done.is_set()
    last = _archiver(live, root, "--once", "--json", stdout=subprocess.PIPE)
    out, err = last.communicate(timeout=120)
    assert last.returncode == 0, err.decode()
    assert json.loads(out)["records"] >= 0
    assert kills["before_commit"] >= 1 and kills["after_commit"] >= 1, kills

    # Every offset in exactly one committed file, with its bytes and headers as sent.
    m = Manifest(root)
    got: dict[int, dict[int, bytes]] = {}
    for batch, f in m.files():
        t = pq.read_table(root / f.path, columns=["partition", "offset", "value", "headers"])
        for part, off, value, headers in zip(*(t.column(c).to_pylist() for c in t.column_names),
                                             strict=True):
            assert part == batch.partition and batch.first <= off <= batch.last
            assert off not in got.setdefault(part, {}), f"offset {part}:{off} archived twice"
            got[part][off] = value
            assert [h["key"] for h in headers] == ["allot-kind", "allot-owner",
                                                  "allot-inbox-offset"]
    for p, values in sent.items():
        assert [got[p][o] for o in range(len(values))] == values
        assert m.next_offset(p) == len(values)
    assert sum(len(v) for v in sent.values()) == RECORDS or sum(
        len(v) for v in sent.values()) >= RECORDS
    assert not list(root.rglob("*" + layout.TMP_SUFFIX))
    # An engine reading the directory sees each record once (and both days).
    con = duckdb.connect()
    total, distinct, days = con.execute(
        f"SELECT count(*), count(DISTINCT (\"partition\", \"offset\")), count(DISTINCT day) "
        f"FROM read_parquet('{layout.glob(root)}', hive_partitioning = true)").fetchone()
    assert total == distinct == sum(len(v) for v in sent.values())
    assert days >= 2
