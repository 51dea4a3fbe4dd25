"""Large gangs do not starve: blocked gangs reserve the hosts that free up soonest, backfilled only by work that leaves in time."""

from __future__ import annotations

from collections.abc import Container
from itertools import combinations
from typing import cast

import pytest
from core_helpers import Sim, preempted, started
from sim_helpers import shipped_log

from projections.workloads import Workload
from scheduler.index.host_free_times import HostFreeTimes
from scheduler.policy import cycle as cycle_mod
from scheduler.policy.placement import Capacity
from scheduler.policy.reservations import ready_times
from scheduler.policy.rules import ANY_SPAN, BudgetRule, Rule


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


# -- reservations hold (issue 8, section 2) --------------------------------------------------

THREE = (("lab", 1, ("admin",)), ("lab/a", 1, ()), ("lab/b", 1, ()), ("lab/c", 1, ()))


def test_a_due_reservation_is_not_taken_by_better_ranked_work_first():
    """At until the holder gets its hosts, although better-ranked work waiting for them comes first in the order."""
    s = Sim(THREE, hosts=2)
    s.run_history("lab/a", 1, 100, name="a-old")        # a used a little: c (nothing) ranks first
    t0 = s.now
    s.submit("b1", "lab/b", 8, 1000)
    assert s.tick() == [started("b1", [("h0", 8)], True, t0 + 1000)]
    s.at(t0 + 10).submit("G", "lab/a", 16, 60, hosts=2)
    s.submit("s", "lab/b", 8, 500)                     # short: it may backfill h1
    assert s.tick() == [("reserved", "G", ("h0", "h1"), t0 + 1000),
                        started("s", [("h1", 8)], True, t0 + 510)]
    s.at(t0 + 20).submit("c1", "lab/c", 8, 990)         # protected past until: it waits
    assert s.tick() == []
    out = s.tick(t0 + 1000)
    assert out[-1] == started("G", [("h0", 8), ("h1", 8)], True, t0 + 1060)
    assert s.status("c1") == "pending"


def test_two_reservations_of_one_size_never_share_a_host():
    """With two slots, the second blocked gang reserves other hosts than the first, not the same ones."""
    s = Sim(THREE, hosts=4, reservations=2)
    for i, until in enumerate((1000, 2000, 3000, 4000)):
        s.submit(f"b{i}", "lab/b", 8, until)
    s.tick()
    s.at(10).submit("G1", "lab/a", 16, 60, hosts=2)
    s.submit("G2", "lab/c", 16, 60, hosts=2)
    s.submit("s", "lab/b", 1, 60)                      # something that would place: reservations settle
    s.finish("b0")
    out = s.tick()
    reserved = {e[1]: (e[2], e[3]) for e in out if e[0] == "reserved"}
    assert reserved == {"G1": (("h0", "h1"), 2000), "G2": (("h2", "h3"), 4000)}


def test_each_size_class_has_its_own_slot():
    """One slot serves a 2-host gang and another a single whole-host job: neither waits for the other's."""
    s = Sim(THREE, hosts=3)
    for i, until in enumerate((1000, 2000, 3000)):
        s.submit(f"b{i}", "lab/b", 7, until)         # one GPU free per host: room for a trigger
    s.tick()
    s.at(10).submit("G", "lab/a", 16, 60, hosts=2)
    s.submit("one", "lab/c", 8, 60)
    s.submit("s", "lab/b", 1, 60)                      # places: the reservations settle first
    out = s.tick()
    reserved = {e[1]: (e[2], e[3]) for e in out if e[0] == "reserved"}
    assert reserved == {"G": (("h0", "h1"), 2000), "one": (("h2",), 3000)}


def test_a_holder_that_can_preempt_its_way_in_elsewhere_does_not_wait():
    """A reservation holder takes unallocated work elsewhere as soon as that host could hold it."""
    s = Sim(THREE, hosts=2)
    s.submit("b1", "lab/b", 7, 1000)
    s.submit("b2", "lab/b", 4, 2000)
    s.submit("u", "lab/c", 4, 0)
    assert [e[1] for e in s.tick()] == ["b1", "b2", "u"]
    s.at(10).submit("W", "lab/a", 8, 60)
    s.submit("s", "lab/b", 1, 60)                      # backfills h0's free GPU
    assert s.tick() == [("reserved", "W", ("h0",), 1000), started("s", [("h0", 1)], True, 70)]
    s.at(100).finish("b2")                              # h1 now holds only unallocated work
    assert s.tick() == [
        preempted("u", "reclaim_unallocated", "W", False),
        started("W", [("h1", 8)], True, 160),
    ]
    assert "W" not in s.state.reservations


