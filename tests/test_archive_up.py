"""``allot up`` keeps its history: define, submit, run, stop, start, and it is all there.

The embedded broker is memory-only; the stack archives its journal and
restores it on the next start, before the worker starts. The test defines a
budget tree and hosts, submits more work than fits (some runs, some waits),
stops the stack (Ctrl-C), starts it again on the same archive, and checks:
the restarted worker folded the first life's journal (its state at a journal
offset equals an offline fold of the archive up to that offset, and that
offset lies past the first life's records), the queue is the one the first
life left (the same running and waiting workloads), and the audit of the
archive holds every event of the first life, unchanged.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from archive.manifest import Manifest
from audit.load import load
from events import WorkloadStarted
from events.factory import Inputs
from streams.broker import free_port
from streams.processor import PartitionFold
from streams.records import JournalRecord
from streams.worker import partition_for
from tests.kafka import REPO, Live, get_state, wait_until

pytestmark = pytest.mark.kafka

CLUSTER = "up-keep"


def _env(port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("ALLOT_") and k != "KAFKA_BOOTSTRAP_SERVERS"}
    env.update(ALLOT_CORE="pure", ALLOT_METRICS_PORT=str(port), ALLOT_PARTITIONS="2")
    return env


def _up(tmp: Path, port: int) -> tuple[subprocess.Popen[str], str, list[str]]:
    proc = subprocess.Popen([sys.executable, "-m", "allot", "up", "--log-dir", str(tmp / "logs"),
                             "--cluster", CLUSTER, "--no-executor", "--time-scale", "1",
                             "--tick-interval-s", "0.5",
                             # The test publishes unsigned inputs straight to the inbox.
                             "--insecure-dev"],
                            cwd=REPO, env=_env(port), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    lines: list[str] = []
    bootstrap = ""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if m := re.search(r"broker (127\.0\.0\.1:\d+)", line):
            bootstrap = m.group(1)
        if "Ctrl-C stops everything" in line:
            return proc, bootstrap, lines
    proc.kill()
    raise AssertionError("allot up did not come up:\n" + "".join(lines))


def _stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=90)
    assert proc.returncode == 0, out
    return out


def _rows(root: Path, p: int) -> list[JournalRecord]:
    m = Manifest(root)
    t = pa.concat_tables([pq.read_table(root / f.path, columns=["offset", "kind", "owner",
                                                                "value", "inbox_offset"])
                          for _, f in m.files(p)]).sort_by("offset")
    return [JournalRecord(partition=p, offset=o, kind=k, owner=w, value=v, inbox_offset=i)
            for o, k, w, v, i in zip(*(t.column(c).to_pylist() for c in t.column_names),
                                     strict=True)]


def _fold(records: list[JournalRecord], p: int, upto: int) -> tuple[str, dict]:
    fold = PartitionFold(p)
    for r in records:
        if r.offset <= upto:
            fold.add(r)
    fold.finish()
    e = fold.engines[CLUSTER]
    wl = e.state.workloads
    return e.state.fingerprint(), {"running": sorted(wl.running),
                                   "pending": sorted(item[0][3] for q in wl.pending.values() for item in q)}


def _ready(port: int, p: int, past: int) -> dict | None:
    try:
        st = get_state(port)
    except OSError:
        return None
    ps = st.get(str(p))
    return ps if ps and ps["journal_offset"] > past else None


def test_stop_and_start_keep_state_queue_and_audit(tmp_path: Path) -> None:
    port = free_port()
    root = tmp_path / "logs" / "archive"
    p = partition_for(CLUSTER, 2)
    proc, bootstrap, _ = _up(tmp_path, port)
    try:
        wait_until(lambda: _ready(port, p, 0), 60, what="the worker's first tick")
        live = Live(bootstrap, "", partitions=2).start()
        try:
            mk = Inputs(cluster=CLUSTER, prefix="k-")
            at = int(time.time())
            live.send_many([mk.node("lab", managers=("admin",), at=at),
                            mk.node("lab/a", at=at), mk.node("lab/b", at=at),
                            mk.host("h0", gpus=8, at=at)]
                           + [mk.submit(f"w{i}", "lab/a" if i % 2 else "lab/b", gpus=4,
                                        min_runtime_s=3600, at=at) for i in range(5)])
            wait_until(lambda: sum(isinstance(e, WorkloadStarted)
                                   for e in live.events(CLUSTER)) >= 2, 30, what="two starts")
        finally:
            live.close()
    except BaseException:
        proc.kill()
        raise
    out = _stop(proc)
    assert "archived in" in out
    first = _rows(root, p)
    assert first, "nothing archived"
    fp_stop, queue_stop = _fold(first, p, first[-1].offset)
    assert len(queue_stop["running"]) == 2 and len(queue_stop["pending"]) == 3, queue_stop
    db = duckdb.connect(str(tmp_path / "a.duckdb"))
    before = load(db, root, "first").events
    first_events = db.execute("SELECT type, id, \"at\" FROM events WHERE run = 'first' "
                              "ORDER BY seq").fetchall()

    # Start again on the same archive: the journal comes back before the worker starts.
    proc, _bootstrap, lines = _up(tmp_path, port)
    try:
        assert any("restored" in line for line in lines), lines
        ps = wait_until(lambda: _ready(port, p, first[-1].offset), 60,
                        what="the restarted worker to claim past the restored journal")
    except BaseException:
        proc.kill()
        raise
    _stop(proc)
    records = _rows(root, p)
    # The first life's records are archived once, unchanged, and the second life follows.
    assert [(r.offset, r.value) for r in records[:len(first)]] == \
        [(r.offset, r.value) for r in first]
    claim = records[len(first)]
    assert claim.kind == "claim" and claim.offset == first[-1].offset + 1
    # The restarted worker's state is the fold of the journal it found (and what followed).
    fp, _ = _fold(records, p, ps["journal_offset"])
    assert ps["clusters"][CLUSTER]["fingerprint"] == fp
    # Right at its claim it held exactly the state the first life stopped with: the queue too.
    assert _fold(records, p, claim.offset) == (fp_stop, queue_stop)
    # The audit of the archive still holds every event of the first life, in order.
    load(db, root, "second")
    second_events = db.execute("SELECT type, id, \"at\" FROM events WHERE run = 'second' "
                               "ORDER BY seq").fetchall()
    assert len(second_events) >= before
    assert set(first_events) <= set(second_events)
    db.close()
