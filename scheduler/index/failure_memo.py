"""The failure memo: victim searches and reservation plans that failed at a world no cycle has changed.

A victim search or a reservation plan for a pending workload ``w`` is a
function of ``w`` and of: the free GPUs and the reservations on the hosts;
the running set (victims, and when each host's work stops being protected);
the victims' eligibility under ``w``'s rule, i.e. the fair-share order (usage
at the fair-share instant, commitments, shares); and, for a search, which
work is past its protection now. Until a cycle starts or stops anything or
commits usage, the free GPUs are the state's (``running_version``,
``health_version``), the order is the state's at the fair-share instant
(those, ``budget.version``, the policy), and the victims are those of the
victim index's build (``VictimIndex.build_id``: rebuilt when a protection
ends). Submissions, cancellations and time inside one fair-share period
change none of it, which is most cycles.

Key: that world (``world_of``; ``Memos.failures``), plus per entry the
workload (``Cycle`` keys entries by what a search reads of it) and the
reservations it may not use; a search entry also holds the index build it
failed at. Lapse: any part of the world changes (then it starts empty); and
within a cycle the cycle stops reading it once it has changed its own world
(``Cycle.failures``). It holds only failures that no cost decided (a
``victims.Miss``; a reservation plan that reached too few hosts). A
protection that ends adds victims, and only on its hosts: an entry of an
earlier build of the world is re-checked there alone
(``victims.fails_again``), not redone. The preemption bound
(``Cycle.freeable``) is kept here too, per index build id.

``Engine(accelerate=False)`` starts it empty for every input;
tests/test_core_failure_memo.py compares whole runs with and without it and
checks that it skipped a real share of the work.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scheduler.index.fair_share_order import fair_share_time

if TYPE_CHECKING:
    from scheduler.memos import FailureWorld
    from scheduler.state import State


def world_of(state: State, moves_with_time: bool = False) -> FailureWorld:
    """What every entry depends on besides its workload (see the module docstring).

    ``moves_with_time``: who may be taken changes with the time alone (the policy's
    ``LOSS_RULES``: a victim's loss grows until its next checkpoint), so the world
    is this moment's and the memo holds for it only.

    (Guarantees read the running set, the budget and the GPUs present.)
    """
    return (state.workloads.running_version, state.cluster_state.health_version,
            state.cluster_state.capacity, state.budget.version, fair_share_time(state),
            state.policy, state.now if moves_with_time else -1)


def failures_at(state: State, moves_with_time: bool = False) -> dict[tuple[object, ...], object]:
    """The memo's entries for ``state``'s world (emptied first when the world moved on)."""
    world = world_of(state, moves_with_time)
    cached = state.memos.failures
    if cached is None or cached[0] != world:
        cached = state.memos.failures = (world, {})
    return cached[1]


__all__ = ["failures_at", "world_of"]
