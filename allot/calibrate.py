"""``python -m allot.calibrate``: a scenario's calibration figures over seeds, with intervals.

The figures themselves are the simulator's (``simulator/calibration.py``: the
load, read from the log). This glue runs the seeds and, for the baseline only,
adds the audit's waits and occupancy, the targets of the baseline's people
model (docs/simulation.md, "The baseline's before"). It prints no outcome
figure of allot, on purpose: calibration is fixed before anyone looks at how
allot did. It lives in ``allot/`` because it needs the audit, which the
simulator may not import (tests/test_layers.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from simulator.calibration import calibration_figures


def measure(scenario: Any, policy: str, result: Any) -> dict[str, Any]:
    """The seeds runner's callback: calibration figures plus the executor's own counts."""
    from simulator.preemption_cost import lost_by_class

    figures = calibration_figures(result.log)
    figures["lost_by_class"] = lost_by_class(result.log)
    if policy == "baseline":
        # The baseline's "before" targets (debug p90, waits, occupancy) are the
        # audit's own figures; allot's outcome figures are not computed here.
        from allot.seeds import audit_figures

        audit = audit_figures(scenario, policy, result)
        waits = audit["wait_s"]
        figures["before"] = {"occupancy": audit["occupancy"],
                             "wait_p50_all_s": waits["all"]["p50"],
                             "wait_p90_all_s": waits["all"]["p90"],
                             "wait_p90_debug_s": waits.get("debug", {}).get("p90")}
    figures.update({"lost_gpu_h": result.lost_gpu_s / 3600, "resubmitted": result.resubmitted,
                    "holds": result.holds, "debug_in_holds": result.debug_in_holds,
                    "wall_seconds": result.wall_seconds})
    return figures


# The figures printed (targets: docs/simulation.md, "Calibration").
ROWS: tuple[tuple[str, str, str], ...] = (
    ("unallocated_share", "unallocated share of GPU time run", "pct"),
    ("total_demand_mean", "total demand / capacity, mean over hours", "x"),
    ("total_demand_p10", "  p10 over hours", "x"),
    ("total_demand_p50", "  p50", "x"),
    ("total_demand_p90", "  p90", "x"),
    ("funded_demand_mean", "funded demand / capacity, mean", "x"),
    ("funded_demand_p10", "  p10", "x"),
    ("funded_demand_p90", "  p90", "x"),
    ("below_entitlement", "team-hours below entitlement", "pct"),
    ("below_entitlement_min_team", "  least often below (one team)", "pct"),
    ("below_entitlement_max_team", "  most often below (one team)", "pct"),
    ("demand_vs_entitlement_p10", "funded demand / entitlement, p10 of team-hours", "x"),
    ("demand_vs_entitlement_p50", "  p50", "x"),
    ("demand_vs_entitlement_p90", "  p90", "x"),
    ("before.occupancy", "occupancy (baseline only)", "pct"),
    ("before.wait_p50_all_s", "wait p50, all work (baseline only, s)", "n"),
    ("before.wait_p90_all_s", "wait p90, all work (baseline only, s)", "n"),
    ("before.wait_p90_debug_s", "wait p90, debug (baseline only, s)", "n"),
    ("lost_gpu_h", "GPU-hours lost to preemption (executor)", "n"),
    ("resubmitted", "resubmissions", "n"),
    ("holds", "squatters' holds submitted", "n"),
    ("debug_in_holds", "debug workloads run inside holds", "n"),
    ("wall_seconds", "wall time of one run (s)", "n"),
)


def main(argv: list[str] | None = None) -> int:
    import msgspec

    from simulator.scenario import ScenarioError, load_scenario
    from simulator.seeds import format_interval, run_seeds

    ap = argparse.ArgumentParser(prog="python -m allot.calibrate", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenario", type=Path)
    ap.add_argument("--seeds", type=int, default=5, help="number of seeds (default 5)")
    ap.add_argument("--first-seed", type=int, help="first seed (default: the scenario's)")
    ap.add_argument("--policy", choices=("allot", "baseline", "both"), default="allot")
    ap.add_argument("--workers", type=int, help="processes (default: one per core)")
    ap.add_argument("--horizon-days", type=float, help="override the simulated span")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--values", action="store_true", help="also print each seed's value")
    args = ap.parse_args(argv)
    try:
        scenario = load_scenario(args.scenario)
    except ScenarioError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.seeds < 1:
        print("error: --seeds must be at least 1", file=sys.stderr)
        return 2
    if args.horizon_days is not None:
        scenario = msgspec.structs.replace(scenario, horizon_days=args.horizon_days)
    policies = ("allot", "baseline") if args.policy == "both" else (args.policy,)
    first = scenario.seed if args.first_seed is None else args.first_seed
    report = run_seeds(scenario, args.scenario.parent, policies,
                       list(range(first, first + args.seeds)), measure, workers=args.workers)
    print(f"{scenario.name}: calibration figures over {args.seeds} seed(s) "
          f"{report.seeds[0]}..{report.seeds[-1]} (mean and 95 % t-interval)")
    width = max(len(label) for _, label, _ in ROWS)
    print(f"{'':{width}s}  " + "  ".join(f"{p:>24s}" for p in policies))
    for key, label, unit in ROWS:
        cells = [format_interval(report.stats[p].get(key), unit) for p in policies]
        line = f"{label:{width}s}  " + "  ".join(f"{c:>24s}" for c in cells)
        if args.values:
            for p in policies:
                iv = report.stats[p].get(key)
                scale = 100 if unit == "pct" else 1
                line += "  [" + " ".join(f"{scale * v:.3g}" for v in (iv.values if iv else ())) + "]"
        print(line)
    if args.json:
        args.json.write_text(json.dumps(report.to_builtins(), indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
