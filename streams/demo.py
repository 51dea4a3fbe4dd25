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
4. exports the journal it wrote (``streams.export``), has it loaded into the
   audit (``audit.load_log``, through the ``Auditor`` the command line hands
   in: ``streams`` does not import the audit), prints the audit summary beside
   the simulator's run of the same scenario, and runs the replay check
   (``scheduler.replay.verify_file``);
5. with the Faust projections running (the default), stops the scheduler so
   the journal is final, waits until the projections applied all of it, and
   compares their windows (GPU-seconds per budget node and per host, hourly
   and daily) with the same figures computed by the audit;
6. ends with PASS when the replay re-derives every decision, the audit loaded
   the journal, every input it published is in the journal, work both started
   and finished, and the projections equal the audit; FAIL with the reasons
   otherwise.
"""

from __future__ import annotations

import asyncio
import heapq
import json
import random
import time
from collections.abc import Callable
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
    tag_of,
)
from events.factory import Inputs
from projections.cluster import OK
from projections.workloads import PENDING
from simulator.scenario import Scenario, with_overrides

SUBMIT, CANCEL, FAULT, REPAIR = range(4)

# key -> window start -> (allocated GPU-seconds, unallocated GPU-seconds)
Figures = dict[str, dict[int, tuple[int, int]]]


class AuditOutcome(msgspec.Struct, kw_only=True):
    """What the audit said about the demo's runs (``allot.live_audit.audit_runs`` makes it)."""

    table: Any                       # a rich renderable: the summaries side by side
    summaries: dict[str, Any]
    node_seconds: Figures            # of the live run: per budget node and hour
    host_seconds: Figures            # of the live run: per host and hour


# The audit, handed in by the command line (``streams`` may not import ``audit``):
# (database path, run name -> (log, wall seconds), the run whose usage to read).
Auditor = Callable[[Path, dict[str, tuple[Path, float]], str], AuditOutcome]


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
    projections_checked: bool = False
    projections_ok: bool = False
    projections_detail: str = ""
    projections_lag: dict[str, Any] = {}
    passed: bool = False
    reasons: list[str] = []


def play(stack: Any, scenario: Scenario, scenario_path: str, out: Path, con: Any,
         horizon_days: float | None = None, view: bool = True,
         projections_port: int | None = None, auditor: Auditor | None = None) -> bool:
    """Play ``scenario`` through ``stack``; print the audit and the replay; True when it passed."""
    if horizon_days is not None:
        scenario = with_overrides(scenario, horizon_days=horizon_days)
    out.mkdir(parents=True, exist_ok=True)
    report = DemoReport(scenario=scenario.name, cluster=scenario.cluster.id,
                        horizon_s=scenario.horizon_s, time_scale=stack.settings.time_scale)
    t0 = time.monotonic()
    asyncio.run(_play(stack, scenario, Path(scenario_path).parent, report, con, view))
    report.play_wall_s = time.monotonic() - t0
    if projections_port is not None:
        # The journal must stop growing for the projections and the export to be compared.
        stack.stop_child("executor")
        stack.stop_child("worker")
    _audit(stack, scenario, Path(scenario_path).parent, out, report, con, projections_port,
           auditor)
    report.wall_s = time.monotonic() - t0
    verdict(report)
    (out / "report.json").write_bytes(msgspec.json.format(msgspec.json.encode(report)))
    con.print(legend(report))
    if report.passed:
        con.print(f"[bold green]PASS[/]: {report.journal_inputs:,} inputs and "
                  f"{report.journal_decisions:,} decisions through Kafka in "
                  f"{report.wall_s:.0f} s ({report.horizon_s / 86400:g} scheduler days at "
                  f"x{report.time_scale:g}); the replay re-derives every decision. "
                  f"Files in {out}/")
    else:
        con.print("[bold red]FAIL[/]: " + "; ".join(report.reasons))
    return report.passed


