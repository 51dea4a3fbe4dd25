"""The journal as a file: ``allot journal export`` keeps what counts, and the audit reads it.

One test writes a journal by hand (claims, a fenced former owner, an exact
duplicate, a group a crash cut short) and checks what the export keeps; the
other exports a journal a live worker wrote and runs ``allot audit replay``
and ``allot audit load`` on the file.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from events import Event, WorkloadStarted, encode, read_log
from events.factory import Inputs
from scheduler import Engine
from scheduler.replay import verify_file
from streams.export import export_journal
from streams.records import (
    JOURNAL,
    KIND_CLAIM,
    KIND_DECISION,
    KIND_INPUT,
    Claim,
    encode_claim,
    journal_headers,
    topic,
)
from streams.topics import ensure_topics
from tests.kafka import REPO, Live, unique_prefix

pytestmark = pytest.mark.kafka


def _groups(cluster: str) -> list[tuple[Event, list[Event]]]:
    mk = Inputs(cluster=cluster, prefix="x")
    eng = Engine(cluster)
    at = 1_800_000_000
    inputs = [mk.tick(at), mk.node("lab", managers=("admin",), at=at), mk.node("lab/a", at=at),
              mk.host("h1", at=at), mk.host("h2", at=at), mk.submit("w1", "lab/a", 8, 60, at=at),
              mk.tick(at + 1),                                      # 6: starts w1
              mk.submit("w2", "lab/a", 4, 60, at=at + 1), mk.submit("w3", "lab/a", 4, 60, at=at + 1),
              mk.tick(at + 2)]                                      # 9: starts w2 and w3
    return [(e, eng.process(e) or []) for e in inputs]


async def _write(bootstrap: str, prefix: str, records: list[tuple[str, str, bytes, int | None]]) -> None:
    p = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await p.start()
    try:
        for kind, owner, value, inbox in records:
            await p.send_and_wait(topic(JOURNAL, prefix), value, key=b"c1", partition=0,
                                  headers=journal_headers(kind, owner, inbox))
    finally:
        await p.stop()


def test_export_keeps_what_counts_and_holds_back_a_cut_group(kafka: str, tmp_path: Path) -> None:
    prefix = unique_prefix()
    asyncio.run(ensure_topics(kafka, prefix, partitions=1))
    groups = _groups("c1")

    def claim(token: str) -> tuple[str, str, bytes, None]:
        return (KIND_CLAIM, token, encode_claim(Claim(token=token, worker=token, partition=0,
                                                      at=0)), None)

    def group(i: int, owner: str, upto: int | None = None) -> list[tuple[str, str, bytes, int | None]]:
        inp, decisions = groups[i]
        out = [(KIND_INPUT, owner, encode(inp), i)]
        return out + [(KIND_DECISION, owner, encode(d), None) for d in decisions[:upto]]

    assert [len(ds) for _, ds in groups] == [0, 0, 0, 0, 0, 0, 1, 0, 0, 2]
    records = [claim("a")]
    for i in range(7):
        records += group(i, "a")
    records += [claim("b")]
    records += group(7, "a")            # the fenced former owner: ignored
    records += group(6, "b")[1:]        # an exact duplicate of group 6's decision
    for i in (7, 8):
        records += group(i, "b")
    records += group(9, "b", upto=1)    # the second decision never written
    asyncio.run(_write(kafka, prefix, records))

    out = tmp_path / "journal.jsonl"
    report = asyncio.run(export_journal(kafka, out, prefix=prefix))
    events = read_log(out)
    ids = [e.id for e in events]
    assert len(ids) == len(set(ids))
    want = [e for inp, ds in groups[:9] for e in (inp, *ds)]
    assert events == want
    assert (report.fenced, report.duplicates, report.withheld) == (1, 1, 2)
    assert verify_file(str(out)).ok

    kept = tmp_path / "all.jsonl"
    asyncio.run(export_journal(kafka, kept, prefix=prefix, complete_only=False))
    assert not verify_file(str(kept)).ok  # the cut group is reported as missing decisions


def _allot(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALLOT_")}
    return subprocess.run([sys.executable, "-m", "allot", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=180)


def test_a_live_journal_exports_replays_and_loads(kafka: str, tmp_path: Path) -> None:
    live = Live(kafka, unique_prefix()).start()
    try:
        live.start_worker(("exp",), time_scale=30.0, tick_interval_s=0.2)
        live.wait_event("exp", lambda e: type(e).__name__ == "ClockTicked")
        mk = Inputs(cluster="exp", prefix="exp-")
        now = int(time.time())
        live.send_many([mk.node("lab", managers=("admin",), at=now), mk.node("lab/a", at=now),
                        mk.node("lab/b", at=now), mk.host("h0", at=now), mk.host("h1", at=now)])
        for i in range(12):
            live.send(mk.submit(f"w{i}", "lab/a" if i % 2 else "lab/b", gpus=4,
                                min_runtime_s=30, resumable=True, at=now))
        for i in range(4):
            live.wait_event("exp", lambda e, i=i: isinstance(e, WorkloadStarted)
                            and e.workload == f"w{i}", what=f"w{i} to start")
            live.send(mk.finish(f"w{i}", at=now))
        time.sleep(2)
    finally:
        live.close()
    out = tmp_path / "live.jsonl"
    done = _allot("journal", "export", "--bootstrap", kafka, "--topic-prefix", live.prefix,
                  "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "wrote" in done.stderr
    replay = _allot("audit", "replay", str(out))
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert "identical" in replay.stdout
    db = tmp_path / "audit.duckdb"
    load = _allot("audit", "load", str(out), "--db", str(db), "--run", "live")
    assert load.returncode == 0, load.stderr
    sql = _allot("audit", "sql", "--db", str(db), "--csv",
                 "SELECT count(*) FROM events WHERE type = 'workload.started'")
    assert sql.returncode == 0, sql.stderr
    assert int(sql.stdout.splitlines()[1]) >= 4
