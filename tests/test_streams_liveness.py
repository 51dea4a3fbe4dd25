"""The liveness rule (streams/liveness.py): who holds what, when a partition is orphaned, who takes it."""

from __future__ import annotations

import msgspec
import pytest

from streams.liveness import (
    HISTORY_LAPSES,
    Beat,
    Decision,
    Liveness,
    decode_beat,
    encode_beat,
    heard_at,
    rendezvous,
)

LAPSE = 2.0


def beat(worker: str, seq: int, held: dict[int, int] | None = None) -> Beat:
    return Beat(worker=worker, name=worker.split("/")[0], seq=seq, at=1_000.0, held=held or {})


def view(me: str = "b/1") -> Liveness:
    return Liveness(me, LAPSE, interval_s=0.5)


def decide(lv: Liveness, now: float, mine: dict[int, int], group: set[int],
           busy: frozenset[int] = frozenset()) -> Decision:
    """``lv.decide`` by an observer whose view is current: its own beat just came back."""
    prev = lv.last.get(lv.me)
    lv.heard(beat(lv.me, (prev[1].seq + 1) if prev else 1, dict(mine)), at=now)
    return lv.decide(now, mine, group=group, busy=busy)


def test_a_beat_round_trips_and_garbage_is_refused() -> None:
    b = beat("a/1", 3, {0: 17, 2: 40})
    assert decode_beat(encode_beat(b)) == b
    with pytest.raises(msgspec.ValidationError):
        decode_beat(b'{"worker": "a", "seq": "x"}')
    with pytest.raises(msgspec.DecodeError):
        decode_beat(b"not json")


def test_a_silent_holders_partitions_go_to_the_live_worker_after_the_lapse() -> None:
    lv = view("b/1")
    lv.heard(beat("a/1", 1, {0: 5, 2: 9}), at=10.0)
    lv.heard(beat("b/1", 1, {1: 6, 3: 7}), at=10.0)
    mine = {1: 6, 3: 7}
    # Within the lapse nothing moves.
    assert decide(lv, 11.9, mine, group={1, 3}).take == frozenset()
    # Past it, b (the only live worker) takes both of a's partitions.
    d = decide(lv, 12.1, mine, group={1, 3})
    assert d.take == {0, 2} and d.orphans == {0: "a/1", 2: "a/1"}
    assert d.fenced == frozenset()


def test_a_beat_heard_in_time_keeps_the_holder() -> None:
    lv = view()
    lv.heard(beat("a/1", 1, {0: 5}), at=10.0)
    lv.heard(beat("a/1", 2, {0: 5}), at=11.5)
    assert decide(lv, 13.0, {}, group=set()).take == frozenset()
    assert decide(lv, 13.6, {}, group=set()).take == {0}


def test_a_late_old_beat_does_not_move_the_last_heard_time_back() -> None:
    lv = view()
    lv.heard(beat("a/1", 5, {0: 5}), at=20.0)
    lv.heard(beat("a/1", 4, {0: 5}), at=10.0)
    assert decide(lv, 21.0, {}, group=set()).take == frozenset()


def test_a_partition_the_holder_let_go_is_left_to_the_group() -> None:
    lv = view()
    lv.heard(beat("a/1", 1, {0: 5, 2: 9}), at=10.0)
    lv.heard(beat("a/1", 2, {2: 9}), at=10.5)      # revoked 0, then died holding 2
    assert decide(lv, 20.0, {}, group=set()).take == {2}


def test_never_taken_on_the_fast_path_what_the_group_gave_or_what_is_being_taken() -> None:
    lv = view()
    lv.heard(beat("a/1", 1, {0: 5, 2: 9}), at=10.0)
    d = decide(lv, 20.0, {}, group={0}, busy={2})
    assert d.take == frozenset() and set(d.orphans) == {0, 2}


def test_the_newest_claim_holds_and_fences_the_older() -> None:
    lv = view("a/1")
    lv.heard(beat("a/1", 1, {0: 5}), at=10.0)
    lv.heard(beat("b/1", 1, {0: 12}), at=10.2)      # b claimed 0 at offset 12, after a's 5
    d = decide(lv, 10.3, {0: 5}, group={0})
    assert d.fenced == {0}
    assert lv.holder[0] == (12, "b/1")
    # A holder's own newer claim is known at once, before its next beat.
    lv.claimed(0, 20)
    assert decide(lv, 10.4, {0: 20}, group={0}).fenced == frozenset()
    assert lv.holder[0] == (20, "a/1")


