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
# A live answer simulates at most this many cycles: about 0.1 s at 1,000 GPUs and 2 s at
# 10,000 with 2,000 pending (compiled core). Deeper in the queue the answer is "not before"
# the time the simulation reached (status "unfinished"); `allot forecast` has no bound.
LIVE_MAX_CYCLES = 500
LIVE = Assumptions(max_cycles=LIVE_MAX_CYCLES)


def forecast_json(state: State | bytes, workload: str) -> dict[str, Any] | None:
    """The forecast of one workload as JSON (``LIVE`` assumptions); None when it has ended.

    ``state`` may be a snapshot (bytes): the state API takes it on the worker's
    loop and simulates in its HTTP thread.
    """
    owned = isinstance(state, bytes)
    st = restore_state(state) if isinstance(state, bytes) else state
    w = st.workloads.all.get(workload)
    if w is None or w.status not in ("pending", "running"):
        return None
    try:
        # No blocker here: the explanation it goes into says what blocks the workload (a
        # second traced cycle would double the answer's cost at 2,000 pending).
        f = forecast_many(st, (workload,), assumptions=LIVE, blocked=False,
                          copy=not owned)[workload]
    except ForecastError:
        return None
    out: dict[str, Any] = msgspec.to_builtins(f)
    out["assumptions"] = msgspec.to_builtins(LIVE)
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
    a = assumptions or LIVE
    ids = [w for w in workloads if w in st.workloads.all
           and st.workloads.all[w].status in ("pending", "running")]
    made_at = st.now  # before the simulation (it may run on this very state)
    t0 = time.perf_counter()
    fs = forecast_many(st, ids, assumptions=a, blocked=False, copy=not owned) if ids else {}
    return {"made_at": made_at, "seconds": round(time.perf_counter() - t0, 4),
            "assumptions": msgspec.to_builtins(a),
            "forecasts": {k: msgspec.to_builtins(v) for k, v in fs.items()}}


__all__ = ["DEFAULT_ROWS", "LIVE", "LIVE_MAX_CYCLES", "MAX_ROWS", "forecast_json",
           "queue_forecasts"]
