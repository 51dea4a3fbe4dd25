"""Convenience constructors for input events with deterministic, sequential ids.

Producers in other languages just write JSON; Python callers (tests, the demo,
the simulator, the CLI) use this to avoid repeating the envelope.
"""

from __future__ import annotations

from typing import Any

from events.base import ChildShare
from events.budget import BudgetNodeDefined, BudgetSharesSet
from events.clock import ClockTicked
from events.host import HostAdded, HostFaulted, HostRemoved, HostRepaired
from events.policy import PolicyConfigured
from events.workload import WorkloadCancelled, WorkloadFinished, WorkloadStopped, WorkloadSubmitted


class Inputs:
    """Makes input events for one cluster: ids are ``<prefix><n>``, in call order."""

    __slots__ = ("cluster", "n", "prefix", "source")

    def __init__(self, cluster: str = "default", prefix: str = "e", source: str = "cli") -> None:
        self.cluster = cluster
        self.prefix = prefix
        self.source = source
        self.n = 0

    def _env(self, at: int, actor: str) -> dict[str, Any]:
        self.n += 1
        return {"id": f"{self.prefix}{self.n}", "at": at, "cluster": self.cluster,
                "actor": actor, "source": self.source}

    def policy(self, at: int = 0, actor: str = "admin", **knobs: Any) -> PolicyConfigured:
        return PolicyConfigured(**self._env(at, actor), **knobs)

    def node(self, path: str, shares: int = 1, managers: tuple[str, ...] = (), at: int = 0,
             actor: str = "admin") -> BudgetNodeDefined:
        return BudgetNodeDefined(**self._env(at, actor), path=path, managers=managers,
                                 shares=shares)

    def shares(self, parent: str, shares: dict[str, int], at: int = 0,
               actor: str = "admin") -> BudgetSharesSet:
        return BudgetSharesSet(**self._env(at, actor), parent=parent, shares=tuple(
            ChildShare(child=c, shares=s) for c, s in shares.items()))

    def host(self, host: str, gpus: int = 8, rack: str | None = None, block: str | None = None,
             at: int = 0, actor: str = "ops") -> HostAdded:
        return HostAdded(**self._env(at, actor), host=host, gpus=gpus, rack=rack, block=block)

    def remove_host(self, host: str, at: int = 0, actor: str = "ops") -> HostRemoved:
        return HostRemoved(**self._env(at, actor), host=host)

    def fault(self, host: str, severity: str = "degraded", at: int = 0, reason: str = "",
              actor: str = "host-monitor") -> HostFaulted:
        return HostFaulted(**self._env(at, actor), host=host, severity=severity,  # type: ignore[arg-type]
                           reason=reason)

    def repair(self, host: str, at: int = 0, actor: str = "host-monitor") -> HostRepaired:
        return HostRepaired(**self._env(at, actor), host=host)

    def submit(self, workload: str, budget: str, gpus: int, min_runtime_s: int, at: int = 0,
               user: str | None = None, **kw: Any) -> WorkloadSubmitted:
        user = user or budget.rsplit("/", 1)[-1]
        return WorkloadSubmitted(**self._env(at, user), workload=workload, budget=budget,
                                 user=user, gpus=gpus, min_runtime_s=min_runtime_s, **kw)

    def cancel(self, workload: str, actor: str, at: int = 0, reason: str = "") -> WorkloadCancelled:
        return WorkloadCancelled(**self._env(at, actor), workload=workload, reason=reason)

    def finish(self, workload: str, at: int = 0, outcome: str = "succeeded",
               actor: str = "executor", **kw: Any) -> WorkloadFinished:
        return WorkloadFinished(**self._env(at, actor), workload=workload, outcome=outcome, **kw)  # type: ignore[arg-type]

    def stopped(self, workload: str, run_number: int, at: int = 0, actor: str = "executor",
                **kw: Any) -> WorkloadStopped:
        return WorkloadStopped(**self._env(at, actor), workload=workload, run_number=run_number,
                               **kw)

    def tick(self, at: int, actor: str = "ticker", cycle: bool = True) -> ClockTicked:
        return ClockTicked(**self._env(at, actor), cycle=cycle)
