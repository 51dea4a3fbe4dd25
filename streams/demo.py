"""``make demo``: a scenario played through Kafka, in accelerated time, then audited and replayed.

``play(stack, scenario, ...)`` runs against a started ``streams.up.Stack``
(broker, worker with its ticker, simulated executor):

1. waits for the cluster's first tick and takes its time as the scenario's
   t = 0 (the worker's ticker is the only clock; with ``time_scale`` above 1 it
   runs that many scheduler seconds per wall second);
2. publishes the scenario's setup (policy, budget tree, hosts), then, as the
   cluster's clock passes each moment, the submissions of the scenario's
   workload sources (``simulator.driver.load_sources``: the same workloads the
   simulator plays), the impatient users' cancellations, the seeded host
   faults, and a repair ``repair_s`` after each ``host.drained``, all with the
   Python client. The simulated executor (another process) reports the
   finishes;
3. shows the live view (``streams.view``) while it plays;
4. exports the journal it wrote (``streams.export``), loads it into the audit
   (``audit.load_log``), prints the audit summary beside the simulator's run of
   the same scenario, and runs the replay check (``scheduler.replay.verify_file``);
5. ends with PASS when the replay re-derives every decision, the audit loaded
   the journal, every input it published is in the journal, and work both
   started and finished; FAIL with the reasons otherwise.
"""

from __future__ import annotations

import asyncio
import heapq
import json
import random
import time
from pathlib import Path
from typing import Any

import msgspec

from events import (
    ClockTicked,
    Event,
    HostDrained,
    WorkloadFinished,
    WorkloadStarted,
    encode_lines,
)
from events.factory import Inputs
from projections.cluster import OK
from projections.workloads import PENDING
from simulator.scenario import Scenario, with_overrides

SUBMIT, CANCEL, FAULT, REPAIR = range(4)


class DemoReport(msgspec.Struct, kw_only=True):
    """What the demo measured and checked (written to ``<out>/report.json``)."""

    scenario: str
    cluster: str
    horizon_s: int
    time_scale: float
    wall_s: float = 0.0
    play_wall_s: float = 0.0
    published: int = 0
    submissions: int = 0
    cancels: int = 0
    faults: int = 0
    repairs: int = 0
    journal_events: int = 0
    journal_inputs: int = 0
    journal_decisions: int = 0
    started: int = 0
    finished: int = 0
    missing_inputs: list[str] = []
    replay_ok: bool = False
    replay_detail: str = ""
    audit_ok: bool = False
    passed: bool = False
    reasons: list[str] = []


def play(stack: Any, scenario: Scenario, scenario_path: str, out: Path, con: Any,
         horizon_days: float | None = None, view: bool = True) -> bool:
    """Play ``scenario`` through ``stack``; print the audit and the replay; True when it passed."""
    if horizon_days is not None:
        scenario = with_overrides(scenario, horizon_days=horizon_days)
    out.mkdir(parents=True, exist_ok=True)
    report = DemoReport(scenario=scenario.name, cluster=scenario.cluster.id,
                        horizon_s=scenario.horizon_s, time_scale=stack.settings.time_scale)
    t0 = time.monotonic()
    asyncio.run(_play(stack, scenario, Path(scenario_path).parent, report, con, view))
    report.play_wall_s = time.monotonic() - t0
    _audit(stack, scenario, Path(scenario_path).parent, out, report, con)
    report.wall_s = time.monotonic() - t0
    _verdict(report)
    (out / "report.json").write_bytes(msgspec.json.format(msgspec.json.encode(report)))
    if report.passed:
        con.print(f"[bold green]PASS[/]: {report.journal_inputs:,} inputs and "
                  f"{report.journal_decisions:,} decisions through Kafka in "
                  f"{report.wall_s:.0f} s ({report.horizon_s / 86400:g} scheduler days at "
                  f"x{report.time_scale:g}); the replay re-derives every decision. "
                  f"Files in {out}/")
    else:
        con.print("[bold red]FAIL[/]: " + "; ".join(report.reasons))
    return report.passed


def _verdict(r: DemoReport) -> None:
    if not r.replay_ok:
        r.reasons.append(f"replay: {r.replay_detail}")
    if not r.audit_ok:
        r.reasons.append("the audit could not load the journal")
    if r.missing_inputs:
        r.reasons.append(f"{len(r.missing_inputs)} published input(s) are not in the journal "
                         f"(e.g. {r.missing_inputs[0]})")
    if not r.started:
        r.reasons.append("no workload started")
    if not r.finished:
        r.reasons.append("no workload finished (is the executor running?)")
    r.passed = not r.reasons