def test_exactly_one_of_several_live_workers_takes_each_orphan() -> None:
    beats = [beat("a/1", 1, {p: p for p in range(8)}), beat("b/1", 1), beat("c/1", 1)]
    takes = {}
    for me in ("b/1", "c/1"):
        lv = view(me)
        for b in beats:
            lv.heard(b, at=10.0 if b.worker == "a/1" else 19.0)
        takes[me] = decide(lv, 20.0, {}, group=set()).take
    assert takes["b/1"] | takes["c/1"] == set(range(8))
    assert takes["b/1"].isdisjoint(takes["c/1"])
    assert takes["b/1"] and takes["c/1"], "rendezvous spreads eight partitions over two"
    assert all(rendezvous(p, {"b/1", "c/1"}) in ("b/1", "c/1") for p in range(8))


def test_the_groups_assignee_reclaims_from_a_fast_path_cover_not_from_a_group_holder() -> None:
    lv = view("a/1")
    lv.heard(beat("a/1", 1, {0: 5}), at=10.0)
    # b covered partition 0 while a was frozen: a fast-path claim at 9.
    lv.heard(Beat(worker="b/1", name="b", seq=1, at=0.0, held={0: 9}, fast=[0]), at=10.2)
    d = decide(lv, 10.3, {0: 5}, group={0})
    assert d.fenced == {0} and d.reclaim == {0}
    # Being taken already: not twice.
    assert decide(lv, 10.4, {}, group={0}, busy=frozenset({0})).reclaim == frozenset()
    # b holds it from the group (its newer assignment): a leaves it alone.
    lv.heard(Beat(worker="b/1", name="b", seq=2, at=0.0, held={0: 9}, fast=[]), at=10.5)
    assert decide(lv, 10.6, {}, group={0}).reclaim == frozenset()
    # b died holding it: a, still given 0 by the group, claims it back (not a fast take).
    d = decide(lv, 13.0, {}, group={0})
    assert d.reclaim == {0} and d.take == frozenset()


def test_history_read_at_start_counts_as_heard_when_written() -> None:
    # A beat written a minute ago (by its writer's clock), read now at start-up.
    assert heard_at(100.0, written_wall=1_000.0, wall_now=1_060.0, lapse=LAPSE) == 40.0
    # A live beat is heard when it arrives, whatever the clocks say within the margin.
    assert heard_at(100.0, 1_000.0, 1_000.0 + HISTORY_LAPSES * LAPSE - 1, LAPSE) == 100.0
    assert heard_at(100.0, 1_005.0, 1_000.0, LAPSE) == 100.0    # writer's clock ahead


def test_forgotten_only_when_silent_and_holding_nothing() -> None:
    lv = view()
    lv.heard(beat("a/1", 1, {0: 5}), at=10.0)
    lv.heard(beat("c/1", 1), at=10.0)
    lv.forget(1_000.0, keep_s=600.0)
    assert set(lv.last) == {"a/1"}


def test_an_observer_that_was_frozen_takes_nothing_until_its_view_is_current() -> None:
    lv = view("a/1")
    lv.heard(beat("b/1", 1, {1: 3}), at=10.0)
    lv.heard(beat("a/1", 1, {0: 2}), at=10.1)
    # Frozen from 10.2 to 30: nothing heard meanwhile, its own beats included.
    assert lv.decide(30.0, {0: 2}, group={0}).take == frozenset()
    # Its reader catches up: b's beats written meanwhile arrive with its own.
    lv.heard(beat("b/1", 40, {1: 3}), at=30.2)
    lv.heard(beat("a/1", 2, {0: 2}), at=30.2)
    assert lv.decide(30.3, {0: 2}, group={0}).take == frozenset()
    # Before its first own beat came back it knows nothing current: nobody lapses.
    fresh = view("c/1")
    fresh.heard(beat("b/1", 1, {1: 3}), at=10.0)
    assert fresh.decide(60.0, {}, group=set()).take == frozenset()
    assert decide(fresh, 60.0, {}, group=set()).take == {1}


def test_the_settings_default_to_a_2_s_lapse_and_refuse_one_shorter_than_two_beats() -> None:
    from streams import config

    s = config.load(environ={})
    assert (s.liveness, s.liveness_interval_s, s.liveness_lapse_s) == (True, 0.5, 2.0)
    assert config.load(environ={"ALLOT_LIVENESS": "false"}).liveness is False
    with pytest.raises(config.ConfigError, match="liveness_lapse_s"):
        config.load(environ={}, flags={"liveness_lapse_s": 0.9})
    with pytest.raises(config.ConfigError, match="liveness_interval_s"):
        config.load(environ={}, flags={"liveness_interval_s": 0})
