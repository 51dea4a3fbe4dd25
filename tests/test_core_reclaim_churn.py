"""Against ``reclaim_room``'s churn: its variants ``_checkpoint``, ``_margin`` and both.

``preemption_rule = "reclaim_room_checkpoint"`` takes a victim by reclaim only
while it would lose at most ``RECLAIM_LOSS_S`` seconds of work per GPU
(``victims.work_lost``: since its last checkpoint, or its whole run when it
cannot resume); ``"reclaim_room_margin"`` asks the balanced test for a margin
of ``RECLAIM_MARGIN_PCT`` points of use per guarantee
(``Guarantees.node_room``, condition 3), so two sides near balance do not
trade GPUs; ``"reclaim_room_checkpoint_margin"`` is both. docs/simulation.md,
"Fair share under overload", has what each did on ai2-month.
"""

from __future__ import annotations

import pytest
from core_helpers import HOUR, Sim

from scheduler.policy.guarantee import RECLAIM_MARGIN_PCT, Guarantees
from scheduler.policy.rules import RECLAIM_LOSS_S

ROOM = {"preemption_rule": "reclaim_room", "borrowed_protection_s": 0}
CHECKPOINT = {"preemption_rule": "reclaim_room_checkpoint", "borrowed_protection_s": 0}
MARGIN = {"preemption_rule": "reclaim_room_margin", "borrowed_protection_s": 0}
BOTH = {"preemption_rule": "reclaim_room_checkpoint_margin", "borrowed_protection_s": 0}

# Three equal teams.
THREE = (
    ("lab", 1, ("admin",)),
    ("lab/a", 1, ()),
    ("lab/b", 1, ()),
    ("lab/c", 1, ()),
)


def _preempted(decisions: list[tuple[object, ...]]) -> list[tuple[object, ...]]:
    return [d for d in decisions if d[0] == "preempted"]


def _just_under(rule: dict[str, object], resumable: bool = True, submit_at: int = 60,
                protect: int = HOUR, accelerate: bool = True, **policy: object) -> Sim:
    """48 GPUs, 16 guaranteed each: lab/a holds 12, lab/b 36 (borrowing), lab/c nothing.

    lab/b's work checkpoints hourly from its start at 0 (when ``resumable``);
    a3 (8 GPUs) of lab/a is submitted at ``submit_at``. The work held asks for
    ``protect`` (only what starts within its share gets it).
    """
    s = Sim(THREE, hosts=6, accelerate=accelerate, **rule, **policy)
    s.submit("a1", "lab/a", 8, protect)
    s.submit("a2", "lab/a", 4, protect)
    s.tick()
    for i in range(4):
        s.submit(f"b{i}", "lab/b", 8, protect, resumable=resumable, checkpoint_interval_s=HOUR)
    s.submit("b4", "lab/b", 4, protect, resumable=resumable, checkpoint_interval_s=HOUR)
    s.tick()
    assert len(s.running()) == 7
    s.at(submit_at)
    s.submit("a3", "lab/a", 8, HOUR)
    return s


# -- the margin ---------------------------------------------------------------------------

def test_room_with_a_margin_is_condition_three_with_the_margin_in_exact_integers() -> None:
    s = Sim(THREE, hosts=6, **MARGIN)  # 48 GPUs: 16 each
    g = Guarantees(s.state)
    assert g.margin == RECLAIM_MARGIN_PCT == 10
    g.take("lab/a", 12)
    g.take("lab/b", 36)
    # (12 + 8) / 16 + 0.10 <= (36 - t) / 16  <=>  36 - t >= 21.6: t <= 14 (16 without it)
    assert g.node_room("lab/a", "lab/b", 8) == 14
    g.margin = 0
    assert g.node_room("lab/a", "lab/b", 8) == 16


