"""The scheduler's reaction to one input: rejections, drains, and cycles.

``react`` runs after the input was folded and returns the derived events the
input causes. It is the single place that maps inputs to policy, used by the
live processor, the simulator and the replay alike.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from events import ClockTicked, Event, HostFaulted
from scheduler.emit import Emitter
from scheduler.policy import baseline, cycle
from scheduler.verdict import Reject, Verdict

if TYPE_CHECKING:
    from scheduler.state import State

Decide = Callable[["State", str], list[Event]]

POLICIES: dict[str, Decide] = {
    "allot": cycle.decide,
    "baseline": baseline.decide,
}


def react(state: State, event: Event, verdict: Verdict) -> list[Event]:
    """The events ``event`` causes, given the verdict its fold returned."""
    if isinstance(verdict, Reject):
        emit = Emitter(state.cluster, state.now, event.id)
        if verdict.kind == "workload":
            emit.workload_rejected(getattr(event, "workload", ""), verdict.reason, verdict.detail)
        elif verdict.kind == "budget":
            emit.budget_rejected(verdict.reason, verdict.detail)
        else:
            emit.input_rejected(verdict.reason, verdict.detail)
        return emit.events
    if verdict is not None:  # Ignore: duplicates and harmless repeats
        return []
    if isinstance(event, ClockTicked):
        if not event.cycle:  # the clock moved; the cycle comes with the next tick
            return []
        return POLICIES[state.policy.scheduler](state, event.id)
    if isinstance(event, HostFaulted) and event.severity == "failed":
        # Protection does not survive a failed host: end its work now, not at the next tick.
        return cycle.drain(state, event.id)
    return []
