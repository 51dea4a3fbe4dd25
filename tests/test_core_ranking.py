"""Hierarchical fair-share ranking: level by level usage per share, then priority and submit time inside a leaf."""

from __future__ import annotations

import pytest
from core_helpers import DEEP, FLAT, HOUR, Sim, started

from scheduler.index.fair_share_order import Ranking, commitments


def _flat(shares_a: int, shares_b: int) -> tuple[tuple[str, int, tuple[str, ...]], ...]:
    return (("lab", 1, ("admin",)), ("lab/a", shares_a, ()), ("lab/b", shares_b, ()))


@pytest.mark.parametrize(
    ("shares_a", "shares_b", "history", "winner"),
    [
        # Equal shares: the leaf with no history goes first, whichever was submitted first.
        (1, 1, [("lab/a", 8, 600)], "wb"),
        (1, 1, [("lab/b", 8, 600)], "wa"),
        # Usage per share, not raw usage: a used twice as much but holds 3x the shares.
        (3, 1, [("lab/a", 8, 600), ("lab/b", 8, 300)], "wa"),
        (1, 3, [("lab/a", 8, 600), ("lab/b", 8, 300)], "wb"),
        # Both unused: the larger share wins the tie, then the name.
        (1, 2, [], "wb"),
        (2, 1, [], "wa"),
        (1, 1, [], "wa"),
    ],
)
def test_less_used_per_share_leaf_starts_first(shares_a, shares_b, history, winner):
    """When only one of two leaves' workloads fits, the leaf with lower usage/share starts first."""
    s = Sim(_flat(shares_a, shares_b), hosts=1)
    for leaf, gpus, seconds in history:
        s.run_history(leaf, gpus, seconds)
    s.at(HOUR)
    s.submit("wb", "lab/b", 8, 600)  # submitted first on purpose: time never crosses leaves
    s.submit("wa", "lab/a", 8, 600)
    assert s.tick() == [started(winner, [("h0", 8)], True, HOUR + 600)]


@pytest.mark.parametrize(
    ("history", "winner"),
    [
        # p1 (x, y) used 4800 in y, p2 (z) used 2400: p2 goes first although x never ran.
        ([("lab/p1/y", 8, 600), ("lab/p2/z", 8, 300)], "wz"),
        # p2 used more: p1 goes first, and inside p1 the unused x beats y.
        ([("lab/p1/y", 8, 300), ("lab/p2/z", 8, 600)], "wx"),
        # Only x used: at the root p1 is the more used program, so z wins.
        ([("lab/p1/x", 8, 300)], "wz"),
    ],
)
def test_ranking_is_decided_level_by_level(history, winner):
    """A leaf with zero usage still waits when its parent is more used than the parent's sibling."""
    s = Sim(DEEP, hosts=1)
    for leaf, gpus, seconds in history:
        s.run_history(leaf, gpus, seconds)
    s.at(HOUR)
    for name, leaf in (("wx", "lab/p1/x"), ("wy", "lab/p1/y"), ("wz", "lab/p2/z")):
        s.submit(name, leaf, 8, 600)
    assert s.tick() == [started(winner, [("h0", 8)], True, HOUR + 600)]


def test_leaf_order_walks_the_tree_depth_first_in_fair_share_order():
    """Ranking.leaf_order lists every leaf under its best-served parent first, siblings by usage/share."""
    s = Sim(DEEP, hosts=1)
    s.run_history("lab/p1/x", 8, 600)   # p1: 4800
    s.run_history("lab/p2/z", 8, 300)   # p2: 2400
    s.at(HOUR)
    r = Ranking(s.state, commitments(s.state))
    assert r.leaf_order() == ["lab/p2/z", "lab/p1/y", "lab/p1/x"]
    assert r.use["lab/p1"] == 4800 and r.use["lab/p2"] == 2400 and r.use["lab"] == 7200


