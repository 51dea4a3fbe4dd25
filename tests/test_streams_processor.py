"""The pure processor: inbox records to dead letters or journal records; the fenced journal fold."""

from __future__ import annotations

import pytest

from events import ClockTicked, Event, WorkloadStarted, encode
from events.factory import Inputs
from events.limits import MAX_RECORD_BYTES
from identity.keys import public_of
from scheduler import Engine
from streams import processor
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

KEY = b"tick-key"
TICKER = "allot.ticker"
CLUSTERS = ("c1", "c2")


def partition_of(cluster: str) -> int:
    return {"c1": 0, "c2": 1}.get(cluster, 0)


def make(**kw: object) -> Processor:
    ring = Keyring({"alice": public_of(b"alice-key")}).with_key(TICKER, public_of(KEY))
    args: dict[str, object] = dict(clusters=CLUSTERS, partition_of=partition_of, keyring=ring,
                                   ticker_principal=TICKER, worker="w")
    args.update(kw)
    return Processor(**args)  # type: ignore[arg-type]


def rec(value: bytes | None, key: bytes | None = b"c1", partition: int = 0, offset: int = 7,
        headers: list[tuple[str, bytes]] | None = None) -> InboxRecord:
    return InboxRecord(topic="allot.inbox", partition=partition, offset=offset, key=key,
                       value=value, headers=tuple(headers or ()))


def tick_record(cluster: str = "c1", at: int = 100, key: bytes = KEY, principal: str = TICKER,
                partition: int = 0) -> InboxRecord:
    t = make_tick(cluster, at, principal, key)
    return rec(t.value, key=t.key, partition=partition, headers=t.headers)


mk = Inputs(cluster="c1", prefix="x")
SUBMIT = mk.submit("w1", "lab/a", gpus=1, min_runtime_s=0, at=100)


def _with(event: Event, **changes: object) -> bytes:
    import msgspec
    return encode(msgspec.structs.replace(event, **changes))


@pytest.mark.parametrize(("record", "reason"), [
    (rec(b"\xff not json"), "malformed"),
    (rec(b'{"type":"workload.exploded","id":"a","at":1}'), "unknown_type"),
    (rec(b'{"type":"clock.ticked","id":"a","at":1,"cluster":"c1","v":99}'), "unknown_version"),
    (rec(b"x" * (MAX_RECORD_BYTES + 1)), "too_large"),
    (rec(None), "no_value"),
    (rec(_with(SUBMIT, cluster="elsewhere"), key=b"elsewhere"), "unknown_cluster"),
    (rec(encode(SUBMIT), key=b"c2"), "wrong_key"),
    (rec(encode(SUBMIT), key=None), "wrong_key"),
    (rec(encode(SUBMIT), partition=1), "wrong_partition"),
    (rec(encode(mk.tick(100))), "untrusted_tick"),
    (tick_record(key=b"wrong key"), "bad_signature"),
    (tick_record(principal="mallory"), "unknown_signer"),
    (rec(encode(SUBMIT), headers=sign_headers(encode(SUBMIT), "alice", b"alice-key")),
     "signer_not_actor"),
    (rec(_with(SUBMIT, cause="e0")), "has_cause"),
    (rec(_with(SUBMIT, id="has/slash")), "bad_id"),
    (rec(encode(WorkloadStarted(id="s1", at=1, cluster="c1", workload="w1", placement=(),
                                allocated=False, protected_until=None))), "not_an_input"),
])
def test_what_goes_to_the_dead_letter(record: InboxRecord, reason: str) -> None:
    engines: dict[str, Engine] = {}
    out = make().handle(record, engines)
    assert isinstance(out, Dead), out
    assert out.letter.reason == reason
    assert (out.letter.topic, out.letter.partition, out.letter.offset) == ("allot.inbox", record.partition, 7)
    assert out.letter.id == f"allot.inbox:{record.partition}:7"
    assert not any(e.state.position for e in engines.values())  # nothing reached an engine


def test_a_signed_tick_is_accepted_and_runs_a_cycle() -> None:
    out = make().handle(tick_record(), {})
    assert isinstance(out, Accepted) and isinstance(out.event, ClockTicked)


def test_an_input_signed_by_its_actor_is_accepted() -> None:
    value = _with(SUBMIT, actor="alice")
    out = make().handle(rec(value, headers=sign_headers(value, "alice", b"alice-key")), {})
    assert isinstance(out, Accepted)
    assert out.value == value  # the journal keeps the exact inbox bytes


def test_require_signatures_dead_letters_unsigned_inputs() -> None:
    out = make(require_signatures=True).handle(rec(encode(SUBMIT)), {})
    assert isinstance(out, Dead) and out.letter.reason == "unauthenticated" \
        and out.letter.detail.startswith("unsigned")


def test_a_repeated_id_is_skipped() -> None:
    p, engines = make(), {}
    assert isinstance(p.handle(tick_record(), engines), Accepted)
    assert isinstance(p.handle(tick_record(), engines), Skipped)


def test_bad_input_after_good_keeps_the_engine() -> None:
    p, engines = make(), {}
    p.handle(tick_record(), engines)
    before = engines["c1"].state.fingerprint()
    assert isinstance(p.handle(rec(b"garbage"), engines), Dead)
    assert engines["c1"].state.fingerprint() == before


# -- the fold ---------------------------------------------------------------------------

