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


# -- the cheapest victim set (issue 8, section 1) ----------------------------------------


def test_the_cheapest_subset_of_a_hosts_victims_is_taken():
    """A 1-GPU request takes the 1-GPU victim, not the 5-GPU one that happens to cover it first."""
    s = Sim(hosts=1)
    s.submit("a2", "lab/a", 2, 60)
    s.submit("v5", "lab/b", 5, 60)
    s.submit("v1", "lab/b", 1, 60)
    assert [e[1] for e in s.tick()] == ["a2", "v5", "v1"]
    s.at(600).submit("p", "lab/a", 1, 60)
    assert s.tick() == [
        preempted("v1", "fair_share", "p", False),
        started("p", [("h0", 1)], True, 660),
    ]


def test_a_gang_takes_victims_that_free_exactly_the_hosts_it_needs():
    """Two 2-host gangs and the free host place a 5-host gang; the 3-host gang (one host unused) stays."""
    s = Sim(hosts=8)
    for name, hosts in (("g2a", 2), ("g2b", 2), ("g3", 3)):
        s.submit(name, "lab/b", 8 * hosts, 60, hosts=hosts)
    s.tick()
    assert s.state.cluster_state.hosts["h7"].free == 8
    s.at(600).submit("G", "lab/a", 40, 60, hosts=5)
    out = s.tick()
    assert sorted(e for e in out if e[0] == "preempted") == [
        preempted("g2a", "fair_share", "G", False),
        preempted("g2b", "fair_share", "G", False),
    ]
    assert out[-1] == started("G", [(h, 8) for h in ("h0", "h1", "h2", "h3", "h7")], True, 660)
    assert "g3" in s.running()


def test_work_already_done_costs_more_than_gpus_taken():
    """A 4-GPU request takes the 8-GPU job that ran a minute rather than the 4-GPU one that ran an hour."""
    s = Sim(hosts=2)
    s.submit("prot", "lab/b", 4, 7200)
    s.submit("old", "lab/b", 4, 60)        # h0, beside prot: runs the whole hour
    assert [e[1] for e in s.tick()] == ["prot", "old"]
    s.at(3540).submit("young", "lab/b", 8, 60)
    assert s.tick() == [started("young", [("h1", 8)], True, 3600)]
    s.at(3600).submit("p", "lab/a", 4, 60)
    assert s.tick() == [
        preempted("young", "fair_share", "p", False),
        started("p", [("h1", 4)], True, 3660),
    ]


@pytest.mark.parametrize(
    ("resumable", "run_s", "checkpoint_s", "lost"),
    [
        (False, 3600, None, 8 * 3600),      # not resumable: the whole run
        (False, 3600, 600, 8 * 3600),       # (a checkpoint does not help what cannot resume)
        (True, 3600, None, 0),              # resumable, continuous checkpoints: nothing
        (True, 3600, 0, 0),
        (True, 3700, 600, 8 * 100),         # since its last checkpoint, at 3600
        (True, 599, 600, 8 * 599),
        (True, 600, 600, 0),
        (False, 0, None, 0),                # just started: nothing done yet
    ],
)
def test_work_lost_counts_the_run_since_the_victim_could_last_resume(resumable, run_s,
                                                                   checkpoint_s, lost):
    """work_lost is GPUs x run time, or GPUs x time since the last checkpoint when resumable."""
    from projections.workloads import Workload
    from scheduler.policy.victims import work_lost

    w = Workload(id="v", budget="lab/b", user="b", gpus=8, hosts=1, gpus_per_host=8,
                 min_runtime_s=60, resumable=resumable, priority=0, kind="training",
                 submitted_at=0, seq=0, submit_event="e")
    w.started_at = 1000
    assert work_lost(w, 1000 + run_s, checkpoint_s) == lost


def test_the_checkpoint_hook_reads_the_workloads_interval_before_the_policys():
    """checkpoint_rule: the workload's own interval wins, else the policy's, else none."""
    from types import SimpleNamespace

    from scheduler.policy.victims import checkpoint_rule

    rule = checkpoint_rule(SimpleNamespace(checkpoint_interval_s=900))
    assert rule(SimpleNamespace(checkpoint_interval_s=300)) == 300
    assert rule(SimpleNamespace()) == 900
    assert checkpoint_rule(SimpleNamespace())(SimpleNamespace()) is None


# -- the fair-share rule, tested directly (issue 8, section 7) ------------------------------


