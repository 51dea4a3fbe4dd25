"""Preemption takes time: a victim's GPUs stay held until ``workload.stopped`` or its grace ends.

With ``preemption_grace_s`` > 0 a preempted run keeps its GPUs (nothing else is
placed on them) until its executor reports ``workload.stopped`` for that run,
or the grace (the policy's, or less if the workload asked) has passed on the
trusted clock. With the default 0 nothing changes: the GPUs are free at the
preemption itself, as every log before the knob was written.
"""

from __future__ import annotations

from typing import Any

import pytest
from core_helpers import Sim, brief, preempted, started

from events import WorkloadStopped
from scheduler import Engine
from scheduler.replay import fold_log

GRACE = 120


def _stopped(s: Sim, workload: str, run: int, event_id: str | None = None) -> list[tuple[Any, ...]]:
    env = s.I._env(s.now, "executor")
    if event_id is not None:
        env["id"] = event_id
    out = s.feed(WorkloadStopped(**env, workload=workload, run_number=run, exit_code=None,
                                 signal="SIGTERM"))
    return brief(out or [])


def _victim_preempted(grace: int = GRACE, **submit: Any) -> Sim:
    """h0 (8 GPUs) runs resumable unallocated ``v`` of lab/b; at t=10 ``p`` of lab/a takes it."""
    s = Sim(hosts=1, preemption_grace_s=grace)
    s.submit("v", "lab/b", 8, 0, resumable=True, **submit)
    assert s.tick() == [started("v", [("h0", 8)], False, 0)]
    s.at(10).submit("p", "lab/a", 8, 60)
    # h0 is sealed for p while v stops (a reservation due at once: nobody else goes there).
    assert s.tick() == [preempted("v", "reclaim_unallocated", "p", True),
                        ("reserved", "p", ("h0",), 10)]
    return s


def test_nothing_is_placed_on_a_victims_gpus_before_it_stops_or_its_grace_ends():
    """Neither the preemptor, nor other work, nor the requeued victim start inside the grace."""
    s = _victim_preempted()
    s.at(11).submit("q", "lab/a", 4, 0)     # fits in the held GPUs' half: must wait too
    for t in (11, 60, 10 + GRACE - 1):
        assert s.tick(t) == [], t
    assert s.state.cluster_state.hosts["h0"].free == 0
    assert s.status("p") == "pending" and s.status("v") == "pending"


def test_stopped_frees_the_gpus_at_once():
    s = _victim_preempted()
    assert s.tick(20) == []
    assert _stopped(s, "v", 1) == []         # accepted: no rejection
    assert s.state.cluster_state.hosts["h0"].free == 8
    assert s.tick(21) == [started("p", [("h0", 8)], True, 81)]


def test_the_grace_end_frees_the_gpus():
    s = _victim_preempted()
    assert s.tick(10 + GRACE - 1) == []
    assert s.tick(10 + GRACE) == [started("p", [("h0", 8)], True, 10 + GRACE + 60)]
    # The report that comes after the grace ran out is answered, not folded twice.
    assert _stopped(s, "v", 1) == [("input_rejected", "not_stopping")]
    assert s.state.cluster_state.hosts["h0"].free == 0


def test_a_workload_may_ask_for_less_grace_never_more():
    s = _victim_preempted(grace_s=30)
    assert s.tick(39) == []
    assert s.tick(40) == [started("p", [("h0", 8)], True, 100)]
    s2 = _victim_preempted(grace_s=10 * GRACE)
    assert s2.tick(10 + GRACE) == [started("p", [("h0", 8)], True, 10 + GRACE + 60)]


def test_duplicate_and_unknown_stopped_reports_are_answered_with_a_reason():
    s = _victim_preempted()
    assert _stopped(s, "v", 1, event_id="stop-v-1") == []
    # The same report again (same id): dropped as a copy, nothing journaled.
    assert s.feed(WorkloadStopped(id="stop-v-1", at=s.now, cluster=s.I.cluster, actor="executor",
                                  source="cli", workload="v", run_number=1)) is None
    # A second report of the run under another id: nothing is held any more.
    assert _stopped(s, "v", 1) == [("input_rejected", "not_stopping")]
    # A run that was never preempted, and a workload nobody submitted.
    assert _stopped(s, "v", 7) == [("input_rejected", "not_stopping")]
    assert _stopped(s, "ghost", 1) == [("input_rejected", "unknown_workload")]
    assert s.state.cluster_state.hosts["h0"].free == 8
    assert s.tick(30) == [started("p", [("h0", 8)], True, 90)]


def test_no_grace_by_default_frees_at_the_preemption():
    """preemption_grace_s = 0 (the default): the preemptor starts in the same cycle, as ever."""
    s = Sim(hosts=1)
    s.submit("v", "lab/b", 8, 0, resumable=True)
    s.tick()
    s.at(10).submit("p", "lab/a", 8, 60)
    assert s.tick() == [preempted("v", "reclaim_unallocated", "p", True),
                        started("p", [("h0", 8)], True, 70)]
    assert _stopped(s, "v", 1) == [("input_rejected", "not_stopping")]


@pytest.mark.parametrize("scheduler", ["allot", "baseline"])
def test_replay_of_a_log_with_graces_reproduces_the_state_exactly(scheduler):
    s = Sim(hosts=2, preemption_grace_s=GRACE, scheduler=scheduler)
    for i in range(4):
        s.submit(f"v{i}", "lab/b", 4, 0, resumable=True)
    s.tick(1)
    s.at(10).submit("p1", "lab/a", 8, 60)
    s.submit("p2", "lab/a", 8, 60, priority=1)
    s.tick(11)
    stopping = sorted(s.state.stopping)
    assert stopping, "the scenario must leave runs stopping through their grace"
    _stopped(s, *stopping[0])
    s.tick(12)
    mid = s.state.fingerprint()
    snap = s.engine.snapshot()
    s.tick(11 + GRACE)
    s.at(11 + GRACE + 100).finish("p1")
    s.tick()
    replayed = fold_log(s.journal)
    assert replayed.state.fingerprint() == s.state.fingerprint()
    # A snapshot taken mid-grace restores the held GPUs and their deadlines.
    restored = Engine.restore(snap)
    assert restored.state.fingerprint() == mid


