"""Many seeds of one scenario, run in parallel processes: a mean and a 95 % interval per figure.

One seed is one sample of the world (workloads, faults, fill-ins); a figure
quoted from one seed can be luck. ``run_seeds`` simulates a scenario once per
seed and policy, each in a process of its own (``concurrent.futures``, a
``spawn`` process pool), hands each result to a ``measure`` callback that turns
it into named figures, and summarises every figure over the seeds as its mean
with a two-sided 95 % Student t-interval: ``mean +- t(0.975, n - 1) x s /
sqrt(n)``, where ``s`` is the sample standard deviation over the ``n`` seeds
that have a value. With one seed there is no interval.

This module is orchestration only: it runs ``Simulation`` and knows nothing of
the audit. Whoever calls it decides what to measure (the CLI passes a callback
that loads the log into the audit's DuckDB views; the calibration script one
that reads the log directly). The callback must be a module-level function, so
a worker process can import it.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import msgspec

from simulator.driver import SimResult, Simulation, load_sources
from simulator.scenario import Scenario

Measure = Callable[[Scenario, str, SimResult], Mapping[str, Any]]

# Two-sided 95 %: the 0.975 quantile of Student's t with df degrees of freedom.
_T975 = (12.706205, 4.302653, 3.182446, 2.776445, 2.570582, 2.446912, 2.364624, 2.306004,
         2.262157, 2.228139, 2.200985, 2.178813, 2.160369, 2.144787, 2.131450, 2.119905,
         2.109816, 2.100922, 2.093024, 2.085963, 2.079614, 2.073873, 2.068658, 2.063899,
         2.059539, 2.055529, 2.051831, 2.048407, 2.045230, 2.042272)
_Z975 = 1.959964


def t975(df: int) -> float:
    """The 0.975 quantile of Student's t distribution with ``df`` >= 1 degrees of freedom.

    Exact to six digits from a table up to 30; beyond, the Cornish-Fisher
    expansion around the normal quantile (error below 1e-4 from df = 30 on).
    """
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    z = _Z975
    return (z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
            + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3))


class Interval(msgspec.Struct, frozen=True, kw_only=True):
    """A figure over seeds: mean, the 95 % t-interval around it, and the values themselves."""

    mean: float
    low: float | None       # None with a single value: no interval
    high: float | None
    n: int
    values: tuple[float, ...]

    @property
    def half_width(self) -> float | None:
        return None if self.high is None else self.high - self.mean


def interval(values: Iterable[float | None]) -> Interval | None:
    """Mean and 95 % t-interval of the values that are not None (None if there are none)."""
    xs = tuple(float(v) for v in values if v is not None)
    if not xs:
        return None
    mean = math.fsum(xs) / len(xs)
    if len(xs) == 1:
        return Interval(mean=mean, low=None, high=None, n=1, values=xs)
    half = t975(len(xs) - 1) * statistics.stdev(xs) / math.sqrt(len(xs))
    return Interval(mean=mean, low=mean - half, high=mean + half, n=len(xs), values=xs)


def flatten(figures: Mapping[str, Any], prefix: str = "") -> dict[str, float | None]:
    """Nested figures as ``a.b.c`` keys; numbers (and None) only, booleans and text dropped."""
    out: dict[str, float | None] = {}
    for key, value in figures.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{name}."))
        elif value is None or (isinstance(value, int | float) and not isinstance(value, bool)):
            out[name] = value
    return out


class SeedRun(msgspec.Struct, frozen=True, kw_only=True):
    """One seed under one policy: its figures, flattened."""

    seed: int
    policy: str
    figures: dict[str, float | None]
    wall_seconds: float


class SeedReport(msgspec.Struct, kw_only=True):
    """Every run, and per policy and figure the summary over seeds."""

    scenario: str
    seeds: list[int]
    policies: list[str]
    runs: list[SeedRun]
    stats: dict[str, dict[str, Interval]]
    method: str = ("mean over seeds; 95 % two-sided Student t-interval, "
                   "mean +- t(0.975, n-1) * s / sqrt(n)")

    def to_builtins(self) -> Any:
        out = msgspec.to_builtins(self)
        for per_figure in out["stats"].values():
            for iv in per_figure.values():
                iv["half_width"] = None if iv["high"] is None else iv["high"] - iv["mean"]
        return out


def _run_one(scenario: Scenario, base_dir: str, policy: str, measure: Measure) -> SeedRun:
    """One (seed, policy) in a worker: simulate, then measure."""
    base = Path(base_dir)
    result = Simulation(scenario, policy, base, load_sources(scenario, base)).run()
    figures = flatten(measure(scenario, policy, result))
    return SeedRun(seed=scenario.seed, policy=policy, figures=figures,
                   wall_seconds=result.wall_seconds)


def summarise(runs: Sequence[SeedRun], policies: Sequence[str]) -> dict[str, dict[str, Interval]]:
    """Per policy, every figure any of its runs has, over the runs' seeds."""
    stats: dict[str, dict[str, Interval]] = {}
    for policy in policies:
        mine = [r for r in runs if r.policy == policy]
        keys = sorted({k for r in mine for k in r.figures})
        per: dict[str, Interval] = {}
        for key in keys:
            iv = interval(r.figures.get(key) for r in mine)
            if iv is not None:
                per[key] = iv
        stats[policy] = per
    return stats


