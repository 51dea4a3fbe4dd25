"""Allocated vs unallocated occupancy: who is charged, who is protected, who gets free GPUs first."""

from __future__ import annotations

import pytest
from core_helpers import HOUR, Sim, preempted, started


@pytest.mark.parametrize(
    ("gpus", "min_runtime", "run_for"),
    [
        (1, 60, 60),          # exactly the minimum runtime
        (4, 600, 1000),       # charged past the minimum runtime too
        (8, 3600, 3 * HOUR),
        (2, 1, 10 * HOUR),
    ],
)
def test_allocated_work_is_charged_while_it_runs(gpus, min_runtime, run_for):
    """An allocated workload charges gpus x seconds run to its leaf, and nothing after it finishes."""
    s = Sim(hosts=1)
    s.submit("w", "lab/a", gpus, min_runtime)
    assert s.tick() == [started("w", [("h0", gpus)], True, min_runtime)]
    s.at(run_for)
    assert s.charged("lab/a") == gpus * run_for
    s.finish("w")
    s.tick(run_for + 5 * HOUR)
    assert s.charged("lab/a") == gpus * run_for
    assert s.charged("lab/b") == 0


@pytest.mark.parametrize("run_for", [0, 1, HOUR, 50 * HOUR])
def test_unallocated_work_is_never_charged(run_for):
    """A workload with minimum runtime 0 starts unallocated and leaves its leaf's usage at zero."""
    s = Sim(hosts=1)
    s.at(100).submit("u", "lab/a", 8, 0)
    assert s.tick() == [started("u", [("h0", 8)], False, 100)]
    s.at(100 + run_for)
    assert s.charged("lab/a") == 0
    assert s.state.usage.usage("lab/a", s.now) == 0
    s.finish("u")
    assert s.charged("lab/a") == 0


@pytest.mark.parametrize(
    ("tick_at", "expect_preemption"),
    [
        (300, False),   # protected (a's final share would still be lower, but protection holds)
        (599, False),   # one second before start + minimum runtime
        (600, True),    # protection ended: fair share takes it
    ],
)
def test_allocated_work_is_protected_until_start_plus_min_runtime(tick_at, expect_preemption):
    """A better-ranked leaf cannot preempt an allocated workload before start + minimum runtime."""
    s = Sim(hosts=1)
    s.submit("wb", "lab/b", 8, 600)
    assert s.tick() == [started("wb", [("h0", 8)], True, 600)]
    s.at(100).submit("wa", "lab/a", 8, 60)
    assert s.tick() == []
    out = s.tick(tick_at)
    if expect_preemption:
        assert out == [
            preempted("wb", "fair_share", "wa", False),
            started("wa", [("h0", 8)], True, tick_at + 60),
        ]
        assert s.status("wb") == "preempted"
    else:
        assert out == []
        assert s.running() == ["wb"]


@pytest.mark.parametrize("a_history", [0, 8 * 600, 8 * 6000])
def test_unallocated_work_is_never_protected(a_history):
    """Any allocated workload, even of an over-used leaf, reclaims GPUs lent to unallocated work at once."""
    s = Sim(hosts=1)
    if a_history:
        s.run_history("lab/a", 8, a_history // 8)
    t = s.now
    s.submit("u", "lab/b", 8, 0)
    assert s.tick() == [started("u", [("h0", 8)], False, t)]
    s.submit("w", "lab/a", 8, 60)
    assert s.tick() == [
        preempted("u", "reclaim_unallocated", "w", False),
        started("w", [("h0", 8)], True, t + 60),
    ]


def test_free_gpus_go_to_allocated_work_before_unallocated():
    """An unallocated workload of a better-ranked leaf, submitted first and with a higher priority, waits for allocated work."""
    s = Sim(hosts=1)
    s.run_history("lab/b", 8, 300)
    s.at(HOUR)
    s.submit("u", "lab/a", 8, 0, priority=9)
    s.submit("w", "lab/b", 8, 60)
    assert s.tick() == [started("w", [("h0", 8)], True, HOUR + 60)]
    assert s.status("u") == "pending"


@pytest.mark.parametrize(
    ("blocked_gpus", "unallocated_gpus", "expected"),
    [
        # The allocated 8-GPU workload cannot use 4 GPUs, so unallocated work may.
        (8, 4, [started("u", [("h0", 4)], False, 10)]),
        # Unallocated work never takes what it cannot fit either.
        (8, 8, []),
        # A 4-GPU allocated workload can use them: it gets them, not unallocated work.
        (4, 4, [started("w", [("h0", 4)], True, 70)]),
    ],
)
def test_unallocated_work_starts_only_on_gpus_allocated_work_cannot_use(
    blocked_gpus, unallocated_gpus, expected
):
    """Unallocated work fills only the GPUs no pending allocated workload can use now."""
    s = Sim(hosts=1)
    s.submit("p", "lab/a", 4, 3600)  # protected: half the host stays busy
    s.tick()
    s.at(10)
    s.submit("u", "lab/a", unallocated_gpus, 0)
    s.submit("w", "lab/b", blocked_gpus, 60)
    assert s.tick() == expected


def test_unallocated_work_fills_leftovers_in_the_same_cycle():
    """After allocated work is placed, what is left is lent to unallocated work in the same cycle."""
    s = Sim(hosts=2)
    s.submit("u", "lab/a", 8, 0)
    s.submit("w", "lab/b", 4, 60)
    assert s.tick() == [
        started("w", [("h0", 4)], True, 60),
        started("u", [("h1", 8)], False, 0),
    ]


# -- no idle GPU beside work that fits (issue 8, section 4) ---------------------------------


def test_unallocated_work_deep_in_a_shared_queue_still_gets_gpus_that_fit_it():
    """100 evals that fit nowhere do not hide the 101st, which fits the 4 GPUs left free."""
    s = Sim(hosts=2)
    s.submit("b-full", "lab/b", 8, 3600)
    s.submit("b-half", "lab/b", 4, 3600)
    s.tick()
    s.at(10)
    for i in range(100):
        s.submit(f"eval8-{i:03d}", "lab/a", 8, 0)
    s.submit("eval4", "lab/a", 4, 0)
    assert s.tick() == [started("eval4", [("h1", 4)], False, 10)]


def test_allocated_work_behind_blocked_work_of_another_shape_still_starts():
    """queue_depth bounds the workloads read past a failure, per shape: a fitting shape is always read."""
    s = Sim(hosts=2, queue_depth=2)
    # Each host: 4 GPUs of b past protection (takeable), the rest protected; h1 keeps 1 free.
    s.submit("b0-old", "lab/b", 4, 60)
    s.submit("b0-prot", "lab/b", 4, 7200)
    s.submit("b1-old", "lab/b", 4, 60)
    s.submit("b1-prot", "lab/b", 3, 7200)
    s.tick()
    assert s.state.cluster_state.hosts["h1"].free == 1
    s.at(600)
    for i in range(3):   # each could preempt 8 GPUs by the cheap bound, but no host frees 8
        s.submit(f"a8-{i}", "lab/a", 8, 600)
    s.submit("a1", "lab/a", 1, 600)
    # (The first 8-GPU job, needing a whole host, reserves the one freeing soonest.)
    assert s.tick() == [("reserved", "a8-0", ("h0",), 7200), started("a1", [("h1", 1)], True, 1200)]
