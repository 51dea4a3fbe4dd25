"""Who may do what, proven: signatures, roles and per-signer ids at the processor (no broker).

Every input goes through ``Processor.handle`` exactly as the live worker sends
it, so these are the attacks of issue 23 against the real check: each refused
input is a dead letter with its reason and leaves the engines unchanged; the
journal of what was accepted folds back to the same state (replay is exact).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import msgspec
import pytest

from events import (
    INPUT_TYPES,
    BudgetNodeDefined,
    BudgetSharesSet,
    ChildShare,
    Event,
    HostAdded,
    HostFaulted,
    PolicyConfigured,
    PrincipalKeyRevoked,
    PrincipalKeyRotated,
    PrincipalRegistered,
    WorkloadCancelled,
    WorkloadFinished,
    WorkloadStarted,
    WorkloadSubmitted,
    encode,
    tag_of,
)
from identity import authorisation, keys
from scheduler import Engine
from streams.processor import Accepted, Dead, InboxRecord, PartitionFold, Processor, Skipped
from streams.records import (
    KIND_CLAIM,
    KIND_DECISION,
    KIND_INPUT,
    Claim,
    JournalRecord,
    encode_claim,
)
from streams.signing import Keyring, sign_headers
from streams.ticker import make_tick

DOCS = Path(__file__).resolve().parent.parent / "docs"
TICKER = "allot.ticker"
TICK_KEY = b"tick-secret"
C = "c1"


def secret(name: str) -> bytes:
    return f"secret-of-{name}".encode()


def pub_hex(name: str, gen: int = 0) -> str:
    return keys.public_hex(keys.public_of(secret(name) + b"#" * gen))


class Live:
    """A processor with require_signatures, the engines it feeds, and the journal it writes."""

    def __init__(self) -> None:
        ring = Keyring().with_key(TICKER, keys.public_of(TICK_KEY)).with_key(
            "root", keys.public_of(secret("root")))
        self.p = Processor(clusters=(C,), partition_of=lambda c: 0, keyring=ring,
                           ticker_principal=TICKER, require_signatures=True, worker="w",
                           admins=("root",))
        self.engines: dict[str, Engine] = {}
        self.journal: list[JournalRecord] = [JournalRecord(
            partition=0, offset=0, kind=KIND_CLAIM, owner="t",
            value=encode_claim(Claim(token="t", worker="w", partition=0, at=0)))]
        self.offset = 0
        self.now = 100

    def send(self, event: Event, signer: str | None = None, key: bytes | None = None,
             gen: int = 0) -> Any:
        value = encode(event)
        headers: list[tuple[str, bytes]] = []
        if signer is not None:
            headers = sign_headers(value, signer, key if key is not None
                                   else secret(signer) + b"#" * gen)
        self.offset += 1
        rec = InboxRecord(topic="allot.inbox", partition=0, offset=self.offset, key=C.encode(),
                          value=value, headers=tuple(headers))
        before = self.snapshot()
        out = self.p.handle(rec, self.engines)
        if isinstance(out, Dead):
            assert self.snapshot() == before, "a refused input changed the state"
        if isinstance(out, Accepted):
            self.journal.append(JournalRecord(partition=0, offset=len(self.journal), kind=KIND_INPUT,
                                              owner="t", value=value, inbox_offset=self.offset))
            for d in out.derived:
                self.journal.append(JournalRecord(partition=0, offset=len(self.journal),
                                                  kind=KIND_DECISION, owner="t", value=encode(d)))
        return out

    def snapshot(self) -> bytes:
        e = self.engines.get(C)
        return e.snapshot() if e is not None else b""

    def tick(self, dt: int = 1) -> Accepted:
        self.now += dt
        t = make_tick(C, self.now, TICKER, TICK_KEY)
        out = self.send_raw(t.value, t.headers)
        assert isinstance(out, Accepted), out
        return out

    def send_raw(self, value: bytes, headers: Any) -> Any:
        before = self.snapshot()
        self.offset += 1
        rec = InboxRecord(topic="allot.inbox", partition=0, offset=self.offset, key=C.encode(),
                          value=value, headers=tuple(headers))
        out = self.p.handle(rec, self.engines)
        if isinstance(out, Dead):
            assert self.snapshot() == before, "a refused input changed the state"
        if isinstance(out, Accepted):
            self.journal.append(JournalRecord(partition=0, offset=len(self.journal), kind=KIND_INPUT,
                                              owner="t", value=value, inbox_offset=self.offset))
            for d in out.derived:
                self.journal.append(JournalRecord(partition=0, offset=len(self.journal),
                                                  kind=KIND_DECISION, owner="t", value=encode(d)))
        return out


_n = 0


def env(actor: str, **kw: Any) -> dict[str, Any]:
    global _n
    _n += 1
    return {"id": f"{actor}:{_n}", "at": 100, "cluster": C, "actor": actor, "source": "test",
            **kw}


def register(name: str, roles: tuple[str, ...], hosts: tuple[str, ...] = (),
             acts_for: tuple[str, ...] = (), by: str = "root") -> PrincipalRegistered:
    pub = pub_hex(name)
    return PrincipalRegistered(**env(by), principal=name, public_key=pub,
                               key_id=keys.key_id(keys.public_from_hex(pub)), roles=roles,
                               hosts=hosts, acts_for=acts_for)


def accepted(out: Any) -> Accepted:
    assert isinstance(out, Accepted), out
    assert not any(tag_of(type(d)).endswith("rejected") for d in out.derived), out.derived
    return out


def dead(out: Any, reason: str) -> str:
    assert isinstance(out, Dead), out
    assert out.letter.reason == reason, (out.letter.reason, out.letter.detail)
    return out.letter.detail


@pytest.fixture
def live() -> Live:
    """A cluster with principals, a budget tree, two hosts, and a running workload of bob's."""
    lv = Live()
    lv.tick()
    accepted(lv.send(register("root", ("admin", "operator", "manager")), "root"))
    for name, roles, hosts in [("alice", ("researcher",), ()), ("bob", ("researcher",), ()),
                               ("mgr", ("manager",), ()), ("exec1", ("executor",), ("h1",)),
                               ("mon", ("monitor",), ()), ("ops", ("operator",), ()),
                               ("mallory", ("researcher",), ())]:
        accepted(lv.send(register(name, roles, hosts), "root"))
    accepted(lv.send(BudgetNodeDefined(**env("root"), path="lab", managers=("root",)), "root"))
    accepted(lv.send(BudgetNodeDefined(**env("root"), path="lab/t", managers=("mgr",)), "root"))
    for leaf in ("a", "b"):
        accepted(lv.send(BudgetNodeDefined(**env("mgr"), path=f"lab/t/{leaf}"), "mgr"))
    for h in ("h1", "h2"):
        accepted(lv.send(HostAdded(**env("ops"), host=h, gpus=8), "ops"))
    accepted(lv.send(WorkloadSubmitted(**env("bob"), workload="wb", budget="lab/t/b", user="bob",
                                       gpus=8, min_runtime_s=0), "bob"))
    started = lv.tick()
    assert any(isinstance(d, WorkloadStarted) and d.workload == "wb" for d in started.derived)
    return lv


