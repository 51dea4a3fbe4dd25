"""Pictures of an audited log: who ran where, usage against entitlement, waits, occupancy.

Every picture here is drawn from the audit views (``runs``, ``run_slots``,
``gpu_hours_by_node_hour``, ``entitlement_by_hour``, ``capacity_by_hour``,
``waits``, ``policy``) over a DuckDB connection whose ``events`` table may hold
several *runs* (the same scenario under different policies, e.g. ``allot`` and
``baseline``). The four plots are:

- ``gantt``: the lab simulator's picture. One row per GPU, one bar per task (a
  run slot: the GPUs one run interval of a workload held on one host), one hue
  per team, hatched where the task was interruptible (unallocated, or past its
  protection), a red edge where the scheduler preempted it.
- ``usage_vs_entitlement``: per team (or per managed budget node), the share of
  all allocated GPU-hours it was charged over the trailing fair-share window,
  against the fraction of the cluster it is entitled to, over time.
- ``wait_cdfs``: per workload kind, the distribution of first-start queue waits,
  one line per run, log time axis.
- ``occupancy``: per run, every GPU-hour split into allocated, unallocated, idle
  and unavailable.

The log does not say *which* GPU of a host a task held, only how many, so the
Gantt assigns GPU indices itself (``assign_gpu_indices``: deterministic interval
partitioning). The computations (index assignment, interruptible segments, CDF
points, trailing-window shares) are pure functions kept apart from the drawing
so they can be tested exactly. Drawing uses matplotlib's object API on the Agg
canvas (no pyplot, no global figure state, no display), so output is the same
bytes for the same data and library versions.
"""

from __future__ import annotations

import colorsys
import heapq
import json
import math
import re
import zlib
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import duckdb
import matplotlib
from matplotlib.collections import LineCollection, PolyCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator, PercentFormatter

HOUR_S = 3_600
DAY_S = 86_400
DEFAULT_WINDOW_S = 7 * DAY_S
DEFAULT_GANTT_HOURS = 24

# Kinds the brief names, in the order a reader scans them (short, interactive
# work first); other kinds follow alphabetically.
KIND_ORDER = ("debug", "interactive", "eval", "training", "batch")

# Fixed colours for the policies the project compares, so "allot" is the same
# colour in every picture; other run names get the next free palette colour.
RUN_COLOURS: dict[str, str] = {"allot": "#1f77b4", "baseline": "#d62728"}
_EXTRA_RUN_COLOURS = ("#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22")

OCCUPANCY_COLOURS = {
    "allocated": "#1f4e79",
    "unallocated": "#6fa8dc",
    "idle": "#e3e3e3",
    "unavailable": "#b85450",
}
PREEMPT_COLOUR = "#e00000"
UNAVAILABLE_BAND = "#f6d5d3"

# Human tick marks for wait-time axes (seconds, label).
DURATION_TICKS: tuple[tuple[float, str], ...] = (
    (1, "≤1 s"), (10, "10 s"), (60, "1 min"), (600, "10 min"), (HOUR_S, "1 h"),
    (6 * HOUR_S, "6 h"), (DAY_S, "1 d"), (7 * DAY_S, "7 d"), (30 * DAY_S, "30 d"),
)

_STYLE: dict[str, Any] = {
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.labelsize": 9,
    "legend.fontsize": 8,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "hatch.linewidth": 0.6,
    # Fixed so PNG bytes do not depend on the machine's defaults.
    "savefig.dpi": 100,
    "svg.hashsalt": "allot",
}


# -- errors -------------------------------------------------------------------------------


class PlotError(Exception):
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


class OvercommittedHostError(PlotError, ValueError):
    """Run slots need more GPUs on a host at once than the host has."""


# -- pure helpers -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SlotSpan:
    """One run slot as the index assignment sees it: GPUs held on a host over [start, stop)."""

    workload: str
    host: str
    gpus: int
    start: int
    stop: int


def assign_gpu_indices(
    slots: Sequence[SlotSpan], host_gpus: Mapping[str, int]
) -> list[tuple[int, ...]]:
    """GPU indices for each slot (same order as ``slots``), by interval partitioning per host.

    Slots are taken per host in (start, workload, stop) order; intervals are
    half-open, so GPUs freed at ``t`` are reusable by a slot starting at ``t``.
    Each slot gets the lowest contiguous block of free indices when one exists
    (so a multi-GPU task draws as one bar), else the lowest free indices.
    Raises OvercommittedHostError when a host would need more GPUs than it has.
    """
    result: list[tuple[int, ...]] = [() for _ in slots]
    by_host: dict[str, list[int]] = {}
    for i, s in enumerate(slots):
        if s.gpus < 0 or s.stop < s.start:
            raise ValueError(f"malformed slot {s!r}")
        by_host.setdefault(s.host, []).append(i)
    for host in sorted(by_host):
        if host not in host_gpus:
            raise OvercommittedHostError(f"host {host!r} has run slots but no known GPU count")
        size = host_gpus[host]
        free = list(range(size))  # kept sorted
        active: list[tuple[int, int, tuple[int, ...]]] = []  # heap of (stop, seq, indices)
        order = sorted(by_host[host], key=lambda i: (slots[i].start, slots[i].workload,
                                                      slots[i].stop, i))
        for seq, i in enumerate(order):
            s = slots[i]
            while active and active[0][0] <= s.start:
                _, _, released = heapq.heappop(active)
                for g in released:
                    free.insert(bisect_left(free, g), g)
            if s.gpus > len(free):
                raise OvercommittedHostError(
                    f"host {host!r} ({size} GPUs) needs {s.gpus} more GPUs at t={s.start} "
                    f"for {s.workload!r} but only {len(free)} are free"
                )
            taken = _lowest_block(free, s.gpus)
            for g in taken:
                free.remove(g)
            result[i] = taken
            heapq.heappush(active, (s.stop, seq, taken))
    return result