def fold_records(partition: int, records: list[JournalRecord]) -> PartitionFold:
    """What a restarted owner does with its partition's journal: ``add`` each record in order."""
    fold = PartitionFold(partition)
    for r in records:
        fold.add(r)
    return fold


def journal_of(groups: list[tuple[Event, list[Event]]], token: str = "t1") -> list[JournalRecord]:
    out = [JournalRecord(partition=0, offset=0, kind=KIND_CLAIM, owner=token,
                         value=encode_claim(Claim(token=token, worker="w", partition=0, at=0)))]
    for i, (inp, decisions) in enumerate(groups):
        out.append(JournalRecord(partition=0, offset=len(out), kind=KIND_INPUT, owner=token,
                                 value=encode(inp), inbox_offset=i))
        for d in decisions:
            out.append(JournalRecord(partition=0, offset=len(out), kind=KIND_DECISION,
                                     owner=token, value=encode(d)))
    return out


def scenario() -> list[tuple[Event, list[Event]]]:
    m = Inputs(cluster="c1", prefix="f")
    eng = Engine("c1")
    inputs = [m.tick(100), m.node("lab", managers=("admin",), at=100), m.node("lab/a", at=100),
              m.host("h1", at=100), m.host("h2", at=100),
              m.submit("w1", "lab/a", 8, 60, at=100), m.submit("w2", "lab/a", 8, 60, at=100),
              m.tick(101)]
    return [(e, eng.process(e) or []) for e in inputs]


def test_the_fold_reaches_the_live_state() -> None:
    groups = scenario()
    live = Engine("c1")
    for e, _ in groups:
        live.process(e)
    fold = fold_records(0, journal_of(groups))
    assert fold.finish() == {}
    assert fold.engines["c1"].state.fingerprint() == live.state.fingerprint()
    assert fold.last_inbox_offset == len(groups) - 1
    assert fold.stats.orphans == 0


def test_finish_returns_the_decisions_a_crash_cut_off() -> None:
    groups = scenario()
    _, decisions = groups[-1]
    assert len(decisions) == 2  # the tick starts both workloads
    records = journal_of(groups)[:-1]  # the second decision never reached the journal
    fold = fold_records(0, records)
    assert fold.finish() == {"c1": [decisions[1]]}


def test_records_under_an_older_claim_do_not_count() -> None:
    groups = scenario()
    records = journal_of(groups[:3], token="old")
    # A new owner claims; the old one (frozen) writes one more input afterwards.
    records.append(JournalRecord(partition=0, offset=len(records), kind=KIND_CLAIM, owner="new",
                                 value=encode_claim(Claim(token="new", worker="w2", partition=0,
                                                          at=0))))
    records.append(JournalRecord(partition=0, offset=len(records), kind=KIND_INPUT, owner="old",
                                 value=encode(groups[3][0]), inbox_offset=3))
    fold = fold_records(0, records)
    fold.finish()
    assert fold.stats.fenced == 1
    assert fold.last_inbox_offset == 2
    assert "h1" not in fold.engines["c1"].state.cluster_state.hosts  # the fenced input


def test_an_exact_duplicate_batch_changes_nothing() -> None:
    groups = scenario()
    once = journal_of(groups)
    twice = once + [JournalRecord(partition=0, offset=len(once) + i, kind=r.kind, owner=r.owner,
                                  value=r.value, inbox_offset=r.inbox_offset)
                    for i, r in enumerate(once[-3:])]
    a = fold_records(0, once)
    b = fold_records(0, twice)
    assert a.finish() == b.finish() == {}
    assert a.engines["c1"].state.fingerprint() == b.engines["c1"].state.fingerprint()
    assert b.stats.duplicates == 3 and b.stats.orphans == 0


def test_snapshot_round_trip_equals_the_engine() -> None:
    eng = Engine("c1")
    for e, _ in scenario():
        eng.process(e)
    fmt, data = processor.snapshot_engine(eng)
    assert processor.restore_engine(fmt, data).state.fingerprint() == eng.state.fingerprint()


def test_changes_schedule() -> None:
    assert processor.changes_schedule(Accepted(event=SUBMIT, value=b"", derived=[]))
    assert not processor.changes_schedule(Accepted(event=mk.tick(1), value=b"", derived=[]))
    started = WorkloadStarted(id="t/0", at=1, cluster="c1", workload="w1", placement=(),
                              allocated=False, protected_until=None)
    # A cycle that decided something may have left work (bounded per cycle): nudge again.
    assert processor.changes_schedule(Accepted(event=mk.tick(1), value=b"", derived=[started]))


def test_fold_without_a_claim_counts_nothing() -> None:
    records = journal_of(scenario())[1:]
    fold = PartitionFold(0)
    for r in records:
        fold.add(r)
    assert fold.finish() == {}
    assert fold.engines == {} and fold.stats.fenced == len(records)


def test_a_copy_of_a_fresh_engines_first_tick_is_skipped() -> None:
    # Two owners' tickers tick the same second: the second copy must be a duplicate even
    # when the first was the first event the engine ever saw (recorded before the clock).
    p, engines = make(), {}
    assert isinstance(p.handle(tick_record(at=1_800_000_000), engines), Accepted)
    assert isinstance(p.handle(tick_record(at=1_800_000_001), engines), Accepted)
    assert isinstance(p.handle(tick_record(at=1_800_000_000), engines), Skipped)

