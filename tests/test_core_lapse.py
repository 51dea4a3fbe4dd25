"""The lapse rule: ended workloads leave the state once nothing can refer to them.

A workload that ended at trusted time ``t`` stays in ``workloads.all`` while
``now - t <= lapse_s`` (the longer of the dedupe and fair-share windows) and
leaves at the first tick past that. Within the lapse every answer about it is
what it always was (a copy of its submission is a duplicate, a cancel is
``already_ended``); after it, the state answers as for an unknown workload.
Leaving changes no decision: the same run with the rule switched off decides
the same, event for event.
"""

from __future__ import annotations

import random

import msgspec
import pytest
from core_helpers import HOUR, Sim

from events import DECISION_TYPES, Event, WorkloadSubmitted, encode_lines
from scheduler import Engine, State
from scheduler.explain import UnknownWorkload, explain
from scheduler.replay import JournalFold, fold_log, verify_log
from scheduler.snapshot import SNAPSHOT_VERSION, restore_state, snapshot_state

DAY = 24 * HOUR


def _ended_one(**policy: int) -> Sim:
    """A run where ``w1`` ran an hour and finished at 1 h, and ``w2`` still runs."""
    sim = Sim(hosts=2, **policy)
    sim.submit("w1", "lab/a", 8, HOUR)
    sim.submit("w2", "lab/b", 8, HOUR)
    sim.tick()
    sim.at(HOUR)
    sim.finish("w1")
    return sim


def test_the_lapse_is_the_longer_of_the_dedupe_and_fair_share_windows() -> None:
    s = State()
    assert s.lapse_s() == max(s.policy.dedupe_window_s, s.policy.window_s)
    sim = Sim(window_s=2 * DAY, dedupe_window_s=3 * DAY)
    assert sim.state.lapse_s() == 3 * DAY


def test_within_the_lapse_an_ended_workload_is_answered_as_before() -> None:
    sim = _ended_one(window_s=DAY, dedupe_window_s=HOUR)
    sim.at(HOUR + DAY)  # exactly the lapse: still held
    assert sim.status("w1") == "succeeded"
    # A copy of its submission (another event id, past the dedupe window) is a known duplicate.
    assert sim.submit("w1", "lab/a", 8, HOUR) == []
    assert sim.cancel("w1", "lead-a") == [("input_rejected", "already_ended")]
    assert explain(sim.state, "w1").status == "succeeded"


def test_past_the_lapse_it_has_left_and_is_answered_as_unknown() -> None:
    sim = _ended_one(window_s=DAY, dedupe_window_s=HOUR)
    sim.at(HOUR + DAY + 1)
    st = sim.state
    assert "w1" not in st.workloads.all
    assert list(st.workloads.ended) == []
    assert "w2" in st.workloads.running  # live work stays, however old
    assert sim.cancel("w1", "lead-a") == [("input_rejected", "unknown_workload")]
    with pytest.raises(UnknownWorkload):
        explain(st, "w1")
    assert st.forgotten_before() == st.now - DAY


def test_only_a_tick_moves_the_rule_and_the_state_version_is_untouched() -> None:
    sim = _ended_one(window_s=DAY, dedupe_window_s=HOUR)
    version = sim.state.version
    sim.at(3 * DAY)
    assert "w1" not in sim.state.workloads.all
    assert sim.state.version == version  # nothing a cycle reads changed


def test_a_run_still_stopping_through_its_grace_is_held_until_it_stops() -> None:
    # w1 (unallocated) is preempted with a grace longer than the lapse and not
    # requeued; its GPUs stay held under its name until the grace ends.
    sim = Sim(hosts=1, window_s=HOUR, dedupe_window_s=60, preemption_grace_s=3 * HOUR,
              bucket_s=60)
    sim.submit("w1", "lab/a", 8, 0, resumable=False)
    sim.tick()
    sim.submit("w2", "lab/b", 8, HOUR)
    out = sim.tick(10)
    assert ("preempted", "w1", "reclaim_unallocated", "w2", False) in out
    sim.at(2 * HOUR)  # past the lapse, inside the grace
    assert "w1" in sim.state.workloads.all
    sim.at(3 * HOUR + 11)  # the grace is over: released, then forgotten
    assert "w1" not in sim.state.workloads.all
    assert not sim.state.stopping