def test_the_margin_leaves_two_sides_near_balance_alone() -> None:
    # lab/a holds 14, lab/b 24, lab/c 10: the cluster is full. a3 asks for 2 GPUs.
    # Balanced, lab/a would end at 16 (1.0 of its guarantee) and lab/b at 16 (1.0):
    # reclaim_room takes an 8-GPU job of lab/b; with the margin lab/b would have to
    # stay at 1.1 (17.6 GPUs), so nothing moves.
    def run(rule: dict[str, object]) -> list[tuple[object, ...]]:
        s = Sim(THREE, hosts=6, **rule)
        s.submit("a1", "lab/a", 8, HOUR)
        s.submit("a2", "lab/a", 4, HOUR)
        s.submit("a4", "lab/a", 2, HOUR)
        s.submit("c1", "lab/c", 8, HOUR)
        s.submit("c2", "lab/c", 2, HOUR)
        s.tick()
        for i in range(3):
            s.submit(f"b{i}", "lab/b", 8, HOUR)
        s.tick()
        assert len(s.running()) == 8 and s.state.cluster_state.capacity == 48
        s.at(60)
        s.submit("a3", "lab/a", 2, HOUR)
        return _preempted(s.tick())

    taken = run(ROOM)
    assert len(taken) == 1 and str(taken[0][1]).startswith("b") and taken[0][2] == "reclaim"
    assert run(MARGIN) == []


@pytest.mark.parametrize("rule", [MARGIN, BOTH], ids=["margin", "checkpoint_margin"])
def test_a_side_far_under_still_reclaims_with_the_margin(rule: dict[str, object]) -> None:
    # The case reclaim_room was made for: after the move lab/a holds 20 (1.25 of its
    # guarantee) and lab/b 28 (1.75), well past the margin.
    s = _just_under(rule)
    out = _preempted(s.tick())
    assert len(out) == 1 and out[0][2] == "reclaim" and out[0][3] == "a3"
    assert s.status("a3") == "running"


# -- the checkpoint ------------------------------------------------------------------------

def test_a_reclaim_waits_for_its_victims_next_checkpoint() -> None:
    # 20 minutes into lab/b's hour a victim would lose 20 minutes of work per GPU:
    # reclaim_room takes one at once; the checkpoint variant waits until just after
    # the next checkpoint (at 1 h), then takes one.
    assert RECLAIM_LOSS_S == 600
    room = _just_under(ROOM, submit_at=1200)
    assert len(_preempted(room.tick())) == 1
    s = _just_under(CHECKPOINT, submit_at=1200)
    for t in range(1200, HOUR, 300):
        assert _preempted(s.tick(t)) == []
    assert s.status("a3") == "pending"
    out = _preempted(s.tick(HOUR + 300))
    assert len(out) == 1 and out[0][2] == "reclaim" and out[0][3] == "a3"
    assert s.status("a3") == "running"


def test_within_the_bound_a_reclaim_is_at_once() -> None:
    s = _just_under(CHECKPOINT, submit_at=RECLAIM_LOSS_S)  # exactly the bound: still little
    assert len(_preempted(s.tick())) == 1


def test_work_that_cannot_resume_is_reclaimed_only_early_in_its_run() -> None:
    early = _just_under(BOTH, resumable=False, submit_at=300)
    assert len(_preempted(early.tick())) == 1
    late = _just_under(BOTH, resumable=False, submit_at=1200)
    for t in range(1200, 3 * HOUR, 300):
        assert _preempted(late.tick(t)) == []
    assert late.status("a3") == "pending"


@pytest.mark.parametrize("accelerate", [True, False], ids=["accelerated", "plain"])
def test_a_checkpoint_passing_is_seen_by_a_tick_with_nothing_new(accelerate: bool) -> None:
    # With a fair-share period of a day and every protection 8 h long, ticks at
    # 20 minutes and at 1 h 5 min see the same world and the same fair-share time:
    # only the checkpoint between them changed who may be taken. The engine's
    # idle-cycle memo and the failure memo must not keep the first tick's
    # "nothing" (the plain twin has neither).
    s = _just_under(CHECKPOINT, submit_at=1200, protect=8 * HOUR, accelerate=accelerate,
                    fair_share_period_s=86_400)
    assert _preempted(s.tick()) == []
    assert _preempted(s.tick(1500)) == []
    out = _preempted(s.tick(HOUR + 300))
    assert len(out) == 1 and out[0][3] == "a3"
