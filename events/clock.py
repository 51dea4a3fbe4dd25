"""Clock events: time as data.

The core never reads a clock. A ``clock.ticked`` event advances the scheduler's
notion of now and triggers one scheduling cycle; the live ticker publishes one
every second, the simulator one at every schedulable moment.
"""

from __future__ import annotations

from events.base import Event


class ClockTicked(Event, kw_only=True, tag="clock.ticked"):
    """Time is now ``at``; run a scheduling cycle."""