def host_of(lv: Live, workload: str) -> str:
    return lv.engines[C].state.workloads.all[workload].placement[0][0]


def test_the_table_covers_every_input_type() -> None:
    assert set(authorisation.TABLE) == set(INPUT_TYPES)


def test_the_docs_table_is_the_code_table() -> None:
    text = (DOCS / "events.md").read_text()
    block = text.split("<!-- authorisation-table: generated from identity.authorisation.TABLE -->")[1]
    block = block.split("<!-- /authorisation-table -->")[0]
    rows = re.findall(r"^\| `([a-z_.]+)` \| ([^|]+) \| (.+) \|$", block, re.M)
    assert [(t, r.strip(), sc.strip()) for t, r, sc in rows] == authorisation.table_rows()


def test_unsigned_admin_budget_edit_is_unauthenticated(live: Live) -> None:
    edit = BudgetSharesSet(**env("root"), parent="lab/t", shares=(ChildShare(child="a", shares=99),))
    assert "unsigned" in dead(live.send(edit), "unauthenticated")
    assert "not a registered key" in dead(live.send(edit, "root", key=b"not the key"),
                                          "unauthenticated")
    # The admin's real signature of another value: one changed byte is a bad signature.
    headers = sign_headers(encode(edit).replace(b"99", b"98"), "root", secret("root"))
    assert "bad_signature" in dead(live.send_raw(encode(edit), headers), "unauthenticated")
    assert live.engines[C].state.budget.nodes["lab/t/a"].shares == 1


