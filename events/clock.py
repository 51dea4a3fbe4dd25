"""Clock events: time as data, from the trusted clock only.

The core never reads a clock. The scheduler's *now* moves only with
``clock.ticked``: the live worker's ticker publishes one per second (signed,
so nobody else can move time), the simulator one at every schedulable moment.
Every other input takes effect at now, whatever ``at`` its producer wrote; one
stamped beyond now plus the policy's ``clock_skew_s`` is rejected
(``future_time``), so no producer can end protections or empty the dedupe
window by writing a date.
"""

from __future__ import annotations

from events.base import Event


class ClockTicked(Event, frozen=True, kw_only=True, tag="clock.ticked"):
    """Time is now ``at`` (never earlier than it was); run a scheduling cycle.

    ``cycle=false`` only moves the clock. The simulator sends one before the
    inputs of a new moment, so they take effect at that moment, then a normal
    tick after them, so one cycle sees everything that happened at it.
    """

    cycle: bool = True
