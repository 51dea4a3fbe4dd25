"""The generator's calibration inputs: exact offered load, and whole-run protection."""

from __future__ import annotations

from pathlib import Path

import msgspec

from simulator.sources import generator

TEAMS = [generator.TeamConfig(path="lab/big", shares=9, researchers=2),
         generator.TeamConfig(path="lab/small", shares=1, researchers=2)]
TRAINING = generator.ClassConfig(kind="training", load=0.5, gpus=[8, 64], duration_median_s=3600,
                                 duration_sigma=1.2, duration_max_s=20_000,
                                 min_runtime_s=(600, 7200), resumable=0.5)


def offered(config: generator.Config) -> float:
    out = generator.load(config, seed=1, base_dir=Path("."))
    return sum(w.gpus * w.duration_s for w in out.workloads) / (config.capacity_gpus * config.horizon_s)


def config(**kw: object) -> generator.Config:
    base = generator.Config(teams=TEAMS, classes=[TRAINING], capacity_gpus=128, horizon_s=20 * 86400,
                            host_gpus=8, max_size_vs_entitlement=1.0)
    return msgspec.structs.replace(base, **kw)


def test_exact_load_offers_the_load_despite_the_size_cap() -> None:
    """The small team may not submit 64-GPU jobs: the count from the mean size misses the load."""
    assert abs(offered(config()) - 0.5) > 0.05
    assert abs(offered(config(exact_load=True)) - 0.5) < 0.01


def test_protect_whole_run_covers_a_non_resumable_run_within_the_range() -> None:
    whole = msgspec.structs.replace(TRAINING, protect_whole_run=True)
    out = generator.load(config(classes=[whole]), seed=1, base_dir=Path("."))
    fixed = [w for w in out.workloads if not w.resumable]
    assert fixed and all(w.min_runtime_s == max(600, min(7200, w.duration_s // 60 * 60))
                         for w in fixed)
    plain = generator.load(config(), seed=1, base_dir=Path("."))
    # The same draws otherwise: only non-resumable minimum runtimes differ.
    assert [(w.workload, w.gpus, w.duration_s) for w in plain.workloads] == \
        [(w.workload, w.gpus, w.duration_s) for w in out.workloads]
