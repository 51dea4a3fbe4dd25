"""The lab simulator's picture: one row per GPU, one bar per task, over a window of a run.

One hue per team, hatched where the task was interruptible (unallocated, or
past its protection), a red edge where the scheduler preempted it, a pale red
band where the host was faulty. The log does not say *which* GPU of a host a
task held, only how many, so the plot assigns GPU indices itself
(``assign_gpu_indices``: deterministic interval partitioning); that and the
split into protected and interruptible parts are pure functions, tested exactly.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import duckdb
import matplotlib
from matplotlib.collections import LineCollection, PolyCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import FixedLocator, NullLocator

from audit.plots.data import (
    PlotError,
    check_runs,
    epoch,
    host_down,
    host_gpu_counts,
    policy_value,
    query,
    run_bounds,
    team_names,
)
from audit.plots.style import (
    DEFAULT_GANTT_HOURS,
    HOUR_S,
    PREEMPT_COLOUR,
    STYLE,
    UNAVAILABLE_BAND,
    mix,
    natural_key,
    origin_note,
    save,
    team_colours,
    workload_shade,
)


class OvercommittedHostError(PlotError, ValueError):
    """Run slots need more GPUs on a host at once than the host has."""


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

    rows = query(con, """
        SELECT workload, host, gpus, start_at, coalesce(stop_at, ?), allocated,
               protected_until, team, stop_reason
        FROM run_slots
        WHERE run = ? AND start_at < ? AND coalesce(stop_at, ?) >= ?
        ORDER BY host, start_at, workload
    """, [t_end, run, w_end, t_end, w_start])
    slots = [
        _GanttSlot(SlotSpan(str(w), str(h), int(g), epoch(s), max(epoch(s), epoch(e))),
                   str(team), bool(alloc), None if pu is None else epoch(pu),
                   reason == "preempted")
        for w, h, g, s, e, alloc, pu, team, reason in rows
    ]

    # Host sizes: the log's host.added events; hosts it does not describe get the
    # policy's host size, or whatever their busiest moment needs.
    sizes = host_gpu_counts(con, run)
    default_size = policy_value(con, run, "host_gpus", 8)
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
    down = host_down(con, run, t_end)
    teams = sorted({s.team for s in slots} | set(team_names(con, run)))
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
    with matplotlib.rc_context(STYLE):
        fig = Figure(figsize=(14, height), layout="constrained")
        ax = fig.add_subplot()
        edge_w = 0.3 if n_rows <= 200 else 0.0  # white seams vanish into noise on huge clusters
        if solid_verts:
            ax.add_collection(PolyCollection(
                solid_verts, facecolors=solid_colours, edgecolors="white", linewidths=edge_w))
        if hatch_verts:
            # Lighter fill plus dark hatching: interruptible still shows the team's hue.
            light = [mix(c, (1.0, 1.0, 1.0), 0.35) for c in hatch_colours]
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
        ax.set_xlabel(f"hours since run start ({origin_note(t0)})")
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
        return save(fig, out)