def run_seeds(scenario: Scenario, base_dir: Path, policies: Sequence[str], seeds: Sequence[int],
              measure: Measure, *, workers: int | None = None,
              progress: Callable[[SeedRun], None] | None = None) -> SeedReport:
    """Simulate ``scenario`` once per seed and policy, ``workers`` processes at a time.

    ``workers`` defaults to the number of cores (at most the number of runs);
    1 runs everything in this process. ``progress`` is called with each run as
    it completes (in completion order); the report lists runs by policy, then seed.
    """
    if not seeds:
        raise ValueError("at least one seed")
    jobs = [(msgspec.structs.replace(scenario, seed=s), str(base_dir), p, measure)
            for p in policies for s in seeds]
    n = min(len(jobs), workers or os.cpu_count() or 1)
    runs: list[SeedRun] = []
    if n <= 1:
        for job in jobs:
            runs.append(_run_one(*job))
            if progress is not None:
                progress(runs[-1])
    else:
        with ProcessPoolExecutor(max_workers=n, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = [pool.submit(_run_one, *job) for job in jobs]
            for fut in futures:
                run = fut.result()
                runs.append(run)
                if progress is not None:
                    progress(run)
    order = {p: i for i, p in enumerate(policies)}
    runs.sort(key=lambda r: (order[r.policy], r.seed))
    return SeedReport(scenario=scenario.name, seeds=list(seeds), policies=list(policies), runs=runs,
                      stats=summarise(runs, policies))


def format_interval(iv: Interval | None, unit: str = "n",
                    duration: Callable[[float], str] | None = None) -> str:
    """``mean +- half`` in the figure's unit: ``pct`` (fractions), ``x`` (ratios), ``n``, or
    ``s`` (seconds, written by ``duration``: the caller's formatter, e.g. the audit's)."""
    if iv is None:
        return "-"

    def one(x: float) -> str:
        if unit == "pct":
            return f"{100 * x:.1f}%"
        if unit == "x":
            return f"{x:.2f}x"
        if unit == "s":
            return duration(x) if duration is not None else f"{x:,.0f} s"
        return f"{x:,.1f}" if abs(x) < 100 else f"{x:,.0f}"

    if iv.high is None:
        return f"{one(iv.mean)} (1 seed)"
    half = iv.high - iv.mean
    if unit == "pct":
        return f"{100 * iv.mean:.1f} +- {100 * half:.1f}%"
    return f"{one(iv.mean)} +- {one(half)}"


__all__ = ["Interval", "Measure", "SeedReport", "SeedRun", "flatten", "format_interval",
           "interval", "run_seeds", "summarise", "t975"]