def legend(r: DemoReport) -> str:
    """What the audit table's figures mean and what PASS checks (printed beside the verdict)."""
    from rich.markup import escape

    checks = ["the replay re-derives every decision of the exported journal",
              "the audit loaded it", "every input the demo published is in the journal",
              "work started and finished"]
    if r.projections_checked:
        checks.append("the Faust projections' windows equal the audit's")
    return escape(
        "How to read this:\n"
        "  table    the same scenario twice: 'live (Kafka)' is what the live stack decided, "
        "'simulated' the simulator on the same workloads; close columns mean the live "
        "pipeline schedules as the simulator predicts. The first day is left out (warm-up: "
        "usage windows start empty). Every row is defined in docs/audit.md, 'The report'.\n"
        "  received / owed  GPU-hours a team got over what it was owed (its share, capped "
        "hour by hour at its demand); 100% = every team got its due.\n"
        "  wait pNN  queue-wait percentiles; work that never started counts with its wait so "
        "far ('>=' marks a lower bound).\n"
        "  PASS     checks that " + "; ".join(checks) + ". It does not grade the figures.")


def verdict(r: DemoReport) -> None:
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
    if r.projections_checked and not r.projections_ok:
        r.reasons.append(f"projections: {r.projections_detail}")
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
    keychain = getattr(stack, "keychain", None)
    async with Client(s.bootstrap, s.topic_prefix, client_id="allot-demo",
                      keychain=keychain) as client:
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
        if keychain is not None:
            # Signatures are on: the scenario's actors sign with keys of their own
            # (in memory), registered first by the stack's admin.
            setup = [*_demo_principals(keychain, cluster, setup, script, zero), *setup]
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


def _demo_principals(keychain: Any, cluster: str, setup: list[Event], script: _Scripted,
                     at: int) -> list[Event]:
    """Registrations of the scenario's actors (fresh keys, in memory), signed by the admin."""
    import secrets

    from events import Role
    from identity.bootstrap import ADMIN, registration

    roles: dict[str, set[str]] = {}
    for e in setup:
        tag = tag_of(type(e))
        if e.actor != ADMIN:
            roles.setdefault(e.actor, set()).add(
                Role.OPERATOR if tag.startswith("host.") else Role.MANAGER
                if tag.startswith("budget.") else Role.ADMIN)
    for w in script.sources.workloads:
        roles.setdefault(w.user, set()).add(Role.RESEARCHER)
    roles.setdefault("host-monitor", set()).add(Role.MONITOR)  # Inputs.fault / .repair
    out: list[Event] = []
    for name in sorted(roles):
        if name == ADMIN:
            continue
        keychain.add(name, secrets.token_hex(32).encode())
        out.append(registration(keychain, cluster, name, sorted(roles[name]), at=at,
                                source="allot-demo"))
    return out


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
           con: Any, projections_port: int | None = None, auditor: Auditor | None = None) -> None:
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
    live_run = "live (Kafka)"
    outcome: AuditOutcome | None = None
    if auditor is None:
        con.print("[red]no audit was given to the demo[/]")
    else:
        try:
            outcome = auditor(out / "audit.duckdb", {live_run: (journal, report.play_wall_s),
                                                     "simulated": (sim_log, sim.wall_seconds)},
                              live_run)
            con.print(outcome.table)
            report.audit_ok = True
        except Exception as exc:  # the verdict says what failed; never a traceback
            con.print(f"[red]audit failed[/]: {exc}")
    if projections_port is not None and outcome is not None:
        _check_projections(stack, scenario.cluster.id, projections_port, outcome, report, con)
    result = verify_file(str(journal))
    report.replay_ok = result.ok
    if result.ok:
        con.print(f"replay: [green]identical[/]: {result.inputs:,} inputs re-derive all "
                  f"{result.decisions:,} recorded decisions ({result.duplicates} duplicates)")
    else:
        d = result.divergence
        report.replay_detail = f"line {d.line} {d.kind}: {d.detail}" if d else "?"
        con.print(f"replay: [red]diverged[/]: {report.replay_detail}")


