"""What the plots read: the audit views, one query helper, and the errors of a database they cannot draw.

Every plot reads the audit views (``runs``, ``run_slots``,
``gpu_hours_by_node_hour``, ``entitlement_by_hour``, ``capacity_by_hour``,
``waits``, ``policy``, ``teams``, ``host_faults``) through these functions, so a
missing view, an unknown run or an old database is reported the same way for
every figure.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import duckdb

from audit.errors import AuditError

HOUR_S = 3_600


class PlotError(AuditError):
    """A plot cannot be drawn from this database."""


class UnknownRunError(PlotError, LookupError):
    """A run name that the ``events`` table does not hold."""

    def __init__(self, run: str, known: Sequence[str]) -> None:
        listed = ", ".join(repr(r) for r in known) or "none"
        super().__init__(f"unknown run {run!r}; runs in this database: {listed}")
        self.run = run
        self.known = tuple(known)


class UnknownManagerError(PlotError, LookupError):
    """A manager name that manages no budget node in the run."""

    def __init__(self, manager: str, known: Sequence[str]) -> None:
        listed = ", ".join(repr(m) for m in known) or "none"
        super().__init__(f"{manager!r} manages no budget node; managers: {listed}")
        self.manager = manager
        self.known = tuple(known)


class MissingViewError(PlotError):
    """An audit view (or the events table) the plot reads does not exist."""


def epoch(value: Any) -> int:
    """A time column value (int seconds, or a timestamp) as int Unix seconds."""
    if isinstance(value, datetime):
        v = value if value.tzinfo else value.replace(tzinfo=UTC)
        return int(v.timestamp())
    return int(value)


def query(con: duckdb.DuckDBPyConnection, sql: str, params: Sequence[Any] = ()) -> list[Any]:
    """Run ``sql``; a missing view becomes MissingViewError naming it."""
    try:
        return con.execute(sql, list(params)).fetchall()
    except duckdb.CatalogException as exc:
        raise MissingViewError(
            f"{exc}; load the log with audit.load (which creates the audit views) first"
        ) from exc


def list_runs(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The run names in the ``events`` table, sorted."""
    return [r for (r,) in query(con, "SELECT DISTINCT run FROM events ORDER BY run")]


def check_runs(con: duckdb.DuckDBPyConnection, runs: Iterable[str]) -> None:
    """Raise UnknownRunError for the first run the database does not hold."""
    known = list_runs(con)
    for r in runs:
        if r not in known:
            raise UnknownRunError(r, known)


def as_runs(runs: str | Sequence[str]) -> list[str]:
    rs = [runs] if isinstance(runs, str) else list(runs)
    if not rs:
        raise ValueError("no runs given")
    return rs


def run_bounds(con: duckdb.DuckDBPyConnection, run: str) -> tuple[int, int]:
    """The first and last clock times of ``run`` (the ``log_span`` view, else event times)."""
    try:
        # log_span uses the scheduler's clock (running max of `at`), as every view does.
        rows = con.execute("SELECT start_t, end_t FROM log_span WHERE run = ?", [run]).fetchall()
    except duckdb.Error:
        rows = query(con, 'SELECT min("at"), max("at") FROM events WHERE run = ?', [run])
    ((lo, hi),) = rows or [(None, None)]
    if lo is None:
        raise UnknownRunError(run, list_runs(con))
    return epoch(lo), epoch(hi)


def policy_value(con: duckdb.DuckDBPyConnection, run: str, column: str, default: int) -> int:
    """One knob from the ``policy`` view, or ``default`` when absent (older views, no row)."""
    if not re.fullmatch(r"[a-z_]+", column):
        raise ValueError(f"bad column name {column!r}")
    try:
        rows = con.execute(f"SELECT {column} FROM policy WHERE run = ? LIMIT 1", [run]).fetchall()
    except duckdb.Error:
        return default
    return int(rows[0][0]) if rows and rows[0][0] is not None else default


def host_gpu_counts(con: duckdb.DuckDBPyConnection, run: str) -> dict[str, int]:
    """GPUs per host from the run's ``host.added`` events (empty when not readable)."""
    try:
        rows = con.execute(
            "SELECT host, max(gpus) FROM events WHERE run = ? AND type = 'host.added' "
            "GROUP BY host", [run]).fetchall()
    except duckdb.Error:
        # The events table may not flatten host fields; callers fall back to policy.host_gpus.
        return {}
    return {h: int(g) for h, g in rows if h is not None and g is not None}


def budget_managers(con: duckdb.DuckDBPyConnection, run: str) -> dict[str, tuple[str, ...]]:
    """Budget node path -> its managers, from the run's ``budget.node_defined`` events."""
    try:
        rows = con.execute(
            "SELECT path, managers FROM events WHERE run = ? AND type = 'budget.node_defined' "
            "ORDER BY \"at\"", [run]).fetchall()
    except duckdb.Error as exc:
        raise MissingViewError(f"cannot read budget managers from events: {exc}") from exc
    out: dict[str, tuple[str, ...]] = {}
    for path, managers in rows:
        if isinstance(managers, str):  # a JSON-typed column
            managers = json.loads(managers)
        out[path] = tuple(managers or ())
    return out


