"""Forged journal records over the real broker: a restarted worker refuses what no worker sealed.

The embedded broker has no ACLs, and the owner's claim token is in its claim
record, so anyone can append a record the fence admits: a decision nobody
derived, an input whose inbox-offset header points far ahead. Every record a
worker writes carries its seal (``identity.journal_seal``); the fold of a
restarted worker refuses the rest before the fence, so the forged decision
changes no state and the forged offset does not move the inbox position.
"""

from __future__ import annotations

import time

import pytest

from events import ClockTicked, Slot, WorkloadStarted, WorkloadSubmitted, encode
from events.factory import Inputs
from identity.journal_seal import HEADER_SEAL, SealCheck
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
from tests.kafka import TICK_KEY, Live, unique_prefix, wait_until

C = "seal-a"


@pytest.mark.kafka
def test_a_restarted_worker_refuses_forged_journal_records(kafka: str) -> None:
    live = Live(kafka, unique_prefix()).start()
    try:
        worker = live.start_worker((C,), time_scale=1.0, tick_interval_s=0.25)
        live.wait_event(C, lambda e: isinstance(e, ClockTicked), what="the first tick")
        mk = Inputs(cluster=C, prefix="s-")
        at = int(time.time())
        live.send_many([mk.node("lab", managers=("admin",), at=at), mk.node("lab/a", at=at),
                        mk.host("h0", gpus=8, at=at)])
        live.send(mk.submit("w1", "lab/a", gpus=8, min_runtime_s=3600, at=at))
        live.wait_event(C, lambda e: isinstance(e, WorkloadStarted), what="w1 to start")
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
        forged = [(encode(ghost), journal_headers(KIND_INPUT, token, far)),
                  (encode(started), journal_headers(KIND_DECISION, token)),
                  (encode(started), [*journal_headers(KIND_DECISION, token),
                                     (HEADER_SEAL, b"00" * 64)])]

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
    finally:
        live.close()


def _rec(offset: int, kind: str, owner: str, value: bytes, inbox: int | None = None,
         seal_hex: bytes | None = None) -> JournalRecord:
    return JournalRecord(partition=0, offset=offset, kind=kind, owner=owner, value=value,
                         inbox_offset=inbox, seal=seal_hex)


def test_the_fold_refuses_forgeries_before_the_fence() -> None:
    from identity.journal_seal import seal

    key = TICK_KEY.encode()
    check = SealCheck(key)
    claim = encode_claim(Claim(token="t1", worker="w", partition=0, at=0))
    mk = Inputs(cluster="c", prefix="e")
    node = encode(mk.node("lab", managers=("admin",)))

    def sealed(offset: int, kind: str, owner: str, value: bytes,
               inbox: int | None = None) -> JournalRecord:
        return _rec(offset, kind, owner, value, inbox, seal(key, 0, kind, owner, inbox, value)[1])

    fold = PartitionFold(0, seal_check=check)
    fold.add(sealed(0, KIND_CLAIM, "t1", claim))
    fold.add(sealed(1, KIND_INPUT, "t1", node, inbox=0))
    # A forged claim with a new token, then records under it: none of them counts.
    fold.add(_rec(2, KIND_CLAIM, "evil", encode_claim(Claim(token="evil", worker="x",
                                                            partition=0, at=0))))
    fold.add(_rec(3, KIND_INPUT, "evil", encode(mk.node("lab/x")), inbox=99_999))
    # A record whose seal is another key's, or of other bytes.
    other = seal(b"another key", 0, KIND_INPUT, "t1", 5, node)[1]
    fold.add(_rec(4, KIND_INPUT, "t1", encode(mk.node("lab/y")), inbox=5, seal_hex=other))
    fold.finish(recover=False)
    assert fold.stats.forged == 3 and fold.fence.token == "t1"
    assert fold.last_inbox_offset == 0
    assert set(fold.engines["c"].state.budget.nodes) == {"lab"}
    # A journal from before seals still folds (nothing sealed yet, nothing refused).
    legacy = PartitionFold(0, seal_check=check)
    legacy.add(_rec(0, KIND_CLAIM, "t1", claim))
    legacy.add(_rec(1, KIND_INPUT, "t1", node, inbox=0))
    legacy.finish(recover=False)
    assert legacy.stats.forged == 0 and "lab" in legacy.engines["c"].state.budget.nodes