class _Scripted:
    """The scenario's inputs in scheduler time, relative to t = 0."""

    def __init__(self, scenario: Scenario, base_dir: Path) -> None:
        from simulator.driver import Simulation, load_sources

        self.scenario = scenario
        self.sources = load_sources(scenario, base_dir)
        self.sim = Simulation(scenario, "allot", base_dir, self.sources)
        self.heap: list[tuple[int, int, int, Any]] = []
        self.seq = 0
        horizon = scenario.horizon_s
        for w in self.sources.workloads:
            if w.submit_at <= horizon:
                self.push(w.submit_at, SUBMIT, w)
        self.sim._schedule_faults(lambda t, _k, payload: self.push(t, FAULT, payload), horizon)

    def push(self, t: int, kind: int, payload: Any) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, kind, self.seq, payload))

    def due(self, t: int) -> list[tuple[int, int, Any]]:
        out = []
        while self.heap and self.heap[0][0] <= t:
            at, kind, _, payload = heapq.heappop(self.heap)
            out.append((at, kind, payload))
        return out


async def _play(stack: Any, scenario: Scenario, base_dir: Path, report: DemoReport, con: Any,
                show: bool) -> None:
    from rich.console import Group
    from rich.live import Live
    from rich.text import Text

    from streams.client import Client
    from streams.view import LiveView, render

    s = stack.settings
    cluster = scenario.cluster.id
    script = _Scripted(scenario, base_dir)
    fault_rng = random.Random(f"{scenario.seed}:severity")
    mk = Inputs(cluster=cluster, prefix="demo-", source="allot-demo")
    lv = LiveView(cluster)
    published: list[str] = []
    async with Client(s.bootstrap, s.topic_prefix, client_id="allot-demo") as client:
        con.print(f"waiting for the first tick of cluster {cluster} ...")
        tail = await client.tail(cluster, start="begin")
        clock = 0
        while clock == 0:
            for item in await tail.poll(200):
                lv.add(item.event)
                if type(item.event) is ClockTicked:
                    clock = item.event.at
        zero = clock
        setup = [msgspec.structs.replace(e, at=zero)
                 for e in script.sim.setup_events(mk)]
        for e in setup:
            published.append((await client.publish(e)).id)
        horizon = zero + scenario.horizon_s
        specs = {w.workload: w for w in script.sources.workloads}
        n_subs = sum(1 for x in script.heap if x[1] == SUBMIT)
        con.print(f"playing {scenario.name}: {n_subs} workloads over "
                  f"{scenario.horizon_s / 86400:g} days of scheduler time "
                  f"(x{s.time_scale:g}: about {scenario.horizon_s / s.time_scale:.0f} s)")

        def status() -> str:
            done = min(1.0, max(0.0, (clock - zero) / max(1, scenario.horizon_s)))
            return (f"day {(clock - zero) / 86400:4.2f} of {scenario.horizon_s / 86400:g} "
                    f"({done:4.0%})  submitted {report.submissions}/{n_subs}  started "
                    f"{report.started}  finished {report.finished}  cancelled "
                    f"{report.cancels}  faults {report.faults}  repairs {report.repairs}")

        live = None
        if show and con.is_terminal:
            live = Live(render(lv), console=con, refresh_per_second=2, transient=False)
            live.start()
        last_draw = last_line = 0.0
        try:
            while clock < horizon:
                dead = stack.dead()
                if dead:
                    raise RuntimeError(f"the {dead[0].name} died: {dead[0].tail()}")
                for item in await tail.poll(100):
                    e = item.event
                    lv.add(e)
                    if type(e) is ClockTicked:
                        clock = max(clock, e.at)
                    elif type(e) is WorkloadStarted:
                        report.started += 1
                    elif type(e) is WorkloadFinished:
                        report.finished += 1
                    elif type(e) is HostDrained:
                        script.push(clock - zero + scenario.faults.repair_s, REPAIR, e.host)
                for _at, kind, payload in script.due(clock - zero):
                    ev = _input(kind, payload, mk, lv, clock, fault_rng, scenario, specs, script)
                    if ev is None:
                        continue
                    published.append((await client.publish(ev)).id)
                    report.published += 1
                    if kind == SUBMIT:
                        report.submissions += 1
                    elif kind == CANCEL:
                        report.cancels += 1
                    elif kind == FAULT:
                        report.faults += 1
                    elif kind == REPAIR:
                        report.repairs += 1
                now = time.monotonic()
                if live is not None and now - last_draw > 0.5:
                    live.update(Group(render(lv, 10), Text(""), Text(status(), style="bold")))
                    last_draw = now
                elif live is None and now - last_line > 5:
                    con.print(status())
                    last_line = now
            # A few more cycles, so the last inputs are journaled with their decisions.
            end = clock + 3 * max(1, int(s.tick_interval_s * s.time_scale))
            while clock < end:
                for item in await tail.poll(100):
                    lv.add(item.event)
                    if type(item.event) is ClockTicked:
                        clock = max(clock, item.event.at)
        finally:
            if live is not None:
                live.update(Group(render(lv, 10), Text(""), Text(status(), style="bold")))
                live.stop()
            await tail.stop()
        con.print(status())
    report.missing_inputs = published  # checked against the exported journal


