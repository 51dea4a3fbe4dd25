"""What-if from history: with nothing changed, a re-simulated period is the recorded one, bit for bit.

The demo scenario is simulated once (the "recorded" journal); a period in its
middle is then re-simulated with no change, and every event of the period,
inputs and decisions, must be identical to the recording. A real change must
diverge, and contracts over a lowered cap are clamped (or, on request, refused)
and counted.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

from events import Event, WorkloadStarted, WorkloadSubmitted, encode
from simulator.driver import Simulation
from simulator.scenario import load_scenario
from whatif.rerun import Change, WhatIfError, rerun

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


@cache
def recorded_log() -> tuple[list[Event], int]:
    sc = load_scenario(SCENARIOS / "demo.toml")
    return Simulation(sc, "allot", SCENARIOS).run().log, sc.epoch


@pytest.mark.parametrize("days", [(0.0, 3.0), (1.0, 2.0), (0.5, 2.5)])
def test_unchanged_policy_reproduces_the_recorded_decisions(days: tuple[float, float]) -> None:
    log, epoch = recorded_log()
    t1, t2 = epoch + int(days[0] * 86_400), epoch + int(days[1] * 86_400)
    r = rerun(log, t1, t2, Change())
    again = [encode(e) for e in r.log[r.period_start:]]
    recorded = [encode(e) for e in r.recorded[r.period_start:]]
    assert r.inputs > 100
    assert sum(type(e) is WorkloadStarted for e in r.log[r.period_start:]) > 50
    assert again == recorded
    assert r.injected_finishes == 0 and r.clamped == 0


def test_a_change_diverges_and_clamps_what_the_new_cap_refuses() -> None:
    log, epoch = recorded_log()
    cap = 1800
    over = sum(1 for e in log if type(e) is WorkloadSubmitted and e.min_runtime_s > cap
               and e.at >= epoch)
    assert over > 0
    r = rerun(log, epoch, epoch + 3 * 86_400, Change(knobs={"min_runtime_cap_s": cap}))
    assert r.clamped == over and r.refused_over_cap == 0
    subs = [e for e in r.log[r.period_start:] if type(e) is WorkloadSubmitted]
    assert max(e.min_runtime_s for e in subs) <= cap
    rejected = [e for e in r.log if type(e).__struct_config__.tag == "workload.rejected"
                and "cap" in e.detail]
    assert not rejected
    assert [encode(e) for e in r.log] != [encode(e) for e in r.recorded]


def test_reject_over_cap_refuses_and_counts() -> None:
    log, epoch = recorded_log()
    r = rerun(log, epoch, epoch + 3 * 86_400,
              Change(knobs={"min_runtime_cap_s": 1800}, over_cap="reject"))
    rejected = [e for e in r.log if type(e).__struct_config__.tag == "workload.rejected"
                and "cap" in e.detail]
    assert r.clamped == 0 and r.refused_over_cap == len(rejected) > 0
    assert r.refused_over_cap_gpu_s > 0


def test_shares_change_is_applied_by_a_manager() -> None:
    log, epoch = recorded_log()
    r = rerun(log, epoch + 86_400, epoch + 2 * 86_400, Change(shares={"lab/robotics": 5}))
    edits = [e for e in r.log[r.period_start:] if type(e).__struct_config__.tag
             == "budget.shares_set"]
    assert len(edits) == 1 and edits[0].id == "whatif-shares-1"


def test_bad_change_is_one_clear_error() -> None:
    log, epoch = recorded_log()
    with pytest.raises(WhatIfError, match="no budget node"):
        rerun(log, epoch, epoch + 86_400, Change(shares={"lab/nope": 3}))
    with pytest.raises(WhatIfError, match="refused"):
        rerun(log, epoch, epoch + 86_400, Change(knobs={"window_s": 60}))


def test_unknown_knob_is_refused() -> None:
    log, epoch = recorded_log()
    with pytest.raises(WhatIfError, match="unknown policy knob"):
        rerun(log, epoch, epoch + 86_400, Change(knobs={"bogus": 3}))


def test_moments_read_as_people_write_them() -> None:
    from whatif.history import parse_moment

    start, end = 1_767_571_200, 1_767_571_200 + 30 * 86_400
    assert parse_moment("day 2", start, end) == start + 2 * 86_400
    assert parse_moment("+36h", start, end) == start + 36 * 3600
    assert parse_moment("end-1d", start, end) == end - 86_400
    assert parse_moment("2026-01-06", start, end) == start + 86_400
    assert parse_moment("2026-01-06T01:00:00+01:00", start, end) == start + 86_400
    with pytest.raises(WhatIfError):
        parse_moment("soon", start, end)