def _lowest_block(free: Sequence[int], n: int) -> tuple[int, ...]:
    """The lowest run of ``n`` consecutive integers in sorted ``free``, else its lowest ``n``."""
    if n == 0:
        return ()
    run_start = 0
    for j in range(len(free)):
        if j > 0 and free[j] != free[j - 1] + 1:
            run_start = j
        if j - run_start + 1 == n:
            return tuple(free[run_start:j + 1])
    return tuple(free[:n])


def contiguous_blocks(indices: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted indices grouped into (first, count) runs of consecutive values."""
    blocks: list[tuple[int, int]] = []
    for g in sorted(indices):
        if blocks and blocks[-1][0] + blocks[-1][1] == g:
            blocks[-1] = (blocks[-1][0], blocks[-1][1] + 1)
        else:
            blocks.append((g, 1))
    return blocks


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


@dataclass(frozen=True, slots=True)
class BarSegments:
    """The protected and interruptible parts of one task bar (None when a part is empty)."""

    protected: tuple[int, int] | None
    interruptible: tuple[int, int] | None


def split_interruptible(
    start: int, stop: int, allocated: bool, protected_until: int | None
) -> BarSegments:
    """Split [start, stop) into the protected part and the interruptible part.

    Unallocated runs are never protected. An allocated run is protected until
    ``protected_until``; ``None`` means protected until it ends (the baseline's
    opt-out jobs).
    """
    if stop < start:
        raise ValueError(f"stop {stop} is before start {start}")
    if not allocated:
        return BarSegments(None, (start, stop))
    if protected_until is None or protected_until >= stop:
        return BarSegments((start, stop), None)
    if protected_until <= start:
        return BarSegments(None, (start, stop))
    return BarSegments((start, protected_until), (protected_until, stop))


@dataclass(frozen=True, slots=True)
class WaitCdf:
    """The empirical CDF of first-start waits; never-started workloads are in the denominator.

    ``ys[i]`` is the fraction of *all* workloads that started within ``xs[i]``
    seconds, so the curve tops out below 1 when some never started.
    """

    xs: tuple[float, ...]
    ys: tuple[float, ...]
    started: int
    never_started: int

    @property
    def total(self) -> int:
        """All workloads counted (started or not)."""
        return self.started + self.never_started


def wait_cdf(waits: Iterable[float | None]) -> WaitCdf:
    """The CDF step points of ``waits`` (seconds; None = never started)."""
    started: list[float] = []
    never = 0
    for w in waits:
        if w is None or (isinstance(w, float) and math.isnan(w)):
            never += 1
        elif w < 0:
            raise ValueError(f"negative wait {w}")
        else:
            started.append(float(w))
    started.sort()
    total = len(started) + never
    xs: list[float] = []
    ys: list[float] = []
    for k, w in enumerate(started, 1):
        if xs and xs[-1] == w:
            ys[-1] = k / total
        else:
            xs.append(w)
            ys.append(k / total)
    return WaitCdf(tuple(xs), tuple(ys), len(started), never)


def trailing_shares(
    node_gpu_h: Sequence[float], total_gpu_h: Sequence[float], window_h: int
) -> list[float | None]:
    """Per hour, the node's share of the total over the trailing ``window_h`` hours.

    Both sequences are on the same dense hourly grid; hour ``i`` covers hours
    ``i - window_h + 1 .. i``. None where the total over the window is zero.
    """
    if len(node_gpu_h) != len(total_gpu_h):
        raise ValueError("node and total series differ in length")
    if window_h < 1:
        raise ValueError(f"window of {window_h} hours")
    out: list[float | None] = []
    node_sum = 0.0
    total_sum = 0.0
    for i in range(len(total_gpu_h)):
        node_sum += node_gpu_h[i]
        total_sum += total_gpu_h[i]
        if i >= window_h:
            node_sum -= node_gpu_h[i - window_h]
            total_sum -= total_gpu_h[i - window_h]
        # Running sums drift by float rounding; below this the window is empty.
        out.append(node_sum / total_sum if total_sum > 1e-9 else None)
    return out


def team_colours(teams: Iterable[str]) -> dict[str, tuple[float, float, float]]:
    """A stable colour per team, assigned in sorted name order (so every plot agrees)."""
    names = sorted(set(teams))
    if len(names) <= 10:
        cmap = matplotlib.colormaps["tab10"]
        return {t: tuple(cmap(i)[:3]) for i, t in enumerate(names)}  # type: ignore[misc]
    # Beyond ten, spread hues evenly and alternate lightness so neighbours differ.
    out: dict[str, tuple[float, float, float]] = {}
    n = len(names)
    for i, t in enumerate(names):
        hue = (i * 0.61803398875) % 1.0  # golden-ratio steps: adjacent names far apart
        light = 0.45 if i % 2 == 0 else 0.6
        out[t] = colorsys.hls_to_rgb(hue, light, 0.65 if n < 40 else 0.55)
    return out


def workload_shade(base: tuple[float, float, float], workload: str) -> tuple[float, float, float]:
    """The team hue, lightened or darkened by a stable hash of the workload id.

    One hue per team, one shade per workload: two adjacent tasks of the same
    team stay distinguishable. crc32, not hash(), because hash() is salted per process.
    """
    h, lum, s = colorsys.rgb_to_hls(*base)
    step = zlib.crc32(workload.encode()) % 5 - 2  # -2..2
    return colorsys.hls_to_rgb(h, min(0.85, max(0.2, lum + 0.07 * step)), s)


def format_duration(seconds: float | None) -> str:
    """Seconds as a short human string: 0 s, 45 s, 12 min, 2.5 h, 3.1 d ('—' for None)."""
    if seconds is None or (isinstance(seconds, float) and math.isnan(seconds)):
        return "—"
    s = float(seconds)
    if math.isinf(s):
        return "never"
    if s < 10 and s != int(s):
        return f"{s:.1f} s"
    if s < 60:
        return f"{s:.0f} s"
    for unit, label in ((DAY_S, "d"), (HOUR_S, "h"), (60, "min")):
        if s >= unit:
            v = s / unit
            text = f"{v:.1f}" if v < 100 else f"{v:.0f}"
            return f"{text.removesuffix('.0')} {label}"
    return f"{s:.0f} s"  # unreachable; keeps type checkers content


def natural_key(name: str) -> tuple[Any, ...]:
    """Sort key that orders h2 before h10."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def kind_order(kinds: Iterable[str]) -> list[str]:
    """Workload kinds in reading order: the brief's kinds first, then the rest by name."""
    ks = set(kinds)
    known = [k for k in KIND_ORDER if k in ks]
    return known + sorted(ks - set(KIND_ORDER))


def run_colours(runs: Sequence[str]) -> dict[str, str]:
    """A colour per run: fixed for allot and baseline, the palette in order for others."""
    out: dict[str, str] = {}
    extra = iter(_EXTRA_RUN_COLOURS * (len(runs) // len(_EXTRA_RUN_COLOURS) + 1))
    for r in runs:
        out[r] = RUN_COLOURS.get(r) or next(extra)
    return out


def densify(hours: Iterable[int]) -> list[int]:
    """Every hour from the first to the last given (hour starts in Unix seconds)."""
    hs = sorted(set(hours))
    if not hs:
        return []
    return list(range(hs[0], hs[-1] + HOUR_S, HOUR_S))


# -- database access ----------------------------------------------------------------------


def _epoch(value: Any) -> int:
    """A time column value (int seconds, or a timestamp) as int Unix seconds."""
    if isinstance(value, datetime):
        v = value if value.tzinfo else value.replace(tzinfo=UTC)
        return int(v.timestamp())
    return int(value)


def _query(con: duckdb.DuckDBPyConnection, sql: str, params: Sequence[Any] = ()) -> list[Any]:
    """Run ``sql``; a missing view becomes MissingViewError naming it."""
    try:
        return con.execute(sql, list(params)).fetchall()
    except duckdb.CatalogException as exc:
        raise MissingViewError(
            f"{exc}; load the log with audit.load (which creates the audit views) first"
        ) from exc


def list_runs(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The run names in the ``events`` table, sorted."""
    return [r for (r,) in _query(con, "SELECT DISTINCT run FROM events ORDER BY run")]


def check_runs(con: duckdb.DuckDBPyConnection, runs: Iterable[str]) -> None:
    """Raise UnknownRunError for the first run the database does not hold."""
    known = list_runs(con)
    for r in runs:
        if r not in known:
            raise UnknownRunError(r, known)


def _as_runs(runs: str | Sequence[str]) -> list[str]:
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
        rows = _query(con, 'SELECT min("at"), max("at") FROM events WHERE run = ?', [run])
    ((lo, hi),) = rows or [(None, None)]
    if lo is None:
        raise UnknownRunError(run, list_runs(con))
    return _epoch(lo), _epoch(hi)


def _policy_value(con: duckdb.DuckDBPyConnection, run: str, column: str, default: int) -> int:
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


def _save(fig: Figure, out: str | Path) -> Path:
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", metadata={"Software": None})
    return path


def _time_unit(span_s: float) -> tuple[float, str]:
    """Divisor and label for a time axis: hours for up to three days, else days."""
    return (HOUR_S, "hours") if span_s <= 3 * DAY_S else (DAY_S, "days")


def _origin_note(t0: int) -> str:
    """How the time origin reads: a UTC date for wall-clock logs, 't=0' for simulations."""
    if t0 >= 10 ** 9:
        return datetime.fromtimestamp(t0, UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"t={t0} s"


# -- gantt --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _GanttSlot:
    span: SlotSpan
    team: str
    allocated: bool
    protected_until: int | None
    preempted: bool


def gantt(
    con: duckdb.DuckDBPyConnection,
    run: str,
    out: str | Path,
    start: int | None = None,
    hours: float | None = None,
    max_gpus: int | None = None,
) -> Path:
    """One row per GPU, one bar per task, over a window; writes a PNG and returns its path.

    ``start`` is in the log's clock (Unix seconds; default: the run's first
    event); ``hours`` defaults to 24 or the rest of the run if shorter.
    ``max_gpus`` caps the rows: whole hosts in name order, up to that many GPUs.
    """
    check_runs(con, [run])
    t0, t_end = run_bounds(con, run)
    w_start = t0 if start is None else int(start)
    if hours is None:
        span = min(DEFAULT_GANTT_HOURS * HOUR_S, max(t_end - w_start, HOUR_S))
    elif hours <= 0:
        raise ValueError(f"hours must be positive, got {hours}")
    else:
        span = int(hours * HOUR_S)
    w_end = w_start + span
    if max_gpus is not None and max_gpus < 1:
        raise ValueError(f"max_gpus must be at least 1, got {max_gpus}")

    rows = _query(con, """
        SELECT workload, host, gpus, start_at, coalesce(stop_at, ?), allocated,
               protected_until, team, stop_reason
        FROM run_slots
        WHERE run = ? AND start_at < ? AND coalesce(stop_at, ?) >= ?
        ORDER BY host, start_at, workload
    """, [t_end, run, w_end, t_end, w_start])
    slots = [
        _GanttSlot(SlotSpan(str(w), str(h), int(g), _epoch(s), max(_epoch(s), _epoch(e))),
                   str(team), bool(alloc), None if pu is None else _epoch(pu),
                   reason == "preempted")
        for w, h, g, s, e, alloc, pu, team, reason in rows
    ]

    # Host sizes: the log's host.added events; hosts it does not describe get the
    # policy's host size, or whatever their busiest moment needs.
    sizes = host_gpu_counts(con, run)
    default_size = _policy_value(con, run, "host_gpus", 8)
    for s in slots:
        if s.span.host not in sizes:
            sizes[s.span.host] = default_size
    hosts = sorted(sizes, key=natural_key)
    total_gpus = sum(sizes.values())
    shown: list[str] = []
    rows_used = 0
    for h in hosts:
        if max_gpus is not None and shown and rows_used + sizes[h] > max_gpus:
            break
        shown.append(h)
        rows_used += sizes[h]
    shown_set = set(shown)
    slots = [s for s in slots if s.span.host in shown_set]
    offset: dict[str, int] = {}
    acc = 0
    for h in shown:
        offset[h] = acc
        acc += sizes[h]
    n_rows = max(acc, 1)

    indices = assign_gpu_indices([s.span for s in slots], sizes)
    down = _host_down(con, run, t_end)
    teams = sorted({s.team for s in slots} | set(_team_names(con, run)))
    palette = team_colours(teams)

    solid_verts: list[list[tuple[float, float]]] = []
    solid_colours: list[tuple[float, float, float]] = []
    hatch_verts: list[list[tuple[float, float]]] = []
    hatch_colours: list[tuple[float, float, float]] = []
    marks: list[list[tuple[float, float]]] = []
    pad = 0.08  # gap between GPU rows, in row units, so separate tasks read as separate bars

    def x(t: int) -> float:
        return (min(max(t, w_start), w_end) - t0) / HOUR_S

    for s, idx in zip(slots, indices, strict=True):
        colour = workload_shade(palette[s.team], s.span.workload)
        seg = split_interruptible(s.span.start, s.span.stop, s.allocated, s.protected_until)
        for first, count in contiguous_blocks(idx):
            y0 = offset[s.span.host] + first + pad
            y1 = offset[s.span.host] + first + count - pad
            for part, verts, colours in ((seg.protected, solid_verts, solid_colours),
                                         (seg.interruptible, hatch_verts, hatch_colours)):
                if part is None or x(part[1]) <= x(part[0]):
                    continue
                a, b = x(part[0]), x(part[1])
                verts.append([(a, y0), (b, y0), (b, y1), (a, y1)])
                colours.append(colour)
            if s.preempted and w_start <= s.span.stop <= w_end:
                xe = x(s.span.stop)
                marks.append([(xe, y0 - pad), (xe, y1 + pad)])

    height = min(36.0, max(4.0, 1.8 + 0.11 * n_rows))
    with matplotlib.rc_context(_STYLE):
        fig = Figure(figsize=(14, height), layout="constrained")
        ax = fig.add_subplot()
        edge_w = 0.3 if n_rows <= 200 else 0.0  # white seams vanish into noise on huge clusters
        if solid_verts:
            ax.add_collection(PolyCollection(
                solid_verts, facecolors=solid_colours, edgecolors="white", linewidths=edge_w))
        if hatch_verts:
            # Lighter fill plus dark hatching: interruptible still shows the team's hue.
            light = [_mix(c, (1.0, 1.0, 1.0), 0.35) for c in hatch_colours]
            ax.add_collection(PolyCollection(
                hatch_verts, facecolors=light, edgecolors="white", linewidths=edge_w,
                hatch="////", hatchcolor=(0.1, 0.1, 0.1, 0.55)))
        if marks:
            ax.add_collection(LineCollection(marks, colors=PREEMPT_COLOUR,
                                             linewidths=2.2 if n_rows <= 200 else 1.4))
        # Faulty hosts (faulted until repaired) as a pale red band behind their rows.
        for h in shown:
            for a, b in down.get(h, []):
                if b > w_start and a < w_end:
                    ax.fill_between([x(a), x(b)], offset[h], offset[h] + sizes[h],
                                    color=UNAVAILABLE_BAND, zorder=0, linewidth=0)
        ax.set_xlim(x(w_start), x(w_end))
        ax.set_ylim(n_rows, 0)  # GPU 0 of the first host on top
        # Host boundaries and one label per host (thinned when there are many).
        for h in shown[1:]:
            ax.axhline(offset[h], color="#9a9a9a", linewidth=0.5, zorder=0)
        step = max(1, math.ceil(len(shown) / 48))
        labelled = shown[::step]
        ax.yaxis.set_major_locator(FixedLocator([offset[h] + sizes[h] / 2 for h in labelled]))
        ax.set_yticklabels(labelled)
        ax.yaxis.set_minor_locator(NullLocator())
        ax.tick_params(axis="y", length=0)
        ax.set_ylabel(f"GPU (host, GPU index 0..{max(sizes[h] for h in shown) - 1} top to bottom)"
                      if shown else "GPU")
        ax.set_xlabel(f"hours since run start ({_origin_note(t0)})")
        ax.grid(axis="x", color="#dddddd", linewidth=0.5)
        ax.set_axisbelow(True)
        cap = (f", first {acc} of {total_gpus} GPUs ({len(shown)} of {len(hosts)} hosts)"
               if len(shown) < len(hosts) else f", {total_gpus} GPUs on {len(hosts)} hosts")
        ax.set_title(f"{run}: tasks per GPU, hours {x(w_start):g}–{x(w_end):g}{cap}", loc="left")
        if not slots:
            ax.text(0.5, 0.5, "no tasks in this window", transform=ax.transAxes,
                    ha="center", va="center", color="#666666")

        team_legend = ax.legend(
            handles=[Patch(facecolor=palette[t], label=t) for t in teams], loc="upper left",
            bbox_to_anchor=(1.005, 1.0), frameon=False, title="team", alignment="left",
            ncols=1 if len(teams) <= 40 else 2)
        ax.add_artist(team_legend)
        ax.legend(handles=[
            Patch(facecolor="#9a9a9a", edgecolor="white", label="protected (solid)"),
            Patch(facecolor="#d0d0d0", edgecolor="#333333", hatch="////",
                  label="interruptible (hatched):\nunallocated, or past\nits minimum runtime"),
            Line2D([], [], color=PREEMPT_COLOUR, linewidth=2.2,
                   label="preempted here (red edge)"),
            Patch(facecolor=UNAVAILABLE_BAND, label="host faulty until repaired"),
        ], loc="lower left", bbox_to_anchor=(1.005, 0.0), frameon=False, title="how to read",
            alignment="left")
        return _save(fig, out)


def _host_down(con: duckdb.DuckDBPyConnection, run: str, end: int
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
                out.setdefault(str(host), []).append((_epoch(a), end if b is None else _epoch(b)))
        return out
    try:
        changes = [(str(k), str(h), _epoch(a)) for k, h, a in con.execute(
            'SELECT type, host, "at" FROM events WHERE run = ? AND type IN '
            "('host.faulted', 'host.repaired', 'host.removed') ORDER BY \"at\"", [run]).fetchall()]
    except duckdb.Error:
        changes = []  # an events table without host columns: no fault shading
    return host_down_intervals(changes, end)


def _mix(a: tuple[float, float, float], b: tuple[float, float, float],
         t: float) -> tuple[float, float, float]:
    """``a`` moved a fraction ``t`` of the way towards ``b``."""
    return (a[0] + (b[0] - a[0]) * t, a[1] + (b[1] - a[1]) * t, a[2] + (b[2] - a[2]) * t)


def _team_names(con: duckdb.DuckDBPyConnection, run: str) -> list[str]:
    """Every team of the run: the ``teams`` view, else nodes at the policy's team depth."""
    try:
        return sorted(str(t) for (t,) in con.execute(
            "SELECT DISTINCT team FROM teams WHERE run = ?", [run]).fetchall())
    except duckdb.Error:
        pass  # an older database without the teams view: derive teams from the tree
    depth = _policy_value(con, run, "team_depth", 2)
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


# -- usage vs entitlement -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class UsageSeries:
    """One node's hourly usage share, trailing-window share and entitlement on a dense grid."""

    node: str
    hours: tuple[int, ...]
    hourly: tuple[float | None, ...]
    trailing: tuple[float | None, ...]
    entitlement: tuple[float | None, ...]
    run_share: float | None  # share of all allocated GPU-hours over the whole run
    mean_entitlement: float | None


def usage_series(
    con: duckdb.DuckDBPyConnection, run: str, nodes: Sequence[str], window_s: int
) -> list[UsageSeries]:
    """Usage shares and entitlement of ``nodes`` per hour of ``run``."""
    cap = _query(con, "SELECT hour, allocated_gpu_h FROM capacity_by_hour WHERE run = ?", [run])
    total_by_hour = {_epoch(h): float(a or 0.0) for h, a in cap}
    grid = densify(total_by_hour)
    total = [total_by_hour.get(h, 0.0) for h in grid]
    pos = {h: i for i, h in enumerate(grid)}
    usage: dict[str, list[float]] = {n: [0.0] * len(grid) for n in nodes}
    ent_points: dict[str, dict[int, float]] = {n: {} for n in nodes}
    if nodes:
        for node, h, a in _query(con, """
                SELECT node, hour, allocated_gpu_h FROM gpu_hours_by_node_hour
                WHERE run = ? AND list_contains(?, node)""", [run, list(nodes)]):
            i = pos.get(_epoch(h))
            if i is not None:
                usage[node][i] += float(a or 0.0)
        for node, h, f in _query(con, """
                SELECT node, hour, fraction FROM entitlement_by_hour
                WHERE run = ? AND list_contains(?, node)""", [run, list(nodes)]):
            if f is not None:
                ent_points[node][_epoch(h)] = float(f)
    window_h = max(1, math.ceil(window_s / HOUR_S))
    grand = sum(total)
    out: list[UsageSeries] = []
    for n in nodes:
        # Entitlement rows may exist only where it changes: carry the last value forward.
        ent: list[float | None] = []
        last: float | None = None
        points = ent_points[n]
        for h in grid:
            last = points.get(h, last)
            ent.append(last)
        known = [e for e in ent if e is not None]
        out.append(UsageSeries(
            node=n,
            hours=tuple(grid),
            hourly=tuple(trailing_shares(usage[n], total, 1)),
            trailing=tuple(trailing_shares(usage[n], total, window_h)),
            entitlement=tuple(ent),
            run_share=sum(usage[n]) / grand if grand > 0 else None,
            mean_entitlement=sum(known) / len(known) if known else None,
        ))
    return out


def usage_vs_entitlement(
    con: duckdb.DuckDBPyConnection,
    run: str,
    out: str | Path,
    level: Literal["team", "manager"] = "team",
    manager: str | None = None,
    window_s: int | None = None,
    max_panels: int = 36,
) -> Path:
    """Small multiples: each node's allocated-usage share against its entitlement over time.

    ``level="team"``: one panel per team (budget nodes at the policy's team
    depth). ``level="manager"``: one panel per budget node a manager owns and,
    when ``manager`` is given, also the children whose shares that manager sets.
    Usage share = the node's allocated GPU-hours / all allocated GPU-hours, over
    the trailing ``window_s`` (default: the run's policy window, else 7 days).
    """
    check_runs(con, [run])
    if level not in ("team", "manager"):
        raise ValueError(f"level must be 'team' or 'manager', got {level!r}")
    if window_s is None:
        window_s = _policy_value(con, run, "window_s", DEFAULT_WINDOW_S)
    t0, _ = run_bounds(con, run)
    subtitle: dict[str, str] = {}
    if level == "team":
        nodes = _team_names(con, run)
        what = "team"
    else:
        nodes, subtitle = managed_nodes(budget_managers(con, run), manager)
        what = f"node managed by {manager}" if manager else "managed budget node"
    total_panels = len(nodes)
    nodes = nodes[:max_panels]
    series = usage_series(con, run, nodes, window_s)
    palette = node_colours(nodes, _team_names(con, run))

    ncols = 1 if len(series) <= 1 else 2 if len(series) <= 4 else 3 if len(series) <= 9 else 4
    nrows = max(1, math.ceil(len(series) / ncols))
    with matplotlib.rc_context(_STYLE):
        fig = Figure(figsize=(4.3 * ncols + 0.4, 2.5 * nrows + 1.1), layout="constrained")
        axes = fig.subplots(nrows, ncols, sharex=True, squeeze=False)
        span = (series[0].hours[-1] - series[0].hours[0] + HOUR_S) if series and \
            series[0].hours else HOUR_S
        div, unit = _time_unit(span)
        win_label = format_duration(window_s)
        for k, ax in enumerate(axes.flat):
            if k >= len(series):
                ax.set_visible(False)
                continue
            s = series[k]
            colour = palette.get(s.node, (0.2, 0.2, 0.2))
            # Hour values mark the *start* of each hour: draw steps across the hour.
            xs = [(h - t0) / div for h in s.hours] + [(s.hours[-1] + HOUR_S - t0) / div] \
                if s.hours else []
            ax.step(xs, _nan(s.hourly) + _nan(s.hourly[-1:]), where="post", color=colour,
                    alpha=0.3, linewidth=0.6)
            ax.step(xs, _nan(s.trailing) + _nan(s.trailing[-1:]), where="post", color=colour,
                    linewidth=1.8)
            ax.step(xs, _nan(s.entitlement) + _nan(s.entitlement[-1:]), where="post",
                    color="black", linestyle="--", linewidth=1.2)
            peak = max([v for v in (*s.trailing, *s.entitlement) if v is not None] or [0.0])
            ax.set_ylim(0, max(0.05, min(1.0, peak * 1.3)))
            ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
            ax.grid(color="#e6e6e6", linewidth=0.5)
            title = s.node + (f"  ({subtitle[s.node]})" if s.node in subtitle else "")
            if s.run_share is not None and s.mean_entitlement is not None:
                title += (f"\nwhole run: used {s.run_share:.1%}, "
                          f"entitled {s.mean_entitlement:.1%}")
            ax.set_title(title, loc="left", fontsize=8.5)
            if k % ncols == 0:
                ax.set_ylabel("share of allocated GPU-h")
            if k >= len(series) - ncols:
                ax.set_xlabel(f"{unit} since run start")
                ax.xaxis.set_tick_params(labelbottom=True)
        if not series:
            axes[0][0].set_visible(True)
            axes[0][0].text(0.5, 0.5, "no budget nodes to show", ha="center", va="center",
                            transform=axes[0][0].transAxes)
        more = f" (first {len(series)} of {total_panels})" if total_panels > len(series) else ""
        fig.suptitle(f"{run}: allocated usage share vs entitlement, per {what}{more}",
                     x=0.01, ha="left", fontsize=11)
        fig.legend(handles=[
            Line2D([], [], color="#555555", linewidth=1.8,
                                    label=f"usage share, trailing {win_label} window"),
            Line2D([], [], color="#555555", alpha=0.3, linewidth=0.6,
                                    label="usage share, each hour"),
            Line2D([], [], color="black", linestyle="--", linewidth=1.2,
                                    label="entitlement (fraction of cluster)"),
        ], loc="outside lower center", ncols=3, frameon=False)
        return _save(fig, out)


def managed_nodes(
    managers: Mapping[str, Sequence[str]], manager: str | None = None
) -> tuple[list[str], dict[str, str]]:
    """The nodes to show for budget owners, and a 'managed by ...' note per node.

    Without ``manager``: every non-root node that has a manager. With one: the
    nodes that manager owns (except the root, which is always 100%) and their
    direct children, whose shares the manager sets.
    """
    owners: dict[str, list[str]] = {}
    for path, ms in managers.items():
        for m in ms:
            owners.setdefault(m, []).append(path)
    notes = {p: "managed by " + ", ".join(ms) for p, ms in managers.items() if ms}
    if manager is None:
        nodes = sorted((p for p, ms in managers.items() if ms and "/" in p), key=natural_key)
        return nodes, notes
    if manager not in owners:
        raise UnknownManagerError(manager, sorted(owners))
    chosen: set[str] = set()
    for p in owners[manager]:
        if "/" in p:
            chosen.add(p)
        chosen.update(c for c in managers if c.rsplit("/", 1)[0] == p and "/" in c)
    return sorted(chosen, key=natural_key), notes


def node_colours(nodes: Iterable[str], teams: Iterable[str]
                 ) -> dict[str, tuple[float, float, float]]:
    """Team colours for teams and the nodes below them; dark grey for nodes above teams."""
    palette = team_colours(teams)
    out: dict[str, tuple[float, float, float]] = {}
    for n in nodes:
        team = next((t for t in palette if n == t or n.startswith(t + "/")), None)
        out[n] = palette[team] if team is not None else (0.27, 0.27, 0.27)
    return out


def _nan(values: Sequence[float | None]) -> list[float]:
    return [math.nan if v is None else v for v in values]


# -- wait CDFs ----------------------------------------------------------------------------


def wait_cdfs(con: duckdb.DuckDBPyConnection, runs: str | Sequence[str], out: str | Path) -> Path:
    """Queue-wait CDFs, one panel per workload kind, one line per run; writes a PNG."""
    rs = _as_runs(runs)
    check_runs(con, rs)
    rows = _query(con, "SELECT run, kind, first_wait_s FROM waits WHERE list_contains(?, run)",
                  [rs])
    waits: dict[tuple[str, str], list[float | None]] = {}
    for r, k, w in rows:
        waits.setdefault((r, str(k)), []).append(None if w is None else float(w))
    kinds = kind_order({k for _, k in waits})
    colours = run_colours(rs)
    started = [w for ws in waits.values() for w in ws if w is not None]
    lo = 1.0  # waits under a second are drawn at 1 s: a log axis has no zero
    hi = max(60.0, max(started, default=60.0) * 1.5)
    ticks = [(v, label) for v, label in DURATION_TICKS if lo <= v <= hi]

    n = max(1, len(kinds))
    ncols = 2 if n in (2, 4) else min(3, n)  # 2x2 rather than 3 + 1 for four kinds
    nrows = math.ceil(n / ncols)
    with matplotlib.rc_context(_STYLE):
        fig = Figure(figsize=(4.6 * ncols + 0.3, 3.3 * nrows + 0.7), layout="constrained")
        axes = fig.subplots(nrows, ncols, squeeze=False, sharey=True)
        for k, ax in enumerate(axes.flat):
            if k >= len(kinds):
                ax.set_visible(False)
                continue
            kind = kinds[k]
            for r in rs:
                ws = waits.get((r, kind), [])
                if not ws:
                    ax.plot([], [], color=colours[r], label=f"{r}: no workloads")
                    continue
                cdf = wait_cdf(ws)
                # Counts only: quantiles belong to the summary table (one definition there),
                # and the dotted 50% / 90% guides let a reader take them off the curve.
                label = f"{r}: {cdf.total} workloads"
                if cdf.never_started:
                    label += f", {cdf.never_started} never started"
                xs = [lo] + [max(x, lo) for x in cdf.xs] + [hi]
                ys = [0.0, *cdf.ys, cdf.ys[-1] if cdf.ys else 0.0]
                ax.step(xs, ys, where="post", color=colours[r], linewidth=1.8, label=label)
            for q in (0.5, 0.9):
                ax.axhline(q, color="#aaaaaa", linestyle=":", linewidth=0.8, zorder=0)
            ax.set_xscale("log")
            ax.set_xlim(lo, hi)
            ax.set_ylim(0, 1.02)
            ax.xaxis.set_major_locator(FixedLocator([v for v, _ in ticks]))
            ax.xaxis.set_major_formatter(FuncFormatter(
                lambda v, _pos, labels=dict(ticks): labels.get(v, "")))
            ax.xaxis.set_minor_locator(NullLocator())
            ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
            ax.grid(color="#e6e6e6", linewidth=0.5)
            ax.set_title(kind, loc="left")
            ax.set_xlabel("queue wait until first start (log scale; under 1 s drawn at 1 s)")
            if k % ncols == 0:
                ax.set_ylabel("workloads started within")
            # CDFs climb to the right, so the lower right corner is the empty one.
            ax.legend(loc="lower right", frameon=True, framealpha=0.85, edgecolor="none",
                      fontsize=7)
        if not kinds:
            axes[0][0].text(0.5, 0.5, "no workloads", ha="center", va="center",
                            transform=axes[0][0].transAxes)
        fig.suptitle("Queue wait CDF by workload kind: " + " vs ".join(rs)
                     + " (never-started workloads keep a curve below 100%)",
                     x=0.01, ha="left", fontsize=11)
        return _save(fig, out)


# -- occupancy ----------------------------------------------------------------------------


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


def occupancy_figures(hours: Iterable[HourUse]) -> tuple[float | None, float | None]:
    """(busy / available GPU-hours, unallocated / busy GPU-hours) over ``hours``.

    Available = allocated + unallocated + idle: faulty hosts' free GPUs are not
    capacity anyone could use. None where the denominator is zero.
    """
    alloc = unalloc = idle = 0.0
    for h in hours:
        alloc += h.allocated_gpu_h
        unalloc += h.unallocated_gpu_h
        idle += h.idle_gpu_h
    busy = alloc + unalloc
    return (busy / (busy + idle) if busy + idle > 0 else None,
            unalloc / busy if busy > 0 else None)


def capacity_hours(con: duckdb.DuckDBPyConnection, run: str) -> list[HourUse]:
    """The run's ``capacity_by_hour`` rows in hour order (``hour_s`` when the view has it)."""
    try:
        rows = con.execute(
            "SELECT hour, hour_s, total_gpus, allocated_gpu_h, unallocated_gpu_h, idle_gpu_h, "
            "unavailable_gpu_h FROM capacity_by_hour WHERE run = ? ORDER BY hour",
            [run]).fetchall()
    except duckdb.BinderException:
        # A view without hour_s: every hour is whole.
        rows = [(h, HOUR_S, *rest) for h, *rest in _query(
            con, "SELECT hour, total_gpus, allocated_gpu_h, unallocated_gpu_h, idle_gpu_h, "
                 "unavailable_gpu_h FROM capacity_by_hour WHERE run = ? ORDER BY hour", [run])]
    except duckdb.CatalogException as exc:
        raise MissingViewError(
            f"{exc}; load the log with audit.load (which creates the audit views) first"
        ) from exc
    return [HourUse(_epoch(h), int(sec or HOUR_S), *(float(v or 0.0) for v in vals))
            for h, sec, *vals in rows]


def occupancy(con: duckdb.DuckDBPyConnection, runs: str | Sequence[str], out: str | Path) -> Path:
    """Stacked GPU use per hour (allocated, unallocated, idle, unavailable), a panel per run."""
    rs = _as_runs(runs)
    check_runs(con, rs)
    data = {r: capacity_hours(con, r) for r in rs}
    labels = {"allocated": "allocated (charged)", "unallocated": "unallocated (free, preemptible)",
              "idle": "idle", "unavailable": "unavailable (free GPUs on faulty hosts)"}

    with matplotlib.rc_context(_STYLE):
        fig = Figure(figsize=(13, 2.9 * len(rs) + 0.9), layout="constrained")
        axes = fig.subplots(len(rs), 1, sharex=True, sharey=True, squeeze=False)
        span = max(((d[-1].hour + d[-1].seconds - d[0].hour) for d in data.values() if d),
                   default=HOUR_S)
        div, unit = _time_unit(span)
        ymax = max((h.total_gpus for d in data.values() for h in d), default=1.0) or 1.0
        for ax, r in zip(axes[:, 0], rs, strict=True):
            hours = data[r]
            if not hours:
                ax.text(0.5, 0.5, "no hours", ha="center", va="center", transform=ax.transAxes)
                ax.set_title(r, loc="left")
                continue
            t0, _ = run_bounds(con, r)
            # Each hour is drawn from its start to its (possibly clipped) end; GPU-hours
            # divided by its length give the mean GPUs in use, comparable across hours.
            edges = [(h.hour - t0) / div for h in hours] + \
                [(hours[-1].hour + hours[-1].seconds - t0) / div]

            def series(values: list[float]) -> list[float]:
                return [*values, values[-1]]

            per = [h.seconds / HOUR_S for h in hours]
            stack = {
                "allocated": [h.allocated_gpu_h / p for h, p in zip(hours, per, strict=True)],
                "unallocated": [h.unallocated_gpu_h / p for h, p in zip(hours, per, strict=True)],
                "idle": [h.idle_gpu_h / p for h, p in zip(hours, per, strict=True)],
                "unavailable": [h.unavailable_gpu_h / p for h, p in zip(hours, per, strict=True)],
            }
            ax.stackplot(edges, *(series(v) for v in stack.values()), step="post",
                         colors=[OCCUPANCY_COLOURS[k] for k in stack],
                         labels=[labels[k] for k in stack], linewidth=0)
            ax.step(edges, series([h.total_gpus for h in hours]), where="post", color="black",
                    linewidth=0.8, label="GPUs in the cluster")
            occ, free_share = occupancy_figures(hours)
            ax.set_title(f"{r}: occupancy {_pct(occ)} of available GPU-hours; "
                         f"{_pct(free_share)} of delivered GPU-hours unallocated", loc="left")
            ax.set_ylabel("GPUs (hourly mean)")
            ax.set_xlim(edges[0], edges[-1])
            # Headroom above the capacity line so it is not hidden in the frame.
            ax.set_ylim(0, ymax * 1.06)
            ax.grid(axis="y", color="#ffffff", linewidth=0.4, alpha=0.6)
        axes[-1, 0].set_xlabel(f"{unit} since run start")
        handles, names = axes[0, 0].get_legend_handles_labels()
        if handles:
            fig.legend(handles, names, loc="outside lower center", ncols=5, frameon=False)
        fig.suptitle("GPU use per hour", x=0.01, ha="left", fontsize=11)
        return _save(fig, out)


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.1%}"


__all__ = [
    "BarSegments", "HourUse", "MissingViewError", "OvercommittedHostError", "PlotError", "SlotSpan",
    "UnknownManagerError", "UnknownRunError", "UsageSeries", "WaitCdf", "assign_gpu_indices",
    "budget_managers", "capacity_hours", "check_runs", "contiguous_blocks", "densify",
    "format_duration", "gantt", "host_gpu_counts", "kind_order", "list_runs", "managed_nodes",
    "natural_key", "occupancy", "occupancy_figures", "run_bounds", "run_colours", "split_interruptible",
    "team_colours", "trailing_shares", "usage_series", "usage_vs_entitlement", "wait_cdf",
    "wait_cdfs", "workload_shade",
]
