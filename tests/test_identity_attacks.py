"""The attacks of issue 23 against a live worker over the real broker, signatures on.

One worker with the defaults of ``allot worker`` (signatures required, roles
checked; the first admin ``root`` from its settings) and a cluster set up by
signed, registered principals. Each attack is published as an attacker
would (bytes on the inbox); it must come back as a dead letter with its
reason, never reach the journal, and the journal must still replay exactly
and re-verify (``allot audit verify`` with roles). The legitimate inputs of
the same principals are taken.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from events import (
    BudgetNodeDefined,
    BudgetSharesSet,
    ChildShare,
    ClockTicked,
    Event,
    HostAdded,
    HostFaulted,
    PrincipalKeyRevoked,
    PrincipalRegistered,
    WorkloadFinished,
    WorkloadStarted,
    WorkloadSubmitted,
    encode,
)
from identity import keys
from identity.audit_verify import verify_journal
from scheduler.replay import verify_log
from streams import signing
from tests.kafka import TICK_KEY, Live, get_state, unique_prefix, wait_until

pytestmark = pytest.mark.kafka

REPO = Path(__file__).resolve().parent.parent
C = "id-att"
ROOT = "root"


def secret(name: str) -> str:
    return f"attack-test-key-of-{name}"


def pub(name: str) -> str:
    return keys.public_hex(keys.public_of(secret(name).encode()))


class Cluster:
    """The live worker, and a way to send an input and wait for its answer."""

    def __init__(self, live: Live, port: int) -> None:
        self.live = live
        self.port = port
        self.n = 0

    def env(self, actor: str, id_: str | None = None) -> dict[str, Any]:
        self.n += 1
        return {"id": id_ or f"{actor}:{self.n}", "at": int(time.time()), "cluster": C,
                "actor": actor, "source": "test"}

    def answer(self, event: Event, sign_as: str | None = None,
               key: str | None = None) -> tuple[str, Any]:
        """("journaled", the input) or ("dead", the dead letter) for one published input."""
        signer = None if sign_as is None else (sign_as, key or secret(sign_as))
        offset = self.live.send(event, sign_as=signer)
        p = self.live.partition_of(C)

        def found() -> tuple[str, Any] | None:
            for d in self.live.dead_letters():
                if d.partition == p and d.offset == offset:
                    return "dead", d
            for r in self.live.admitted(p):
                if r.kind == "input" and r.inbox_offset == offset:
                    return "journaled", r
            return None

        return wait_until(found, 30, what=f"the answer to {event.id}")

    def ok(self, event: Event, sign_as: str) -> None:
        kind, what = self.answer(event, sign_as)
        assert kind == "journaled", what

    def refused(self, event: Event, reason: str, sign_as: str | None = None,
                key: str | None = None) -> str:
        kind, what = self.answer(event, sign_as, key)
        assert kind == "dead" and what.reason == reason, (kind, what)
        return what.detail

    def events(self) -> list[Event]:
        return self.live.events(C)


def register(cl: Cluster, name: str, roles: tuple[str, ...], hosts: tuple[str, ...] = ()) -> None:
    cl.ok(PrincipalRegistered(**cl.env(ROOT), principal=name, public_key=pub(name),
                              key_id=keys.key_id(keys.public_from_hex(pub(name))), roles=roles,
                              hosts=hosts), ROOT)


@pytest.fixture(scope="module")
def cl(kafka: str) -> Iterator[Cluster]:
    live = Live(kafka, unique_prefix()).start()
    worker = live.start_worker((C,), time_scale=1.0, tick_interval_s=0.25,
                               require_signatures=True, admin_principal=ROOT,
                               admin_public_key=pub(ROOT), metrics_port=0)
    try:
        assert worker.metrics_address is not None
        c = Cluster(live, worker.metrics_address[1])
        live.wait_event(C, lambda e: isinstance(e, ClockTicked), what="the first tick")
        register(c, ROOT, ("admin", "operator", "manager"))
        for name, roles, hosts in [("alice", ("researcher",), ()), ("bob", ("researcher",), ()),
                                   ("mgr", ("manager",), ()), ("exec0", ("executor",), ("h0",)),
                                   ("mon", ("monitor",), ()), ("mallory", ("researcher",), ())]:
            register(c, name, roles, hosts)
        c.ok(BudgetNodeDefined(**c.env(ROOT), path="lab", managers=(ROOT,)), ROOT)
        c.ok(BudgetNodeDefined(**c.env(ROOT), path="lab/t", managers=("mgr",)), ROOT)
        for leaf in ("alice", "bob"):
            c.ok(BudgetNodeDefined(**c.env("mgr"), path=f"lab/t/{leaf}"), "mgr")
        c.ok(HostAdded(**c.env(ROOT), host="h0", gpus=8), ROOT)
        c.ok(WorkloadSubmitted(**c.env("bob"), workload="wb", budget="lab/t/bob", user="bob",
                               gpus=8, min_runtime_s=0), "bob")
        live.wait_event(C, lambda e: isinstance(e, WorkloadStarted) and e.workload == "wb",
                        what="bob's workload to start")
        yield c
    finally:
        live.close()


def test_an_unsigned_admin_budget_edit_is_unauthenticated(cl: Cluster) -> None:
    edit = BudgetSharesSet(**cl.env(ROOT), parent="lab/t",
                           shares=(ChildShare(child="alice", shares=1000),))
    assert cl.refused(edit, "unauthenticated").startswith("unsigned")
    assert cl.refused(edit, "unauthenticated", ROOT, key="a guess").startswith("unknown_signer")
    # root's real signature, of other bytes (a replayed signature on an edited record).
    other = msgspec.structs.replace(edit, shares=(ChildShare(child="alice", shares=1),))
    headers = signing.sign_headers(encode(other), ROOT, secret(ROOT).encode())
    offset = cl.live.send(edit, headers=headers)
    letter = wait_until(lambda: next((d for d in cl.live.dead_letters()
                                      if d.offset == offset), None), 30, what="the dead letter")
    assert letter.reason == "unauthenticated" and letter.detail.startswith("bad_signature")
    assert edit.id not in {e.id for e in cl.events()}


def test_a_researcher_cannot_end_another_teams_workload(cl: Cluster) -> None:
    fin = WorkloadFinished(**cl.env("alice"), workload="wb")
    assert "needs executor" in cl.refused(fin, "not_authorised", "alice")
    fault = HostFaulted(**cl.env("alice"), host="h0", severity="failed")
    cl.refused(fault, "not_authorised", "alice")
    assert not any(isinstance(e, WorkloadFinished | HostFaulted) for e in cl.events())


def test_alice_cannot_submit_as_bob(cl: Cluster) -> None:
    sub = WorkloadSubmitted(**cl.env("alice"), workload="wx", budget="lab/t/bob", user="bob",
                            gpus=1, min_runtime_s=0)
    assert "may act only for itself" in cl.refused(sub, "not_authorised", "alice")
    forged = msgspec.structs.replace(sub, actor="bob", id="bob:forged")
    cl.refused(forged, "signer_not_actor", "alice")


def test_id_squatting_by_another_signer_does_not_drop_the_real_event(cl: Cluster) -> None:
    real = WorkloadSubmitted(**cl.env("alice", "alice:next-job"), workload="wa-real",
                             budget="lab/t/alice", user="alice", gpus=1, min_runtime_s=0)
    squat = msgspec.structs.replace(real, actor="mallory", user="mallory", workload="wm",
                                    budget="lab/t/bob")
    cl.refused(squat, "foreign_id", "mallory")
    cl.ok(real, "alice")


def test_legitimate_roles_are_taken(cl: Cluster) -> None:
    cl.ok(BudgetSharesSet(**cl.env("mgr"), parent="lab/t",
                          shares=(ChildShare(child="alice", shares=3),)), "mgr")
    cl.ok(WorkloadFinished(**cl.env("exec0"), workload="wb"), "exec0")
    cl.ok(HostFaulted(**cl.env("mon"), host="h0", severity="degraded"), "mon")


def test_a_record_signed_by_allot_sign_and_published_by_confluent_kafka_is_taken(
        cl: Cluster, tmp_path: Path) -> None:
    import confluent_kafka

    keydir = tmp_path / "keys"
    keydir.mkdir(mode=0o700)
    (keydir / "bob.key").write_text(secret("bob") + "\n")
    rec = tmp_path / "rec.json"
    event = WorkloadSubmitted(**cl.env("bob"), workload="wb-kcat", budget="lab/t/bob",
                              user="bob", gpus=1, min_runtime_s=0)
    rec.write_bytes(encode(event))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALLOT_")}
    out = subprocess.run([sys.executable, "-m", "allot", "sign", str(rec), "--json",
                          "--partitions", str(cl.live.partitions)], cwd=REPO,
                         env={**env, "ALLOT_KEY_DIR": str(keydir)}, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    sig = json.loads(out.stdout)
    assert sig["partition"] == cl.live.partition_of(C)
    producer = confluent_kafka.Producer({"bootstrap.servers": cl.live.bootstrap,
                                         "partitioner": "murmur2_random", "acks": "all"})
    producer.produce(cl.live.inbox, rec.read_bytes(), key=sig["key"],
                     headers=list(sig["headers"].items()))
    assert producer.flush(30) == 0
    wait_until(lambda: any(e.id == event.id for e in cl.events()), 30,
               what="the record published by confluent-kafka")


def test_a_revoked_key_is_refused_after_and_earlier_inputs_replay(cl: Cluster) -> None:
    early = WorkloadSubmitted(**cl.env("alice"), workload="wa-early", budget="lab/t/alice",
                              user="alice", gpus=1, min_runtime_s=0)
    cl.ok(early, "alice")
    kid = keys.key_id(keys.public_from_hex(pub("alice")))
    cl.ok(PrincipalKeyRevoked(**cl.env(ROOT), principal="alice", key_id=kid), ROOT)
    late = WorkloadSubmitted(**cl.env("alice"), workload="wa-late", budget="lab/t/alice",
                             user="alice", gpus=1, min_runtime_s=0)
    assert "revoked" in cl.refused(late, "revoked", "alice")
    events = cl.events()
    ids = {e.id for e in events}
    assert early.id in ids and late.id not in ids
    # The journal replays exactly, and every input in it re-verifies, roles included:
    # alice's early submit was signed by a key that was valid then.
    assert verify_log(enumerate(events, 1)).ok
    ring = signing.Keyring({ROOT: keys.public_of(secret(ROOT).encode()),
                            "allot.ticker": keys.public_of(TICK_KEY.encode())})
    report = cl.live.bg.run(verify_journal(cl.live.bootstrap, ring, cl.live.prefix,
                                           admins=(ROOT,), authorise=True))
    assert report.failed == 0, report.failures
    assert report.by_signer.get("alice", 0) >= 2


def test_state_shows_how_inputs_are_trusted_and_no_claim_token(cl: Cluster) -> None:
    state = get_state(cl.port)
    assert state and all(v["security"] == "signed" for v in state.values())
    assert all("token" not in v for v in state.values())
