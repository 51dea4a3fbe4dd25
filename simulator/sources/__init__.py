"""Workload sources for the simulator: explicit lists, a seeded generator, real traces.

Each source module defines a msgspec ``Config`` struct (tagged by its ``type``
in the scenario file) and ``load(config, *, seed, base_dir) -> SourceOutput``:
the budget nodes it needs and the workloads it submits. Sources are pure given
their seed: the same scenario always yields the same workloads.
"""

from __future__ import annotations

import msgspec

from simulator.spec import BudgetNodeSpec, WorkloadSpec


class SourceOutput(msgspec.Struct, kw_only=True):
    """What a source contributes to a scenario."""

    nodes: list[BudgetNodeSpec] = []
    workloads: list[WorkloadSpec] = []
