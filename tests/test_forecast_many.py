"""One forward simulation answers several workloads exactly as one forecast per workload does."""

from __future__ import annotations

import random

import msgspec
import pytest

from events.factory import Inputs
from forecast.live import forecast_json, queue_forecasts
from forecast.simulate import Assumptions, ForecastError, forecast, forecast_many
from scheduler import Engine
from scheduler.snapshot import snapshot_state

T0 = 1_767_225_600


def _busy(seed: int = 3, hosts: int = 6, pending: int = 40) -> Engine:
    """A full cluster with a mixed queue: shapes, teams, protections and unallocated work."""
    rng = random.Random(seed)
    eng = Engine("c")
    mk = Inputs(cluster="c", prefix="m")
    for e in (mk.tick(T0, cycle=False), mk.policy(at=T0), mk.node("lab", managers=("admin",), at=T0)):
        eng.process(e)
    teams = [f"lab/t{i}" for i in range(4)]
    for t in teams:
        eng.process(mk.node(t, shares=rng.randint(1, 4), at=T0))
    for h in range(hosts):
        eng.process(mk.host(f"h{h}", at=T0))
    for h in range(hosts):
        eng.process(mk.submit(f"run{h}", rng.choice(teams), 8, 1800, at=T0,
                              expected_duration_s=rng.randint(1800, 4 * 3600)))
    eng.process(mk.tick(T0 + 1))
    for i in range(pending):
        gpus = rng.choice([1, 2, 4, 8, 16])
        eng.process(mk.submit(f"p{i}", rng.choice(teams), gpus, rng.choice([0, 900, 3600]),
                              at=T0 + 2, hosts=max(1, gpus // 8),
                              expected_duration_s=rng.randint(600, 3 * 3600)))
    eng.process(mk.tick(T0 + 3, cycle=False))
    return eng


def test_one_simulation_answers_as_one_forecast_per_workload() -> None:
    eng = _busy()
    before = eng.state.fingerprint()
    pending = sorted(w.id for w in eng.state.workloads.all.values() if w.status == "pending")
    asked = [*pending[::3], "run0"]  # a running one too
    many = forecast_many(eng.state, asked)
    assert eng.state.fingerprint() == before  # copied, never touched
    assert list(many) == asked
    for wid in asked:
        assert msgspec.to_builtins(many[wid]) == msgspec.to_builtins(forecast(eng, wid)), wid
    statuses = {f.status for f in many.values()}
    assert "running" in statuses and "pending" in statuses
    # Different starts and different queue depths: the comparison is not trivially equal.
    assert len({f.start for f in many.values()}) > 3
    assert len({f.ahead for f in many.values()}) > 3


def test_the_horizon_and_the_snapshot_path() -> None:
    eng = _busy(seed=5)
    pending = [w.id for w in eng.state.workloads.all.values() if w.status == "pending"]
    a = Assumptions(horizon_s=3600)
    many = forecast_many(eng.state, pending, assumptions=a, blocked=False)
    assert any(f.status == "beyond_horizon" for f in many.values())
    for wid in pending[:8]:
        one = forecast(eng, wid, assumptions=a)
        assert many[wid].start == one.start and many[wid].ahead == one.ahead
        assert many[wid].blocked_by is None
    # The state API's path: a snapshot taken under the lock, simulated elsewhere.
    doc = queue_forecasts(snapshot_state(eng.state), pending, a)
    assert doc["made_at"] == eng.state.now
    assert {k: v.get("start") for k, v in doc["forecasts"].items()} == {
        k: f.start for k, f in many.items()}


def test_errors_and_the_explain_hook() -> None:
    eng = _busy(pending=4)
    with pytest.raises(ForecastError):
        forecast_many(eng.state, ["p0", "nope"])
    j = forecast_json(eng.state, "p0")
    assert j is not None and j["status"] in ("pending", "beyond_horizon")
    assert j["assumptions"]["horizon_s"] == 14 * 86_400
    assert j["assumptions"]["max_cycles"] == 5_000  # 6 hosts: the bound in host-cycles, capped
    assert forecast_json(eng.state, "nope") is None


def test_a_cycle_budget_stops_early_and_says_not_before() -> None:
    eng = _busy(seed=7)
    pending = [w.id for w in eng.state.workloads.all.values() if w.status == "pending"]
    free = forecast_many(eng.state, pending, blocked=False)
    deepest = max(free.values(), key=lambda f: f.cycles)
    budget = Assumptions(max_cycles=max(1, deepest.cycles // 2))
    bounded = forecast_many(eng.state, pending, assumptions=budget, blocked=False)
    unfinished = [f for f in bounded.values() if f.status == "unfinished"]
    assert unfinished and len(unfinished) < len(pending)
    for f in bounded.values():
        if f.status == "unfinished":
            # Not started by the time the bounded simulation reached: it starts later.
            assert f.start is None and f.simulated_until is not None
            later = free[f.workload].start
            assert later is None or later > f.simulated_until
        else:  # within the budget: the unbounded answer
            assert f.start == free[f.workload].start and f.ahead == free[f.workload].ahead
    one = forecast_many(eng.state, [unfinished[0].workload], assumptions=budget, blocked=False)
    assert msgspec.to_builtins(one) == {k: msgspec.to_builtins(bounded[k]) for k in one}
