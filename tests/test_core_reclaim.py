"""Guaranteed shares and borrowing: ``preemption_rule = "reclaim"`` and ``borrowed_protection_s``.

A budget node is guaranteed its fraction of the GPUs present; work started
beyond it borrows. These tests pin the policy on small clusters: what is
protected, who may take borrowed GPUs back, and that nobody takes them back
the other way. Two cases are Kueue's fair-sharing preemption tests
(``preemption_fair_test.go``), "preempt huge workload if there is no other
option" among them.
"""

from __future__ import annotations

from core_helpers import DEEP, HOUR, Sim, started

from scheduler.policy.guarantee import Guarantees, protection_end

RECLAIM = {"preemption_rule": "reclaim", "borrowed_protection_s": 0}


def _preempted(decisions: list[tuple[object, ...]]) -> list[tuple[object, ...]]:
    return [d for d in decisions if d[0] == "preempted"]


def test_a_start_within_the_guarantee_is_protected_for_its_minimum_runtime() -> None:
    s = Sim(hosts=2, borrowed_protection_s=600)  # 16 GPUs, lab/a guaranteed 8
    s.submit("a1", "lab/a", 8, HOUR)
    assert s.tick() == [started("a1", [("h0", 8)], True, HOUR)]


def test_a_start_beyond_the_guarantee_is_protected_only_for_borrowed_protection() -> None:
    s = Sim(hosts=2, borrowed_protection_s=600)
    s.submit("a1", "lab/a", 8, HOUR)
    s.submit("a2", "lab/a", 8, HOUR)
    out = s.tick()
    assert sorted(out) == sorted([started("a1", [("h0", 8)], True, HOUR),
                                  started("a2", [("h1", 8)], True, 600)])


def test_without_the_knob_every_funded_start_is_protected_for_its_minimum_runtime() -> None:
    s = Sim(hosts=2)
    s.submit("a1", "lab/a", 8, HOUR)
    s.submit("a2", "lab/a", 8, HOUR)
    assert {d[4] for d in s.tick()} == {HOUR}


def test_an_owner_takes_its_share_back_from_a_borrower_at_once() -> None:
    s = Sim(hosts=2, **RECLAIM)
    s.submit("a1", "lab/a", 8, HOUR)
    s.submit("a2", "lab/a", 8, HOUR)
    s.tick()
    s.at(60)
    s.submit("b1", "lab/b", 8, HOUR)
    out = s.tick()
    assert _preempted(out) == [("preempted", "a2", "reclaim", "b1", False)]
    assert ("started", "b1", (("h1", 8),), True, 60 + HOUR) in out


def test_work_within_its_share_is_not_taken_by_another_budget() -> None:
    # lab/b is far less used over the window, but lab/a holds only its guarantee.
    s = Sim(hosts=2, **RECLAIM)
    s.submit("a1", "lab/a", 8, 60)
    s.tick()
    s.submit("b0", "lab/b", 8, 60)
    s.tick()
    s.at(2 * HOUR)
    s.submit("b1", "lab/b", 8, 60)
    assert _preempted(s.tick()) == []
    assert s.status("a1") == "running"


def test_the_fair_share_rule_time_slices_the_same_work_away() -> None:
    # The same as above under the windowed rule: lab/b, less used, takes a1.
    s = Sim(hosts=2)
    s.submit("a1", "lab/a", 8, 60)
    s.tick()
    s.at(2 * HOUR)
    s.submit("b0", "lab/b", 8, 60)
    s.tick()
    s.submit("b1", "lab/b", 8, 60)
    assert [d[2] for d in _preempted(s.tick())] == ["fair_share"]


def test_a_reclaimer_that_would_borrow_itself_takes_nothing() -> None:
    s = Sim(hosts=2, **RECLAIM)
    s.submit("a1", "lab/a", 16, HOUR, hosts=2, gpus_per_host=8)
    s.tick()
    s.at(60)
    s.submit("b1", "lab/b", 16, HOUR, hosts=2, gpus_per_host=8)  # beyond lab/b's 8
    assert _preempted(s.tick()) == []


def test_kueue_preempt_huge_workload_if_there_is_no_other_option() -> None:
    # One leaf's 9-host gang holds a 9-host cluster; another leaf, using
    # nothing, asks for 2 hosts. Kueue preempts the huge workload; so does reclaim.
    s = Sim(hosts=9, **RECLAIM)
    s.submit("huge", "lab/a", 72, HOUR, hosts=9, gpus_per_host=8)
    s.tick()
    s.at(5 * HOUR)
    s.submit("small", "lab/b", 16, HOUR, hosts=2, gpus_per_host=8)
    out = s.tick()
    assert _preempted(out) == [("preempted", "huge", "reclaim", "small", False)]
    assert s.status("small") == "running"


