"""``allot simulate --seeds N``: a scenario over N seeds, every audit figure as a mean and interval.

The runner (``simulator.seeds``) simulates each seed and policy in a process
of its own; this module is the command line's side of it. It measures each run
with the audit (``audit_figures``: the log is loaded into a DuckDB database of
its own and ``audit.report.summary`` computes the figures, exactly as for a
single run), prints the headline figures as ``mean +- half-width`` of the 95 %
Student t-interval over the seeds, and writes every figure, each seed's value
included, to ``OUT/seeds.json``.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from simulator.driver import SimResult
from simulator.scenario import Scenario
from simulator.seeds import SeedReport, SeedRun, format_interval, run_seeds

# The headline rows: (figure key in the flattened audit summary, label, unit).
ROWS: tuple[tuple[str, str, str], ...] = (
    ("occupancy", "occupancy", "pct"),
    ("unallocated_share", "unallocated share of delivered", "pct"),
    ("owed_received.total", "received / owed (all teams)", "pct"),
    ("owed_received.worst", "worst team", "pct"),
    ("owed_received.teams_at_least_95", "teams at >= 95% of owed", "n"),
    ("owed_received_net_idle.total", "received / owed, net of idle holds", "pct"),
    ("owed_received_net_killed.total", "received / owed, net of killed work", "pct"),
    ("owed_received_net.total", "received / owed, net of both", "pct"),
    ("owed_received_net.worst", "worst team, net of both", "pct"),
    ("idle_hold_gpu_h", "GPU-hours of idle holds (funded)", "n"),
    ("killed_gpu_h", "GPU-hours of killed work (funded)", "n"),
    ("wait_s.all.p50", "wait p50 (all)", "s"),
    ("wait_s.all.p90", "wait p90 (all)", "s"),
    ("wait_s.debug.p50", "wait p50 (debug)", "s"),
    ("wait_s.debug.p90", "wait p90 (debug)", "s"),
    ("wait_s.training.p90", "wait p90 (training)", "s"),
    ("wait_s.all.never_started", "never started (all)", "n"),
    ("requeue_wait_s.all.p50", "requeue wait p50 (all)", "s"),
    ("requeue_wait_s.all.p90", "requeue wait p90 (all)", "s"),
    ("requeue_wait_s.training.p90", "requeue wait p90 (training)", "s"),
    ("requeue_wait_s.all.n", "requeued runs (all)", "n"),
    ("refused.too_large", "refused as too large", "n"),
    ("refused_gpu_h.too_large", "GPU-hours refused as too large", "n"),
    ("largest_gang_wait_s", "largest gang wait", "s"),
    ("lost_gpu_hours", "GPU-hours lost to preemption", "n"),
    ("fragmentation", "fragmentation", "pct"),
    ("sim.lost_gpu_h", "GPU-hours lost (executor's count)", "n"),
    ("sim.resubmitted", "resubmissions of lost runs", "n"),
    ("calibration.total_demand_mean", "total demand / capacity (mean)", "x"),
    ("calibration.total_demand_p10", "total demand / capacity (p10)", "x"),
    ("calibration.funded_demand_mean", "funded demand / capacity (mean)", "x"),
    ("calibration.below_entitlement", "team-hours below entitlement", "pct"),
    ("sim.debug_in_holds", "debug run inside squatters' holds", "n"),
    ("sim.wall_seconds", "wall time of one run", "s"),
)


def audit_figures(scenario: Scenario, policy: str, result: SimResult) -> dict[str, Any]:
    """The audit summary of one run (in a worker process), plus the simulator's own counts."""
    from audit.load import load_log, open_db
    from audit.report import summary
    from events import write_log

    with tempfile.TemporaryDirectory(prefix="allot-seed-") as tmp:
        log = Path(tmp) / "events.jsonl"
        write_log(log, result.log)
        con = open_db(Path(tmp) / "sim.duckdb")
        try:
            con.execute("SET threads = 1")  # the pool already runs one process per core
            load_log(con, log, run=policy)
            figures = summary(con, policy, wall_seconds=result.wall_seconds)
        finally:
            con.close()
    # The load's calibration figures (docs/simulation.md, "Calibration") from the
    # same run, so one multi-seed run reports the load next to the outcome.
    from simulator.calibration import calibration_figures
    from simulator.preemption_cost import lost_by_class

    figures["calibration"] = calibration_figures(result.log)
    figures["lost_by_class"] = lost_by_class(result.log)
    figures["sim"] = {"events": len(result.log), "cycles": result.cycles,
                      "demand_ratio": result.demand_ratio, "lost_gpu_h": result.lost_gpu_s / 3600,
                      "resubmitted": result.resubmitted, "holds": result.holds,
                      "debug_in_holds": result.debug_in_holds,
                      "wall_seconds": result.wall_seconds}
    return figures


def render(report: SeedReport, duration: Any) -> Table:
    """The headline figures, one column per policy, ``mean +- half-width`` over the seeds."""
    n = len(report.seeds)
    table = Table(title=f"{report.scenario}: {n} seeds ({report.seeds[0]}..{report.seeds[-1]}), "
                        f"mean +- 95 % t-interval half-width", title_justify="left")
    table.add_column("figure", style="bold")
    for policy in report.policies:
        table.add_column(policy, justify="right")
    for key, label, unit in ROWS:
        if not any(key in report.stats[p] for p in report.policies):
            continue
        table.add_row(label, *(format_interval(report.stats[p].get(key), unit, duration)
                               for p in report.policies))
    return table


def run_multi_seed(path: Path, scenario: Scenario, policies: Sequence[str], out: Path, seeds: int,
                   *, workers: int | None = None, console: Console | None = None) -> SeedReport:
    """Simulate ``seeds`` seeds from the scenario's own, audit each run, print and write the summary."""
    from allot.simulate import output_dir
    from audit.formatting import format_duration as duration
    from simulator.driver import load_sources
    from simulator.scenario import ScenarioError
    from simulator.sources.generator import GeneratorError

    console = console or Console(stderr=True)
    out = output_dir(out)
    try:  # a bad source fails here, in one line, not in every worker
        load_sources(scenario, path.parent)
    except GeneratorError as exc:
        raise ScenarioError(f"{path}: generator source: {exc}") from exc
    first = scenario.seed
    console.print(f"[bold]{scenario.name}[/]: {seeds} seeds ({first}..{first + seeds - 1}) x "
                  f"{len(policies)} policies, {workers or 'one per core'} worker process(es)")
    t0 = time.perf_counter()

    def done(run: SeedRun) -> None:
        console.print(f"  seed {run.seed} {run.policy}: {run.wall_seconds:.1f} s simulated "
                      f"({time.perf_counter() - t0:.0f} s elapsed)")

    report = run_seeds(scenario, path.parent, policies, list(range(first, first + seeds)),
                       audit_figures, workers=workers, progress=done)
    (out / "seeds.json").write_text(json.dumps(report.to_builtins(), indent=2, sort_keys=True,
                                               default=str) + "\n")
    Console().print(render(report, duration))
    console.print(f"every figure and each seed's value in {out / 'seeds.json'}")
    return report
