"""An explicit list of workloads, written out in the scenario file (for small, exact scenarios)."""

from __future__ import annotations

from pathlib import Path

import msgspec

from simulator.sources import SourceOutput
from simulator.spec import WorkloadSpec


class Config(msgspec.Struct, frozen=True, kw_only=True, tag="list", forbid_unknown_fields=True):
    """``[[sources]]`` with ``type = "list"`` and ``[[sources.workloads]]`` tables."""

    workloads: list[WorkloadSpec] = []


def load(config: Config, *, seed: int, base_dir: Path) -> SourceOutput:
    """The listed workloads, sorted by submission time then id."""
    return SourceOutput(workloads=sorted(config.workloads, key=lambda w: (w.submit_at, w.workload)))
