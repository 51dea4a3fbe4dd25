"""The engine: fold an input, react to it, fold the reaction. Every driver runs this.

The live Faust processor, the simulator and the audit replay all call
``Engine.process`` with inputs in log order, so the same log always yields the
same state and the same decisions.
"""

from __future__ import annotations

from events import ClockTicked, Event
from scheduler.ranking import fair_share_time
from scheduler.react import react
from scheduler.state import DUPLICATE, State

NEVER = 1 << 62


class Engine:
    """A scheduler for one cluster.

    It memoises one fact: "the last cycle decided nothing". A cycle is a pure
    function of the state, and between two ticks with no other event in
    between the state differs only in time. Time reaches a cycle in two ways
    only: protections ending (so the memo lapses at the next ``protected_until``)
    and fair share, which is evaluated at a period boundary (so the memo lapses
    at the next period). Inside those bounds the cycle would decide nothing
    again, and is skipped. ``memo=False`` turns this off; tests check that the
    log is the same either way.
    """

    __slots__ = ("_idle", "memo", "state")

    def __init__(self, cluster: str = "default", memo: bool = True) -> None:
        self.state = State(cluster)
        self.memo = memo
        # (state version, fair-share instant, next protection end) of the last empty cycle
        self._idle: tuple[int, int, int] | None = None

    def process(self, event: Event) -> list[Event] | None:
        """Handle one input. Return the derived events, or None for a duplicate id.

        The caller journals ``event`` followed by the returned events (unless None).
        """
        state = self.state
        verdict = state.apply(event, trusted=False)
        if verdict is DUPLICATE:
            return None
        if type(event) is ClockTicked and verdict is None and self.memo:
            idle = self._idle
            fs = fair_share_time(state)
            if idle is not None and idle[0] == state.version and idle[1] == fs \
                    and state.now < idle[2]:
                return []
            derived = react(state, event, verdict)
            self._idle = None if derived else (state.version, fs, self._next_expiry())
        else:
            derived = react(state, event, verdict)
        for d in derived:
            state.apply(d, trusted=True)
        return derived

    def _next_expiry(self) -> int:
        now = self.state.now
        nxt = NEVER
        for w in self.state.workloads.running.values():
            pu = w.protected_until
            if pu is not None and now < pu < nxt:
                nxt = pu
        for _, until, _ in self.state.reservations.values():  # a due reservation matters too
            if now < until < nxt:
                nxt = until
        return nxt

    def fold(self, event: Event) -> None:
        """Apply a recorded event (input or decision) without reacting: plain replay."""
        self.state.apply(event)
