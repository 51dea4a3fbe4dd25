"""How the audit prints figures: one formatter per kind of number, for the table, the page and the plots.

Durations, fractions, counts and GPU-hours appear in the terminal report, the
HTML page and the plot titles; each is written by one function here so the
three agree ("2.5 h" everywhere, never "2.5 h" in one place and "150.0 min" in
another). Missing values print as "—".
"""

from __future__ import annotations

import math
from typing import Any

MISSING = "—"
_UNITS = ((86_400, "d"), (3_600, "h"), (60, "min"))


def format_duration(seconds: float | None) -> str:
    """Seconds as a short human string: 0 s, 45 s, 12 min, 2.5 h, 3.1 d ('—' for None, 'never' for inf)."""
    if seconds is None or (isinstance(seconds, float) and math.isnan(seconds)):
        return MISSING
    s = float(seconds)
    if math.isinf(s):
        return "never"
    if abs(s) < 10 and s != int(s):
        return f"{s:.1f} s"
    if abs(s) < 60:
        return f"{s:.0f} s"
    for unit, label in _UNITS:
        if abs(s) >= unit:
            v = s / unit
            text = f"{v:.1f}" if abs(v) < 100 else f"{v:.0f}"
            return f"{text.removesuffix('.0')} {label}"
    return f"{s:.0f} s"  # unreachable: |s| >= 60 always matches minutes


def format_percent(value: Any) -> str:
    """A fraction (0..1) as a percentage with one decimal ('—' for None)."""
    return MISSING if value is None else f"{float(value):.1%}"


def format_count(value: Any) -> str:
    """An integer with thousands separators ('—' for None)."""
    return MISSING if value is None else f"{int(value):,}"


def format_gpu_hours(value: Any) -> str:
    """GPU-hours with one decimal ('—' for None)."""
    return MISSING if value is None else f"{float(value):,.1f} GPU-h"


def format_bound(text: str, lower_bound: bool | None) -> str:
    """A figure that is only a lower bound (it rests on censored waits) reads '≥ 2.5 h'."""
    return f"≥ {text}" if lower_bound and text != MISSING else text
