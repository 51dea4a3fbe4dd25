"""Shared helpers for the benchmark scripts: timing with medians, and the machine's description."""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

import native

if TYPE_CHECKING:
    from simulator.scenario import Scenario


def machine() -> str:
    """One line naming this machine: CPU model, cores, Python, and which form of the core runs."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    core = native.status()
    return (f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"{core.name} core ({core.reason})")


def median_seconds(fn: Callable[[], object], repeat: int, warmup: int = 2) -> tuple[float, list[float]]:
    """Median wall time of ``fn`` over ``repeat`` runs (after ``warmup`` unmeasured runs)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times


def scenario_at(path: Path, days: float | None = None, hosts: int | None = None) -> Scenario:
    """The scenario file ``path``, cut to ``days`` and resized to ``hosts`` where given."""
    from simulator.scenario import load_scenario

    scenario = load_scenario(path)
    if days is not None:
        scenario = msgspec.structs.replace(scenario, horizon_days=days)
    if hosts is not None:
        scenario = msgspec.structs.replace(
            scenario, cluster=msgspec.structs.replace(scenario.cluster, hosts=hosts))
    return scenario
