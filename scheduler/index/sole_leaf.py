"""Hosts by the one leaf whose allocated work they hold: where a rule kept to its own leaf can find whole hosts.

A reservation plan (``reservations.ready_times``) or a victim search's
feasibility walk (``victims.ready_hosts``) for whole hosts (GPUs per host at
least any host's) readies a host only if the candidate may take every piece
of work there: nothing it may not take can be left on a host it needs whole.
A rule that takes no allocated work of another leaf (``Rule.own_leaf``: no
due reservation, and reclaiming from nobody, which is most candidates of a
busy cluster) can therefore ready only hosts whose allocated work is all of
its own leaf, or that hold none; the walk of any other host fails at its
first other-leaf workload. These indexes list the hosts that way, so that
those walks visit only hosts that can pass; the walk of each is unchanged.
Hosts in no list (work of several leaves) pass for no such rule.

Key: the object each was built from (``SoleLeafFrees``: a ``HostFreeTimes``;
``SoleLeafVictims``: a victim index's ``on_host``), held and compared by
identity; lapse: another object (then it is built again: once per running
set). Kept in the state's memos (``Memos.sole_leaf_frees`` and
``sole_leaf_victims``), so ``Engine(accelerate=False)`` builds them afresh per input;
tests/test_core_sole_leaf.py compares decisions with and without them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Generic, Protocol, TypeVar

from projections.workloads import Workload


# What these indexes read of the policy's objects, named here so that the index does
# not import the policy modules that use it (no circle of imports).
class FreeTimes(Protocol):
    """A ``reservations.HostFreeTimes``: per host, (free GPUs, [(time, GPUs, id, work)])."""

    @property
    def per_host(self) -> Mapping[str, tuple[int, Sequence[tuple[int, int, str, Workload]]]]: ...


class HeldWork(Protocol):
    """A ``victims.Victim``: the running workload it stands for."""

    @property
    def w(self) -> Workload: ...


# A ``victims.HostBySpan`` entry: (least span of its victims, host, its victims).
Entry = TypeVar("Entry", bound=tuple[int, str, Sequence[HeldWork]])

# The category of hosts holding no allocated work at all (only unallocated work).
NO_LEAF = ""


class SoleLeafFrees:
    """Per leaf, the hosts whose listed allocated work (``HostFreeTimes.per_host``) is all of that leaf."""

    __slots__ = ("by_leaf", "source")

    def __init__(self, source: FreeTimes) -> None:
        self.source = source
        by_leaf: dict[str, list[str]] = {}
        for name, (_, here) in source.per_host.items():
            leaf: str | None = NO_LEAF
            for _, g, _, other in here:
                if g > 0 and other.allocated:
                    if leaf == NO_LEAF:
                        leaf = other.budget
                    elif leaf != other.budget:
                        leaf = None  # several leaves: no such rule readies it
                        break
            if leaf is not None:
                by_leaf.setdefault(leaf, []).append(name)
        self.by_leaf = by_leaf

    def hosts(self, leaf: str) -> list[str]:
        """The hosts a rule kept to ``leaf`` might ready (those with no allocated work first)."""
        return [*self.by_leaf.get(NO_LEAF, ()), *self.by_leaf.get(leaf, ())]


class SoleLeafVictims(Generic[Entry]):
    """Per leaf, the hosts (``VictimIndex.hosts_by_span`` entries, in its order) whose allocated victims are all of it."""

    __slots__ = ("by_leaf", "source")

    def __init__(self, source: object, hosts_by_span: list[Entry]) -> None:
        self.source = source
        by_leaf: dict[str, list[Entry]] = {}
        for entry in hosts_by_span:
            leaf: str | None = NO_LEAF
            for v in entry[2]:
                w = v.w
                if w.allocated:
                    if leaf == NO_LEAF:
                        leaf = w.budget
                    elif leaf != w.budget:
                        leaf = None
                        break
            if leaf is not None:
                by_leaf.setdefault(leaf, []).append(entry)
        self.by_leaf = by_leaf

    def entries(self, leaf: str) -> tuple[list[Entry], list[Entry]]:
        """The entries a rule kept to ``leaf`` might ready: those with no allocated victim, and its own."""
        return self.by_leaf.get(NO_LEAF, []), self.by_leaf.get(leaf, [])


def sole_leaf_frees(cached: SoleLeafFrees | None, frees: FreeTimes) -> SoleLeafFrees:
    """The index of ``frees``: ``cached`` while it was built from ``frees``, else a new one."""
    if cached is None or cached.source is not frees:
        cached = SoleLeafFrees(frees)
    return cached


def sole_leaf_victims(cached: SoleLeafVictims[Entry] | None, on_host: object,
                      hosts_by_span: list[Entry]) -> SoleLeafVictims[Entry]:
    """The index of a victim index's ``on_host`` (and its ``hosts_by_span``), kept the same way."""
    if cached is None or cached.source is not on_host:
        cached = SoleLeafVictims(on_host, hosts_by_span)
    return cached


__all__ = ["NO_LEAF", "FreeTimes", "HeldWork", "SoleLeafFrees", "SoleLeafVictims", "sole_leaf_frees", "sole_leaf_victims"]
