"""Cluster times and durations in words people read: dates in UTC, "2.5 h", never epoch seconds.

The core's explanations are sentences for people; they name times as dates and
spans as durations. Pure: the text is a function of the number (UTC, no local
time zone, no clock).
"""

from __future__ import annotations

from datetime import UTC, datetime

_UNITS = ((86_400, "d"), (3_600, "h"), (60, "min"))


def date_text(t: int) -> str:
    """A cluster time (Unix seconds) as ``2026-01-05 14:30:00 UTC``."""
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def duration_text(seconds: int) -> str:
    """A duration as ``45 s``, ``12 min``, ``2.5 h``, ``3.1 d``."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s} s"
    for unit, label in _UNITS:
        if s >= unit:
            v = s / unit
            text = f"{v:.1f}" if v < 100 else f"{v:.0f}"
            return f"{text.removesuffix('.0')} {label}"
    return f"{s} s"  # unreachable: s >= 60 always matches minutes
