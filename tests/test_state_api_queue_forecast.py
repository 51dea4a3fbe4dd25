"""The state API's queue in-process: ``limit`` holds across allocations; forecasts attach to rows."""

from __future__ import annotations

from scheduler import Engine
from streams.state_api import StateApi
from tests.test_forecast_many import _busy


class _Source:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def engines(self) -> dict[str, Engine]:
        return {"c": self.engine}


def test_limit_holds_across_allocations_and_forecasts_attach() -> None:
    eng = _busy(pending=40)
    api = StateApi(_Source(eng))
    full = api.queue()
    assert len({r["budget"] for r in full["rows"]}) > 2  # several allocations' queues
    for limit in (1, 3, 7):
        rows = api.queue(limit=limit)["rows"]
        assert [r["workload"] for r in rows] == [r["workload"] for r in full["rows"][:limit]]
    body = api.queue_with_forecasts(limit=10, rows=4)
    assert body["forecast"]["rows"] == 4 and "error" not in body["forecast"]
    with_f = [r for r in body["rows"] if "forecast" in r]
    assert [r["workload"] for r in with_f] == [r["workload"] for r in body["rows"][:4]]
    assert all(r["forecast"]["status"] in ("pending", "beyond_horizon", "unfinished")
               for r in with_f)
    assert body["forecast"]["made_at"] == eng.state.now
