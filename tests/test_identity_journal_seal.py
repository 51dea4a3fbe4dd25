"""Forged journal records over the real broker: a restarted worker refuses what no worker sealed.

The embedded broker has no ACLs, and the owner's claim token is in its claim
record, so anyone can append a record the fence admits: a decision nobody
derived, an input whose inbox-offset header points far ahead. Every record a
worker writes carries its seal (``identity.journal_seal``); the fold of a
restarted worker refuses the rest before the fence, so the forged decision
changes no state and the forged offset does not move the inbox position.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import duckdb
import pytest

from archive.writer import archive_once
from audit.errors import LogLoadError
from audit.load import load
from events import ClockTicked, Slot, WorkloadStarted, WorkloadSubmitted, encode
from events.factory import Inputs
from identity import keys
from identity.audit_verify import verify_archive, verify_journal
from identity.journal_seal import (
    CHUNK,
    HEADER_SEAL,
    SealCheck,
    SealGate,
    reader_check,
    seal,
    seal_records,
    trusted_keys,
    worker_public_key,
)
from streams.client import Client
from streams.export import export_journal
from streams.processor import PartitionFold
from streams.records import (
    JOURNAL,
    KIND_CLAIM,
    KIND_DECISION,
    KIND_INPUT,
    Claim,
    JournalRecord,
    encode_claim,
    journal_headers,
    topic,
)
from streams.signing import Keyring
from streams.worker import Worker
from tests.kafka import TICK_KEY, Live, unique_prefix, wait_until

C = "seal-a"


def _w1_running(live: Live, prefix: str, **kw: Any) -> tuple[Worker, Inputs, int]:
    """A worker, a budget, one 8-GPU host and w1 running on all of it."""
    worker = live.start_worker((C,), time_scale=1.0, tick_interval_s=0.25, **kw)
    live.wait_event(C, lambda e: isinstance(e, ClockTicked), what="the first tick")
    mk = Inputs(cluster=C, prefix=prefix)
    at = int(time.time())
    live.send_many([mk.node("lab", managers=("admin",), at=at), mk.node("lab/a", at=at),
                    mk.host("h0", gpus=8, at=at)])
    live.send(mk.submit("w1", "lab/a", gpus=8, min_runtime_s=3600, at=at))
    live.wait_event(C, lambda e: isinstance(e, WorkloadStarted), what="w1 to start")
    return worker, mk, at


@pytest.mark.kafka
def test_a_restarted_worker_and_every_reader_refuse_forged_journal_records(
        kafka: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    live = Live(kafka, unique_prefix()).start()
    try:
        worker, mk, at = _w1_running(live, "s-")
        p = live.partition_of(C)
        token = live.claims(p)[-1].token  # readable by anyone: it is in the claim record
        ghost = WorkloadSubmitted(id="evil-1", at=at, cluster=C, actor="x", source="x",
                                  workload="ghost", budget="lab/a", user="x", gpus=8,
                                  min_runtime_s=3600)
        started = WorkloadStarted(id="evil-1/0", at=at, cluster=C, actor="allot.scheduler",
                                  source="allot.scheduler", cause="evil-1", workload="ghost",
                                  placement=(Slot(host="h0", gpus=8),), allocated=True,
                                  protected_until=at + 3600)
        far = 10_000
        # A real worker seal, lifted from the last record and put on the forged decision.
        lifted = next(r.seal for r in reversed(live.raw(p)) if r.seal is not None)
        assert lifted is not None and lifted.startswith(b"2;")
        forged = [(encode(ghost), journal_headers(KIND_INPUT, token, far)),
                  (encode(started), journal_headers(KIND_DECISION, token)),
                  (encode(started), [*journal_headers(KIND_DECISION, token),
                                     (HEADER_SEAL, b"00" * 64)]),
                  (encode(started), [*journal_headers(KIND_DECISION, token),
                                     (HEADER_SEAL, lifted)])]

        async def write() -> None:
            for value, headers in forged:
                await live._producer.send_and_wait(  # type: ignore[union-attr]
                    topic(JOURNAL, live.prefix), value, key=C.encode(), partition=p,
                    headers=headers)
        live.bg.run(write())
        live.stop_worker(worker)
        worker = live.start_worker((C,), time_scale=1.0, tick_interval_s=0.25)
        # The forged start changed nothing: only w1 holds h0's GPUs.
        engine = wait_until(lambda: worker.engines().get(C), 30, what="the engine")
        assert "ghost" not in engine.state.workloads.all
        assert engine.state.cluster_state.hosts["h0"].free == 0
        assert set(engine.state.cluster_state.hosts["h0"].workloads) == {"w1"}
        # The forged offset did not move the inbox position: the next records are taken.
        live.send(mk.submit("w2", "lab/a", gpus=1, min_runtime_s=0, at=int(time.time())))
        live.wait_event(C, lambda e: isinstance(e, WorkloadSubmitted) and e.workload == "w2",
                        what="w2 journaled after the restart")
        live.stop_worker(worker)
        _readers_refuse_the_forgeries(live, tmp_path, monkeypatch, len(forged))
    finally:
        live.close()


def _readers_refuse_the_forgeries(live: Live, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  n: int) -> None:
    """The export, ``allot audit verify`` (live and archive) and ``allot audit load`` refuse them."""
    ring = tmp_path / "keyring.toml"
    pub = keys.public_hex(worker_public_key(TICK_KEY.encode()))
    ring.write_text(f'[keys]\n"allot.ticker" = "{pub}"\n')
    # The export: public keys only (no secret), the forged records left out and counted.
    out = tmp_path / "journal.jsonl"
    report = live.bg.run(export_journal(live.bootstrap, out, live.prefix,
                                        seal_check=reader_check(str(ring), key_dir=str(tmp_path))))
    assert report.forged == n and report.sealed > 0 and report.legacy == report.unsealed == 0
    assert b"ghost" not in out.read_bytes() and b"w2" in out.read_bytes()
    # The same from the command line, the workers' key from the keyring setting: loud.
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALLOT_")}
    cli = subprocess.run([sys.executable, "-m", "allot", "journal", "export", "--bootstrap",
                          live.bootstrap, "--topic-prefix", live.prefix, "--out",
                          str(tmp_path / "cli.jsonl")],
                         env={**env, "ALLOT_KEYRING_FILE": str(ring),
                              "ALLOT_KEY_DIR": str(tmp_path / "no-keys")},
                         capture_output=True, text=True, timeout=180)
    assert cli.returncode == 0, cli.stderr
    assert f"REFUSED {n} journal record(s) no worker signed" in cli.stderr, cli.stderr
    # A client's journal tail (what the executors act on) given the same check.
    async def tail() -> tuple[list[str], int]:
        async with Client(live.bootstrap, live.prefix,
                          seal_check=SealCheck([worker_public_key(TICK_KEY.encode())])) as c:
            t = await c.tail(C, start="begin")
            seen: list[str] = []
            try:
                while not t.caught_up or not seen:
                    seen += [getattr(i.event, "workload", "") for i in await t.poll(200)]
            finally:
                await t.stop()
            return seen, t.forged
    seen, refused = live.bg.run(tail())
    assert "ghost" not in seen and "w2" in seen and refused == n
    # allot audit verify, live: the same count, and not verified.
    keyring = Keyring.from_file(ring)
    found = live.bg.run(verify_journal(live.bootstrap, keyring, live.prefix))
    assert found.forged == n and not found.ok and found.failed == 0
    assert all("forged" in line for line in found.failures)
    # The archive of the same journal: verify --archive says so (exit 1), and the load refuses.
    root = tmp_path / "archive"
    live.bg.run(archive_once(live.bootstrap, root, live.prefix), timeout=60)
    assert verify_archive(root, keyring).forged == n
    run = subprocess.run([sys.executable, "-m", "allot", "audit", "verify", "--archive",
                          str(root), "--keyring", str(ring), "--json"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 1, run.stderr
    assert json.loads(run.stdout)["forged"] == n
    monkeypatch.setenv("ALLOT_KEYRING", str(ring))
    with pytest.raises(LogLoadError, match=f"{n} of .* no valid worker seal"):
        load(duckdb.connect(str(tmp_path / "a.duckdb")), root, "archived")


def _rec(offset: int, kind: str, owner: str, value: bytes, inbox: int | None = None,
         seal_hex: bytes | None = None) -> JournalRecord:
    return JournalRecord(partition=0, offset=offset, kind=kind, owner=owner, value=value,
                         inbox_offset=inbox, seal=seal_hex)


def _sealed_recs(key: bytes, records: list[tuple[int, str, str, bytes, int | None]]
                 ) -> list[JournalRecord]:
    """``records`` (offset, kind, owner, value, inbox) sealed together, as a worker writes them."""
    seals = seal_records(key, 0, [(k, o, i, v) for _, k, o, v, i in records])
    return [_rec(off, k, o, v, i, s[1]) for (off, k, o, v, i), s in zip(records, seals, strict=True)]


def test_the_fold_refuses_forgeries_before_the_fence() -> None:
    key = TICK_KEY.encode()
    check = SealCheck([worker_public_key(key)])   # public keys only: what any reader holds
    claim = encode_claim(Claim(token="t1", worker="w", partition=0, at=0))
    mk = Inputs(cluster="c", prefix="e")
    node = encode(mk.node("lab", managers=("admin",)))
    fold = PartitionFold(0, seal_check=check)
    for r in _sealed_recs(key, [(0, KIND_CLAIM, "t1", claim, None),
                                (1, KIND_INPUT, "t1", node, 0)]):
        fold.add(r)
    # A forged claim with a new token, then records under it: none of them counts.
    fold.add(_rec(2, KIND_CLAIM, "evil", encode_claim(Claim(token="evil", worker="x",
                                                            partition=0, at=0))))
    fold.add(_rec(3, KIND_INPUT, "evil", encode(mk.node("lab/x")), inbox=99_999))
    # A record sealed by another key, and a real seal moved onto other bytes.
    other = seal_records(b"another key", 0, [(KIND_INPUT, "t1", 5, node)])[0][1]
    fold.add(_rec(4, KIND_INPUT, "t1", node, inbox=5, seal_hex=other))
    real = seal_records(key, 0, [(KIND_INPUT, "t1", 6, node)])[0][1]
    fold.add(_rec(5, KIND_INPUT, "t1", encode(mk.node("lab/y")), inbox=6, seal_hex=real))
    # A v1 (HMAC) seal made up by whoever wrote it: no secret here to check it, refused.
    fold.add(_rec(6, KIND_INPUT, "t1", encode(mk.node("lab/z")), inbox=7,
                  seal_hex=seal(b"guess", 0, KIND_INPUT, "t1", 7, node)[1]))
    fold.finish(recover=False)
    assert fold.stats.forged == 5 and fold.fence.token == "t1"
    assert fold.last_inbox_offset == 0
    assert set(fold.engines["c"].state.budget.nodes) == {"lab"}
    # A journal from before seals still folds (nothing sealed yet, nothing refused).
    legacy = PartitionFold(0, seal_check=check)
    legacy.add(_rec(0, KIND_CLAIM, "t1", claim))
    legacy.add(_rec(1, KIND_INPUT, "t1", node, inbox=0))
    legacy.finish(recover=False)
    assert legacy.stats.forged == 0 and "lab" in legacy.engines["c"].state.budget.nodes


def test_a_chunk_is_signed_once_and_each_record_verifies_alone() -> None:
    key = TICK_KEY.encode()
    values = [encode(Inputs(cluster="c", prefix="m").node(f"lab{i}")) for i in range(CHUNK + 5)]
    recs = _sealed_recs(key, [(i, KIND_INPUT, "t", v, i) for i, v in enumerate(values)])
    sigs = {r.seal.split(b";")[2] for r in recs if r.seal}
    assert len(sigs) == 2   # CHUNK records under one signature, the 5 left under another
    check = SealCheck([worker_public_key(key)])
    # Any record checks alone (a reader starting mid-chunk, after a snapshot).
    for r in reversed(recs):
        assert check(0, r.kind, r.owner, r.inbox_offset, r.value, r.seal)
    r = recs[7]
    assert not check(0, r.kind, r.owner, (r.inbox_offset or 0) + 1, r.value, r.seal)
    assert not check(1, r.kind, r.owner, r.inbox_offset, r.value, r.seal)
    assert not check(0, KIND_DECISION, r.owner, r.inbox_offset, r.value, r.seal)
    head, kid, sig, _idx, path = (r.seal or b"").split(b";")
    moved = b";".join([head, kid, sig, b"8", path])    # another index on the same path
    assert not check(0, r.kind, r.owner, r.inbox_offset, r.value, moved)
    # Another worker group's key, or none: nothing verifies.
    assert not SealCheck([keys.public_of(b"other")])(0, r.kind, r.owner, r.inbox_offset,
                                                      r.value, r.seal)
    assert not SealCheck()(0, r.kind, r.owner, r.inbox_offset, r.value, r.seal)


def test_a_reader_counts_legacy_seals_and_refuses_them_after_public_ones() -> None:
    key = TICK_KEY.encode()
    node = encode(Inputs(cluster="c", prefix="g").node("lab"))
    v1 = seal(key, 0, KIND_INPUT, "t", 0, node)[1]
    v2 = seal_records(key, 0, [(KIND_INPUT, "t", 1, node)])[0][1]
    gate = SealGate(SealCheck([worker_public_key(key)]))
    assert gate.admit(0, KIND_INPUT, "t", None, node, None)        # before any seal
    assert gate.admit(0, KIND_INPUT, "t", 0, node, v1)             # old journal: legacy
    assert gate.admit(0, KIND_INPUT, "t", 1, node, v2)
    assert not gate.admit(0, KIND_INPUT, "t", 0, node, v1)         # v1 after v2: refused
    assert not gate.admit(0, KIND_INPUT, "t", 2, node, None)       # unsealed after sealed
    assert (gate.unsealed_before, gate.legacy, gate.verified, gate.forged) == (1, 1, 1, 2)
    # A worker (holding the secret) checks the v1 seal for real.
    assert SealCheck(secret=key)(0, KIND_INPUT, "t", 0, node, v1)
    assert not SealCheck(secret=b"other")(0, KIND_INPUT, "t", 0, node, v1)


def test_a_rotated_key_keeps_old_records_valid_when_kept_as_ticker_at_label() -> None:
    old, new = b"old tick key", b"new tick key"
    node = encode(Inputs(cluster="c", prefix="r").node("lab"))
    by_old = seal_records(old, 0, [(KIND_INPUT, "t", 0, node)])[0][1]
    by_new = seal_records(new, 0, [(KIND_INPUT, "t", 1, node)])[0][1]
    ring = Keyring().with_key("allot.ticker", keys.public_of(new))
    only_new = SealCheck(trusted_keys(ring))
    assert only_new(0, KIND_INPUT, "t", 1, node, by_new)
    assert not only_new(0, KIND_INPUT, "t", 0, node, by_old)
    both = SealCheck(trusted_keys(ring.with_key("allot.ticker@2026-12", keys.public_of(old))
                                  .with_key("someone.else", keys.public_of(b"x"))))
    assert both(0, KIND_INPUT, "t", 0, node, by_old) and both(0, KIND_INPUT, "t", 1, node, by_new)
    assert len(both.trusted) == 2   # other principals' keys never seal the journal


@pytest.mark.kafka
def test_rotating_the_workers_key_keeps_the_journal_readable(kafka: str, tmp_path: Path) -> None:
    """A new ``tick_key``, the old public key kept as ``allot.ticker@old``: nothing is lost."""
    old_key, new_key = "rotation-old-tick-key", "rotation-new-tick-key"
    old_pub = keys.public_hex(worker_public_key(old_key.encode()))
    new_pub = keys.public_hex(worker_public_key(new_key.encode()))
    ring = tmp_path / "workers.toml"
    ring.write_text(f'[keys]\n"allot.ticker@old" = "{old_pub}"\n')
    live = Live(kafka, unique_prefix()).start()
    try:
        worker, mk, _ = _w1_running(live, "r-", tick_key=old_key)
        live.stop_worker(worker)
        worker = live.start_worker((C,), time_scale=1.0, tick_interval_s=0.25, tick_key=new_key,
                                   keyring_file=str(ring))
        engine = wait_until(lambda: worker.engines().get(C), 30, what="the engine")
        assert set(engine.state.cluster_state.hosts["h0"].workloads) == {"w1"}
        live.send(mk.submit("w2", "lab/a", gpus=1, min_runtime_s=0, at=int(time.time())))
        live.wait_event(C, lambda e: isinstance(e, WorkloadSubmitted) and e.workload == "w2",
                        what="w2 journaled after the rotation")
        p = live.partition_of(C)
        kids = {(r.seal or b"").split(b";")[1] for r in live.raw(p)}
        assert kids == {keys.key_id(worker_public_key(k.encode())).encode()
                        for k in (old_key, new_key)}
        live.stop_worker(worker)
        # The auditor: both keys verify everything (the old ticks too); the new key alone
        # cannot vouch for what the old one sealed.
        both = Keyring.from_file(ring).with_key("allot.ticker", keys.public_from_hex(new_pub))
        report = live.bg.run(verify_journal(live.bootstrap, both, live.prefix))
        assert report.ok and report.sealed == report.records, report
        only_new = Keyring().with_key("allot.ticker", keys.public_from_hex(new_pub))
        partial = live.bg.run(verify_journal(live.bootstrap, only_new, live.prefix))
        assert partial.forged > 0 and not partial.ok
    finally:
        live.close()


def test_a_reader_finds_the_workers_key_where_allot_up_keeps_it(tmp_path: Path) -> None:
    from identity.local import Keychain

    assert reader_check(key_dir=str(tmp_path / "none")) is None   # no key anywhere: unchecked
    secret = Keychain(tmp_path).ensure("allot.ticker")
    check = reader_check(key_dir=str(tmp_path))
    assert check is not None and set(check.trusted) == {keys.secret_key_id(secret)}
    node = encode(Inputs(cluster="c", prefix="k").node("lab"))
    sealed = seal_records(secret, 0, [(KIND_INPUT, "t", 0, node)])[0][1]
    assert check(0, KIND_INPUT, "t", 0, node, sealed)


def test_the_export_says_loudly_what_it_refused(capsys: pytest.CaptureFixture[str]) -> None:
    from identity.journal_seal import say_export_seals
    from streams.export import ExportReport

    say_export_seals(ExportReport())
    assert "NOT checked" in capsys.readouterr().err
    say_export_seals(ExportReport(seals_checked=True, sealed=9, forged=2,
                                  forged_at=["3:17", "3:18"]))
    err = capsys.readouterr().err
    assert "REFUSED 2 journal record(s)" in err and "3:17, 3:18" in err
    say_export_seals(ExportReport(seals_checked=True, sealed=9))
    assert capsys.readouterr().err == ""
