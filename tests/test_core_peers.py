"""Cases from peer schedulers' own test suites, translated to allot's terms, each with its source.

- Kueue, Topology Aware Scheduling with the BestFit profile
  (kubernetes-sigs/kueue, pkg/cache/scheduler/tas_flavor_snapshot_test.go,
  TestFindTopologyAssignments): a gang goes to the lowest topology level that
  holds it whole, the tightest domain there, least-free hosts inside. Kueue's
  pods are allot's whole hosts; its racks sit inside blocks, as ours do.
- Kueue, fair-sharing preemption (pkg/scheduler/preemption/preemption_fair_test.go,
  TestFairPreemptions): which queue loses a workload. Kueue compares
  instantaneous dominant-resource shares; allot compares windowed usage plus the
  preemptor's commitment, so the cases keep their shape (who is over-served,
  who is at its share), not Kueue's exact numbers.
- Slurm, Fair Tree (testsuite/expect/test24.4.prog.c, the association tree and
  raw usage of its "aA", "aB", "aC", "aE" and "aF" accounts): siblings ranked by
  Level FS = S/U, depth first. Slurm gives tied siblings one rank; allot's order
  is total (the larger share, then the name), which the table states.
"""

from __future__ import annotations

import pytest
from core_helpers import Sim, preempted, started

from scheduler.index.fair_share_order import Ranking, commitments

# -- Kueue TAS, BestFit --------------------------------------------------------------------

# Kueue's "defaultNodes": block b1 holds rack r1 {x3} and rack r2 {x5, x1, x6};
# block b2 holds rack r1 {x2} and rack r2 {x4}. Racks are named within their block.
KUEUE_DEFAULT_NODES = [
    ("x3", "r1", "b1"), ("x5", "r2", "b1"), ("x1", "r2", "b1"), ("x6", "r2", "b1"),
    ("x2", "r1", "b2"), ("x4", "r2", "b2"),
]
# Kueue's "binaryTreesNodes": two blocks of two racks of two hosts.
KUEUE_BINARY_TREES = [
    ("x3", "r1", "b1"), ("x5", "r1", "b1"), ("x1", "r2", "b1"), ("x6", "r2", "b1"),
    ("x2", "r1", "b2"), ("x4", "r1", "b2"), ("x7", "r2", "b2"), ("x8", "r2", "b2"),
]


@pytest.mark.parametrize(
    ("case", "nodes", "hosts", "expected"),
    [
        # "rack required; multiple Pods fit in some racks; BestFit": the one rack that fits.
        ("rack fits", KUEUE_DEFAULT_NODES, 2, ["x1", "x5"]),
        ("rack fits, three", KUEUE_DEFAULT_NODES, 3, ["x1", "x5", "x6"]),
        # "rack preferred; but only block can accommodate the workload; BestFit".
        ("only a block", KUEUE_DEFAULT_NODES, 4, ["x1", "x3", "x5", "x6"]),
        # "rack preferred; but only multiple blocks can accommodate the workload; BestFit".
        ("only several blocks", KUEUE_DEFAULT_NODES, 6, ["x1", "x2", "x3", "x4", "x5", "x6"]),
        # "block required; 4 pods fit into one host each; BestFit": a whole block.
        ("a block of two racks", KUEUE_BINARY_TREES, 4, ["x1", "x3", "x5", "x6"]),
        # Two hosts fit in every rack: the first rack (all equally tight), not across two.
        ("any rack", KUEUE_BINARY_TREES, 2, ["x3", "x5"]),
    ],
)
def test_kueue_tas_best_fit(case, nodes, hosts, expected):
    """A gang lands in the smallest domain that holds it: rack, then block, then anywhere."""
    s = Sim(hosts=[(name, rack, block) for name, rack, block in nodes])
    s.submit("g", "lab/a", 8 * hosts, 60, hosts=hosts)
    assert s.tick() == [started("g", [(h, 8) for h in expected], True, 60)], case


def test_kueue_tas_best_fit_prefers_the_tightest_rack():
    """Of two racks that hold the gang, the one with fewer free GPUs wins (BestFit's least free capacity)."""
    nodes = [("h0", "r0", "b0"), ("h1", "r0", "b0"), ("h2", "r0", "b0"),
             ("h3", "r1", "b0"), ("h4", "r1", "b0"), ("h5", "r1", "b0")]
    s = Sim(hosts=nodes)
    s.submit("busy", "lab/b", 8, 3600)            # takes h0: r0 keeps two free hosts, r1 three
    s.tick()
    s.submit("g", "lab/a", 16, 60, hosts=2)
    assert s.tick() == [started("g", [("h1", 8), ("h2", 8)], True, 60)]