def _busy_log(seed: int, forget: bool, monkeypatch: pytest.MonkeyPatch) -> list[Event]:
    """Random submissions, finishes and cancels over ten days under a one-day lapse."""
    if not forget:
        monkeypatch.setattr(State, "forget_ended", lambda self: None)
    rng = random.Random(seed)
    sim = Sim(hosts=4, window_s=DAY, dedupe_window_s=6 * HOUR, bucket_s=HOUR,
              fair_share_period_s=300)
    live: list[str] = []
    for step in range(600):
        sim.at(step * 1_500)
        r = rng.random()
        if r < 0.45:
            wid = f"w{step}"
            sim.submit(wid, rng.choice(["lab/a", "lab/b"]), rng.choice([1, 2, 4, 8]),
                       rng.choice([0, 600, HOUR]), resumable=rng.random() < 0.5)
            live.append(wid)
        elif r < 0.75 and live:
            wid = live.pop(rng.randrange(len(live)))
            # (Only live work is named: the inputs must not depend on what was forgotten.)
            w = sim.state.workloads.all.get(wid)
            if w is not None and w.status == "running":
                sim.finish(wid)
            elif w is not None and w.status == "pending":
                sim.cancel(wid, "admin")
        sim.tick()
    monkeypatch.undo()
    return sim.journal


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_forgetting_changes_no_decision(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    with_rule = _busy_log(seed, True, monkeypatch)
    without = _busy_log(seed, False, monkeypatch)
    assert encode_lines(with_rule) == encode_lines(without)
    # ... and it did forget: the fold holds far fewer workloads than were submitted.
    engine = fold_log(with_rule)
    submitted = sum(1 for e in with_rule if isinstance(e, WorkloadSubmitted))
    assert 0 < len(engine.state.workloads.all) < submitted / 2


def test_replay_and_snapshots_forget_exactly_as_the_live_engine(
        monkeypatch: pytest.MonkeyPatch) -> None:
    log = _busy_log(4, True, monkeypatch)
    assert verify_log(enumerate(log)).ok
    whole = fold_log(log)
    inputs = [i for i, e in enumerate(log) if type(e) not in DECISION_TYPES]
    for cut in (inputs[len(inputs) // 3], inputs[2 * len(inputs) // 3]):  # (between groups)
        half = fold_log(log[:cut])
        restored = Engine.restore(half.snapshot())
        assert restored.state.fingerprint() == half.state.fingerprint()
        fold = JournalFold(restored)
        for e in log[cut:]:
            fold.add(e)
        fold.finish()
        assert fold.engine.state.fingerprint() == whole.state.fingerprint()
        assert list(fold.engine.state.workloads.ended) == list(whole.state.workloads.ended)


def test_a_version_4_snapshot_is_lifted_with_its_ended_workloads_ending_at_its_now() -> None:
    sim = _ended_one(window_s=DAY, dedupe_window_s=HOUR)
    sim.at(2 * HOUR)
    body = msgspec.msgpack.decode(snapshot_state(sim.state))
    assert body["v"] == SNAPSHOT_VERSION == 5
    old = {k: v for k, v in body.items() if k != "ended"}
    old["v"] = 4
    st = restore_state(msgspec.msgpack.encode(old))
    assert list(st.workloads.ended) == [(2 * HOUR, "w1")]
    assert st.workloads.all["w1"].status == "succeeded"


def test_the_state_api_says_a_workload_left_the_live_state() -> None:
    from streams.state_api import RunLog, StateApi, StateError
    from tests.test_state_api_queue_forecast import EngineSource

    sim = _ended_one(window_s=DAY, dedupe_window_s=HOUR)
    runs = RunLog()
    for e in sim.journal:
        runs.observe(e, sim.engine)  # (after the fact: end times as of the final state)
    api = StateApi(EngineSource(sim.engine), runs)
    assert [r["workload"] for r in api.history()["rows"]] == ["w1"]
    sim.at(HOUR + DAY + 1)
    with pytest.raises(StateError) as err:
        api.explain("w1")
    assert err.value.status == 404
    text = str(err.value)
    assert "not in the live state" in text or "in the live state of 'default'" in text
    assert "ended before 1970-01-01 01:00:01 UTC" in text and "archive" in text
    body = api.history()
    assert body["rows"] == [] and body["forgotten_before"] == HOUR + 1
    assert "have left the live state" in body["note"]