@pytest.mark.parametrize(
    ("min_runtime", "expected"),
    [
        # b used 4 GPUs x 600 s = 2400; a commits 8 x min_runtime: 2392 < 2400.
        (299, [preempted("vb", "fair_share", "p", False), started("p", [("h0", 8)], True, 899)]),
        (300, []),   # 2400 == 2400: an exact tie is not "strictly less used"
        (301, []),   # 2408 > 2400: its own commitment puts a past b
    ],
)
def test_fair_share_needs_strictly_less_use_after_the_preemptors_commitment(min_runtime, expected):
    """With 8 GPUs free but scattered (so the cheap bound lets the search run), only the rule decides."""
    tree = (("lab", 1, ("admin",)), ("lab/a", 1, ()), ("lab/b", 1, ()), ("lab/c", 1, ()))
    s = Sim(tree, hosts=2)
    s.submit("vb", "lab/b", 4, 60)
    s.submit("fill", "lab/c", 4, 7200)       # keeps h0's other half busy for a moment ...
    s.tick()
    s.submit("c-prot", "lab/c", 4, 7200)     # ... so this one lands on h1
    assert s.tick() == [started("c-prot", [("h1", 4)], True, 7200)]
    s.finish("fill")
    s.at(600).submit("p", "lab/a", 8, min_runtime)
    hosts = s.state.cluster_state.hosts
    assert (hosts["h0"].workloads, hosts["h0"].free, hosts["h1"].free) == ({"vb": 4}, 4, 4)
    assert s.tick() == expected


@pytest.mark.parametrize(
    ("a_use", "commitment", "b_use", "may"),
    [
        (0, 0, 1, True),
        (0, 0, 0, False),          # a tie is never "strictly less"
        (100, 0, 100, False),
        (99, 0, 100, True),
        (99, 1, 100, False),       # the commitment closes the gap exactly
        (50, 49, 100, True),
        (50, 50, 100, False),
        (0, 101, 100, False),      # the candidate's own commitment alone puts it past
    ],
)
def test_may_preempt_compares_usage_plus_commitment_strictly(a_use, commitment, b_use, may):
    """Ranking.may_preempt: (use_a + commitment) / share_a < use_b / share_b, strictly."""
    from scheduler.index.fair_share_order import Ranking, commitments

    s = Sim(hosts=1)
    r = Ranking(s.state, commitments(s.state))
    r.use["lab/a"], r.use["lab/b"] = a_use, b_use
    assert r.may_preempt("lab/a", commitment, "lab/b") is may
    # And it is the one comparison the cycle's cheap bound uses too.
    from scheduler.policy.fair_share import less_used

    assert less_used(a_use, 1, b_use, 1, commitment) is may


def test_overlapping_victim_gangs_are_taken_together_when_only_both_ready_enough_hosts():
    """Two half-host victim gangs share a host: taking both readies three hosts; neither alone two."""
    s = Sim(hosts=3)
    s.submit("A", "lab/b", 8, 60, hosts=2)       # 2 x 4: h0 and h1
    s.tick()
    s.submit("fill", "lab/b", 4, 7200)           # h0's other half, for a moment
    s.tick()
    s.submit("B", "lab/b", 8, 60, hosts=2)       # 2 x 4: h1 and h2
    assert s.tick() == [started("B", [("h1", 4), ("h2", 4)], True, 60)]
    s.finish("fill")
    s.at(600).submit("G", "lab/a", 16, 60, hosts=2)
    out = s.tick()
    assert sorted(e for e in out if e[0] == "preempted") == [
        preempted("A", "fair_share", "G", False),
        preempted("B", "fair_share", "G", False),
    ]
    assert out[-1] == started("G", [("h0", 8), ("h1", 8)], True, 660)


def test_a_gang_prefers_a_free_host_and_one_victim_to_two_victims():
    """With one host free, a 2-host gang takes the single cheapest victim host, not two."""
    s = Sim(hosts=3)
    s.submit("v-old", "lab/b", 8, 60)
    s.tick()
    s.at(300).submit("v-young", "lab/b", 8, 60)
    s.tick()
    s.submit("free-h2", "lab/b", 8, 7200)        # h2 busy for a moment, then free
    s.tick()
    s.finish("free-h2")
    s.at(900).submit("G", "lab/a", 16, 60, hosts=2)
    out = s.tick()
    # v-young has done less work (600 s) than v-old (900 s): it goes, with the free host.
    assert out == [preempted("v-young", "fair_share", "G", False),
                   started("G", [("h1", 8), ("h2", 8)], True, 960)]


def test_a_job_never_tears_down_a_gang_larger_than_itself():
    """A gang over more hosts than the preemptor uses is not its to take; a gang as large may take it."""
    s = Sim(hosts=4)
    s.submit("gang", "lab/b", 32, 60, hosts=4)
    s.tick()
    s.at(600).submit("p", "lab/a", 8, 60)
    assert s.tick() == []                     # it would free three hosts for nothing
    s.submit("g4", "lab/a", 32, 60, hosts=4)
    assert s.tick() == [
        preempted("gang", "fair_share", "g4", False),
        started("g4", [(f"h{i}", 8) for i in range(4)], True, 660),
    ]
