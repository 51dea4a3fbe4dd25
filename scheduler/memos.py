"""What a cycle carries over to the next to go faster: one typed slot per accelerator.

A cycle derives some values from the state (the victim index, the fair-share
base, sibling sums, the frees, failed searches) that the next cycle can reuse
while what they were derived from is unchanged. Each slot below says what it
holds, its key (what it was derived from) and its lapse rule (when a reader
must rebuild it instead). The reader checks the key; the slot never answers
for a state it was not derived from.

A cache only: never part of the state's identity (``State.snapshot`` and the
saved snapshots leave it out), and emptying it changes no decision:
``Engine(accelerate=False)`` empties it before every input, and the property tests
compare that twin's logs with the memoised engine's byte for byte
(tests/test_core_properties.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from events import PolicyConfigured
    from scheduler.index.fair_share_order import FairShareBase, _Shape
    from scheduler.index.host_free_times import HostFreeTimes
    from scheduler.index.sibling_sums import CarriedSums
    from scheduler.index.sole_leaf import SoleLeafFrees, SoleLeafVictims
    from scheduler.index.victim_index import HostBySpan, VictimIndex
    from scheduler.policy.guarantee import GuaranteeShape

# The world failed searches were recorded in: running set, host health, GPUs present,
# budget tree, fair-share time, policy, and the time itself under a policy whose
# victims move with it (``LOSS_RULES``; -1 otherwise).
FailureWorld = tuple[int, int, int, int, int, "PolicyConfigured", int]


class Memos:
    """The accelerators' carried values of one cluster's state (see the module docstring)."""

    __slots__ = ("active", "baseline_held", "failures", "fair_share", "fair_share_shape",
                 "frees", "guarantee_shape", "siblings", "sole_leaf_frees", "sole_leaf_victims",
                 "victims")

    def __init__(self) -> None:
        # Each leaf with pending work and its count of active ancestors (``fair_share_order.activate_waiting``).
        # Key: (the leaves with pending work, the budget's version); lapse: either changes.
        self.active: tuple[tuple[tuple[str, ...], int], dict[str, int]] | None = None
        # The baseline's non-preemptible GPUs per team. Key: (running set version, budget
        # version, team depth); lapse: any of them changes.
        self.baseline_held: tuple[tuple[int, int, int], dict[str, int]] | None = None
        # Searches that failed whatever the costs (scheduler/index/failure_memo.py). Key: the world
        # (``FailureWorld``); lapse: any part of it changes.
        self.failures: tuple[FailureWorld, dict[tuple[object, ...], object]] | None = None
        # The fair-share order's base (``FairShareBase``); its own ``current`` says
        # whether it still holds (usage, tree and fair-share time).
        self.fair_share: FairShareBase | None = None
        # The tree's tables the fair-share order reads. Key: the tree's ``Structure``
        # object; lapse: a new structure (every budget edit).
        self.fair_share_shape: _Shape | None = None
        # When each host's GPUs come free (``HostFreeTimes``). Key: (host health version, hosts);
        # lapse: either changes (a running-set change advances it instead).
        self.frees: HostFreeTimes | None = None
        # Each budget node's guaranteed fraction, path and siblings. Key: the tree's
        # ``Structure`` object; lapse: a new structure.
        self.guarantee_shape: GuaranteeShape | None = None
        # Sibling sums of victims by usage per share (scheduler/index/sibling_sums.py). Key: the
        # objects they were summed from (usage, victim counts, tree); lapse: another object.
        self.siblings: CarriedSums | None = None
        # Hosts by the one leaf whose allocated work they hold (scheduler/index/sole_leaf.py),
        # of the frees and of the victim index. Key: the ``HostFreeTimes`` object, the index's
        # ``on_host`` object; lapse: another object.
        self.sole_leaf_frees: SoleLeafFrees | None = None
        self.sole_leaf_victims: SoleLeafVictims[HostBySpan] | None = None
        # The victim index: (key (running set, health, budget versions), built at, next
        # protection end, index). Lapse: the key changes, or time reaches the next end
        # (then it is advanced from the old one where it can be).
        self.victims: tuple[tuple[int, int, int], int, int, VictimIndex] | None = None

    def clear(self) -> None:
        """Forget everything: what a restored state starts with, and what ``Engine(accelerate=False)``
        does before every input (the plain twin the tests compare against)."""
        self.active = None
        self.baseline_held = None
        self.failures = None
        self.fair_share = None
        self.fair_share_shape = None
        self.frees = None
        self.guarantee_shape = None
        self.siblings = None
        self.sole_leaf_frees = None
        self.sole_leaf_victims = None
        self.victims = None


__all__ = ["FailureWorld", "Memos"]
