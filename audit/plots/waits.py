"""Queue waits: the distribution of first-start waits per workload kind, one line per run.

Workloads that never started stay in the denominator, so a curve that tops out
below 100 % shows the starved share at a glance.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import duckdb
import matplotlib
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator, PercentFormatter

from audit.plots.data import as_runs, check_runs, query
from audit.plots.style import DURATION_TICKS, STYLE, kind_order, run_colours, save


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


def wait_cdfs(con: duckdb.DuckDBPyConnection, runs: str | Sequence[str], out: str | Path) -> Path:
    """Queue-wait CDFs, one panel per workload kind, one line per run; writes a PNG."""
    rs = as_runs(runs)
    check_runs(con, rs)
    rows = query(con, "SELECT run, kind, first_wait_s FROM waits WHERE list_contains(?, run)",
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
    with matplotlib.rc_context(STYLE):
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
        return save(fig, out)