def test_forged_actor_is_refused(live: Live) -> None:
    edit = BudgetSharesSet(**env("root"), parent="lab/t", shares=(ChildShare(child="a", shares=99),))
    dead(live.send(edit, "mallory"), "signer_not_actor")


def test_a_researcher_cannot_end_another_teams_workload(live: Live) -> None:
    fin = WorkloadFinished(**env("alice"), workload="wb")
    assert "needs executor" in dead(live.send(fin, "alice"), "not_authorised")
    cancel = WorkloadCancelled(**env("alice"), workload="wb")
    dead(live.send(cancel, "alice"), "not_authorised")
    assert live.engines[C].state.workloads.all["wb"].status == "running"


def test_an_executor_reports_only_for_its_hosts(live: Live) -> None:
    accepted(live.send(register("exec2", ("executor",), ("h2",)), "root"))
    mine, other = ("exec1", "exec2") if host_of(live, "wb") == "h1" else ("exec2", "exec1")
    fin = WorkloadFinished(**env(other), workload="wb")
    assert "not the executor" in dead(live.send(fin, other), "not_authorised")
    assert live.engines[C].state.workloads.all["wb"].status == "running"
    accepted(live.send(WorkloadFinished(**env(mine), workload="wb"), mine))
    assert live.engines[C].state.workloads.all["wb"].status != "running"


def test_alice_cannot_submit_as_bob(live: Live) -> None:
    sub = WorkloadSubmitted(**env("alice"), workload="wx", budget="lab/t/b", user="bob", gpus=1,
                            min_runtime_s=0)
    assert "may act only for itself" in dead(live.send(sub, "alice"), "not_authorised")
    assert "wx" not in live.engines[C].state.workloads.all
    own = WorkloadSubmitted(**env("alice"), workload="wa", budget="lab/t/a", user="alice", gpus=1,
                            min_runtime_s=0)
    accepted(live.send(own, "alice"))


def test_acts_for_is_declared_by_an_admin(live: Live) -> None:
    accepted(live.send(register("alice", ("researcher",), acts_for=("bob",)), "root"))
    sub = WorkloadSubmitted(**env("alice"), workload="wx", budget="lab/t/b", user="bob", gpus=1,
                            min_runtime_s=0)
    accepted(live.send(sub, "alice"))
    # ...and only by an admin: alice cannot grant herself more.
    dead(live.send(register("alice", ("researcher",), acts_for=("*",), by="alice"), "alice"),
         "not_authorised")


def test_host_roles(live: Live) -> None:
    fault = HostFaulted(**env("alice"), host="h2", severity="failed")
    dead(live.send(fault, "alice"), "not_authorised")
    dead(live.send(HostAdded(**env("mon"), host="h9"), "mon"), "not_authorised")
    accepted(live.send(HostFaulted(**env("mon"), host="h2", severity="degraded"), "mon"))
    accepted(live.send(HostAdded(**env("ops"), host="h9"), "ops"))


def test_budget_edits_need_a_manager_of_the_node(live: Live) -> None:
    edit = BudgetSharesSet(**env("alice"), parent="lab/t", shares=(ChildShare(child="a", shares=5),))
    dead(live.send(edit, "alice"), "not_authorised")
    edit = BudgetSharesSet(**env("mgr"), parent="lab", shares=(ChildShare(child="t", shares=5),))
    assert "does not manage 'lab'" in dead(live.send(edit, "mgr"), "not_authorised")
    edit = BudgetSharesSet(**env("mgr"), parent="lab/t", shares=(ChildShare(child="a", shares=5),))
    accepted(live.send(edit, "mgr"))
    assert live.engines[C].state.budget.nodes["lab/t/a"].shares == 5


def test_only_admins_configure_the_policy_and_register(live: Live) -> None:
    dead(live.send(PolicyConfigured(**env("mgr"), min_runtime_cap_s=60), "mgr"), "not_authorised")
    dead(live.send(register("eve", ("admin",), by="mgr"), "mgr"), "not_authorised")
    accepted(live.send(PolicyConfigured(**env("root"), min_runtime_cap_s=3600), "root"))


def test_an_unknown_key_cannot_register_first() -> None:
    lv = Live()
    lv.tick()
    assert "no key" in dead(lv.send(register("eve", ("admin",), by="eve"), "eve"),
                            "unauthenticated")
    assert len(lv.engines[C].state.principals) == 0


