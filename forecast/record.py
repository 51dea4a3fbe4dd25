"""Recording forecasts as they are made, so the audit can score them against what happened.

A forecast is not a decision: it never enters the journal, and recording one
changes nothing the core does. Records (``score.ForecastRecord``) go to a
JSON-lines side file that ``allot audit forecasts`` loads next to the run's
events (audit/forecasts.py reads it, view ``forecast_errors``). Two producers:

- the simulator, at each submission (or a seeded sample of them,
  ``SubmissionForecasts``): the forecast start of the new workload as of its
  submission, made on a copy of the state (``Simulation(on_submit=...)``);
- the live state API, through ``forecast.live``: every forecast it serves is
  appended to the file named by ``ALLOT_FORECAST_RECORD`` (unset: none).

The sample is chosen by a hash of the seed and the workload id, not by a
random stream, so the same workloads are chosen whatever else the run does
and whichever order they arrive in.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Iterable

import msgspec

from forecast.score import ForecastRecord
from forecast.simulate import Assumptions, Forecast, forecast_many
from scheduler.state import State

RECORD_ENV = "ALLOT_FORECAST_RECORD"   # the live API appends what it serves to this file

_append_lock = threading.Lock()   # the state API's HTTP threads may append at once


def chosen(workload: str, rate: float, seed: int) -> bool:
    """Is ``workload`` in the sample of ``rate`` (0..1) drawn with ``seed``? Deterministic."""
    if rate >= 1.0:
        return True
    if rate <= 0.0:
        return False
    h = hashlib.sha256(f"{seed}:{workload}".encode()).digest()
    return int.from_bytes(h[:8], "big") < rate * (1 << 64)


def record_of(f: Forecast, kind: str, source: str) -> ForecastRecord:
    """The record of one forecast (``source``: who made it: simulator, api, cli)."""
    return ForecastRecord(workload=f.workload, kind=kind, made_at=f.now, start=f.start,
                          status=f.status, not_before=f.simulated_until, source=source)


class SubmissionForecasts:
    """The simulator's hook: forecast each sampled submission as of its submission.

    ``Simulation(on_submit=hook)`` calls ``hook(state, workload_id, kind)``
    right after a submission is folded (before the moment's cycle). The
    forecast runs on a copy of ``state`` (``forecast_many`` copies it), without
    the explanation's traced cycle, so the simulation's decisions are the same
    with or without the hook.
    """

    def __init__(self, rate: float = 1.0, seed: int = 0,
                 assumptions: Assumptions | None = None) -> None:
        self.rate = rate
        self.seed = seed
        self.assumptions = assumptions or Assumptions()
        self.records: list[ForecastRecord] = []
        self.submissions = 0   # submissions seen (sampled or not)

    def __call__(self, state: State, workload: str, kind: str) -> None:
        self.submissions += 1
        if not chosen(workload, self.rate, self.seed):
            return
        w = state.workloads.all.get(workload)
        if w is None or w.status != "pending":   # refused or a duplicate: nothing to forecast
            return
        f = forecast_many(state, (workload,), assumptions=self.assumptions, blocked=False)[workload]
        self.records.append(record_of(f, kind, "simulator"))


def write_records(path: str | os.PathLike[str], records: Iterable[ForecastRecord],
                  append: bool = False) -> None:
    """Write (or append) ``records`` as JSON lines."""
    data = b"".join(msgspec.json.encode(r) + b"\n" for r in records)
    with _append_lock, open(path, "ab" if append else "wb") as fh:
        fh.write(data)


def record_served(forecasts: Iterable[Forecast], kinds: dict[str, str]) -> None:
    """Append forecasts the live API served to ``$ALLOT_FORECAST_RECORD`` (if set)."""
    path = os.environ.get(RECORD_ENV)
    if not path:
        return
    write_records(path, (record_of(f, kinds.get(f.workload, ""), "api") for f in forecasts
                         if f.status != "running"), append=True)


__all__ = ["RECORD_ENV", "SubmissionForecasts", "chosen", "record_of", "record_served",
           "write_records"]
