"""The engine: admit an input, validate it, fold it, react, fold the reaction. Every driver runs this.

The live worker, the simulator and the replay all call ``Engine.process`` with
inputs in journal order, so the same journal always yields the same state and
the same decisions. One input goes through five steps:

1. **Admit** (``scheduler.admission``): an input that may not enter the journal
   at all (a decision type, a ``cause``, a bad id, another cluster, a value no
   record can hold) raises ``InputRefused``; nothing changes.
2. **Dedupe**: an id already recorded within the dedupe window returns None.
3. **Validate** (``scheduler.validation``) against the state.
4. **Record and fold**: the input takes its place in the journal; it is folded
   only if valid.
5. **React** (``scheduler.react``): rejections, drains, cycles; each derived
   event is folded as a fact.

``fold_input`` is steps 1-4 without 5, which is how a journal is folded
(``scheduler.replay``): the recorded decisions are folded instead of
re-derived.
"""

from __future__ import annotations

from bisect import bisect_right

from events import ClockTicked, Event
from scheduler.admission import InputRefused, refusal
from scheduler.index.fair_share_order import fair_share_time
from scheduler.policy.rules import LOSS_RULES
from scheduler.react import react
from scheduler.snapshot import restore_state, snapshot_state
from scheduler.state import State
from scheduler.validation import validate
from scheduler.verdict import Verdict

NEVER = 1 << 62


class Engine:
    """A scheduler for one cluster.

    It memoises one fact: "the last cycle decided nothing". A cycle is a pure
    function of the state, and between two ticks with no other event in
    between the state differs only in time. Time reaches a cycle in two ways
    only: protections ending (so the memo lapses at the next ``protected_until``)
    and fair share, which is evaluated at a period boundary (so the memo lapses
    at the next period). Inside those bounds the cycle would decide nothing
    again, and is skipped. ``accelerate=False`` turns this off, and empties the
    accelerators' carried values (``State.memos``, scheduler/memos.py) before
    every input: the plain twin, which the property tests compare with the
    memoised engine log for log. Neither is state: snapshots leave them out, and
    a restored engine simply runs its first cycle.
    """

    __slots__ = ("_idle", "accelerate", "state")

    def __init__(self, cluster: str = "default", accelerate: bool = True) -> None:
        self.state = State(cluster)
        self.accelerate = accelerate
        # (state version, fair-share instant, next protection end) of the last empty cycle
        self._idle: tuple[int, int, int] | None = None

    def admit(self, event: Event) -> None:
        """Raise ``InputRefused`` when ``event`` may not enter this cluster's journal."""
        problem = refusal(self.state.cluster, event)
        if problem is not None:
            raise InputRefused(*problem)

    def fold_input(self, event: Event) -> Verdict | bool:
        """Steps 1-4: admit, dedupe, validate, record and (if valid) fold; no reaction.

        Returns False for a duplicate id, else the validation verdict (None: folded).
        """
        self.admit(event)
        state = self.state
        if state.has_seen(event.id):
            return False
        verdict = validate(state, event)
        state.record(event)
        if verdict is None:
            state.fold(event)
        return verdict

    def process(self, event: Event) -> list[Event] | None:
        """Handle one input. Return the derived events, or None for a duplicate id.

        Raises ``InputRefused`` for an input that may not be journaled at all.
        Otherwise the caller journals ``event`` followed by the returned events
        (unless None), in order.
        """
        if not self.accelerate:
            # The plain twin: no accelerator carries anything from one input to the next.
            self.state.memos.clear()
        verdict: Verdict | bool = self.fold_input(event)
        if verdict is False:
            return None
        state = self.state
        # (Under ``LOSS_RULES`` who may be reclaimed moves with the time itself, so
        # no tick is idle by this memo: scheduler/policy/cycle.py, ``loses_little``.)
        if type(event) is ClockTicked and verdict is None and self.accelerate and event.cycle \
                and state.policy.preemption_rule not in LOSS_RULES:
            idle = self._idle
            fs = fair_share_time(state)
            if idle is not None and idle[0] == state.version and idle[1] == fs \
                    and state.now < idle[2]:
                return []
            derived = react(state, event, verdict)  # type: ignore[arg-type]
            self._idle = None if derived else (state.version, fs, self._next_expiry())
        else:
            derived = react(state, event, verdict)  # type: ignore[arg-type]
        for d in derived:
            state.apply(d)
        return derived

    def fold_decision(self, event: Event) -> bool:
        """Fold a recorded decision as a fact; False when its id was already folded."""
        state = self.state
        if state.has_seen(event.id):
            return False
        state.apply(event)
        return True

    def _next_expiry(self) -> int:
        state = self.state
        now = state.now
        # The running set's protection ends, sorted (kept by the projection).
        ends = state.workloads.protection_ends
        i = bisect_right(ends, now)
        nxt = min(ends[i], NEVER) if i < len(ends) else NEVER
        for _, until, _ in state.reservations.values():  # a due reservation matters too
            if now < until < nxt:
                nxt = until
        return nxt

    # -- snapshots ------------------------------------------------------------------

    def snapshot(self) -> bytes:
        """The whole state as versioned bytes (see ``scheduler.snapshot``)."""
        return snapshot_state(self.state)

    @classmethod
    def restore(cls, data: bytes, accelerate: bool = True) -> Engine:
        """An engine whose state is the one ``snapshot`` wrote."""
        engine = cls(accelerate=accelerate)
        engine.state = restore_state(data)
        return engine


__all__ = ["Engine", "InputRefused"]
