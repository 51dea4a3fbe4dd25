"""The state API's queue in-process: ``limit`` holds across allocations; forecasts attach to rows."""

from __future__ import annotations

import json

from scheduler import Engine
from streams.state_api import StateApi, http_routes
from tests.test_forecast_many import busy_state


class EngineSource:
    """The state API's source of engines: one cluster, "c", this engine (tests import it)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def engines(self) -> dict[str, Engine]:
        return {"c": self.engine}


def test_limit_holds_across_allocations_and_forecasts_attach() -> None:
    eng = busy_state(pending=40)
    api = StateApi(EngineSource(eng))
    full = api.queue()
    assert len({r["budget"] for r in full["rows"]}) > 2  # several allocations' queues
    for limit in (1, 3, 7):
        rows = api.queue(limit=limit)["rows"]
        assert [r["workload"] for r in rows] == [r["workload"] for r in full["rows"][:limit]]
    status, _, raw = http_routes(api, lambda fn: fn())(
        "/api/queue", {"limit": "10", "forecast": "1", "forecast_rows": "4"})
    body = json.loads(raw)
    assert status == 200 and body["forecast"]["rows"] == 4 and "error" not in body["forecast"]
    with_f = [r for r in body["rows"] if "forecast" in r]
    assert [r["workload"] for r in with_f] == [r["workload"] for r in body["rows"][:4]]
    assert all(r["forecast"]["status"] in ("pending", "beyond_horizon", "unfinished")
               for r in with_f)
    assert body["forecast"]["made_at"] == eng.state.now


def test_an_explanation_without_its_forecast_simulates_nothing() -> None:
    """``/api/explain/ID?forecast=0`` (what ``allot wait`` polls): the same explanation, no
    forward simulation; without the flag the forecast is there."""
    eng = busy_state(pending=40)
    route = http_routes(StateApi(EngineSource(eng)), lambda fn: fn())
    wid = StateApi(EngineSource(eng)).queue()["rows"][0]["workload"]
    status, _, plain = route(f"/api/explain/{wid}", {"forecast": "0"})
    status_f, _, full = route(f"/api/explain/{wid}", {})
    assert status == status_f == 200
    plain_body, full_body = json.loads(plain), json.loads(full)
    assert plain_body["forecast"] is None and full_body["forecast"] is not None
    assert {k: v for k, v in plain_body.items() if k != "forecast"} == \
        {k: v for k, v in full_body.items() if k != "forecast"}
