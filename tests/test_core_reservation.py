"""Large gangs do not starve: blocked gangs reserve the hosts that free up soonest, backfilled only by work that leaves in time."""

from __future__ import annotations

import pytest
from core_helpers import Sim, preempted, started


def _blocked_gang(**policy) -> Sim:
    """h0 and h1 hold protected b work (until 1000 and 2000), h2 is free; a's 2 x 8 gang G waits."""
    s = Sim(hosts=3, **policy)
    s.submit("b1", "lab/b", 8, 1000)
    s.submit("b2", "lab/b", 8, 2000)
    assert s.tick() == [
        started("b1", [("h0", 8)], True, 1000),
        started("b2", [("h1", 8)], True, 2000),
    ]
    s.at(10).submit("G", "lab/a", 16, 60, hosts=2)
    return s


def test_blocked_gang_does_not_take_or_preempt_anything_early():
    """A gang that cannot be placed because its victims are protected starts nothing and preempts nothing."""
    s = _blocked_gang()
    assert s.tick() == []
    assert s.running() == ["b1", "b2"]
    assert s.status("G") == "pending"


@pytest.mark.parametrize(
    ("leaf", "min_runtime", "at_10"),
    [
        # Ends its protection (and ranks worse) before the reservation ends: backfills h2.
        ("lab/b", 500, [("reserved", "G", ("h0", "h2"), 1000),
                        started("s", [("h2", 8)], True, 510)]),
        ("lab/b", 990, [("reserved", "G", ("h0", "h2"), 1000),
                        started("s", [("h2", 8)], True, 1000)]),
        # Would still be protected at 1000: it may not use the reserved hosts.
        ("lab/b", 991, [("reserved", "G", ("h0", "h2"), 1000)]),
        ("lab/a", 2000, [("reserved", "G", ("h0", "h2"), 1000)]),
    ],
)
def test_reserved_hosts_only_take_work_that_leaves_in_time(leaf, min_runtime, at_10):
    """The gang reserves the hosts free soonest until its victims' protection ends; later work backfills only if preemptible by then."""
    s = _blocked_gang()
    s.submit("s", leaf, 8, min_runtime)
    assert s.tick() == at_10
    assert s.state.reservations["G"] == (("h0", "h2"), 1000, 10)


@pytest.mark.parametrize(
    ("leaf", "min_runtime"),
    [
        ("lab/b", 500),     # backfill from the worse-ranked leaf
        ("lab/b", 0),       # unallocated backfill: preemptible at once
        ("lab/a", 500),     # backfill from the gang's own leaf, same priority
    ],
)
def test_gang_starts_when_its_reservation_ends(leaf, min_runtime):
    """At the reservation's ``until`` the gang starts on the reserved hosts, taking back any backfill."""
    s = _blocked_gang()
    s.submit("s", leaf, 8, min_runtime)
    s.tick()
    assert s.running() == ["b1", "b2", "s"]
    assert s.tick(999) == []
    out = s.tick(1000)
    assert sorted(e for e in out if e[0] == "preempted") == sorted([
        preempted("b1", "fair_share", "G", False),
        preempted("s", "reclaim_unallocated" if min_runtime == 0 else "reservation", "G", False),
    ])
    assert out[-1] == started("G", [("h0", 8), ("h2", 8)], True, 1060)
    assert s.running() == ["G", "b2"]


def test_better_ranked_short_work_backfills_and_is_taken_back_at_until():
    """Short work of a leaf the gang could never preempt by fair share may backfill; at ``until`` the gang takes its host back."""
    tree = (("lab", 1, ("admin",)), ("lab/a", 1, ()), ("lab/b", 1, ()), ("lab/c", 1, ()))
    s = Sim(tree, hosts=3)
    s.submit("b1", "lab/b", 8, 1000)
    s.submit("b2", "lab/b", 8, 2000)
    s.tick()
    s.at(10).submit("G", "lab/a", 16, 60, hosts=2)
    s.submit("c-short", "lab/c", 4, 100)  # lab/c has used nothing: it ranks ahead of lab/a
    assert s.tick() == [
        ("reserved", "G", ("h0", "h2"), 1000),
        started("c-short", [("h2", 4)], True, 110),
    ]
    out = s.tick(1000)
    assert preempted("c-short", "reservation", "G", False) in out
    assert out[-1] == started("G", [("h0", 8), ("h2", 8)], True, 1060)


def test_reservation_binds_work_of_a_third_leaf():
    """A reservation binds later work of every leaf: a long job cannot squat a reserved host, a short one may."""
    tree = (("lab", 1, ("admin",)), ("lab/a", 1, ()), ("lab/b", 1, ()), ("lab/c", 1, ()))
    s = Sim(tree, hosts=3)
    s.run_history("lab/c", 8, 2000, name="c-old")  # lab/c is the more used side: G may preempt it
    t0 = s.now
    s.submit("b1", "lab/b", 8, 1000)
    s.submit("b2", "lab/b", 8, 2000)
    s.tick()
    s.at(t0 + 10).submit("G", "lab/a", 16, 60, hosts=2)
    s.submit("c-long", "lab/c", 4, 5000)
    s.submit("c-short", "lab/c", 4, 100)
    assert s.tick() == [
        ("reserved", "G", ("h0", "h2"), t0 + 1000),
        started("c-short", [("h2", 4)], True, t0 + 110),
    ]


def test_no_reservation_without_a_knob():
    """With ``reservations=0`` blocked gangs hold nothing and small work takes the free host."""
    s = _blocked_gang(reservations=0)
    s.submit("s", "lab/b", 8, 5000)
    assert s.tick() == [started("s", [("h2", 8)], True, 5010)]
    assert s.state.reservations == {}


def test_reservation_lapses_when_the_gang_is_cancelled():
    """Once the gang is cancelled its hosts take any work again."""
    s = _blocked_gang()
    s.submit("s", "lab/b", 8, 5000)
    assert s.tick() == [("reserved", "G", ("h0", "h2"), 1000)]
    s.at(20).cancel("G", "a")
    assert s.tick() == [started("s", [("h2", 8)], True, 5020)]
