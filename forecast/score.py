"""Scoring forecasts against what happened: the error of each, and median / p90 per class of work.

A forecast record (``ForecastRecord``, JSON lines) says which workload, when it
was made, and the start it estimated. ``score(records, actual)`` pairs each
with the workload's actual first start (from the journal: ``first_starts``) and
returns, per kind of work and over all, how many were scored, and the median
and p90 of the absolute error (seconds); a workload that never started is
counted apart (``never_started``), not scored.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from events import Event, WorkloadStarted


class ForecastRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One recorded forecast."""

    workload: str
    kind: str
    made_at: int
    start: int | None          # None: not within the forecast's horizon (or not simulated that far)
    # The forecast's status: "pending" (a start), "beyond_horizon", "unfinished" (a live
    # forecast's cycle bound: it starts no earlier than ``not_before``).
    status: str = "pending"
    not_before: int | None = None
    source: str = ""           # who made it: "simulator", "api", "cli"


def first_starts(events: Iterable[Event]) -> dict[str, int]:
    """Each workload's first start time in a journal."""
    out: dict[str, int] = {}
    for e in events:
        if type(e) is WorkloadStarted and e.workload not in out:
            out[e.workload] = e.at
    return out


def _quantile(xs: list[int], q: float) -> float:
    s = sorted(xs)
    if not s:
        return float("nan")
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def score(records: Iterable[ForecastRecord], actual: dict[str, int]) -> dict[str, dict[str, float]]:
    """Per kind (and "all"): scored, never_started, beyond_horizon, p50/p90 absolute error (s)."""
    errors: dict[str, list[int]] = {}
    never: dict[str, int] = {}
    beyond: dict[str, int] = {}
    for r in records:
        for k in (r.kind, "all"):
            if r.workload not in actual:
                never[k] = never.get(k, 0) + 1
            elif r.start is None:
                beyond[k] = beyond.get(k, 0) + 1
            else:
                errors.setdefault(k, []).append(abs(r.start - actual[r.workload]))
    kinds = sorted(set(errors) | set(never) | set(beyond), key=lambda k: (k == "all", k))
    return {k: {"scored": len(errors.get(k, [])), "never_started": never.get(k, 0),
                "beyond_horizon": beyond.get(k, 0),
                "p50_abs_error_s": _quantile(errors.get(k, []), 0.5),
                "p90_abs_error_s": _quantile(errors.get(k, []), 0.9)} for k in kinds}


__all__ = ["ForecastRecord", "first_starts", "score"]