# -- Kueue fair-sharing preemption ----------------------------------------------------------


def _kueue_fair_cluster(admitted: dict[str, int]) -> Sim:
    """One 9-GPU host shared by cohort members a, b, c (3 GPUs of quota each, as in Kueue's
    baseCQs); ``admitted`` 1-GPU workloads per queue start at t=0 and are past protection at 600."""
    tree = (("lab", 1, ("admin",)), ("lab/a", 1, ()), ("lab/b", 1, ()), ("lab/c", 1, ()))
    s = Sim(tree, hosts=0)
    s.feed(s.I.host("h0", gpus=9))
    for leaf, n in admitted.items():
        for i in range(1, n + 1):
            s.submit(f"{leaf}{i}", f"lab/{leaf}", 1, 60)
    s.tick()
    s.at(600)
    return s


@pytest.mark.parametrize(
    ("case", "admitted", "incoming", "victim"),
    [
        # "reclaim nominal from user using the most": a is at its share, b far above.
        ("reclaim from the queue using the most", {"a": 3, "b": 5, "c": 1}, ("c", 1, 60), "b1"),
        # "reclaim borrowable quota from user using the most": a (at its share) asks.
        ("reclaim borrowed quota", {"a": 3, "b": 5, "c": 1}, ("a", 1, 60), "b1"),
        # "can't preempt when everyone under nominal" (here: everyone at its share).
        ("nobody above its share", {"a": 3, "b": 3, "c": 3}, ("c", 1, 60), None),
        # "can't preempt when it would switch the imbalance": a asks for 2 (1 is free). Its
        # commitment (its "final share") would bring it level with b: 1800 + 2 x 600 = 3000.
        ("no switching the imbalance", {"a": 3, "b": 5}, ("a", 2, 600), None),
        # One second less of protection and a stays strictly below b: it may.
        ("staying below", {"a": 3, "b": 5}, ("a", 2, 599), "b1"),
    ],
)
def test_kueue_fair_sharing_preemption(case, admitted, incoming, victim):
    """Equally costly victims are taken from the most over-served queue; none if the preemptor would not stay below."""
    s = _kueue_fair_cluster(admitted)
    leaf, gpus, min_runtime = incoming
    s.submit("incoming", f"lab/{leaf}", gpus, min_runtime)
    out = s.tick()
    if victim is None:
        assert out == [], case
    else:
        assert out == [preempted(victim, "fair_share", "incoming", False),
                       started("incoming", [("h0", gpus)], True, 600 + min_runtime)], case


# -- Slurm Fair Tree --------------------------------------------------------------------------

# (path, shares, raw usage): test24.4's accounts aA, aB, aC, aE, aF and their users.
SLURM_TEST24_4 = [
    ("root/aA", 40, None), ("root/aA/aAA", 30, None), ("root/aA/aAA/uAA1", 1, 20),
    ("root/aA/aAB", 10, None), ("root/aA/aAB/uAB1", 1, 25), ("root/aA/aAB/uAB2", 1, 0),
    ("root/aB", 60, None), ("root/aB/aBA", 25, None), ("root/aB/aBA/uBA1", 1, 25),
    ("root/aB/aBB", 35, None), ("root/aB/aBB/uBB1", 1, 0),
    ("root/aC", 0, None), ("root/aC/uC1", 0, 30),          # no shares: served last
    ("root/aE", 10, None), ("root/aE/aE1", 10, 0), ("root/aE/aE2", 10, 0),   # a tie
    ("root/aF", 20, None), ("root/aF/uF1", 10, 0), ("root/aF/uF2", 20, 0),
]


def test_slurm_fair_tree_ranks_test24_4s_tree():
    """Level by level, the lower usage per share first; ties: the larger share, then the name."""
    tree = (("root", 1, ("admin",)), *((p, s, ()) for p, s, _ in SLURM_TEST24_4))
    s = Sim(tree, hosts=1)
    for path, _, usage in SLURM_TEST24_4:
        if usage:
            s.run_history(path, 1, usage * 60)   # usage in GPU-minutes
    r = Ranking(s.state, commitments(s.state))
    assert [leaf.rsplit("/", 1)[-1] for leaf in r.leaf_order()] == [
        # aE and aF used nothing: aF first (20 shares against 10), inside it uF2 (20 > 10).
        "uF2", "uF1", "aE1", "aE2",
        # aB: 25 / 60; inside, aBB (nothing used) before aBA.
        "uBB1", "uBA1",
        # aA: 45 / 40; aAA (20 / 30) before aAB (25 / 10); inside aAB the unused uAB2 first.
        "uAA1", "uAB2", "uAB1",
        # aC holds no shares: last, whatever it used.
        "uC1",
    ]