@pytest.mark.parametrize(
    ("queue", "winner"),
    [
        # (name, priority, submit time)
        ([("p0", 0, 0), ("p2", 2, 5)], "p2"),            # priority beats submit time
        ([("early", 0, 0), ("late", 0, 5)], "early"),    # then submit time
        ([("first", 1, 5), ("second", 1, 5)], "first"),  # then log order
        ([("neg", -1, 0), ("zero", 0, 5)], "zero"),
        ([("mid", 2, 0), ("lo", 1, 0), ("hi", 3, 9)], "hi"),
    ],
)
def test_priority_then_submit_time_orders_a_leaf(queue, winner):
    """Inside one leaf a higher priority starts first, then the earlier submission, then log order."""
    s = Sim(hosts=1)
    for name, priority, t in queue:
        s.at(t).submit(name, "lab/a", 8, 60, priority=priority)
    t = s.now
    assert s.tick() == [started(winner, [("h0", 8)], True, t + 60)]


@pytest.mark.parametrize("priority", [1, 100, 10**6])
def test_priority_never_beats_a_better_ranked_leaf(priority):
    """A high-priority workload of an over-used leaf waits behind a low-priority one of an under-used leaf."""
    s = Sim(hosts=1)
    s.run_history("lab/a", 8, 300)
    s.at(HOUR)
    s.submit("a-high", "lab/a", 8, 60, priority=priority)
    s.at(HOUR + 5)
    s.submit("b-low", "lab/b", 8, 60, priority=-5)
    assert s.tick() == [started("b-low", [("h0", 8)], True, HOUR + 65)]


def test_each_admission_moves_its_leaf_down_the_order():
    """Within one cycle a start commits its minimum runtime, so the next free host goes to the other leaf."""
    s = Sim(hosts=2)
    s.submit("a1", "lab/a", 8, 600)
    s.submit("a2", "lab/a", 8, 600)
    s.submit("b1", "lab/b", 8, 600)
    assert s.tick() == [
        started("a1", [("h0", 8)], True, 600),
        started("b1", [("h1", 8)], True, 600),
    ]


def test_running_commitment_counts_as_usage():
    """A leaf whose workload just started (nothing charged yet) ranks behind an idle sibling."""
    s = Sim(hosts=2)
    s.submit("a1", "lab/a", 4, 3600)
    assert s.tick() == [started("a1", [("h0", 4)], True, 3600)]
    r = Ranking(s.state, commitments(s.state))
    assert r.use["lab/a"] == 4 * 3600 and r.use["lab/b"] == 0
    s.submit("a2", "lab/a", 8, 60)
    s.submit("b2", "lab/b", 8, 60)
    s.submit("b3", "lab/b", 8, 60)
    # b goes first and takes the whole free host; a2 and b3 find no whole host left.
    assert s.tick() == [started("b2", [("h1", 8)], True, 60)]


def test_ranking_is_deterministic_across_engines():
    """Two engines fed the same inputs make identical decisions, ties included."""
    logs = []
    for _ in range(2):
        s = Sim(FLAT, hosts=3)
        for i in range(6):
            s.submit(f"a{i}", "lab/a", 4, 60 * (i + 1), priority=i % 2)
            s.submit(f"b{i}", "lab/b", 4, 60 * (i + 1), priority=i % 3)
        out = [s.tick(t) for t in (0, 300, 600, 900)]
        logs.append((out, s.state.fingerprint()))
    assert logs[0] == logs[1]
    assert logs[0][0][0]  # the first cycle did start work


@pytest.mark.parametrize(
    ("at", "a_usage", "winner"),
    [
        # a's hour [0, 3600) is bucket 0; b's half hour [3600, 5400) is bucket 1. A 2-hour
        # window at t covers the buckets from (t - 7200) // 3600 + 1 on.
        (7199, 8 * 3600, "wb"),   # both buckets still in: a used more
        (7200, 0, "wa"),          # bucket 0 just left: a used nothing any more
    ],
)
def test_usage_leaves_the_lookback_window_at_its_bucket_edge(at, a_usage, winner):
    """Usage older than the window stops counting exactly one bucket after the window passes it."""
    s = Sim(hosts=1, window_s=2 * HOUR, bucket_s=HOUR, fair_share_period_s=1)
    s.run_history("lab/a", 8, HOUR)
    s.run_history("lab/b", 8, HOUR // 2)
    s.at(at)
    assert (s.state.usage.usage("lab/a", at), s.state.usage.usage("lab/b", at)) == \
        (a_usage, 8 * HOUR // 2)
    s.submit("wb", "lab/b", 8, 60)
    s.submit("wa", "lab/a", 8, 60)
    assert s.tick() == [started(winner, [("h0", 8)], True, at + 60)]
