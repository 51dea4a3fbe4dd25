"""Preemption: the cheapest victim set that really places the best-ranked blocked workload, and no thrash."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from core_helpers import Sim, preempted, started

# Victim kinds: (min runtime, resumable). Allocated victims run in lab/b from t=0 with a
# 60 s minimum runtime, so by t=600 they are past protection and b is the more used leaf.
KINDS = {
    "unalloc": (0, False),
    "unalloc-resumable": (0, True),
    "alloc": (60, False),
    "alloc-resumable": (60, True),
    "alloc-protected": (3600, False),
}


def _two_victims(x: str, y: str) -> Sim:
    """h0 runs victim ``x`` and h1 runs victim ``y`` (both 8 GPUs, lab/b); it is t=600."""
    s = Sim(hosts=2)
    for name, kind in (("x", x), ("y", y)):
        min_runtime, resumable = KINDS[kind]
        s.submit(name, "lab/b", 8, min_runtime, resumable=resumable)
        out = s.tick()
        assert [e[:2] for e in out] == [("started", name)], out
    s.at(600)
    return s


@pytest.mark.parametrize(
    ("x", "y", "victim", "reason"),
    [
        ("alloc-resumable", "unalloc", "y", "reclaim_unallocated"),      # unallocated first
        ("unalloc", "alloc-resumable", "x", "reclaim_unallocated"),
        ("unalloc", "unalloc-resumable", "y", "reclaim_unallocated"),    # then resumable
        ("unalloc-resumable", "unalloc", "x", "reclaim_unallocated"),
        ("alloc", "alloc-resumable", "y", "fair_share"),                 # allocated: resumable
        ("alloc-resumable", "alloc", "x", "fair_share"),
        ("alloc-protected", "alloc", "y", "fair_share"),                 # never the protected
        ("alloc", "alloc-protected", "x", "fair_share"),
    ],
)
def test_cheapest_victim_is_chosen(x, y, victim, reason):
    """Unallocated before allocated, resumable before not, and never a protected workload."""
    s = _two_victims(x, y)
    s.submit("p", "lab/a", 8, 60)
    resumable = KINDS[x if victim == "x" else y][1]
    host = "h0" if victim == "x" else "h1"
    assert s.tick() == [
        preempted(victim, reason, "p", resumable),
        started("p", [(host, 8)], True, 660),
    ]
    assert s.status(victim) == ("pending" if resumable else "preempted")


def test_fewest_gpus_then_fewest_victims():
    """The plan frees only what is needed: one 4-GPU victim rather than an 8-GPU one."""
    s = Sim(hosts=2)
    s.submit("prot", "lab/b", 4, 3600)
    s.tick()
    s.submit("u4", "lab/b", 4, 0)
    s.submit("u8", "lab/b", 8, 0)
    assert s.tick() == [
        started("u4", [("h0", 4)], False, 0),
        started("u8", [("h1", 8)], False, 0),
    ]
    s.at(10).submit("p", "lab/a", 4, 60)
    assert s.tick() == [
        preempted("u4", "reclaim_unallocated", "p", False),
        started("p", [("h0", 4)], True, 70),
    ]


def test_one_big_victim_beats_two_small_ones():
    """Between two hosts freeing 8 GPUs, the one with fewer victims is chosen."""
    s = Sim(hosts=2)
    s.submit("u4a", "lab/b", 4, 0)
    s.submit("u4b", "lab/b", 4, 0)
    s.submit("u8", "lab/b", 8, 0)
    assert s.tick() == [
        started("u4a", [("h0", 4)], False, 0),
        started("u4b", [("h0", 4)], False, 0),
        started("u8", [("h1", 8)], False, 0),
    ]
    s.at(10).submit("p", "lab/a", 8, 60)
    assert s.tick() == [
        preempted("u8", "reclaim_unallocated", "p", False),
        started("p", [("h1", 8)], True, 70),
    ]


@pytest.mark.parametrize(
    ("setup", "ask"),
    [
        # h0: 4 protected + 4 unallocated; freeing the 4 still leaves 8 short.
        ([("prot", 4, 3600), ("u", 4, 0)], (8, 1)),
        # A 2 x 8 gang: one host could be freed, the other holds protected work.
        ([("prot", 8, 3600), ("u", 8, 0)], (16, 2)),
    ],
)
def test_no_preemption_that_would_not_place_the_preemptor(setup, ask):
    """Nothing is preempted when the freed GPUs still would not place the candidate."""
    hosts = ask[1]
    s = Sim(hosts=hosts)
    for name, gpus, min_runtime in setup:
        s.submit(name, "lab/b", gpus, min_runtime)
    out = s.tick()
    assert [e[1] for e in out] == [n for n, _, _ in setup]
    gpus, hosts = ask
    s.at(10).submit("p", "lab/a", gpus, 60, hosts=hosts)
    assert s.tick() == []
    assert s.running() == sorted(n for n, _, _ in setup)


@pytest.mark.parametrize(
    ("a_history_s", "expected"),
    [
        # a has no usage: b (4800 GPU-s by now) ranks worse, its workload is taken.
        (0, [preempted("wb", "fair_share", "wa", True), started("wa", [("h0", 8)], True, 3660)]),
        # a used far more than b: b's allocation ranks better and keeps its GPUs.
        (3000, []),
    ],
)
def test_fair_share_preemption_needs_a_worse_ranked_victim(a_history_s, expected):
    """An allocated workload past protection is taken only by a better-ranked allocation."""
    s = Sim(hosts=1)
    if a_history_s:
        s.run_history("lab/a", 8, a_history_s)
    s.at(3000)
    s.submit("wb", "lab/b", 8, 60, resumable=True)
    assert s.tick()[-1][:2] == ("started", "wb")
    s.at(3600).submit("wa", "lab/a", 8, 60)
    assert s.tick() == expected


@pytest.mark.parametrize(
    ("victim_priority", "preemptor_priority", "expected"),
    [
        (0, 1, [preempted("low", "priority", "high", False), started("high", [("h0", 8)], True, 660)]),
        (0, 0, []),
        (2, 1, []),
    ],
)
def test_same_leaf_preemption_needs_a_lower_priority(victim_priority, preemptor_priority, expected):
    """Inside one leaf a workload past protection is preempted only for a higher-priority one."""
    s = Sim(hosts=1)
    s.submit("low", "lab/a", 8, 60, priority=victim_priority)
    s.tick()
    s.at(600).submit("high", "lab/a", 8, 60, priority=preemptor_priority)
    assert s.tick() == expected


def test_priority_preemption_is_not_blocked_by_another_leafs_failed_search():
    """A leaf's higher-priority workload still takes its lower-priority sibling's GPUs when a better-ranked leaf could not preempt."""
    s = Sim(hosts=1)
    s.run_history("lab/a", 8, 600)                # a: 4800 GPU-s, t 0..600
    s.at(600).submit("low", "lab/b", 8, 60)
    s.tick()
    s.at(1200)                                   # b: 4800 GPU-s too: a tie, a ranks first
    s.submit("wa", "lab/a", 8, 60)               # may not take b's GPUs (not less used)
    s.submit("high", "lab/b", 8, 60, priority=5)  # may take low's: same leaf, higher priority
    assert s.tick() == [
        preempted("low", "priority", "high", False),
        started("high", [("h0", 8)], True, 1260),
    ]


@pytest.mark.parametrize("resumable", [True, False])
def test_resumable_victims_are_requeued_others_end(resumable):
    """A preempted resumable workload waits again and restarts later; a non-resumable one ends as preempted."""
    s = Sim(hosts=1)
    s.submit("v", "lab/b", 8, 0, resumable=resumable)
    s.tick()
    s.at(10).submit("p", "lab/a", 8, 60)
    assert s.tick()[0] == preempted("v", "reclaim_unallocated", "p", resumable)
    w = s.state.workloads.all["v"]
    assert (w.status, w.preemptions, w.placement) == (
        "pending" if resumable else "preempted", 1, ())
    s.at(100).finish("p")
    assert s.tick() == ([started("v", [("h0", 8)], False, 100)] if resumable else [])


# -- no thrash -------------------------------------------------------------------------


def _thrash_fs_period() -> tuple[Sim, int]:
    """P preempts V mid fair-share period; more cycles follow inside the same period."""
    s = Sim(hosts=1)
    s.submit("hb", "lab/b", 8, 60)
    s.tick()
    s.at(125).finish("hb")                        # b: 1000 GPU-s
    s.at(490).submit("V", "lab/b", 8, 1, resumable=True)
    assert s.tick() == [started("V", [("h0", 8)], True, 491)]
    s.at(500).submit("P", "lab/a", 8, 60, resumable=True)
    return s, 570  # P's protection ended at 560; still the period that began at 300


def _thrash_initial_share() -> tuple[Sim, int]:
    """P preempts V; the next cycle comes right when P's protection ends."""
    s = Sim(hosts=1, fair_share_period_s=1)
    s.submit("V", "lab/b", 8, 5, resumable=True)
    assert s.tick() == [started("V", [("h0", 8)], True, 5)]
    s.at(50).submit("P", "lab/a", 8, 60, resumable=True)
    return s, 110


