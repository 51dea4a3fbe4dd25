"""Scenario files: the cluster, the budget tree, the policy knobs, the workloads, the faults.

A scenario is a TOML file (format in docs/scenarios.md). It is decoded into
typed structs so a mistake is reported with the path of the bad key, e.g.
``Expected `int`, got `str` - at `$.cluster.hosts```.
"""

from __future__ import annotations

import tomllib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Union

import msgspec

from events import PolicyConfigured
from simulator.sources import explicit, generator, philly

SourceConfig = Union[explicit.Config, generator.Config, philly.Config]  # noqa: UP007


class ScenarioError(ValueError):
    """The scenario file is missing, not TOML, or does not fit the format."""


class ClusterConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Hosts of one cluster, named ``h0000``..., with rack and block labels."""

    id: str = "sim"
    hosts: int
    gpus_per_host: int = 8
    hosts_per_rack: int = 16
    racks_per_block: int = 4


class NodeConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A budget node below the root."""

    path: str
    shares: int = 1
    managers: tuple[str, ...] = ()


class BudgetConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The budget tree's root and the nodes the scenario names itself."""

    root: str = "lab"
    managers: tuple[str, ...] = ("admin",)
    nodes: list[NodeConfig] = []


class ScheduledFault(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One fault at a known time (for exact scenarios and incident replays)."""

    host: str
    at: int                                # seconds since the scenario start
    severity: Literal["degraded", "failed"] = "degraded"


class FaultConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Host fault injection: a seeded Poisson process per host, plus scheduled faults."""

    host_fault_rate_per_day: float = 0.0  # faults per host per day
    failed_fraction: float = 0.25          # share of faults that are hard failures
    repair_s: int = 4 * 3600               # automated repair time after the host drained
    scheduled: list[ScheduledFault] = []


class Scenario(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A whole simulation input."""

    name: str
    description: str = ""
    seed: int = 0
    horizon_days: float
    tick_s: int = 300          # periodic cycle on top of the event-driven ones
    start: str = "2026-01-05T00:00:00+00:00"  # wall-clock time of t=0 in the log
    policy: dict[str, Any] = {}
    cluster: ClusterConfig
    budget: BudgetConfig = BudgetConfig()
    sources: list[SourceConfig] = []
    faults: FaultConfig = FaultConfig()

    @property
    def horizon_s(self) -> int:
        return int(self.horizon_days * 86_400)

    @property
    def epoch(self) -> int:
        """t=0 as Unix seconds; a ``start`` without a UTC offset means UTC (never local time)."""
        dt = datetime.fromisoformat(self.start)
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=UTC)
        return int(dt.timestamp())

    @property
    def capacity_gpus(self) -> int:
        return self.cluster.hosts * self.cluster.gpus_per_host


# Knobs a scenario may set; ``scheduler`` is chosen per run (--policy), not here.
_KNOBS = set(PolicyConfigured.__struct_fields__) - {
    "id", "at", "cluster", "actor", "source", "cause", "v", "scheduler"}


def check_policy(knobs: dict[str, Any], where: str) -> None:
    """Unknown or mistyped policy knobs raise ScenarioError naming the knob."""
    unknown = set(knobs) - _KNOBS
    if unknown:
        raise ScenarioError(f"{where}: unknown policy knob(s) {sorted(unknown)} - at `$.policy`; "
                            f"known: {sorted(_KNOBS)}")
    try:
        msgspec.convert({"id": "check", "at": 0, **knobs}, PolicyConfigured)
    except msgspec.ValidationError as exc:
        raise ScenarioError(f"{where}: {str(exc).replace('at `$.', 'at `$.policy.')}") from exc


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file."""
    p = Path(path)
    try:
        raw = tomllib.loads(p.read_text())
    except FileNotFoundError as exc:
        raise ScenarioError(f"{p}: no such scenario file") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{p}: not valid TOML: {exc}") from exc
    try:
        scenario = msgspec.convert(raw, Scenario)
    except msgspec.ValidationError as exc:
        raise ScenarioError(f"{p}: {exc}") from exc
    check_policy(scenario.policy, str(p))
    if scenario.cluster.hosts < 1 or scenario.horizon_s < 1 or scenario.tick_s < 1:
        raise ScenarioError(f"{p}: cluster.hosts, horizon_days and tick_s must be positive")
    return scenario


def with_overrides(scenario: Scenario, **changes: Any) -> Scenario:
    """A copy with top-level fields replaced (for what-if runs)."""
    return msgspec.structs.replace(scenario, **changes)
