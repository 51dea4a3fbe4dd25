"""The old priority scheduler (scheduler/policy/baseline.py), kept for side-by-side simulation: its documented rules."""

from __future__ import annotations

import pytest
from core_helpers import Sim, preempted, started


def _baseline(shares_a: int = 1, shares_b: int = 1, hosts: int = 4) -> Sim:
    tree = (("lab", 1, ("admin",)), ("lab/a", shares_a, ()), ("lab/b", shares_b, ()))
    return Sim(tree, hosts=hosts, scheduler="baseline")


@pytest.mark.parametrize(
    ("shares_a", "jobs", "opted_out"),
    [
        # 32 GPUs, a holds half: 16 non-preemptible GPUs, the rest runs preemptible.
        (1, [8, 8, 8], [True, True, False]),
        (1, [8, 4, 4, 8], [True, True, True, False]),
        # a holds 3/4: 24 GPUs.
        (3, [8, 8, 8, 8], [True, True, True, False]),
        # A job bigger than what is left of the limit runs preemptible; a smaller one still fits.
        (1, [8, 4, 8, 4], [True, True, False, True]),
    ],
)
def test_jobs_opt_out_up_to_the_team_limit(shares_a, jobs, opted_out):
    """A team's jobs run non-preemptible (protected until they end) while under its share, preemptible beyond it."""
    s = _baseline(shares_a)
    for i, gpus in enumerate(jobs):
        s.submit(f"a{i}", "lab/a", gpus, 60)
    out = s.tick()
    assert [e[1] for e in out] == [f"a{i}" for i in range(len(jobs))]
    assert [(e[3], e[4]) for e in out] == [(o, None if o else 0) for o in opted_out]


def test_over_limit_jobs_are_preempted_by_opt_out_jobs():
    """An opted-out job of another team preempts a preemptible over-limit job (reason priority)."""
    s = _baseline()
    for i in range(3):
        s.submit(f"a{i}", "lab/a", 8, 60)
    s.tick()
    s.submit("b0", "lab/b", 8, 60)
    assert s.tick(1) == [started("b0", [("h3", 8)], True, None)]
    s.submit("b1", "lab/b", 8, 60, priority=-1)   # even a LOW job, when it opts out
    assert s.tick(2) == [
        preempted("a2", "priority", "b1", False),
        started("b1", [("h2", 8)], True, None),
    ]


@pytest.mark.parametrize(
    ("victim_priority", "preemptor_priority", "preempts"),
    [(0, 1, True), (0, 0, False), (1, 0, False)],
)
def test_preemptible_jobs_preempt_only_lower_priority(victim_priority, preemptor_priority, preempts):
    """A preemptible (over-limit) job takes GPUs only from preemptible jobs of strictly lower priority."""
    s = _baseline(hosts=2)           # limit 8 GPUs per team
    s.submit("a0", "lab/a", 8, 60)
    s.submit("v", "lab/b", 8, 60, priority=victim_priority)
    s.tick()
    assert s.state.workloads.all["v"].allocated  # b is under its limit: v opted out
    s.finish("a0")
    s.submit("a1", "lab/a", 8, 60)
    s.tick(1)                        # a1 opts out and takes h0
    s.submit("a2", "lab/a", 8, 60, priority=victim_priority)
    s.finish("v")
    s.tick(2)                        # a2 runs preemptible on h1 (a is at its limit)
    assert not s.state.workloads.all["a2"].allocated
    s.submit("a3", "lab/a", 8, 60, priority=preemptor_priority)
    out = s.tick(3)
    if preempts:
        assert out == [preempted("a2", "priority", "a3", False), started("a3", [("h1", 8)], False, 3)]
    else:
        assert out == []


def test_non_preemptible_jobs_are_not_drained_from_a_degraded_host():
    """On a degraded host, opted-out jobs run on forever (no host.drained); preemptible ones leave at once."""
    s = _baseline(hosts=2)
    s.submit("keep", "lab/a", 4, 60)
    s.submit("over", "lab/a", 8, 60)      # over a's 8-GPU limit: preemptible
    assert s.tick() == [
        started("keep", [("h0", 4)], True, None),
        started("over", [("h1", 8)], False, 0),
    ]
    s.at(10).fault("h0")
    s.fault("h1")
    assert s.tick() == [preempted("over", "host_drain", "h1", False), ("drained", "h1")]
    assert s.tick(10**6) == []
    assert s.running() == ["keep"]
    # A failure still ends it.
    assert s.fault("h0", "failed") == [preempted("keep", "host_failure", "h0", False), ("drained", "h0")]


def test_global_priority_order_ignores_fair_share():
    """The baseline orders everything by priority then submit time, whatever each team used."""
    s = _baseline(hosts=1)
    s.run_history("lab/a", 8, 3600)
    s.submit("b-normal", "lab/b", 8, 60)
    s.submit("a-high", "lab/a", 8, 60, priority=1)
    # (8 GPUs are over either team's 4-GPU limit on this one host: it runs preemptible.)
    assert s.tick() == [started("a-high", [("h0", 8)], False, 3600)]
    assert s.tick(3601) == []
