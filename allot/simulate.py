"""``allot simulate``: run a scenario under one or both policies and write everything out.

This is command-line glue: it joins the simulator (which depends on the core
alone) to the audit (DuckDB loading, the report, plots), so neither has to
import the other.

Output directory layout::

    OUT/allot/events.jsonl       the full event log of the allot run (same schema as live)
    OUT/baseline/events.jsonl    the same scenario under the old priority scheduler
    OUT/sim.duckdb               both logs loaded, with the audit views (open it in duckdb)
    OUT/summary.json             the audit summary per policy, plus run facts
    OUT/plots/*.png              Gantt, usage vs entitlement, wait CDFs, occupancy
    OUT/report.html              one self-contained page with all of the above

Every number in summary.json comes from the audit's SQL views over the logs:
the simulator's report and the audit of a live log are one implementation.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

import native
from allot.errors import CliError
from audit.load import load_log, open_db
from audit.report import render, summary
from events import PolicyConfigured, write_log
from simulator.driver import Simulation, load_sources
from simulator.scenario import Scenario, ScenarioError, check_policy, load_scenario, validate
from simulator.sources.generator import GeneratorError

POLICIES = ("allot", "baseline")


def apply_overrides(scenario: Scenario, knobs: dict[str, Any], horizon_days: float | None,
                    seed: int | None) -> Scenario:
    """A what-if copy: policy knobs, horizon and seed replaced, and checked like the file.

    An override the file itself could not hold (``--horizon-days -1``) is a
    ScenarioError naming the option, never a silently different run.
    """
    changes: dict[str, Any] = {}
    if knobs:
        check_policy(knobs, "--set")
        changes["policy"] = {**scenario.policy, **knobs}
    if horizon_days is not None:
        changes["horizon_days"] = horizon_days
    if seed is not None:
        changes["seed"] = seed
    if not changes:
        return scenario
    where = ", ".join(f"--{k.replace('_', '-')}" if k != "policy" else "--set" for k in changes)
    return validate(msgspec.structs.replace(scenario, **changes), where)


def output_dir(path: str | Path) -> Path:
    """The output directory, created if missing; CliError if it cannot be one."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise CliError(f"--out {out}: exists and is not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CliError(f"--out {out}: cannot create the directory: "
                       f"{exc.strerror or exc}") from exc
    return out


def run_scenario(
    path: str | Path,
    policies: Sequence[str],
    out_dir: str | Path,
    *,
    plots: bool = True,
    knobs: dict[str, Any] | None = None,
    horizon_days: float | None = None,
    seed: int | None = None,
    warmup_s: int | None = None,
    console: Console | None = None,
    over_cap: str = "clamp",
) -> dict[str, Any]:
    """Simulate, audit and report; return the summary written to summary.json.

    ``warmup_s`` is the start of each run left out of every figure (default: the
    audit's, one lookback window). ``over_cap`` is what a submission whose
    minimum runtime exceeds the policy's cap does: "clamp" (its owner resubmits
    it at the cap, the default) or "reject" (sent as is, refused); the summary
    counts both (``clamped_over_cap``, ``refused_over_cap``).
    """
    console = console or Console(stderr=True)
    path = Path(path)
    scenario = apply_overrides(load_scenario(path), knobs or {}, horizon_days, seed)
    out = output_dir(out_dir)
    t0 = time.perf_counter()
    try:
        sources = load_sources(scenario, path.parent)
    except GeneratorError as exc:
        raise ScenarioError(f"{path}: generator source: {exc}") from exc
    core = native.status()
    console.print(f"[bold]{escape(scenario.name)}[/]: {len(sources.workloads):,} workloads, "
                  f"{scenario.capacity_gpus:,} GPUs, {scenario.horizon_days:g} days "
                  f"(sources loaded in {time.perf_counter() - t0:.1f} s; "
                  f"{core.name} core: {escape(core.reason)})")
    facts: dict[str, dict[str, Any]] = {}
    logs: dict[str, Path] = {}
    for policy in policies:
        sim = Simulation(scenario, policy, path.parent, sources, over_cap=over_cap)
        with Progress(TextColumn(f"simulating [bold]{policy:8s}[/]"), BarColumn(),
                      TextColumn("{task.fields[day]}"), TimeElapsedColumn(),
                      console=console, transient=False) as bar:
            task = bar.add_task(policy, total=scenario.horizon_s, day="")

            def tick(done: int, total: int, task: Any = task, bar: Progress = bar) -> None:
                bar.update(task, completed=done, day=f"day {done / 86_400:5.1f}")

            result = sim.run(tick)
        log_path = out / policy / "events.jsonl"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        write_log(log_path, result.log)
        logs[policy] = log_path
        facts[policy] = {
            "events": len(result.log),
            "cycles": result.cycles,
            "workloads": result.workloads,
            "demand_ratio": round(result.demand_ratio, 3),
            "wall_seconds": round(result.wall_seconds, 2),
            "speedup_vs_real_time": round(result.sim_seconds / max(result.wall_seconds, 1e-9)),
            "core": core.name,
            "clamped_over_cap": result.clamped,
            "refused_over_cap": result.refused_over_cap,
            "refused_over_cap_gpu_h": round(result.refused_over_cap_gpu_s / 3600, 1),
        }
        console.print(f"  {policy}: {len(result.log):,} events, {result.cycles:,} cycles, "
                      f"{result.wall_seconds:.1f} s wall "
                      f"({facts[policy]['speedup_vs_real_time']:,}x real time)")
        if result.clamped or result.refused_over_cap:
            cap = msgspec.convert({"id": "cap", "at": 0, **scenario.policy},
                                  PolicyConfigured).min_runtime_cap_s
            refused = (f"{result.refused_over_cap:,} refused "
                       f"({result.refused_over_cap_gpu_s / 3600:,.0f} GPU-hours of work)"
                       if result.refused_over_cap else "none refused")
            console.print(f"  {policy}: contracts over the {cap:,} s cap: "
                          f"{result.clamped:,} clamped to the cap (sent as their owners would "
                          f"resubmit them), {refused}")
    db_path = out / "sim.duckdb"
    if db_path.exists():
        db_path.unlink()
    con = open_db(db_path)
    summaries: dict[str, dict[str, Any]] = {}
    for policy, log_path in logs.items():
        load_log(con, log_path, run=policy)
    for policy in logs:
        s = summary(con, policy, wall_seconds=facts[policy]["wall_seconds"], warmup_s=warmup_s)
        s.update({k: v for k, v in facts[policy].items() if k != "wall_seconds"})
        summaries[policy] = s
    doc = {"scenario": scenario.name, "description": scenario.description,
           "seed": scenario.seed, "policy_knobs": scenario.policy, **summaries}
    (out / "summary.json").write_text(json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n")
    Console().print(render(summaries))
    if plots:
        from audit.html_report import write_html, write_plots

        with console.status("drawing plots"):
            write_plots(con, list(logs), out / "plots")
            write_html(con, list(logs), out / "report.html", summaries,
                       title=f"allot simulation: {scenario.name}")
        console.print(escape(f"plots in {out / 'plots'}, report in {out / 'report.html'}"))
    con.close()
    console.print(escape(f"logs, {db_path.name} and summary.json in {out}"))
    return doc
