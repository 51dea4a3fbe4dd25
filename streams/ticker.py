"""The trusted clock: signed ``clock.ticked`` records on the inbox, one per owned cluster per interval.

Time reaches the core only as tick events (design rule 1), and only the
ticker's ticks count (rule 4): each is signed with the key the ticker and the
workers share, and the worker dead-letters any tick it cannot verify. Ticks go
through the inbox like every other input, so the journal records exactly the
ticks the engine saw and a replay sees the same time.

Ids are deterministic: ``tick:<cluster>:<at>`` for the periodic tick,
``nudge:<cluster>:<inbox offset>`` for the immediate tick the worker sends after
inputs that may change the schedule, and ``nudge:<cluster>:<inbox offset>:batch``
for the tick a worker journals itself at the end of a batch (``cycle_in_batch``:
the one tick that skips the inbox, signed and journaled like the others, so a
replay sees it as the engine did), ``...:batch:<n>`` for the n-th batch tick
that continues a deciding cycle's bounded work (``cycle_continue``). Two tickers (a former owner still alive,
and the new one) produce the same ids for the same second or trigger, so the
engine takes one and skips the other.

``VirtualClock`` is the time ticks carry: the wall clock at ``time_scale`` 1;
otherwise virtual time continues from the cluster's own clock (its latest
tick) at ``time_scale`` virtual seconds per wall second, so a restart or a
takeover never moves a cluster's time backwards.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import msgspec

from events import ClockTicked, encode
from streams.signing import sign_headers

TICK_SOURCE = "allot.ticker"


class TickRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One signed tick, ready for the inbox (key = cluster, value = event JSON)."""

    cluster: str
    event: ClockTicked
    key: bytes
    value: bytes
    headers: list[tuple[str, bytes]]


class VirtualClock:
    """Seconds as ticks carry them, per cluster. ``wall`` and ``mono`` are injectable for tests."""

    def __init__(self, time_scale: float = 1.0, wall: Callable[[], float] = time.time,
                 mono: Callable[[], float] = time.monotonic) -> None:
        self.time_scale = time_scale
        self.wall = wall
        self.mono = mono
        self._anchors: dict[str, tuple[int, float]] = {}
        self._last: dict[str, int] = {}

    def anchor(self, cluster: str, cluster_now: int) -> None:
        """Start (or restart) ``cluster``'s virtual time from its journaled clock ``cluster_now``."""
        wall_now = int(self.wall())
        base = cluster_now if (self.time_scale != 1.0 and cluster_now > 0) else wall_now
        self._anchors[cluster] = (max(base, cluster_now), self.mono())
        self._last[cluster] = max(self._last.get(cluster, 0), cluster_now)

    def now(self, cluster: str) -> int:
        """The time a tick of ``cluster`` carries now (never less than the last one)."""
        if self.time_scale == 1.0:
            at = int(self.wall())
        else:
            anchor = self._anchors.get(cluster)
            if anchor is None:
                self.anchor(cluster, 0)
                anchor = self._anchors[cluster]
            base, mono0 = anchor
            at = base + int((self.mono() - mono0) * self.time_scale)
        at = max(at, self._last.get(cluster, 0))
        self._last[cluster] = at
        return at

    def forget(self, cluster: str) -> None:
        """``cluster`` moved to another worker."""
        self._anchors.pop(cluster, None)


def tick_id(cluster: str, at: int) -> str:
    return f"tick:{cluster}:{at}"


def nudge_id(cluster: str, inbox_offset: int) -> str:
    return f"nudge:{cluster}:{inbox_offset}"


def batch_cycle_id(cluster: str, inbox_offset: int, again: int = 0) -> str:
    """The id of the tick a worker journals after a batch (``cycle_in_batch``).

    From the batch's last schedule-changing input: an owner that handles the same
    records again derives the same id, so the engine takes the tick once. It
    never equals a ``nudge_id`` (cluster ids hold no colon).
    """
    if again:
        return f"nudge:{cluster}:{inbox_offset}:batch:{again}"
    return f"nudge:{cluster}:{inbox_offset}:batch"


def make_tick(cluster: str, at: int, principal: str, key: bytes,
              event_id: str | None = None) -> TickRecord:
    """A signed tick of ``cluster`` at ``at`` (id ``tick:<cluster>:<at>`` unless given)."""
    event = ClockTicked(id=event_id or tick_id(cluster, at), at=at, cluster=cluster,
                        actor=principal, source=TICK_SOURCE)
    value = encode(event)
    return TickRecord(cluster=cluster, event=event, key=cluster.encode(), value=value,
                      headers=sign_headers(value, principal, key))
