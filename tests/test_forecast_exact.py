"""Forecasts: exact on a small deterministic cluster, the caller's engine untouched; error scoring."""

from __future__ import annotations

import pytest

from events import WorkloadStarted
from events.factory import Inputs
from forecast.score import ForecastRecord, first_starts, score
from forecast.simulate import Assumptions, ForecastError, forecast, forecast_for, forecast_many
from scheduler import Engine

T0 = 1_767_225_600


def _cluster() -> tuple[Engine, Inputs]:
    eng = Engine("c")
    mk = Inputs(cluster="c", prefix="t")
    for e in (mk.tick(T0, cycle=False), mk.policy(at=T0), mk.node("lab", managers=("admin",), at=T0),
              mk.node("lab/a", at=T0), mk.node("lab/b", at=T0), mk.host("h0", at=T0),
              mk.host("h1", at=T0)):
        eng.process(e)
    return eng, mk


def _start_all(eng: Engine, mk: Inputs, at: int) -> list[str]:
    out = eng.process(mk.tick(at)) or []
    return [d.workload for d in out if type(d) is WorkloadStarted]


def test_the_forecast_is_exact_when_the_future_is_as_assumed() -> None:
    eng, mk = _cluster()
    # Two 8-GPU jobs fill both hosts, ending after 1 h and 3 h; then two more wait.
    eng.process(mk.submit("a1", "lab/a", 8, 600, at=T0, expected_duration_s=3600))
    eng.process(mk.submit("b1", "lab/b", 8, 600, at=T0, expected_duration_s=3 * 3600))
    assert sorted(_start_all(eng, mk, T0 + 1)) == ["a1", "b1"]
    eng.process(mk.submit("a2", "lab/a", 8, 600, at=T0 + 1, expected_duration_s=7200))
    eng.process(mk.submit("b2", "lab/b", 8, 600, at=T0 + 1, expected_duration_s=600))
    before = eng.state.fingerprint()
    fa = forecast(eng, "a2")
    fb = forecast_for(eng, "b2")
    assert eng.state.fingerprint() == before  # the caller's state is never touched
    # a2 takes a1's host when a1 ends (1 h); b2 waits for the first host to free after that:
    # b1 ends at 3 h, a2 at 1 h + 2 h = 3 h as well, so b2 starts at 3 h.
    assert fa.status == "pending" and fa.start == T0 + 1 + 3600 and fa.waits_for == ("a1",)
    assert fb.start == T0 + 1 + 3 * 3600
    assert fa.blocked_by is not None
    # What happens when the world behaves as assumed: the same starts.
    eng.process(mk.tick(T0 + 1 + 3600, cycle=False))
    eng.process(mk.finish("a1", at=T0 + 1 + 3600))
    assert _start_all(eng, mk, T0 + 1 + 3600) == ["a2"]


def test_running_and_unknown_workloads() -> None:
    eng, mk = _cluster()
    eng.process(mk.submit("a1", "lab/a", 8, 600, at=T0, expected_duration_s=3600))
    _start_all(eng, mk, T0 + 1)
    assert forecast(eng, "a1").status == "running"
    with pytest.raises(ForecastError):
        forecast(eng, "nope")


def test_beyond_the_horizon() -> None:
    eng, mk = _cluster()
    # Every funded start protected for its whole minimum runtime (not the default).
    eng.process(mk.policy(at=T0, borrowed_protection_s=None))
    for i in range(2):
        eng.process(mk.submit(f"a{i}", "lab/a", 8, 28_800, at=T0, expected_duration_s=30 * 86_400))
    _start_all(eng, mk, T0 + 1)
    eng.process(mk.submit("late", "lab/b", 8, 600, at=T0 + 1))
    # Both hosts are protected for 8 h: nothing can start within a 1 h horizon.
    f = forecast(eng, "late", assumptions=Assumptions(horizon_s=3600))
    assert f.status == "beyond_horizon" and f.start is None