def test_a_marginal_fair_share_lead_does_not_preempt():
    """P's side is less used now, but not once its own commitment counts: no preemption yet, and no ping-pong later."""
    s, next_tick = _thrash_initial_share()
    assert s.tick() == []  # at 50: V used 400 GPU-s, P would commit 480
    assert s.running() == ["V"]
    out = s.tick(next_tick)  # at 110 V has used 880 > 480: now P's side is really behind
    assert out[0] == preempted("V", "fair_share", "P", True)
    assert preempted("P", "fair_share", "V", True) not in s.tick(next_tick + 60)
    assert s.running() == ["P"]


def _thrash_plain(next_tick: int) -> Callable[[], tuple[Sim, int]]:
    """P preempts V at a period boundary; the next cycle comes at ``next_tick``."""

    def build() -> tuple[Sim, int]:
        s = Sim(hosts=1)
        s.submit("V", "lab/b", 8, 60, resumable=True)
        s.tick()
        s.at(600).submit("P", "lab/a", 8, 60, resumable=True)
        return s, next_tick

    return build


@pytest.mark.parametrize(
    "scenario",
    [_thrash_plain(601), _thrash_plain(660), _thrash_plain(900), _thrash_fs_period],
    ids=["plain-601", "plain-660", "plain-900", "fs-period"],
)
def test_victim_does_not_preempt_its_preemptor_on_the_next_pass(scenario):
    """Right after P preempts V for fair share, V must not take P's GPUs back in the next cycle."""
    s, next_tick = scenario()
    out = s.tick()
    assert out[0] == preempted("V", "fair_share", "P", True), out
    assert out[1][:2] == ("started", "P")
    nxt = s.tick(next_tick)
    assert preempted("P", "fair_share", "V", True) not in nxt, nxt
    assert s.running() == ["P"]
