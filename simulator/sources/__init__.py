"""Workload sources for the simulator: explicit lists, a seeded generator, real traces.

Each source module defines a msgspec ``Config`` struct (tagged by its ``type``
in the scenario file) and ``load(config, *, seed, base_dir) -> SourceOutput``:
the budget nodes it needs and the workloads it submits. Sources are pure given
their seed: the same scenario always yields the same workloads.
"""

from __future__ import annotations

import msgspec

from simulator.spec import BudgetNodeSpec, SquatterSpec, WorkloadSpec


class SquatConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Squatting, the old scheduler's pathology: researchers hold idle jobs to debug on.

    A share of the researchers keeps a hold (an idle job of a few GPUs, high
    priority, not resumable, protected for ``min_runtime_s``) running at all
    times: it is submitted at a random moment of the first working day, runs
    ``hold_s`` and is renewed when it ends (or resubmitted when it is
    preempted). The hold's GPUs count as occupied and are charged to the team,
    though they deliver nothing but the owner's debug runs, which run inside it
    (a debug workload no larger than the hold is then never submitted). Squatting
    happens only under the policies listed in ``policies``: it is the answer to
    debug waits of hours, and under allot a debug job starts in seconds.
    """

    share: float = 0.0               # of each team's researchers (rounded to whole people)
    gpus: tuple[int, ...] = (1, 2, 4, 8)
    gpus_weights: tuple[float, ...] | None = None
    hold_s: int = 86_400             # a hold's length before it is renewed
    min_runtime_s: int = 28_800      # so it opts out under the baseline (allocated)
    priority: int = 1                # HIGH, like everything else
    policies: tuple[str, ...] = ("baseline",)


class SourceOutput(msgspec.Struct, kw_only=True):
    """What a source contributes to a scenario."""

    nodes: list[BudgetNodeSpec] = []
    workloads: list[WorkloadSpec] = []
    squatters: list[SquatterSpec] = []
    squat: SquatConfig | None = None  # how the squatters' holds look (generator sources)