def test_scoring_per_kind() -> None:
    recs = [ForecastRecord(workload="a", kind="debug", made_at=0, start=100),
            ForecastRecord(workload="b", kind="debug", made_at=0, start=50),
            ForecastRecord(workload="c", kind="training", made_at=0, start=None),
            ForecastRecord(workload="d", kind="training", made_at=0, start=10)]
    actual = {"a": 110, "b": 20, "c": 5}
    s = score(recs, actual)
    assert s["debug"]["scored"] == 2 and s["debug"]["p50_abs_error_s"] == 20.0
    assert s["debug"]["p90_abs_error_s"] == pytest.approx(28.0)
    assert s["training"]["beyond_horizon"] == 1 and s["training"]["never_started"] == 1
    assert s["all"]["scored"] == 2


def test_first_starts_reads_the_journal() -> None:
    eng, mk = _cluster()
    log = []
    e = mk.submit("a1", "lab/a", 8, 600, at=T0, expected_duration_s=3600)
    log += [e, *(eng.process(e) or [])]
    t = mk.tick(T0 + 1)
    log += [t, *(eng.process(t) or [])]
    assert first_starts(log) == {"a1": T0 + 1}


def test_a_gang_the_healthy_hosts_cannot_hold_is_answered_without_simulating() -> None:
    eng, mk = _cluster()
    eng.process(mk.submit("a1", "lab/a", 8, 600, at=T0, expected_duration_s=3600))
    _start_all(eng, mk, T0 + 1)
    eng.process(mk.fault("h1", "failed", at=T0 + 1, reason="test"))
    eng.process(mk.submit("gang", "lab/b", 16, 600, at=T0 + 1, hosts=2))
    f = forecast(eng, "gang", assumptions=Assumptions(horizon_s=86_400))
    assert f.status == "beyond_horizon" and f.start is None and f.cycles == 0
    assert f.unplaceable is not None and "1" in f.unplaceable
    # The plain path, simulated through the horizon, says the same.
    plain = forecast_many(eng.state, ("gang",), assumptions=Assumptions(horizon_s=86_400),
                          shortcuts=False)["gang"]
    assert (plain.status, plain.start, plain.blocked_by) == (f.status, f.start, f.blocked_by)
    assert plain.cycles > 0 and plain.unplaceable is None


def test_a_gang_that_fits_the_healthy_hosts_is_simulated() -> None:
    eng, mk = _cluster()
    eng.process(mk.submit("a1", "lab/a", 8, 600, at=T0, expected_duration_s=3600))
    _start_all(eng, mk, T0 + 1)
    eng.process(mk.submit("gang", "lab/b", 16, 600, at=T0 + 1, hosts=2))
    f = forecast(eng, "gang")
    assert f.unplaceable is None and f.start == T0 + 1 + 3600


def test_a_run_preempted_inside_the_forecast_ends_at_its_new_runs_end() -> None:
    """A requeued workload that starts again runs its whole new run, not to its old run's end."""
    eng, mk = _cluster()
    # lab/a fills both hosts: a1 within its share (8 of its 8), a1b borrowed (resumable, 2 h).
    eng.process(mk.submit("a1", "lab/a", 8, 600, at=T0, expected_duration_s=10 * 3600))
    eng.process(mk.submit("a1b", "lab/a", 8, 600, at=T0 + 1, expected_duration_s=2 * 3600,
                          resumable=True))
    assert sorted(_start_all(eng, mk, T0 + 1)) == ["a1", "a1b"]
    now = T0 + 10
    eng.process(mk.tick(now, cycle=False))
    # lab/b comes back for its share (1 h of work): the forecast's first cycle reclaims a1b,
    # which is requeued and starts again when b1 ends, at now + 1 h, for 2 h more.
    eng.process(mk.submit("b1", "lab/b", 8, 600, at=now, expected_duration_s=3600))
    eng.process(mk.submit("a3", "lab/a", 8, 600, at=now, expected_duration_s=3600))
    f = forecast(eng, "a3", now=now)
    # a3 waits behind its teammate a1b: it starts when a1b's second run ends (now + 3 h),
    # not at a1b's first run's expected end (T0 + 1 + 2 h).
    assert f.status == "pending"
    assert f.start == now + 3600 + 2 * 3600, f
    assert f.waits_for == ("a1b",)
