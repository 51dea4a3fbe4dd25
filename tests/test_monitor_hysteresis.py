"""The monitor's hysteresis: pure, time as data, so every rule is checked by a plain sequence."""

from __future__ import annotations

import itertools

import pytest

from monitor.checks import Observation
from monitor.hysteresis import MonitorState, Thresholds, Transition, commit, step

OK = Observation()
HOT = Observation(severity="degraded", reasons=("GPU 3: 94 C (limit 90 C)",))
LOST = Observation(severity="failed", reasons=("1 of 8 GPUs lost (index 6)",))
TH = Thresholds(fault_after=3, repair_after=2, min_interval_s=600)


def run(seq: list[tuple[float, Observation]], th: Thresholds = TH,
        state: MonitorState | None = None) -> tuple[MonitorState, list[tuple[float, Transition]]]:
    """Feed the observations; commit every transition (as a successful publish does)."""
    s = state or MonitorState()
    out = []
    for now, obs in seq:
        s, t = step(s, obs, now, th)
        if t is not None:
            s = commit(s, t, now)
            out.append((now, t))
    return s, out


def test_fault_after_n_bad_in_a_row_only() -> None:
    s, ts = run([(0, HOT), (30, HOT), (60, OK), (90, HOT), (120, HOT)])
    assert ts == [] and s.bad == 2 and not s.faulted
    s, ts = run([(0, HOT), (30, HOT), (60, HOT)])
    assert [(at, t.kind, t.severity, t.reason) for at, t in ts] == [
        (60, "fault", "degraded", "GPU 3: 94 C (limit 90 C)")]
    assert s.faulted and s.severity == "degraded" and s.last_change_at == 60


def test_repair_after_m_good_and_the_min_interval() -> None:
    seq = [(0, HOT), (30, HOT), (60, HOT)] + [(90 + 30 * i, OK) for i in range(30)]
    s, ts = run(seq)
    assert [t.kind for _, t in ts] == ["fault", "repair"]
    # Two good looks came at 120, but the repair waits until 600 s after the fault.
    assert ts[1][0] == 660 and not s.faulted


def test_a_flapping_sensor_faults_once_per_interval_at_most() -> None:
    """Bad three times, good twice, forever: without the interval that is a drain every 150 s."""
    pattern = [HOT, HOT, HOT, OK, OK]
    seq = [(30.0 * i, pattern[i % 5]) for i in range(240)]  # two hours of looks
    _, ts = run(seq, Thresholds(fault_after=3, repair_after=2, min_interval_s=1800))
    faults = [at for at, t in ts if t.kind == "fault"]
    assert len(faults) == 2  # not 48
    times = [at for at, _ in ts]
    assert all(b - a >= 1800 for a, b in itertools.pairwise(times))
    _, free = run(seq, Thresholds(fault_after=3, repair_after=2, min_interval_s=0))
    assert len([t for _, t in free if t.kind == "fault"]) == 48


def test_failed_does_not_wait_for_the_interval() -> None:
    s = MonitorState(faulted=False, last_change_at=1000)  # repaired at 1000
    s, ts = run([(1010, HOT), (1020, HOT), (1030, HOT)], state=s)
    assert ts == []  # a degraded reading so soon after a repair waits
    # Three failed looks in a row: faulted at once, the interval notwithstanding.
    s, ts = run([(1040, LOST), (1050, LOST), (1060, LOST)], state=s)
    assert [(at, t.severity) for at, t in ts] == [(1060, "failed")]


def test_mixed_bad_looks_fault_as_degraded() -> None:
    _, ts = run([(0, LOST), (10, HOT), (20, LOST)])
    assert [(at, t.severity) for at, t in ts] == [(20, "degraded")]


def test_degraded_escalates_to_failed_never_back() -> None:
    s, ts = run([(0, HOT)] * 3 + [(10, LOST), (20, LOST), (30, LOST), (40, HOT), (50, HOT),
                                  (60, HOT)])
    assert [(at, t.severity) for at, t in ts] == [(0, "degraded"), (30, "failed")]
    assert s.severity == "failed"


def test_an_unpublished_transition_is_proposed_again_with_the_same_key() -> None:
    s = MonitorState()
    keys = []
    for now in (0, 30, 60, 90):
        s, t = step(s, HOT, now, TH)  # never committed: the broker was away
        if t is not None:
            keys.append(t.key)
    assert keys == ["fault-degraded-0", "fault-degraded-0"]
    assert not s.faulted and s.bad == 4


def test_a_known_fault_is_repaired_without_waiting() -> None:
    """A monitor started on a host the scheduler holds faulty (no transition time known)."""
    _, ts = run([(0, OK), (30, OK)], state=MonitorState(faulted=True, severity="degraded"))
    assert [(at, t.kind) for at, t in ts] == [(30, "repair")]


def test_bad_thresholds() -> None:
    with pytest.raises(ValueError):
        Thresholds(fault_after=0)
    with pytest.raises(ValueError):
        Thresholds(min_interval_s=-1)