def _input(kind: int, payload: Any, mk: Inputs, lv: Any, clock: int, rng: random.Random,
           scenario: Scenario, specs: dict[str, Any], script: _Scripted) -> Event | None:
    """The input a scripted moment publishes now (None when it no longer applies)."""
    if kind == SUBMIT:
        w = payload
        if w.patience_s is not None:
            script.push(w.submit_at + w.patience_s, CANCEL, w.workload)
        return mk.submit(w.workload, w.budget, w.gpus, w.min_runtime_s, at=clock, user=w.user,
                         hosts=w.hosts, resumable=w.resumable, priority=w.priority, kind=w.kind,
                         expected_duration_s=w.duration_s)
    if kind == CANCEL:
        x = lv.state.workloads.all.get(payload)
        if x is None or x.status != PENDING or x.runs:
            return None
        return mk.cancel(x.id, actor=x.user, at=clock, reason="patience")
    if kind == FAULT:
        host, severity = payload
        h = lv.state.cluster_state.hosts.get(host)
        if h is None or h.health != OK:
            return None
        if severity is None:
            severity = "failed" if rng.random() < scenario.faults.failed_fraction else "degraded"
        return mk.fault(host, severity, at=clock, reason="injected")
    return mk.repair(payload, at=clock)


def _audit(stack: Any, scenario: Scenario, base_dir: Path, out: Path, report: DemoReport,
           con: Any) -> None:
    from audit.load import LogLoadError, load_log, open_db
    from audit.report import render, summary
    from events import read_log
    from scheduler.replay import verify_file
    from simulator.driver import Simulation
    from streams.export import export_journal

    s = stack.settings
    journal = out / "journal.jsonl"
    con.rule("[bold]the journal, exported, audited and replayed")
    exp = asyncio.run(export_journal(s.bootstrap, journal, prefix=s.topic_prefix,
                                     clusters=[scenario.cluster.id],
                                     fetch_wait_ms=s.fold_fetch_wait_ms))
    report.journal_events = exp.events
    report.journal_inputs = exp.inputs
    report.journal_decisions = exp.decisions
    con.print(f"exported {exp.events:,} events ({exp.inputs:,} inputs, {exp.decisions:,} "
              f"decisions; {exp.duplicates} duplicate and {exp.fenced} fenced record(s) "
              f"skipped) to {journal}")
    ids = {e.id for e in read_log(journal)}
    report.missing_inputs = [i for i in report.missing_inputs if i not in ids]
    sim = Simulation(scenario, "allot", base_dir).run()
    sim_log = out / "simulated.jsonl"
    sim_log.write_bytes(encode_lines(sim.log))
    db = out / "audit.duckdb"
    db.unlink(missing_ok=True)
    try:
        con_db = open_db(db)
        load_log(con_db, journal, run="live (Kafka)")
        load_log(con_db, sim_log, run="simulated")
        sums = {"live (Kafka)": summary(con_db, "live (Kafka)", report.play_wall_s),
                "simulated": summary(con_db, "simulated", sim.wall_seconds)}
        con.print(render(sums))
        (out / "summary.json").write_text(json.dumps(sums, indent=2, default=str))
        con_db.close()
        report.audit_ok = True
    except (LogLoadError, Exception) as exc:  # the verdict says what failed; never a traceback
        report.audit_ok = False
        con.print(f"[red]audit failed[/]: {exc}")
    result = verify_file(str(journal))
    report.replay_ok = result.ok
    if result.ok:
        con.print(f"replay: [green]identical[/]: {result.inputs:,} inputs re-derive all "
                  f"{result.decisions:,} recorded decisions ({result.duplicates} duplicates)")
    else:
        d = result.divergence
        report.replay_detail = f"line {d.line} {d.kind}: {d.detail}" if d else "?"
        con.print(f"replay: [red]diverged[/]: {report.replay_detail}")


__all__ = ["DemoReport", "play"]
