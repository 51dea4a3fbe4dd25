"""Shared helpers for the scheduling-core tests: a small driver around ``Engine`` and event summaries.

``Sim`` wraps one engine and one ``Inputs`` factory, records the journal a
live processor would write (each accepted input followed by its derived
events), and builds the budget trees and fleets the scenarios share.
``brief`` turns derived events into plain tuples so tests can assert the
exact decisions of a cycle in one comparison.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from events import (
    BudgetEditRejected,
    Event,
    HostDrained,
    InputRejected,
    WorkloadPreempted,
    WorkloadRejected,
    WorkloadReserved,
    WorkloadStarted,
)
from events.factory import Inputs
from scheduler import Engine, State

HOUR = 3_600

# (path, shares, managers): the flat two-team tree most scenarios use.
FLAT = (
    ("lab", 1, ("admin",)),
    ("lab/a", 1, ("lead-a",)),
    ("lab/b", 1, ("lead-b",)),
)

# A deeper tree: two programs, the first with two projects.
DEEP = (
    ("lab", 1, ("admin",)),
    ("lab/p1", 1, ("lead-p1",)),
    ("lab/p1/x", 1, ("lead-x",)),
    ("lab/p1/y", 1, ()),
    ("lab/p2", 1, ("lead-p2",)),
    ("lab/p2/z", 1, ()),
)


def brief(events: Iterable[Event]) -> list[tuple[Any, ...]]:
    """Derived events as comparable tuples (the decision, without the envelope)."""
    out: list[tuple[Any, ...]] = []
    for e in events:
        if isinstance(e, WorkloadStarted):
            # Slots sorted by host: the order of a gang's hosts carries no meaning.
            slots = tuple(sorted((s.host, s.gpus) for s in e.placement))
            out.append(("started", e.workload, slots, e.allocated, e.protected_until))
        elif isinstance(e, WorkloadPreempted):
            out.append(("preempted", e.workload, e.reason, e.by, e.requeued))
        elif isinstance(e, WorkloadReserved):
            out.append(("reserved", e.workload, e.hosts, e.until))
        elif isinstance(e, HostDrained):
            out.append(("drained", e.host))
        elif isinstance(e, WorkloadRejected):
            out.append(("rejected", e.workload, e.reason))
        elif isinstance(e, BudgetEditRejected):
            out.append(("edit_rejected", e.reason))
        elif isinstance(e, InputRejected):
            out.append(("input_rejected", e.reason))
        else:  # pragma: no cover - every derived type is listed above
            raise AssertionError(f"unexpected derived event {e!r}")
    return out


class Sim:
    """One engine fed by one input factory, with the journal it produced."""

    def __init__(
        self,
        tree: Sequence[tuple[str, int, tuple[str, ...]]] = FLAT,
        hosts: int | Sequence[tuple[str, str | None, str | None]] = 1,
        *,
        accelerate: bool = True,
        cluster: str = "default",
        **policy: Any,
    ) -> None:
        self.I = Inputs(cluster=cluster)
        self.engine = Engine(cluster, accelerate=accelerate)
        self.journal: list[Event] = []
        self.now = 0
        policy.setdefault("team_depth", 1)
        # These tests pin mechanisms (placement, victim choice, reservations,
        # memos) under the policy they were written for: every funded start
        # protected for its minimum runtime and fair-share time slicing. The
        # default (reclaim, borrowed work unprotected) is pinned by
        # tests/test_core_reclaim.py and tests/test_core_default_policy.py.
        policy.setdefault("preemption_rule", "fair_share")
        policy.setdefault("borrowed_protection_s", None)
        self.feed(self.I.policy(**policy))
        for path, shares, managers in tree:
            self.feed(self.I.node(path, shares=shares, managers=managers))
        if isinstance(hosts, int):
            hosts = [(f"h{i}", None, None) for i in range(hosts)]
        for name, rack, block in hosts:
            self.feed(self.I.host(name, rack=rack, block=block))

    @property
    def state(self) -> State:
        return self.engine.state

    def feed(self, event: Event) -> list[Event] | None:
        """Process one input; journal it and its derived events unless it was a duplicate."""
        out = self.engine.process(event)
        if out is not None:
            self.journal.append(event)
            self.journal.extend(out)
        return out

    def at(self, t: int) -> Sim:
        """Move the trusted clock to ``t`` without a cycle (never backwards).

        Only ticks move the scheduler's clock, so this feeds a ``clock.ticked``
        with ``cycle=false``; inputs that follow are stamped ``t``.
        """
        assert t >= self.now
        if t > self.state.now:
            self.feed(self.I.tick(t, cycle=False))
        self.now = t
        return self

    # -- inputs, stamped at the current time ------------------------------------------

    def submit(self, workload: str, budget: str, gpus: int, min_runtime_s: int,
               **kw: Any) -> list[tuple[Any, ...]]:
        return brief(self.feed(self.I.submit(workload, budget, gpus, min_runtime_s,
                                             at=self.now, **kw)) or [])

    def tick(self, t: int | None = None) -> list[tuple[Any, ...]]:
        """Advance to ``t`` (if given) and run one cycle; return its decisions."""
        if t is not None:
            self.at(t)
        return brief(self.feed(self.I.tick(self.now)) or [])

    def finish(self, workload: str, **kw: Any) -> list[tuple[Any, ...]]:
        return brief(self.feed(self.I.finish(workload, at=self.now, **kw)) or [])

    def cancel(self, workload: str, actor: str) -> list[tuple[Any, ...]]:
        return brief(self.feed(self.I.cancel(workload, actor, at=self.now)) or [])

    def fault(self, host: str, severity: str = "degraded") -> list[tuple[Any, ...]]:
        return brief(self.feed(self.I.fault(host, severity, at=self.now)) or [])

    def repair(self, host: str) -> list[tuple[Any, ...]]:
        return brief(self.feed(self.I.repair(host, at=self.now)) or [])

    # -- queries -------------------------------------------------------------------------

    def status(self, workload: str) -> str:
        return self.state.workloads.all[workload].status

    def running(self) -> list[str]:
        return sorted(self.state.workloads.running)

    def charged(self, leaf: str) -> int:
        """GPU-seconds ever charged to ``leaf`` up to now."""
        return self.state.usage.lifetime(leaf, self.now)

    def run_history(self, leaf: str, gpus: int, seconds: int, name: str | None = None) -> None:
        """Give ``leaf`` ``gpus x seconds`` of charged usage: run a workload, then finish it."""
        name = name or f"hist-{leaf.rsplit('/', 1)[-1]}-{self.now}"
        self.submit(name, leaf, gpus, min(seconds, HOUR))
        started = self.tick()
        assert started and started[-1][:2] == ("started", name), started
        self.at(self.now + seconds)
        self.finish(name)


def started(workload: str, slots: Sequence[tuple[str, int]], allocated: bool,
            protected_until: int | None) -> tuple[Any, ...]:
    """The brief of a ``workload.started`` event."""
    return ("started", workload, tuple(sorted(slots)), allocated, protected_until)


def preempted(workload: str, reason: str, by: str | None, requeued: bool) -> tuple[Any, ...]:
    """The brief of a ``workload.preempted`` event."""
    return ("preempted", workload, reason, by, requeued)