def team_names(con: duckdb.DuckDBPyConnection, run: str) -> list[str]:
    """Every team of the run: the ``teams`` view, else nodes at the policy's team depth."""
    try:
        return sorted(str(t) for (t,) in con.execute(
            "SELECT DISTINCT team FROM teams WHERE run = ?", [run]).fetchall())
    except duckdb.Error:
        pass  # an older database without the teams view: derive teams from the tree
    depth = policy_value(con, run, "team_depth", 2)
    try:
        nodes = [n for (n,) in con.execute(
            "SELECT DISTINCT node FROM entitlement_by_hour WHERE run = ?", [run]).fetchall()]
    except duckdb.Error:
        nodes = []
    return _nodes_at_team_depth(nodes, depth)


def _nodes_at_team_depth(nodes: Iterable[str], depth: int) -> list[str]:
    """Nodes at ``depth``, plus leaves shallower than it (a team that was never split)."""
    ns = set(nodes)
    parents = {n.rsplit("/", 1)[0] for n in ns if "/" in n}
    return sorted(n for n in ns
                  if n.count("/") == depth or (n.count("/") < depth and n not in parents))


@dataclass(frozen=True, slots=True)
class HourUse:
    """One hour of ``capacity_by_hour``: its length and where its GPU-hours went."""

    hour: int
    seconds: int  # shorter than 3600 for the hours the views clip to the log span
    total_gpus: float  # mean GPUs present
    allocated_gpu_h: float
    unallocated_gpu_h: float
    idle_gpu_h: float
    unavailable_gpu_h: float


def capacity_hours(con: duckdb.DuckDBPyConnection, run: str) -> list[HourUse]:
    """The run's ``capacity_by_hour`` rows in hour order (``hour_s`` when the view has it)."""
    try:
        rows = con.execute(
            "SELECT hour, hour_s, total_gpus, allocated_gpu_h, unallocated_gpu_h, idle_gpu_h, "
            "unavailable_gpu_h FROM capacity_by_hour WHERE run = ? ORDER BY hour",
            [run]).fetchall()
    except duckdb.BinderException:
        # A view without hour_s: every hour is whole.
        rows = [(h, HOUR_S, *rest) for h, *rest in query(
            con, "SELECT hour, total_gpus, allocated_gpu_h, unallocated_gpu_h, idle_gpu_h, "
                 "unavailable_gpu_h FROM capacity_by_hour WHERE run = ? ORDER BY hour", [run])]
    except duckdb.CatalogException as exc:
        raise MissingViewError(
            f"{exc}; load the log with audit.load (which creates the audit views) first"
        ) from exc
    return [HourUse(epoch(h), int(sec or HOUR_S), *(float(v or 0.0) for v in vals))
            for h, sec, *vals in rows]


def host_down(con: duckdb.DuckDBPyConnection, run: str, end: int
               ) -> dict[str, list[tuple[int, int]]]:
    """Fault intervals per host: the ``host_faults`` view, else paired from raw events."""
    try:
        rows = con.execute(
            "SELECT host, faulted_at, coalesce(repaired_at, removed_at) FROM host_faults "
            "WHERE run = ? ORDER BY host, faulted_at", [run]).fetchall()
    except duckdb.Error:
        pass
    else:
        out: dict[str, list[tuple[int, int]]] = {}
        for host, a, b in rows:
            if a is not None:
                out.setdefault(str(host), []).append((epoch(a), end if b is None else epoch(b)))
        return out
    try:
        changes = [(str(k), str(h), epoch(a)) for k, h, a in con.execute(
            'SELECT type, host, "at" FROM events WHERE run = ? AND type IN '
            "('host.faulted', 'host.repaired', 'host.removed') ORDER BY \"at\"", [run]).fetchall()]
    except duckdb.Error:
        changes = []  # an events table without host columns: no fault shading
    return host_down_intervals(changes, end)


def host_down_intervals(
    changes: Iterable[tuple[str, str, int]], end: int
) -> dict[str, list[tuple[int, int]]]:
    """Per host, the [faulted, repaired) intervals from (type, host, at) events in log order.

    A fault while already down extends nothing; ``host.removed`` also ends an
    interval; an interval still open at ``end`` is closed there.
    """
    down_since: dict[str, int] = {}
    out: dict[str, list[tuple[int, int]]] = {}
    for kind, host, at in changes:
        if kind == "host.faulted":
            down_since.setdefault(host, at)
        elif kind in ("host.repaired", "host.removed") and host in down_since:
            out.setdefault(host, []).append((down_since.pop(host), at))
    for host, since in down_since.items():
        out.setdefault(host, []).append((since, max(since, end)))
    return out

