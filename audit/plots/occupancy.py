"""Occupancy: every GPU-hour of each hour split into allocated, unallocated, idle and unavailable.

One panel per run, stacked per hour, with the GPUs present drawn over it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import duckdb
import matplotlib
from matplotlib.figure import Figure

from audit.plots.data import HourUse, as_runs, capacity_hours, check_runs, run_bounds
from audit.plots.style import HOUR_S, OCCUPANCY_COLOURS, STYLE, pct, save, time_unit


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


def occupancy(con: duckdb.DuckDBPyConnection, runs: str | Sequence[str], out: str | Path) -> Path:
    """Stacked GPU use per hour (allocated, unallocated, idle, unavailable), a panel per run."""
    rs = as_runs(runs)
    check_runs(con, rs)
    data = {r: capacity_hours(con, r) for r in rs}
    labels = {"allocated": "allocated (charged)", "unallocated": "unallocated (free, preemptible)",
              "idle": "idle", "unavailable": "unavailable (free GPUs on faulty hosts)"}

    with matplotlib.rc_context(STYLE):
        fig = Figure(figsize=(13, 2.9 * len(rs) + 0.9), layout="constrained")
        axes = fig.subplots(len(rs), 1, sharex=True, sharey=True, squeeze=False)
        span = max(((d[-1].hour + d[-1].seconds - d[0].hour) for d in data.values() if d),
                   default=HOUR_S)
        div, unit = time_unit(span)
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
            ax.set_title(f"{r}: occupancy {pct(occ)} of available GPU-hours; "
                         f"{pct(free_share)} of delivered GPU-hours unallocated", loc="left")
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
        return save(fig, out)

