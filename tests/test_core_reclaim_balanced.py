"""The balanced reclaim: ``preemption_rule = "reclaim_balanced"``.

A side strictly under its guarantee takes from a side that stays at or above
its own after the take, and only while the taker's side ends up no more used
per guarantee than the victim's (``Guarantees.node_room``). What a victim set
takes from one side is checked as a whole before anything stops
(``Guarantees.balanced``). Work the balance does not let a whole-host
candidate take, but that borrows, may be planned on by a reservation: the
lock-out bound (docs/simulation.md, "Fair share under overload").
``preemption_rule = "reclaim_room"`` is the same take without those
reservations: it runs the just-under case, the property, and a test that it
leaves the huge-gang case waiting.

The property at the end runs random workloads through the rule and checks,
from the emitted events alone, that no reclaim leaves the preemptor's side
more used per guarantee than a victim's side.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
from core_helpers import HOUR, Sim
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.policy.guarantee import Guarantees

BALANCED = {"preemption_rule": "reclaim_balanced", "borrowed_protection_s": 0}
# The same take without the reservations on borrowed work (no lock-out bound).
ROOM = {"preemption_rule": "reclaim_room", "borrowed_protection_s": 0}
RECLAIM = {"preemption_rule": "reclaim", "borrowed_protection_s": 0}
# Its variants against churn (tests/test_core_reclaim_churn.py): the property holds for them too.
CHURN = tuple({"preemption_rule": r, "borrowed_protection_s": 0}
              for r in ("reclaim_room_checkpoint", "reclaim_room_margin",
                        "reclaim_room_checkpoint_margin"))

# Three equal teams.
THREE = (
    ("lab", 1, ("admin",)),
    ("lab/a", 1, ()),
    ("lab/b", 1, ()),
    ("lab/c", 1, ()),
)

# ai2-month's budget tree, top level and one or two leaves per group (128 hosts of 8).
AI2 = (
    ("lab", 1, ("admin",)),
    ("lab/llm", 40, ()),
    ("lab/llm/pretrain", 40, ()),
    ("lab/llm/safety", 5, ()),
    ("lab/multimodal", 25, ()),
    ("lab/multimodal/vlm", 50, ()),
    ("lab/robotics", 20, ()),
    ("lab/robotics/sim", 40, ()),
    ("lab/agents", 15, ()),
    ("lab/agents/tools", 35, ()),
    ("lab/agents/coding", 35, ()),
)


def _preempted(decisions: list[tuple[object, ...]]) -> list[tuple[object, ...]]:
    return [d for d in decisions if d[0] == "preempted"]


def _just_under(rule: dict[str, object]) -> Sim:
    """48 GPUs, 16 guaranteed each: lab/a holds 12, lab/b 36, lab/c nothing; a3 asks for 8."""
    s = Sim(THREE, hosts=6, **rule)
    s.submit("a1", "lab/a", 8, HOUR)
    s.submit("a2", "lab/a", 4, HOUR)
    s.tick()
    for i in range(4):
        s.submit(f"b{i}", "lab/b", 8, HOUR)
    s.submit("b4", "lab/b", 4, HOUR)
    s.tick()
    assert len(s.running()) == 7
    s.at(60)
    s.submit("a3", "lab/a", 8, HOUR)
    return s


@pytest.mark.parametrize("rule", [BALANCED, ROOM], ids=["reclaim_balanced", "reclaim_room"])
def test_a_side_just_under_its_guarantee_takes_from_the_side_with_most_excess(
        rule: dict[str, object]) -> None:
    # The plain reclaim's edge: 12 + 8 > 16, so a3 reclaims nothing there. Balanced:
    # after the move lab/a holds 20, lab/b 28 (>= 16, and 20/16 <= 28/16).
    s = _just_under(rule)
    out = _preempted(s.tick())
    assert len(out) == 1 and out[0][2] == "reclaim" and out[0][3] == "a3"
    assert str(out[0][1]).startswith("b")
    assert s.status("a3") == "running"


def test_the_plain_reclaim_leaves_the_same_side_waiting() -> None:
    s = _just_under(RECLAIM)
    assert _preempted(s.tick()) == []
    assert s.status("a3") == "pending"


def test_room_is_the_three_part_test_in_exact_integers() -> None:
    s = Sim(THREE, hosts=6)  # 48 GPUs: 16 each
    g = Guarantees(s.state)
    g.take("lab/a", 12)
    g.take("lab/b", 36)
    # t <= 36 - max(16, 12 + 8): 16
    assert g.node_room("lab/a", "lab/b", 8) == 16
    # lab/a at 16 is not strictly under: nothing, whatever it asks
    g.take("lab/a", 4)
    assert g.node_room("lab/a", "lab/b", 1) == 0
    # from a side at its guarantee: nothing (lab/c holds 0, lab/b holds 36)
    assert g.node_room("lab/c", "lab/a", 4) == 0
    # a gang past its guarantee may reclaim from enough excess: 36 - 24 = 12
    assert g.node_room("lab/c", "lab/b", 24) == 12
    assert g.balanced("lab/c", 24, [("lab/b", 8), ("lab/b", 4)])
    assert not g.balanced("lab/c", 24, [("lab/b", 8), ("lab/b", 8)])


def test_room_with_unequal_shares() -> None:
    s = Sim(AI2, hosts=128)  # 1024 GPUs: llm 409.6, agents 153.6
    g = Guarantees(s.state)
    g.take("lab/llm/pretrain", 512)
    g.take("lab/agents/coding", 96)
    # t <= 512 - max(ceil(409.6), ceil((96 + 64) * 40 / 15)) = 512 - 427
    assert g.node_room("lab/agents", "lab/llm", 64) == 85
    assert g.node_room("lab/agents", "lab/llm", 8) == 512 - 410


def test_kueue_huge_workload_is_reserved_and_taken_within_one_tick() -> None:
    # One leaf's 9-host gang holds a 9-host cluster; another leaf, using nothing,
    # asks for 2 hosts. Taking the gang would leave lab/b more used than lab/a, so
    # the balance says no; the lock-out bound says a reservation, due at once.
    s = Sim(hosts=9, **BALANCED)
    s.submit("huge", "lab/a", 72, HOUR, hosts=9, gpus_per_host=8)
    s.tick()
    s.at(5 * HOUR).submit("small", "lab/b", 16, HOUR, hosts=2, gpus_per_host=8)
    seen = [s.tick(), s.tick(5 * HOUR + 300)]
    assert [[d[0] for d in out] for out in seen] == [["reserved"], ["preempted", "started"]]
    assert seen[1][0] == ("preempted", "huge", "reservation", "small", False)
    assert s.status("small") == "running"


def test_reclaim_room_plans_no_reservation_on_the_huge_workload() -> None:
    # The cost of "reclaim_room": without the reservations on borrowed work, the
    # Kueue case keeps the plain reclaim's lock-out (small waits for huge to end).
    s = Sim(hosts=9, **ROOM)
    s.submit("huge", "lab/a", 72, HOUR, hosts=9, gpus_per_host=8)
    s.tick()
    s.at(5 * HOUR).submit("small", "lab/b", 16, HOUR, hosts=2, gpus_per_host=8)
    for t in range(5 * HOUR, 7 * HOUR, 300):
        assert [d[0] for d in s.tick(t)] == []
    assert s.status("small") == "pending" and s.status("huge") == "running"


def test_a_gang_larger_than_its_guarantee_is_no_longer_locked_out() -> None:
    # The plain reclaim's limit (test_core_reclaim.py pins it): one 8-GPU host,
    # lab/b guaranteed 4 asks for 8 while lab/a's 8 borrow 4.
    s = Sim(hosts=1, **BALANCED)
    s.submit("a1", "lab/a", 8, HOUR)
    s.tick()
    s.at(600)
    s.submit("b1", "lab/b", 8, 600)
    s.tick()
    s.tick(900)
    assert s.status("b1") == "running" and s.status("a1") == "preempted"


def test_a_64_host_gang_on_ai2_months_cluster_locks_nobody_out() -> None:
    # 128 hosts. lab/llm/pretrain's 64-host gang borrows (512 > 409.6); the rest
    # is held within its share by multimodal (32 hosts), robotics (20) and agents
    # (12). lab/agents/tools (agents at 96 of 153.6) asks for an 8-host gang:
    # no side has room for a 512-GPU victim, so the wait is the reservation's.
    s = Sim(AI2, hosts=128, **BALANCED)
    s.submit("pre", "lab/llm/pretrain", 512, 8 * HOUR, hosts=64, gpus_per_host=8)
    s.submit("vlm", "lab/multimodal/vlm", 256, 8 * HOUR, hosts=32, gpus_per_host=8)
    s.submit("sim", "lab/robotics/sim", 160, 8 * HOUR, hosts=20, gpus_per_host=8)
    s.submit("cod", "lab/agents/coding", 96, 8 * HOUR, hosts=12, gpus_per_host=8)
    s.tick()
    assert len(s.running()) == 4
    s.at(HOUR)
    s.submit("tools", "lab/agents/tools", 64, HOUR, hosts=8, gpus_per_host=8)
    s.tick()
    s.tick(HOUR + 300)
    assert s.status("tools") == "running"
    assert s.status("pre") == "preempted"  # by the reservation (not resumable)
    for w in ("vlm", "sim", "cod"):  # work within its share is untouched
        assert s.status(w) == "running"


def test_work_within_its_share_is_not_planned_on() -> None:
    # a1 holds lab/a's guarantee exactly: b1 (16 GPUs) reserves nothing on it.
    s = Sim(hosts=2, **BALANCED)
    s.submit("a1", "lab/a", 8, HOUR)
    s.tick()
    s.at(2 * HOUR)
    s.submit("b1", "lab/b", 16, 600, hosts=2, gpus_per_host=8)
    for t in range(2 * HOUR, 6 * HOUR, 300):
        assert _preempted(s.tick(t)) == []
    assert s.status("a1") == "running"


# -- the property: no reclaim leaves the preemptor's side more used per guarantee ----------

LEAVES = ("lab/a", "lab/b", "lab/c")
SIZES = ((1, 1), (2, 1), (4, 1), (8, 1), (16, 2))


def _side_fraction(node: str) -> Fraction:
    return Fraction(1, 3) if node.count("/") == 1 else Fraction(1)


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(st.sampled_from((BALANCED, ROOM, *CHURN)),
       st.lists(st.tuples(st.sampled_from(LEAVES), st.sampled_from(SIZES),
                          st.sampled_from((60, 600, HOUR)), st.sampled_from((0, 60, 300, 900))),
                min_size=5, max_size=40))
def test_no_reclaim_leaves_the_preemptor_more_used_than_its_victim(
        rule: dict[str, object], ops: list[tuple[str, tuple[int, int], int, int]]) -> None:
    s = Sim(THREE, hosts=3, **rule)
    held = dict.fromkeys(LEAVES, 0)  # allocated GPUs per leaf, from the events alone
    now = 0
    for i, (leaf, (gpus, hosts), min_runtime, step) in enumerate(ops):
        now += step
        s.at(now)
        s.submit(f"w{i}", leaf, gpus, min_runtime, hosts=hosts, gpus_per_host=gpus // hosts)
        _account(s, s.tick(), held)
        if i % 4 == 3:  # work finishes now and then, so the cluster keeps moving
            for r in s.running()[:1]:
                w = s.state.workloads.all[r]
                if w.min_runtime_s > 0:
                    held[w.budget] -= w.gpus
                _account(s, s.finish(r), held)


def _account(s: Sim, decisions: list[tuple[object, ...]], held: dict[str, int],
             gpus_present: int = 24) -> int:
    """Follow one cycle's decisions in order; check every reclaiming start. Returns their count."""
    workloads = s.state.workloads.all
    taken: dict[object, list[str]] = {}
    checked = 0
    for d in decisions:
        if d[0] == "preempted":
            v = workloads[str(d[1])]
            if v.min_runtime_s > 0:
                held[v.budget] -= v.gpus
            if d[2] == "reclaim":
                taken.setdefault(d[3], []).append(v.budget)
        elif d[0] == "started":
            w = workloads[str(d[1])]
            if d[3]:
                held[w.budget] += w.gpus
            for vleaf in taken.pop(w.id, ()):
                # After the move: the victim's side still at or above its guarantee,
                # and the preemptor's side no more used per guarantee than the victim's.
                share = Fraction(gpus_present, 3)
                assert held[vleaf] >= share, (w.id, vleaf, held)
                assert held[w.budget] <= held[vleaf], (w.id, w.budget, vleaf, held)
                checked += 1
    return checked


def test_the_property_check_sees_a_reclaim() -> None:
    # ``_account`` is not vacuous: on the just-under case it checks one reclaim.
    s = _just_under(BALANCED)
    held = {"lab/a": 12, "lab/b": 36, "lab/c": 0}
    assert _account(s, s.tick(), held, gpus_present=48) == 1
    assert held == {"lab/a": 20, "lab/b": 28, "lab/c": 0}