def _plain_ready_times(w: Workload, capacity: Capacity, frees: HostFreeTimes, rule: BudgetRule,
                       gone: Container[str], now: int) -> dict[str, int]:
    """``ready_times`` without its bounds: every host walked to its crossing or its end."""
    out: dict[str, int] = {}
    lists = {h: listed for h, (_, listed) in frees.per_host.items()}
    for name, free in capacity.free.items():
        held = capacity.reserved.get(name)
        if held is not None and held[1] != w.id:
            continue
        if free >= w.gpus_per_host:
            out[name] = now
            continue
        got = free
        for t, g, wid, other in lists.get(name, ()):
            if wid not in gone and rule(other) is not None:
                got += g
                if got >= w.gpus_per_host:
                    out[name] = max(t, now)
                    break
    return out


@pytest.mark.parametrize(("name", "days"), [("ai2-month", 2.0), ("ai2-month-heavy", 2.0),
                                            ("demo", None)])
def test_ready_times_stops_early_but_answers_as_the_plain_walk(name, days, monkeypatch):
    """Walks that stop once the work they passed over rules the host out give every plan the same hosts and times."""
    real = cycle_mod.ready_times
    calls: list[int] = []
    wrong: list[str] = []

    def compared(w, capacity, frees, rule, gone, now, sole=None):  # type: ignore[no-untyped-def]
        out = real(w, capacity, frees, rule, gone, now, sole)  # (narrowed by sole: the same too)
        calls.append(len(out))
        if list(out.items()) != list(_plain_ready_times(w, capacity, frees, rule, gone, now).items()):
            wrong.append(w.id)
        return out

    monkeypatch.setattr(cycle_mod, "ready_times", compared)
    shipped_log(name, days)
    assert not wrong, wrong[:5]
    assert len(calls) > 20
    assert any(n > 0 for n in calls)


class _Takes(Rule):
    """A rule that may take exactly the workloads named."""

    def __init__(self, ids: set[str]) -> None:
        super().__init__(ANY_SPAN)
        self.ids = ids

    def reason(self, v: Workload) -> str | None:
        return "priority" if v.id in self.ids else None


def test_ready_times_answers_as_the_plain_walk_for_every_need_and_rule():
    """Every subset of takeable work, every need, with and without a stopped workload and a hold.

    Planning asks only for whole hosts, where no host has spare GPUs; ``allot
    explain`` asks for any need, where the walks may pass over some work and
    still cross.
    """
    s = Sim(hosts=2)
    for wid, gpus, min_runtime in (("a1", 2, 100), ("a2", 3, 300), ("b1", 2, 200), ("u1", 1, 0),
                                   ("b2", 4, 50), ("u2", 2, 0)):
        s.submit(wid, "lab/a" if wid[0] == "a" else "lab/b", gpus, min_runtime)
    s.tick()
    state = s.state
    ids = sorted(state.workloads.running)
    assert len(ids) == 6
    assert all(len(h.workloads) > 1 for h in state.cluster_state.hosts.values())
    frees = HostFreeTimes.of(state)
    compared = 0
    for held in (False, True):
        capacity = Capacity(state)
        if held:
            capacity.reserve("h1", 500, "X")
        for k in range(len(ids) + 1):
            for takeable in combinations(ids, k):
                rule = cast("BudgetRule", _Takes(set(takeable)))
                for gone in ((), (ids[0],), (ids[3],)):
                    for need in range(1, 9):
                        w = Workload(id="W", budget="lab/a", user="a", gpus=need, hosts=1,
                                     gpus_per_host=need, min_runtime_s=60, resumable=False,
                                     priority=0, kind="training", submitted_at=0, seq=0,
                                     submit_event="e")
                        for now in (0, 150):
                            want = _plain_ready_times(w, capacity, frees, rule, set(gone), now)
                            got = ready_times(w, capacity, frees, rule, set(gone), now)
                            assert list(got.items()) == list(want.items()), (takeable, gone, need)
                            compared += 1
    assert compared > 5000
