"""The engine: derived-event envelopes, the idle-cycle memo, replay by folding, and the purity of decide()."""

from __future__ import annotations

import pytest
from core_helpers import DEEP, Sim, brief

from events import ClockTicked, WorkloadStarted
from scheduler import Engine, decide
from scheduler.replay import fold_log


def _busy() -> Sim:
    """A small history with starts, preemptions, a reservation, a fault and rejections."""
    s = Sim(DEEP, hosts=3)
    s.submit("x1", "lab/p1/x", 8, 600, resumable=True)
    s.submit("y1", "lab/p1/y", 8, 1200)
    s.submit("u1", "lab/p2/z", 4, 0)
    s.tick()
    s.at(100).submit("gz", "lab/p2/z", 16, 60, hosts=2)
    s.submit("z2", "lab/p2/z", 8, 100)
    s.submit("bad", "lab/p2/z", 8, 10**6)
    s.tick()
    s.at(650).fault("h2")
    s.tick()
    s.at(1300).tick()
    s.repair("h2")
    s.tick(1301)
    return s


def test_derived_events_carry_the_input_as_cause_and_numbered_ids():
    """Every derived event has cause = its input's id, id = <cause>/<n> from 0, the input's time and the scheduler as actor."""
    s = _busy()
    cause, n = None, 0
    seen_derived = 0
    for e in s.journal:
        if e.cause is None:
            cause, n, at = e.id, 0, e.at
            continue
        assert (e.cause, e.id, e.at) == (cause, f"{cause}/{n}", at)
        assert e.actor == e.source == "allot.scheduler"
        n += 1
        seen_derived += 1
    assert seen_derived >= 8


def test_replaying_the_journal_reaches_the_live_state():
    """Folding the recorded log (inputs and decisions) into fresh engines gives the live fingerprint, every time."""
    s = _busy()
    prints = set()
    for _ in range(2):
        prints.add(fold_log(s.journal).state.fingerprint())
    assert prints == {s.state.fingerprint()}


def test_replay_ignores_duplicated_journal_entries():
    """A journal with every event delivered twice folds to the same state (dedupe by id)."""
    s = _busy()
    doubled = [copy for e in s.journal for copy in (e, e)]
    assert fold_log(doubled).state.fingerprint() == s.state.fingerprint()


def test_reprocessing_the_inputs_re_derives_the_same_decisions():
    """Feeding only the inputs to a fresh engine reproduces every derived event exactly."""
    s = _busy()
    inputs = [e for e in s.journal if e.cause is None]
    again = Engine()
    journal = []
    for e in inputs:
        journal.append(e)
        journal.extend(again.process(e))
    assert journal == s.journal


def test_decide_is_pure():
    """decide(state) twice on the same state returns equal events and leaves the fingerprint unchanged."""
    s = _busy()
    s.at(1400)
    s.submit("x2", "lab/p1/x", 4, 60)
    s.submit("u2", "lab/p1/y", 4, 0)
    s.feed(s.I.host("h9", at=1400))  # new capacity: the probe has something to place
    before = s.state.fingerprint()
    first = decide(s.state, "probe")
    assert first  # something to decide: the probe is not trivially empty
    assert decide(s.state, "probe") == first
    assert s.state.fingerprint() == before


@pytest.mark.parametrize("memo", [True, False])
def test_memo_lapses_when_a_protection_ends(memo):
    """An idle cycle is skipped only until the next protection ends: at that instant the cycle runs for real."""
    s = Sim(hosts=1, accelerate=memo)
    s.submit("wb", "lab/b", 8, 700)
    s.tick()
    s.at(10).submit("wa", "lab/a", 8, 60)
    assert s.tick() == []
    assert s.tick(11) == []
    assert s.tick(699) == []
    assert [e[0] for e in s.tick(700)] == ["preempted", "started"]


def _period_scenario(memo: bool) -> Sim:
    """a used 4800 GPU-s long ago; b runs from t=1000; a waits for b to become the more used leaf."""
    s = Sim(hosts=1, accelerate=memo)
    s.run_history("lab/a", 8, 600)
    s.at(1000).submit("wb", "lab/b", 8, 60)
    s.tick()
    s.at(1100).submit("wa", "lab/a", 8, 60)
    return s


def test_memo_lapses_at_a_fair_share_period():
    """A cycle idle within one fair-share period runs again at the next period, exactly as without the memo."""
    times = (1100, 1500, 1799, 1800, 1801)
    live = _period_scenario(memo=True)
    outs = {t: live.tick(t) for t in times}
    # b's usage passes a's only at the period starting at 1800 (8 x 800 > 4800 + 480).
    assert [t for t, out in outs.items() if out] == [1800]
    assert outs[1800][0] == ("preempted", "wb", "fair_share", "wa", False)
    ref = _period_scenario(memo=False)
    assert {t: ref.tick(t) for t in times} == outs


def test_duplicate_tick_runs_no_second_cycle():
    """A tick delivered twice runs one cycle: the duplicate returns None."""
    s = Sim(hosts=1)
    s.submit("w", "lab/a", 8, 60)
    tick = s.I.tick(0)
    first = s.engine.process(tick)
    assert brief(first) == [("started", "w", (("h0", 8),), True, 60)]
    assert s.engine.process(tick) is None
    assert len(s.state.workloads.running) == 1


def test_ticks_only_ever_derive_cycle_decisions():
    """A plain submit never starts work by itself: only clock.ticked runs a cycle."""
    s = Sim(hosts=1)
    assert s.submit("w", "lab/a", 8, 60) == []
    assert s.status("w") == "pending"
    started = [e for e in s.journal if isinstance(e, WorkloadStarted)]
    assert not started
    assert s.tick()
    cause = next(e for e in s.journal if isinstance(e, WorkloadStarted)).cause
    assert isinstance(next(e for e in s.journal if e.id == cause), ClockTicked)
