"""How the audit's plots look: colours, the matplotlib style, time axes, saving.

One hue per team in every plot (assigned in sorted name order), fixed colours
for the allot and baseline runs, and a fixed matplotlib style and PNG metadata
so the same data gives the same bytes.
"""

from __future__ import annotations

import colorsys
import math
import re
import zlib
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import matplotlib
from matplotlib.figure import Figure

from audit.formatting import format_percent

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

STYLE: dict[str, Any] = {
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


def mix(a: tuple[float, float, float], b: tuple[float, float, float],
         t: float) -> tuple[float, float, float]:
    """``a`` moved a fraction ``t`` of the way towards ``b``."""
    return (a[0] + (b[0] - a[0]) * t, a[1] + (b[1] - a[1]) * t, a[2] + (b[2] - a[2]) * t)


def save(fig: Figure, out: str | Path) -> Path:
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", metadata={"Software": None})
    return path


def time_unit(span_s: float) -> tuple[float, str]:
    """Divisor and label for a time axis: hours for up to three days, else days."""
    return (HOUR_S, "hours") if span_s <= 3 * DAY_S else (DAY_S, "days")


def origin_note(t0: int) -> str:
    """How the time origin reads: a UTC date for wall-clock logs, 't=0' for simulations."""
    if t0 >= 10 ** 9:
        return datetime.fromtimestamp(t0, UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"t={t0} s"


def nan_list(values: Sequence[float | None]) -> list[float]:
    return [math.nan if v is None else v for v in values]



def pct(value: float | None) -> str:
    """A fraction as a percentage for a plot title (the audit's one percent format)."""
    return format_percent(value)