def test_kueue_huge_workload_keeps_the_cluster_under_the_fair_share_rule() -> None:
    # The windowed rule never tears down a gang larger than the candidate's.
    s = Sim(hosts=9)
    s.submit("huge", "lab/a", 72, HOUR, hosts=9, gpus_per_host=8)
    s.tick()
    s.at(5 * HOUR)
    s.submit("small", "lab/b", 16, HOUR, hosts=2, gpus_per_host=8)
    assert _preempted(s.tick()) == []


def test_reclaimed_gpus_are_not_taken_back_the_other_way() -> None:
    # After b1 took its share back from a2, lab/a (asking again) holds its
    # guarantee and lab/b no more than its own: nothing moves, cycle after cycle.
    s = Sim(hosts=2, **RECLAIM)
    s.submit("a1", "lab/a", 8, HOUR, resumable=True)
    s.submit("a2", "lab/a", 8, HOUR, resumable=True)
    s.tick()
    s.at(60)
    s.submit("b1", "lab/b", 8, HOUR)
    assert _preempted(s.tick()) == [("preempted", "a2", "reclaim", "b1", True)]
    for t in range(2 * HOUR, 12 * HOUR, HOUR):
        assert _preempted(s.tick(t)) == []
    assert s.running() == ["a1", "b1"]


def test_guarantees_are_exact_fractions_of_the_gpus_present_down_the_tree() -> None:
    s = Sim(DEEP, hosts=3)  # 24 GPUs: p1 12 (x 6, y 6), p2 12 (z 12)
    s.submit("x1", "lab/p1/x", 6, HOUR)
    s.tick()
    g = Guarantees(s.state)
    assert g.fraction["lab/p1/x"] == (1, 4)
    assert g.within("lab/p1/x", 0) and not g.within("lab/p1/x", 1)
    assert g.within("lab/p1/y", 6) and not g.within("lab/p1/y", 7)
    assert g.node_within("lab/p1", 6) and not g.node_within("lab/p1", 7)
    assert not g.borrowing("lab/p1/x")
    g.take("lab/p1/x", 1)
    assert g.borrowing("lab/p1/x") and not g.borrowing("lab/p1")
    assert g.sides("lab/p1/x", "lab/p2/z") == ("lab/p1", "lab/p2")
    assert g.sides("lab/p1/x", "lab/p1/y") == ("lab/p1/x", "lab/p1/y")
    assert g.sides("lab/p1/x", "lab/p1/x") is None


def test_guarantees_leave_out_work_the_cycle_already_stopped() -> None:
    s = Sim(hosts=2)
    s.submit("a1", "lab/a", 8, HOUR)
    s.tick()
    assert Guarantees(s.state).held["lab/a"] == 8
    assert Guarantees(s.state, stopped={"a1"}).held.get("lab/a", 0) == 0


def test_protection_end_is_never_longer_than_the_minimum_runtime() -> None:
    assert protection_end(100, 60, False, 600) == 160
    assert protection_end(100, 6000, False, 600) == 700
    assert protection_end(100, 6000, True, 600) == 6100
    assert protection_end(100, 6000, False, None) == 6100


def test_a_gang_larger_than_its_guarantee_shares_borrowed_gpus_by_fair_share() -> None:
    # One 8-GPU host, lab/a and lab/b guaranteed 4 each: b1 (8 GPUs) cannot
    # reclaim (it would take lab/b past its own guarantee), so without the
    # fallback it would wait as long as a1 runs (here 30 days). a1 borrows, so
    # fair share decides: b1 gets in once lab/a's window use passes b1's
    # commitment, within one fair-share period.
    s = Sim(hosts=1, **RECLAIM)
    s.submit("a1", "lab/a", 8, HOUR)
    s.tick()
    s.at(600)
    s.submit("b1", "lab/b", 8, 600)
    preempted = []
    for t in range(600, 3 * HOUR, 300):
        preempted += _preempted(s.tick(t))
        if s.status("b1") == "running":
            break
    assert preempted == [("preempted", "a1", "fair_share", "b1", False)]
    assert t <= 600 + 2 * 300, t


def test_work_within_its_share_is_not_taken_by_the_fallback_either() -> None:
    # Two hosts: a1 holds lab/a's guarantee exactly (8 of 16), so b1 (16 GPUs,
    # past lab/b's 8) may take nothing from it, by reclaim or by fair share.
    s = Sim(hosts=2, **RECLAIM)
    s.submit("a1", "lab/a", 8, HOUR)
    s.tick()
    s.at(2 * HOUR)
    s.submit("b1", "lab/b", 16, 600)
    for t in range(2 * HOUR, 6 * HOUR, 300):
        assert _preempted(s.tick(t)) == []
    assert s.status("a1") == "running"
