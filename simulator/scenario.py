"""Scenario files: the cluster, the budget tree, the policy knobs, the workloads, the faults.

A scenario is a TOML file (format in docs/scenarios.md). It is decoded into
typed structs so a mistake is reported with the path of the bad key, e.g.
``Expected `int`, got `str` - at `$.cluster.hosts```. The types also carry the
bounds of every number (no negative fault rate, no NaN horizon, no more hosts
than a cluster may hold), and ``validate`` checks what one key alone cannot
(a scheduled fault names a host of the cluster, the run is not absurdly long),
so a scenario is refused with one clear line, never simulated after a silent
change and never a traceback.
"""

from __future__ import annotations

import math
import re
import tomllib
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import msgspec

from events import PolicyConfigured
from events.errors import AllotError
from events.limits import (
    CLUSTER_ID_PATTERN,
    MAX_GPUS_PER_HOST,
    MAX_HOSTS_PER_CLUSTER,
    MAX_SHARES,
    Text,
)
from simulator.sources import explicit, generator, philly

SourceConfig = Union[explicit.Config, generator.Config, philly.Config]  # noqa: UP007

# A simulated span beyond ten years is a typo (days for seconds, say), and the
# periodic ticks alone would not fit in memory: at most this many.
MAX_HORIZON_DAYS = 3_660
MAX_TICKS = 10_000_000
# Random faults per host per day: one an hour is far beyond any real fleet.
MAX_FAULT_RATE_PER_DAY = 24.0

Positive = Annotated[int, msgspec.Meta(ge=1)]
Seconds = Annotated[int, msgspec.Meta(ge=0, le=2**62)]
Fraction = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]


class ScenarioError(AllotError, ValueError):
    """The scenario file is missing, unreadable, not TOML, or does not fit the format."""


class ClusterConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Hosts of one cluster, named ``h0000``..., with rack and block labels."""

    id: str = "sim"
    hosts: Annotated[int, msgspec.Meta(ge=1, le=MAX_HOSTS_PER_CLUSTER)]
    gpus_per_host: Annotated[int, msgspec.Meta(ge=1, le=MAX_GPUS_PER_HOST)] = 8
    hosts_per_rack: Positive = 16
    racks_per_block: Positive = 4


class NodeConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A budget node below the root."""

    path: Text
    shares: Annotated[int, msgspec.Meta(ge=0, le=MAX_SHARES)] = 1
    managers: tuple[Text, ...] = ()


class BudgetConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The budget tree's root and the nodes the scenario names itself."""

    root: str = "lab"
    managers: tuple[str, ...] = ("admin",)
    nodes: list[NodeConfig] = []


class ScheduledFault(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One fault at a known time (for exact scenarios and incident replays)."""

    host: Text
    at: Seconds                            # seconds since the scenario start
    severity: Literal["degraded", "failed"] = "degraded"


class FaultConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Host fault injection: a seeded Poisson process per host, plus scheduled faults."""

    # faults per host per day
    host_fault_rate_per_day: Annotated[float, msgspec.Meta(ge=0.0, le=MAX_FAULT_RATE_PER_DAY)] = 0.0
    failed_fraction: Fraction = 0.25       # share of faults that are hard failures
    repair_s: Seconds = 4 * 3600           # automated repair time after the host drained
    scheduled: list[ScheduledFault] = []


class Scenario(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A whole simulation input."""

    name: str
    description: str = ""
    seed: int = 0
    horizon_days: Annotated[float, msgspec.Meta(gt=0.0, le=MAX_HORIZON_DAYS)]
    tick_s: Positive = 300     # periodic cycle on top of the event-driven ones
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
    """Read and validate a scenario file; every failure is a ScenarioError naming the file."""
    p = Path(path)
    try:
        text = p.read_bytes().decode("utf-8")
    except FileNotFoundError as exc:
        raise ScenarioError(f"{p}: no such scenario file") from exc
    except IsADirectoryError as exc:
        raise ScenarioError(f"{p}: is a directory, not a scenario file") from exc
    except OSError as exc:
        raise ScenarioError(f"{p}: cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ScenarioError(f"{p}: not UTF-8 text (byte {exc.start})") from exc
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{p}: not valid TOML: {exc}") from exc
    return validate(raw, str(p))


def validate(raw: dict[str, Any] | Scenario, where: str) -> Scenario:
    """A checked Scenario from a decoded file (or a what-if copy); ScenarioError says what is wrong.

    ``where`` starts the message (the file, or the option that changed it).
    """
    if isinstance(raw, Scenario):
        raw = msgspec.to_builtins(raw)
    try:
        scenario = msgspec.convert(raw, Scenario)
    except msgspec.ValidationError as exc:
        raise ScenarioError(f"{where}: {exc}") from exc
    check_policy(scenario.policy, where)
    if not math.isfinite(scenario.horizon_days) or scenario.horizon_s < 1:
        raise ScenarioError(f"{where}: horizon_days must be a positive number of days "
                            f"(at least one second), got {scenario.horizon_days!r}")
    if scenario.horizon_s // scenario.tick_s > MAX_TICKS:
        raise ScenarioError(f"{where}: {scenario.horizon_s // scenario.tick_s:,} periodic ticks "
                            f"(horizon / tick_s) is over the limit of {MAX_TICKS:,}; "
                            f"raise tick_s or shorten the horizon")
    if not re.fullmatch(CLUSTER_ID_PATTERN, scenario.cluster.id):
        raise ScenarioError(f"{where}: cluster id {scenario.cluster.id!r} must match "
                            f"{CLUSTER_ID_PATTERN} - at `$.cluster.id`")
    try:
        scenario.epoch  # noqa: B018 - parses ``start``
    except ValueError as exc:
        raise ScenarioError(f"{where}: start {scenario.start!r} is not an ISO 8601 date-time "
                            f"- at `$.start`") from exc
    hosts = scenario.cluster.hosts
    for i, fault in enumerate(scenario.faults.scheduled):
        index = host_index(fault.host)
        if index is None or index >= hosts:
            raise ScenarioError(f"{where}: scheduled fault for unknown host {fault.host!r} (the "
                                f"cluster has h0000..{host_name(hosts - 1)}) - at "
                                f"`$.faults.scheduled[{i}].host`")
    return scenario


def host_name(i: int) -> str:
    """The simulated cluster's name for host ``i``."""
    return f"h{i:04d}"


def host_index(name: str) -> int | None:
    """The index of a simulated host name (``h0042`` -> 42), or None if it is not one."""
    m = re.fullmatch(r"h(\d{4,})", name)
    if m is None or host_name(int(m.group(1))) != name:
        return None
    return int(m.group(1))


def with_overrides(scenario: Scenario, **changes: Any) -> Scenario:
    """A copy with top-level fields replaced (for what-if runs)."""
    return msgspec.structs.replace(scenario, **changes)
