"""Forecasts for the live state API: the JSON ``/api/explain/ID`` and ``/api/queue?forecast=1`` carry.

``streams.state_api.forecast_hook`` calls ``forecast_json(state, workload)``
for an explanation. Live answers are bounded (``live_assumptions``). ``queue_forecasts(state_or_snapshot, workload_ids)`` runs
one forward simulation for the first rows of the queue
(``simulate.forecast_many``). Times stay Unix seconds in the JSON (scripts
compute with them); the verbs and the dashboard print them as dates.

Every forecast served (not those of work already running) is appended to the
file ``ALLOT_FORECAST_RECORD`` names, when set, for the audit to score
(forecast/record.py; ``allot audit forecasts``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import msgspec

from forecast.record import record_served
from forecast.simulate import Assumptions, ForecastError, forecast_many
from scheduler.snapshot import restore_state
from scheduler.state import State

DEFAULT_ROWS = 20     # rows of `allot queue --forecast` forecast unless asked otherwise
MAX_ROWS = 200        # at most, whatever is asked: one request must not hold a worker long
# A live answer simulates a bounded number of cycles, so that one answer takes about a second
# at most (issue 26: a forecast at 2,000 pending <= 1 s). A cycle's cost grows with the hosts
# it places on (measured 2026-12-04 at 2,000 pending, compiled core, 2 shared cores: about
# 0.7 ms a cycle on 128 hosts, 5-7 ms on 1,250), so the bound is in host-cycles: 150,000 of
# them, between 100 and 5,000 cycles. Deeper in the queue the answer is "not before" the
# time the simulation reached (status "unfinished"). The bound depends on the state only,
# so the answer stays a pure function of it; `allot forecast` has none.
HOST_CYCLES = 150_000
MIN_CYCLES, MAX_CYCLES = 100, 5_000


def live_assumptions(state: State) -> Assumptions:
    """The default assumptions, with the cycle bound for ``state``'s number of hosts."""
    hosts = max(1, len(state.cluster_state.hosts))
    return Assumptions(max_cycles=max(MIN_CYCLES, min(MAX_CYCLES, HOST_CYCLES // hosts)))


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
        a = live_assumptions(st)
        f = forecast_many(st, (workload,), assumptions=a, blocked=False,
                          copy=not owned)[workload]
    except ForecastError:
        return None
    record_served((f,), {workload: w.kind})
    out: dict[str, Any] = msgspec.to_builtins(f)
    out["assumptions"] = msgspec.to_builtins(a)
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
    a = assumptions or live_assumptions(st)
    ids = [w for w in workloads if w in st.workloads.all
           and st.workloads.all[w].status in ("pending", "running")]
    made_at = st.now  # before the simulation (it may run on this very state)
    kinds = {w: st.workloads.all[w].kind for w in ids}
    t0 = time.perf_counter()
    fs = forecast_many(st, ids, assumptions=a, blocked=False, copy=not owned) if ids else {}
    record_served(fs.values(), kinds)
    return {"made_at": made_at, "seconds": round(time.perf_counter() - t0, 4),
            "assumptions": msgspec.to_builtins(a),
            "forecasts": {k: msgspec.to_builtins(v) for k, v in fs.items()}}


__all__ = ["DEFAULT_ROWS", "MAX_ROWS", "forecast_json", "live_assumptions", "queue_forecasts"]