def _host_stopped(s: Sim, workload: str, run: int, host: str) -> list[tuple[Any, ...]]:
    out = s.feed(WorkloadStopped(**s.I._env(s.now, "executor"), workload=workload, run_number=run,
                                 host=host))
    return brief(out or [])


def test_each_host_of_a_gang_frees_its_own_gpus():
    """A gang stops host by host (one executor each): a host's report frees that host only."""
    s = Sim(hosts=2, preemption_grace_s=GRACE)
    s.submit("v", "lab/b", 16, 0, hosts=2, resumable=True)
    assert s.tick()[0][:2] == ("started", "v")
    s.at(10).submit("p", "lab/a", 16, 60, hosts=2)
    assert s.tick() == [preempted("v", "reclaim_unallocated", "p", True),
                        ("reserved", "p", ("h0", "h1"), 10)]
    assert _host_stopped(s, "v", 1, "h0") == []
    hosts = s.state.cluster_state.hosts
    assert (hosts["h0"].free, hosts["h1"].free) == (8, 0)
    assert _host_stopped(s, "v", 1, "h0") == [("input_rejected", "not_stopping")]
    assert s.tick(20) == []                     # p needs both hosts
    assert _host_stopped(s, "v", 1, "h1") == []
    assert s.tick(21) == [started("p", [("h0", 8), ("h1", 8)], True, 81)]


def test_a_late_finish_of_an_earlier_run_does_not_end_the_new_run():
    s = Sim(hosts=1)
    s.submit("v", "lab/b", 8, 0, resumable=True)
    s.tick()
    s.at(10).submit("p", "lab/a", 8, 60)
    s.tick()
    s.at(100).finish("p")
    assert s.tick() == [started("v", [("h0", 8)], False, 100)]
    assert s.finish("v", run_number=1) == [("input_rejected", "not_running")]
    assert s.status("v") == "running"
    assert s.finish("v", run_number=2) == []
    assert s.status("v") == "succeeded"


def test_the_gpus_a_preemption_frees_go_to_its_preemptor_and_it_preempts_once():
    """Under a grace the victims' GPUs are held for the workload that stopped them.

    ``p`` (lab/a) stops ``v0``; while ``v0`` stops, ``q`` (lab/b, ranked before
    lab/a) stops ``v1``. When ``v0``'s GPUs come back they are ``p``'s: ``q``, still
    waiting for its own victim, does not take them, and ``p`` takes no second
    victim (``v2`` runs on). Then ``v1``'s GPUs go to ``q``.
    """
    s = Sim(hosts=3, preemption_grace_s=GRACE)
    s.run_history("lab/a", 8, 3_600)  # lab/a has used more: lab/b ranks first
    t0 = s.now
    for i in range(3):
        s.submit(f"v{i}", "lab/b", 8, 0, resumable=True)
    assert len(s.tick()) == 3
    s.at(t0 + 10).submit("p", "lab/a", 8, 60)
    assert s.tick() == [preempted("v0", "reclaim_unallocated", "p", True),
                        ("reserved", "p", ("h0",), t0 + 10)]
    s.at(t0 + 20).submit("q", "lab/b", 8, 60)
    assert s.tick() == [preempted("v1", "reclaim_unallocated", "q", True),
                        ("reserved", "q", ("h1",), t0 + 20)]
    assert s.tick(t0 + 10 + GRACE) == [started("p", [("h0", 8)], True, t0 + 10 + GRACE + 60)]
    assert s.tick(t0 + 20 + GRACE) == [started("q", [("h1", 8)], True, t0 + 20 + GRACE + 60)]
    assert s.status("v2") == "running"
    preemptions = [e for e in s.journal if type(e).__name__ == "WorkloadPreempted"]
    assert [(e.workload, e.by) for e in preemptions] == [("v0", "p"), ("v1", "q")]


def test_the_free_gpus_a_waiting_preemptor_counts_on_are_sealed_for_it():
    """A plan on free GPUs and a stopping victim: the free ones wait for the preemptor too.

    ``p`` needs two hosts: h0 is free, h1 runs ``v``. Left open while ``v`` stops,
    h0 went to unallocated ``u``; at ``v``'s stop ``p`` no longer fit, stopped
    ``u``, and ``v`` restarted on h1: each stop was answered by another.
    """
    s = Sim(hosts=2, preemption_grace_s=GRACE)
    s.submit("v", "lab/b", 8, 0, resumable=True)
    assert s.tick()[0][:2] == ("started", "v")
    s.at(10).submit("p", "lab/a", 16, 60, hosts=2)
    s.submit("u", "lab/b", 8, 0, resumable=True)
    assert s.tick() == [preempted("v", "reclaim_unallocated", "p", True),
                        ("reserved", "p", ("h0", "h1"), 10)]
    assert _stopped(s, "v", 1) == []
    assert s.tick(11) == [started("p", [("h0", 8), ("h1", 8)], True, 71)]
    for t in (12, 10 + GRACE, 20 + GRACE):
        assert s.tick(t) == [], t
    preemptions = [e for e in s.journal if type(e).__name__ == "WorkloadPreempted"]
    assert [(e.workload, e.by) for e in preemptions] == [("v", "p")]
