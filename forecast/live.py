"""Forecasts for the live state API: the JSON ``/api/explain/ID`` and ``/api/queue?forecast=1`` carry.

``streams.state_api.forecast_hook`` calls ``forecast_json(state, workload)``
for an explanation. ``queue_forecasts(state_or_snapshot, workload_ids)`` runs
one forward simulation for the first rows of the queue
(``simulate.forecast_many``). Times stay Unix seconds in the JSON (scripts
compute with them); the verbs and the dashboard print them as dates.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import msgspec

from forecast.simulate import Assumptions, ForecastError, forecast_many
from scheduler.snapshot import restore_state
from scheduler.state import State

DEFAULT_ROWS = 20     # rows of `allot queue --forecast` forecast unless asked otherwise
MAX_ROWS = 200        # at most, whatever is asked: one request must not hold a worker long


def forecast_json(state: State, workload: str) -> dict[str, Any] | None:
    """The forecast of one workload as JSON; None when it has ended (nothing to forecast)."""
    w = state.workloads.all.get(workload)
    if w is None or w.status not in ("pending", "running"):
        return None
    try:
        f = forecast_many(state, (workload,))[workload]
    except ForecastError:
        return None
    out: dict[str, Any] = msgspec.to_builtins(f)
    out.setdefault("assumptions", msgspec.to_builtins(Assumptions()))
    return out


def queue_forecasts(state: State | bytes, workloads: Sequence[str],
                    assumptions: Assumptions | None = None) -> dict[str, Any]:
    """Forecasts of ``workloads`` (pending, in queue order) from one simulation.

    ``state`` may be a snapshot (bytes) taken elsewhere: the state API copies
    the state under the worker's lock and simulates outside it. Returns
    ``{"made_at", "seconds", "assumptions", "forecasts": {id: forecast}}``.
    """
    owned = isinstance(state, bytes)
    st = restore_state(state) if isinstance(state, bytes) else state
    a = assumptions or Assumptions()
    ids = [w for w in workloads if w in st.workloads.all
           and st.workloads.all[w].status in ("pending", "running")]
    made_at = st.now  # before the simulation (it may run on this very state)
    t0 = time.perf_counter()
    fs = forecast_many(st, ids, assumptions=a, blocked=False, copy=not owned) if ids else {}
    return {"made_at": made_at, "seconds": round(time.perf_counter() - t0, 4),
            "assumptions": msgspec.to_builtins(a),
            "forecasts": {k: msgspec.to_builtins(v) for k, v in fs.items()}}


__all__ = ["DEFAULT_ROWS", "MAX_ROWS", "forecast_json", "queue_forecasts"]