def test_revoked_key_rejected_after_and_earlier_inputs_replay(live: Live) -> None:
    accepted(live.send(WorkloadSubmitted(**env("alice"), workload="wa1", budget="lab/t/a",
                                         user="alice", gpus=1, min_runtime_s=0), "alice"))
    kid = live.engines[C].state.principals.get("alice").key_id  # type: ignore[union-attr]
    accepted(live.send(PrincipalKeyRevoked(**env("root"), principal="alice", key_id=kid), "root"))
    later = WorkloadSubmitted(**env("alice"), workload="wa2", budget="lab/t/a", user="alice",
                              gpus=1, min_runtime_s=0)
    assert "revoked" in dead(live.send(later, "alice"), "revoked")
    assert "wa1" in live.engines[C].state.workloads.all
    assert "wa2" not in live.engines[C].state.workloads.all
    # The journal (everything accepted, the revocation included) folds to the live state.
    fold = PartitionFold(0)
    for r in live.journal:
        fold.add(r)
    fold.finish(recover=False)
    assert fold.engines[C].snapshot() == live.engines[C].snapshot()
    # ...and a snapshot of it carries the registry: the revoked key stays revoked.
    restored = Engine.restore(live.engines[C].snapshot())
    assert restored.state.principals.retired_why(kid) == "revoked"


def test_a_principal_rotates_its_own_key(live: Live) -> None:
    new_pub = pub_hex("alice", gen=1)
    rot = PrincipalKeyRotated(**env("alice"), principal="alice", public_key=new_pub,
                              key_id=keys.key_id(keys.public_from_hex(new_pub)))
    accepted(live.send(rot, "alice"))
    sub = WorkloadSubmitted(**env("alice"), workload="wr", budget="lab/t/a", user="alice", gpus=1,
                            min_runtime_s=0)
    assert "rotated" in dead(live.send(sub, "alice"), "revoked")
    accepted(live.send(sub, "alice", gen=1))
    # Nobody else may rotate alice's key.
    other = pub_hex("mallory", gen=5)
    dead(live.send(PrincipalKeyRotated(**env("mallory"), principal="alice", public_key=other,
                                       key_id=keys.key_id(keys.public_from_hex(other))),
                   "mallory"), "not_authorised")


def test_id_squatting_by_another_signer_does_not_drop_the_real_event(live: Live) -> None:
    real = WorkloadSubmitted(id="alice:job-7", at=100, cluster=C, actor="alice", source="cli",
                             workload="wa7", budget="lab/t/a", user="alice", gpus=1,
                             min_runtime_s=0)
    squat = msgspec.structs.replace(real, actor="mallory", user="mallory", workload="wm",
                                    budget="lab/t/b")
    dead(live.send(squat, "mallory"), "foreign_id")
    out = live.send(real, "alice")
    assert not isinstance(out, Skipped)
    accepted(out)
    assert "wa7" in live.engines[C].state.workloads.all
    # Ids with no signer prefix are refused too, so nobody takes the tick namespace.
    dead(live.send(msgspec.structs.replace(real, id="tick:c1:999"), "alice"), "foreign_id")


def test_the_tick_namespace_cannot_be_registered(live: Live) -> None:
    out = accepted_or_rejected(live.send(register("tick", ("researcher",)), "root"))
    assert out == "bad_principal"


def accepted_or_rejected(out: Any) -> str | None:
    assert isinstance(out, Accepted), out
    rej = [d for d in out.derived if tag_of(type(d)).endswith("rejected")]
    return rej[0].reason if rej else None  # type: ignore[attr-defined]


def test_a_replayed_old_signed_record_is_dropped_or_refused_never_taken_twice(live: Live) -> None:
    edit = BudgetSharesSet(**env("mgr"), parent="lab/t", shares=(ChildShare(child="a", shares=7),))
    value = encode(edit)
    headers = sign_headers(value, "mgr", secret("mgr"))
    accepted(live.send_raw(value, headers))
    # Within the dedupe window the replayed bytes are a duplicate: nothing journaled.
    assert isinstance(live.send_raw(value, headers), Skipped)
    accepted(live.send(BudgetSharesSet(**env("mgr"), parent="lab/t",
                                       shares=(ChildShare(child="a", shares=2),)), "mgr"))
    # Two days later the id is forgotten, but the record is too old to be taken again.
    live.tick(2 * 86_400)
    assert "older than the dedupe window" in dead(live.send_raw(value, headers), "stale")
    assert live.engines[C].state.budget.nodes["lab/t/a"].shares == 2
