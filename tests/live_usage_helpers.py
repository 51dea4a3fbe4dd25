"""Helpers shared by the projection tests: journals as records, audit figures, brute force.

- ``as_records``: a list of events as one journal partition (a claim, then each
  event as an input or decision record under it), which is what the live
  projections read.
- ``audit_node_hours`` / ``audit_host_hours``: the same figures computed by the
  audit (DuckDB views over the log), in GPU-seconds per key and window start.
- ``hop``: hourly audit figures summed into hopping windows.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import duckdb

from allot import live_audit
from events import DECISION_TYPES, Event, encode, write_log
from streams.records import (
    KIND_CLAIM,
    KIND_DECISION,
    KIND_INPUT,
    Claim,
    JournalRecord,
    encode_claim,
)
from streams.usage_windows import WindowSpec

Figures = dict[str, dict[int, tuple[int, int]]]


def as_records(events: list[Event], partition: int = 0, token: str = "tok",
               start_offset: int = 0) -> list[JournalRecord]:
    out = [JournalRecord(partition=partition, offset=start_offset, kind=KIND_CLAIM, owner=token,
                         value=encode_claim(Claim(token=token, worker="w", partition=partition,
                                                  at=0.0)))]
    for i, e in enumerate(events, start_offset + 1):
        kind = KIND_DECISION if type(e) in DECISION_TYPES else KIND_INPUT
        out.append(JournalRecord(partition=partition, offset=i, kind=kind, owner=token,
                                 value=encode(e), inbox_offset=i if kind == KIND_INPUT else None))
    return out


def load_audit(events: list[Event], tmp: Path) -> duckdb.DuckDBPyConnection:
    from audit.load import load_log, open_db

    log = tmp / "log.jsonl"
    write_log(log, events)
    con = open_db(tmp / "audit.duckdb")
    load_log(con, log, run="r")
    return con


def audit_node_seconds(con: duckdb.DuckDBPyConnection) -> Figures:
    """GPU-seconds per budget node and hour, from the audit's ``gpu_hours_by_node_hour``."""
    return live_audit.node_seconds(con, "r")


def audit_host_seconds(con: duckdb.DuckDBPyConnection) -> Figures:
    """GPU-seconds per host and hour, from the audit's ``run_slots`` cut at hour boundaries."""
    return live_audit.host_seconds(con, "r")


def hop(hourly: Figures, spec: WindowSpec) -> Figures:
    """Hourly figures summed into the windows of ``spec`` (its step a multiple of an hour)."""
    out: Figures = defaultdict(dict)
    for key, cells in hourly.items():
        for hour, (a, u) in cells.items():
            for s in spec.starts(hour):
                a0, u0 = out[key].get(s, (0, 0))
                out[key][s] = (a0 + a, u0 + u)
    return {k: {s: v for s, v in c.items() if v != (0, 0)} for k, c in out.items()}


def nonzero(f: Figures) -> Figures:
    return {k: {s: v for s, v in c.items() if v != (0, 0)} for k, c in f.items()
            if any(v != (0, 0) for v in c.values())}
