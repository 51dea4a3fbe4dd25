"""The lost-state figure: GPU-hours of in-memory state that preempted interactive sessions lose.

An interactive session (a notebook, a debugger) holds its state in memory: a
preemption after its protection ends loses all of it, and its owner starts
again. With a checkpoint hook and a restore hook (docs/executor.md) the
executor asks the session to save its state when it is preempted, within the
grace, and the requeued run restores it. ``python -m simulator.lost_state``
measures what that saves on a scenario, per seed, in three configurations
fixed beforehand:

- ``as_shipped``: the scenario as it is;
- ``grace``: the policy's ``preemption_grace_s`` set to ``--grace`` (what
  hooks need), the sessions still not restorable: what the grace alone does;
- ``restorable``: the same grace, and the class's sessions restorable
  (``restorable = 1``, the hook taking ``--hook``, a restore ``--restore``).

The figure per configuration is ``SimResult.lost_state_gpu_s`` of the class
(the driver's ground truth: a victim that cannot resume loses its run, a
restorable one what its last checkpoint did not save), in GPU-hours, over
the whole run (no warm-up cut). Beside it: the sessions preempted, the hooks
completed and cut, the restore overhead paid, and the work lost by every
class (``lost_gpu_s``), so a gain for sessions at others' expense shows.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec

from events import WorkloadPreempted
from simulator.driver import SimResult
from simulator.scenario import Scenario, load_scenario, with_overrides
from simulator.seeds import format_interval, run_seeds
from simulator.sources import generator

CONFIGS = ("as_shipped", "grace", "restorable")


class LostStateError(ValueError):
    """The scenario has no generated class of that kind."""


def variant(scenario: Scenario, config: str, kind: str, grace_s: int, hook_s: int,
            restore_s: int) -> Scenario:
    """``scenario`` in one of ``CONFIGS`` (the class ``kind`` of its generator sources)."""
    if config == "as_shipped":
        return scenario
    policy = {**scenario.policy, "preemption_grace_s": grace_s}
    sources = list(scenario.sources)
    if config == "restorable":
        found = False
        for i, src in enumerate(sources):
            if not isinstance(src, generator.Config):
                continue
            classes = [msgspec.structs.replace(c, restorable=1.0, checkpoint_hook_s=hook_s,
                                               restart_overhead_s=restore_s)
                       if c.kind == kind else c for c in src.classes]
            found = found or any(c.kind == kind for c in src.classes)
            sources[i] = msgspec.structs.replace(src, classes=classes)
        if not found:
            raise LostStateError(f"{scenario.name}: no generated class of kind {kind!r}")
    return msgspec.structs.replace(scenario, policy=policy, sources=sources)


def measure(scenario: Scenario, policy: str, result: SimResult) -> Mapping[str, Any]:
    """The figures of one run (module level: a worker process imports it)."""
    kind = _KIND
    preempted = sum(1 for e in result.log
                    if type(e) is WorkloadPreempted and e.workload.startswith(f"{kind}-"))
    return {"lost_state_gpu_h": result.lost_state_gpu_s.get(kind, 0) / 3600,
            "sessions_preempted": preempted,
            "hooks_completed": result.hooks_completed, "hooks_cut": result.hooks_cut,
            "lost_all_gpu_h": result.lost_gpu_s / 3600,
            "lost_state_all_gpu_h": sum(result.lost_state_gpu_s.values()) / 3600}


# The class measured (the generator names its workloads ``<kind>-NNNNNN``).
_KIND = "interactive"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m simulator.lost_state",
        description="GPU-hours of in-memory state that preempted interactive sessions lose: "
                    "the scenario as shipped, with a preemption grace only, and with the "
                    "sessions restorable (checkpoint and restore hooks), per seed.")
    ap.add_argument("scenario", type=Path, help="a scenario file, e.g. scenarios/ai2-month.toml")
    ap.add_argument("--seeds", default=None,
                    help="comma-separated seeds (default: the scenario's own)")
    ap.add_argument("--grace", type=int, default=300, metavar="SECONDS",
                    help="preemption_grace_s of the grace and restorable runs (default 300)")
    ap.add_argument("--hook", type=int, default=120, metavar="SECONDS",
                    help="how long a session's checkpoint hook takes (default 120)")
    ap.add_argument("--restore", type=int, default=300, metavar="SECONDS",
                    help="how long a requeued session takes to restore (default 300)")
    ap.add_argument("--configs", default=",".join(CONFIGS),
                    help=f"which of {', '.join(CONFIGS)} to run (default: all)")
    ap.add_argument("--horizon-days", type=float, default=None, metavar="DAYS",
                    help="simulate only the first DAYS days (default: the scenario's horizon)")
    ap.add_argument("--workers", type=int, default=1,
                    help="processes at a time (default 1: the machine may be shared)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args(argv)
    scenario = load_scenario(args.scenario)
    if args.horizon_days is not None:
        scenario = with_overrides(scenario, horizon_days=args.horizon_days)
    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else [scenario.seed]
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    bad = [c for c in configs if c not in CONFIGS]
    if bad:
        ap.error(f"unknown configuration {bad[0]!r} (one of {', '.join(CONFIGS)})")
    out: dict[str, Any] = {"scenario": scenario.name, "seeds": seeds,
                           "horizon_days": scenario.horizon_days, "grace_s": args.grace,
                           "hook_s": args.hook, "restore_s": args.restore, "configs": {}}
    for config in configs:
        try:
            sc = variant(scenario, config, _KIND, args.grace, args.hook, args.restore)
        except LostStateError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        if not args.json:
            print(f"{config}: simulating {len(seeds)} seed(s)...", file=sys.stderr)
        report = run_seeds(sc, args.scenario.resolve().parent, ["allot"], seeds, measure,
                           workers=args.workers)
        stats = report.stats["allot"]
        out["configs"][config] = {k: msgspec.to_builtins(v) for k, v in stats.items()}
        if not args.json:
            print(f"  {config:<11} interactive state lost "
                  f"{format_interval(stats.get('lost_state_gpu_h'))} GPU-h, sessions preempted "
                  f"{format_interval(stats.get('sessions_preempted'))}, hooks completed "
                  f"{format_interval(stats.get('hooks_completed'))} / cut "
                  f"{format_interval(stats.get('hooks_cut'))}; all classes lost "
                  f"{format_interval(stats.get('lost_all_gpu_h'))} GPU-h")
    if args.json:
        print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