# -- the projections against the audit ----------------------------------------------------------


def hop(hourly: Figures, size_s: int, step_s: int) -> Figures:
    """Hourly figures summed into hopping windows of ``size_s`` every ``step_s`` seconds."""
    from streams.usage_windows import WindowSpec

    spec = WindowSpec(name="x", size_s=size_s, step_s=step_s)
    out: Figures = {}
    for key, cells in hourly.items():
        for hour, (a, u) in cells.items():
            for s in spec.starts(hour):
                a0, u0 = out.setdefault(key, {}).get(s, (0, 0))
                out[key][s] = (a0 + a, u0 + u)
    return nonzero(out)


def nonzero(f: Figures) -> Figures:
    return {k: {s: v for s, v in c.items() if v != (0, 0)} for k, c in f.items()
            if any(v != (0, 0) for v in c.values())}


def _get(port: int, path: str) -> Any:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
        return json.loads(r.read())


def _check_projections(stack: Any, cluster: str, port: int, audit: AuditOutcome,
                       report: DemoReport, con: Any, timeout_s: float = 90.0) -> None:
    report.projections_checked = True
    s = stack.settings
    child = stack.child("projections")
    partition, last = asyncio.run(_last_offset(s.bootstrap, s.topic_prefix, cluster))
    p = str(partition)
    deadline = time.monotonic() + timeout_s
    st: dict[str, Any] = {}
    while time.monotonic() < deadline:
        if child is not None and not child.alive():
            report.projections_detail = f"the projections process died: {child.tail()}"
            return
        try:
            st = _get(port, "/status")
        except (OSError, ValueError):
            st = {}
        if st.get("offsets", {}).get(p, -1) >= last:
            break
        time.sleep(0.5)
    else:
        report.projections_detail = (f"not caught up with the journal in {timeout_s:.0f} s "
                                     f"(at {st.get('offsets', {}).get(p)}, journal ends {last})")
        return
    report.projections_lag = st.get("lag", {})
    nodes, hosts = audit.node_seconds, audit.host_seconds
    diffs = []
    for window in st.get("windows", []):
        for dim, hourly in (("node", nodes), ("host", hosts)):
            body = _get(port, f"/usage?cluster={cluster}&window={window['name']}&dim={dim}")
            got = nonzero({k: {c["start"]: (c["alloc_gpu_s"], c["unalloc_gpu_s"]) for c in v}
                           for k, v in body["usage"].items()})
            want = hourly if window["size_s"] == window["step_s"] == 3600 else \
                hop(hourly, window["size_s"], window["step_s"])
            if got != want:
                bad = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))
                diffs.append(f"{window['name']}/{dim}: {len(bad)} key(s) differ, e.g. {bad[:2]}")
    report.projections_ok = not diffs
    report.projections_detail = "; ".join(diffs)
    lag = report.projections_lag
    if diffs:
        con.print(f"projections: [red]differ from the audit[/]: {report.projections_detail}")
    else:
        con.print(f"projections: [green]equal to the audit[/] (GPU-seconds per node and host, "
                  f"every window; {st.get('records', 0):,} journal records, "
                  f"{st.get('skipped_redelivered', 0)} re-delivered and skipped; lag append -> "
                  f"applied p50 {lag.get('p50_ms')} ms, p99 {lag.get('p99_ms')} ms)")


async def _last_offset(bootstrap: str, prefix: str, cluster: str) -> tuple[int, int]:
    """``cluster``'s journal partition and the offset of its last record (read, not end_offsets)."""
    from streams.client import Client

    async with Client(bootstrap, prefix, client_id="allot-demo-end") as c:
        tail = await c.tail(cluster, start="end")
        try:
            while not tail.caught_up:
                await tail.poll(200)
            await tail.poll(300)
            return tail.partition, tail.position - 1
        finally:
            await tail.stop()


__all__ = ["AuditOutcome", "Auditor", "DemoReport", "Figures", "hop", "nonzero", "play"]
