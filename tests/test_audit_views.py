"""Tests for the audit views: small hand-computed logs with exact expected numbers, and
internal consistency on a log produced by the real engine."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import duckdb
import pytest

from audit import create_views, load_log, summary
from events import (
    HostDrained,
    Slot,
    WorkloadPreempted,
    WorkloadStarted,
    encode_lines,
)
from events.base import Event
from events.factory import Inputs
from scheduler import Engine

H = 3600


class Log:
    """A hand-written log: inputs from the factory, decisions caused by the latest input."""

    def __init__(self) -> None:
        self.mk = Inputs()
        self.events: list[Event] = []
        self._cause = ""
        self._n = 0

    def add(self, e: Event) -> Event:
        self.events.append(e)
        if e.cause is None:
            self._cause, self._n = e.id, 0
        return e

    def _derived(self, at: int) -> dict[str, object]:
        self._n += 1
        return {"id": f"{self._cause}/{self._n - 1}", "at": at, "cause": self._cause,
                "actor": "allot.scheduler", "source": "allot.scheduler"}

    def tick(self, at: int) -> None:
        self.add(self.mk.tick(at))

    def start(self, workload: str, at: int, slots: dict[str, int], allocated: bool = True,
              protected_until: int | None = None) -> None:
        self.add(WorkloadStarted(**self._derived(at), workload=workload,
                                 placement=tuple(Slot(host=h, gpus=g) for h, g in slots.items()),
                                 allocated=allocated, protected_until=protected_until))

    def preempt(self, workload: str, at: int, reason: str, requeued: bool, by: str | None = None) -> None:
        self.add(WorkloadPreempted(**self._derived(at), workload=workload, reason=reason,  # type: ignore[arg-type]
                                   by=by, requeued=requeued))

    def drained(self, host: str, at: int) -> None:
        self.add(HostDrained(**self._derived(at), host=host))

    def con(self, tmp_path: Path, run: str = "r") -> duckdb.DuckDBPyConnection:
        path = tmp_path / run / "events.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(encode_lines(self.events))
        con = fresh_db()
        load_log(con, path)
        return con


def fresh_db() -> duckdb.DuckDBPyConnection:
    """An in-memory audit database with no warm-up: these logs are hours long, and the
    default warm-up (one 7-day lookback window) would leave nothing to measure."""
    con = duckdb.connect()
    create_views(con)
    con.execute("SET VARIABLE allot_warmup_s = 0")
    return con


def rows(con: duckdb.DuckDBPyConnection, sql: str) -> list[tuple]:
    return con.execute(sql).fetchall()


def near(table: list[tuple]) -> list[tuple]:
    """Rows with floats rounded to 9 places, to compare sums of fractions exactly."""
    return [tuple(round(v, 9) if isinstance(v, float) else v for v in row) for row in table]


def two_teams() -> Log:
    """Teams a (7 shares) and b (3) on one 10-GPU host for two hours.

    a1 (8 GPUs, funded) runs the whole time; b1 (2 GPUs, funded) waits 30 min,
    then runs until 1.5 h; u1 (1 GPU, unallocated, team b) runs 30 min and is
    preempted (not resumable) so b1 can start.
    """
    log = Log()
    mk = log.mk
    log.add(mk.policy(team_depth=1, host_gpus=10))
    log.add(mk.node("lab", managers=("admin",)))
    log.add(mk.node("lab/a", shares=7))
    log.add(mk.node("lab/b", shares=3))
    log.add(mk.host("h0", gpus=10))
    log.add(mk.submit("a1", "lab/a", 8, 3600, at=0))
    log.add(mk.submit("b1", "lab/b", 2, 600, at=0, kind="debug"))
    log.add(mk.submit("u1", "lab/b", 1, 0, at=0, kind="eval"))
    log.tick(0)
    log.start("a1", 0, {"h0": 8}, protected_until=3600)
    log.start("u1", 0, {"h0": 1}, allocated=False)
    log.tick(1800)
    log.preempt("u1", 1800, "reclaim_unallocated", requeued=False, by="b1")
    log.start("b1", 1800, {"h0": 2}, protected_until=2400)
    log.add(mk.finish("b1", at=5400))
    log.tick(5400)
    log.add(mk.finish("a1", at=7200))
    log.tick(7200)
    return log


def test_owed_received_per_hour_is_exact(tmp_path: Path) -> None:
    """Owed is the entitlement capped at demand each hour, received is capped at owed."""
    con = two_teams().con(tmp_path)
    got = rows(con, """SELECT team, hour, fraction, entitled_gpu_h, demand_gpu_h, owed_gpu_h,
                              received_gpu_h, received_capped
                       FROM owed_received ORDER BY team, hour""")
    assert near(got) == near([
        ("lab/a", 0, 0.7, 7.0, 8.0, 7.0, 8.0, 7.0),
        ("lab/a", 3600, 0.7, 7.0, 8.0, 7.0, 8.0, 7.0),
        # b1 is in demand from submission (0) to its end (5400); it runs from 1800.
        ("lab/b", 0, 0.3, 3.0, 2.0, 2.0, 1.0, 1.0),
        ("lab/b", 3600, 0.3, 3.0, 1.0, 1.0, 1.0, 1.0),
    ])


def test_owed_received_by_team_and_total(tmp_path: Path) -> None:
    """Per team the ratio is capped received over owed; the unfunded u1 never counts."""
    con = two_teams().con(tmp_path)
    got = dict(rows(con, "SELECT team, ratio FROM owed_received_by_team"))
    assert got == pytest.approx({"lab/a": 1.0, "lab/b": 2 / 3})
    (total,) = rows(con, "SELECT sum(received_capped) / sum(owed_gpu_h) FROM owed_received")[0]
    assert total == pytest.approx(16 / 17)


def test_a_team_owed_nothing_has_no_ratio(tmp_path: Path) -> None:
    """A team with entitlement but no funded demand is owed nothing, so its ratio is NULL."""
    log = two_teams()
    log.add(log.mk.node("lab/c", shares=0, at=7200))
    con = log.con(tmp_path)
    assert rows(con, "SELECT owed_gpu_h, ratio FROM owed_received_by_team WHERE team = 'lab/c'") == [
        (0.0, None)]


def test_capacity_and_occupancy_by_hour(tmp_path: Path) -> None:
    """Allocated, unallocated and idle GPU-hours add up to the hosts present."""
    con = two_teams().con(tmp_path)
    got = rows(con, """SELECT hour, c.total_gpus, o.allocated_gpu_h, o.unallocated_gpu_h, o.idle_gpu_h,
                              o.unavailable_gpu_h, o.occupancy
                       FROM occupancy_by_hour AS o JOIN capacity_by_hour AS c USING (run, hour)
                       ORDER BY hour""")
    assert near(got) == near([
        (0, 10.0, 9.0, 0.5, 0.5, 0.0, 0.95),
        (3600, 10.0, 9.0, 0.0, 1.0, 0.0, 0.9),
    ])


def faulted_host() -> Log:
    """Two 8-GPU hosts for one hour; h1 faults at 900 while a 4-GPU job runs on it.

    The job is drained at 1800 (requeued), the host is drained then and repaired at 2700.
    """
    log = Log()
    mk = log.mk
    log.add(mk.policy(team_depth=1))
    log.add(mk.node("lab", managers=("admin",)))
    log.add(mk.node("lab/a"))
    log.add(mk.host("h0"))
    log.add(mk.host("h1"))
    log.add(mk.submit("w1", "lab/a", 8, 3600, at=0))
    log.add(mk.submit("w2", "lab/a", 4, 0, at=0, resumable=True))
    log.tick(0)
    log.start("w1", 0, {"h0": 8}, protected_until=3600)
    log.start("w2", 0, {"h1": 4}, allocated=False)
    log.add(mk.fault("h1", at=900, reason="xid 79"))
    log.tick(1800)
    log.preempt("w2", 1800, "host_drain", requeued=True, by="h1")
    log.drained("h1", 1800)
    log.add(mk.repair("h1", at=2700))
    log.tick(3600)
    return log


def test_unavailable_gpu_hours_exclude_work_still_running(tmp_path: Path) -> None:
    """A faulted host is unavailable until repaired, minus the GPUs still busy on it."""
    con = faulted_host().con(tmp_path)
    got = rows(con, """SELECT total_gpu_h, allocated_gpu_h, unallocated_gpu_h, unavailable_gpu_h,
                              idle_gpu_h, occupancy FROM occupancy_by_hour""")
    # h1 faulty 900-2700: 4 free GPUs for 15 min, then 8 for 15 min.
    assert near(got) == near([(16.0, 8.0, 2.0, 3.0, 3.0, 10 / 13)])


def test_host_faults_episode(tmp_path: Path) -> None:
    """One fault episode: faulted, drained after 900 s, repaired."""
    con = faulted_host().con(tmp_path)
    assert rows(con, """SELECT host, severity, reason, faulted_at, drained_at, repaired_at, drain_s
                        FROM host_faults""") == [("h1", "degraded", "xid 79", 900, 1800, 2700, 900)]


def test_preemptions_and_lost_gpu_hours(tmp_path: Path) -> None:
    """Only victims that are not requeued lose their run: GPUs x run length."""
    log = faulted_host()
    mk = log.mk
    # A non-resumable 4-GPU job on h1 after the repair, preempted after 15 minutes.
    log.add(mk.submit("w3", "lab/a", 4, 600, at=3600))
    log.tick(3600)
    log.start("w3", 3600, {"h1": 4}, protected_until=4200)
    log.tick(4500)
    log.preempt("w3", 4500, "fair_share", requeued=False, by="w9")
    con = log.con(tmp_path)
    got = rows(con, "SELECT reason, count, requeued, gpu_hours_lost FROM preemptions ORDER BY reason")
    assert near(got) == [("fair_share", 1, 0, 1.0), ("host_drain", 1, 1, 0.0)]
    assert rows(con, """SELECT workload, stop_reason, preempt_reason, preempted_by, requeued
                        FROM runs WHERE workload = 'w3'""") == [
        ("w3", "preempted", "fair_share", "w9", False)]
    assert rows(con, "SELECT status, ended_at, preemptions, runs FROM workloads WHERE workload = 'w3'") == [
        ("preempted", 4500, 1, 1)]


def test_runs_and_workload_status_at_log_end(tmp_path: Path) -> None:
    """A requeued workload is pending again and an unfinished run is open at the log's end."""
    con = faulted_host().con(tmp_path)
    assert rows(con, """SELECT workload, start_at, stop_at, stop_reason, placement
                        FROM runs ORDER BY workload""") == [
        ("w1", 0, 3600, "open", [{"host": "h0", "gpus": 8}]),
        ("w2", 0, 1800, "preempted", [{"host": "h1", "gpus": 4}]),
    ]
    assert rows(con, "SELECT workload, status, ended_at FROM workloads ORDER BY workload") == [
        ("w1", "running", None), ("w2", "pending", None)]
    assert rows(con, "SELECT workload, requeue_waits FROM waits ORDER BY workload") == [
        ("w1", []), ("w2", [None])]


def test_wait_percentiles_are_exact(tmp_path: Path) -> None:
    """p50/p90 interpolate first waits; a workload that never started counts with its
    censored wait (end of log - submission), and a figure that depends on it says so."""
    log = Log()
    mk = log.mk
    log.add(mk.policy(team_depth=1))
    log.add(mk.node("lab", managers=("admin",)))
    log.add(mk.node("lab/a"))
    log.add(mk.host("h0"))
    waits = (0, 10, 20, 30, 1000)
    for i in range(len(waits)):
        log.add(mk.submit(f"d{i}", "lab/a", 1, 600, at=0, kind="debug"))
    for i, wait in enumerate(waits):
        log.tick(wait)
        log.start(f"d{i}", wait, {"h0": 1})
    log.add(mk.submit("never", "lab/a", 1, 600, at=1000, kind="debug"))
    log.add(mk.submit("t0", "lab/a", 1, 600, at=1000, kind="training"))
    log.tick(1100)
    log.start("t0", 1100, {"h0": 1})
    con = log.con(tmp_path)
    # "never" waited at least 1100 - 1000 = 100 s (censored).
    got = rows(con, """SELECT kind, n, started, never_started, p50, p90, p50_censored, p90_censored,
                              max, max_censored, p50_started, p90_started, max_started
                       FROM wait_percentiles ORDER BY kind""")
    assert near(got) == near([
        # all: 0 10 20 30 100 100* 1000 -> p50 = 30; p90 = 100 + 0.4 x 900, and it rests on 100*.
        ("all", 7, 6, 1, 30.0, 460.0, False, True, 1000, False, 25.0, 550.0, 1000),
        # debug: 0 10 20 30 100* 1000 -> p50 = 25 (exact); p90 = 100 + 0.5 x 900 (censored).
        ("debug", 6, 5, 1, 25.0, 550.0, False, True, 1000, False, 20.0, 30 + 0.6 * 970, 1000),
        ("training", 1, 1, 0, 100.0, 100.0, False, False, 100, False, 100.0, 100.0, 100),
    ])
    assert rows(con, "SELECT workload, wait_s, censored FROM waits WHERE workload IN ('never', 'd4') "
                     "ORDER BY workload") == [("d4", 1000, False), ("never", 100, True)]


def test_rejected_inputs_have_no_effect(tmp_path: Path) -> None:
    """Rejected submissions, budget edits and cancels are excluded from every view."""
    mk = Inputs()
    eng = Engine()
    log: list[Event] = []

    def feed(e: Event) -> list[Event]:
        out = eng.process(e)
        assert out is not None
        log.append(e)
        log.extend(out)
        return out

    feed(mk.policy(team_depth=1))
    feed(mk.node("lab", managers=("admin",)))
    feed(mk.node("lab/a", shares=1))
    feed(mk.node("lab/b", shares=1))
    feed(mk.host("h0"))
    feed(mk.submit("w1", "lab/a", 4, 600, at=0))
    assert feed(mk.submit("w2", "lab/nope", 4, 600, at=0))[0].reason == "unknown_budget"
    assert feed(mk.submit("w1", "lab/b", 2, 600, at=0))[0].reason == "duplicate_workload"
    assert feed(mk.shares("lab", {"a": 9}, at=0, actor="mallory"))[0].reason == "not_a_manager"
    feed(mk.tick(0))
    assert feed(mk.cancel("w1", actor="mallory", at=0))[0].reason == "not_authorised"
    feed(mk.tick(3600))
    path = tmp_path / "engine" / "events.jsonl"
    path.parent.mkdir()
    path.write_bytes(encode_lines(log))
    con = fresh_db()
    load_log(con, path)
    assert rows(con, "SELECT workload, budget, gpus, status FROM workloads") == [
        ("w1", "lab/a", 4, "running")]
    assert rows(con, "SELECT count(*) FROM accepted_events WHERE type = 'workload.submitted'") == [(1,)]
    assert dict(rows(con, "SELECT node, fraction FROM entitlement_by_hour WHERE node <> 'lab'")) == {
        "lab/a": 0.5, "lab/b": 0.5}
    assert rows(con, "SELECT stop_reason FROM runs") == [("open",)]


def test_entitlement_after_shares_set(tmp_path: Path) -> None:
    """A shares_set changes only the listed children; fractions multiply down the path."""
    log = Log()
    mk = log.mk
    log.add(mk.policy(team_depth=1))
    log.add(mk.node("lab", managers=("admin",)))
    log.add(mk.node("lab/a", shares=1))
    log.add(mk.node("lab/b", shares=1))
    log.add(mk.node("lab/a/x", shares=1))
    log.add(mk.node("lab/a/y", shares=3))
    log.add(mk.shares("lab", {"a": 3}, at=1800))
    log.tick(7200)
    con = log.con(tmp_path)
    got = dict(((n, h), f) for n, h, f in rows(con, "SELECT node, hour, fraction FROM entitlement_by_hour"))
    # a: 1/2 for the first half hour, then 3/4.
    assert got[("lab/a", 0)] == pytest.approx(0.5 * 0.5 + 0.75 * 0.5)
    assert got[("lab/a", 3600)] == pytest.approx(0.75)
    assert got[("lab/b", 3600)] == pytest.approx(0.25)
    assert got[("lab/a/x", 3600)] == pytest.approx(0.75 * 0.25)
    assert got[("lab/a/y", 0)] == pytest.approx((0.5 * 0.5 + 0.75 * 0.5) * 0.75)
    assert got[("lab", 0)] == 1.0


def test_fragmentation_on_a_tiny_cluster(tmp_path: Path) -> None:
    """Free GPUs on partly-free hosts over all free GPUs, weighted by time."""
    log = Log()
    mk = log.mk
    log.add(mk.policy(team_depth=1))
    log.add(mk.node("lab", managers=("admin",)))
    log.add(mk.node("lab/a"))
    log.add(mk.host("h0"))
    log.add(mk.host("h1"))
    log.add(mk.submit("small", "lab/a", 3, 600, at=0))
    log.add(mk.submit("big", "lab/a", 8, 600, at=0))
    log.tick(0)
    log.start("small", 0, {"h0": 3})
    log.tick(1800)
    log.start("big", 1800, {"h1": 8})
    log.tick(3600)
    log.add(mk.finish("small", at=3600))
    log.add(mk.finish("big", at=3600))
    log.tick(5400)
    con = log.con(tmp_path)
    got = rows(con, "SELECT hour, free_gpu_h, fragmented_gpu_h, fragmentation FROM fragmentation_by_hour ORDER BY hour")
    # Hour 0: h0 has 5 free all hour (partial); h1 has 8 free for half an hour (whole host).
    # Hour 1 (half an hour): both hosts wholly free, so nothing is fragmented.
    assert near(got) == near([(0, 9.0, 5.0, 5 / 9), (3600, 8.0, 0.0, 0.0)])


def test_gpu_hours_by_node_hour_rolls_up_to_ancestors(tmp_path: Path) -> None:
    """Every budget node gets its own and its descendants' GPU-hours, split by hour."""
    con = two_teams().con(tmp_path)
    got = rows(con, """SELECT node, hour, allocated_gpu_h, unallocated_gpu_h
                       FROM gpu_hours_by_node_hour ORDER BY node, hour""")
    assert near(got) == [
        ("lab", 0, 9.0, 0.5), ("lab", 3600, 9.0, 0.0),
        ("lab/a", 0, 8.0, 0.0), ("lab/a", 3600, 8.0, 0.0),
        ("lab/b", 0, 1.0, 0.5), ("lab/b", 3600, 1.0, 0.0),
    ]


def test_late_inputs_take_effect_at_the_scheduler_clock(tmp_path: Path) -> None:
    """An input whose at is behind the clock counts from the clock (t), never backwards."""
    log = faulted_host()
    log.add(log.mk.finish("w1", at=100))  # arrives after the tick at 3600
    log.tick(4000)
    con = log.con(tmp_path)
    assert rows(con, "SELECT stop_at, stop_reason FROM runs WHERE workload = 'w1'") == [
        (3600, "succeeded")]


def test_views_keep_runs_apart(tmp_path: Path) -> None:
    """Two runs in one database never mix: each view partitions by run."""
    con = two_teams().con(tmp_path, run="first")
    path = tmp_path / "second" / "events.jsonl"
    path.parent.mkdir()
    path.write_bytes(encode_lines(faulted_host().events))
    load_log(con, path)
    got = dict(rows(con, "SELECT run, sum(allocated_gpu_h + unallocated_gpu_h) FROM occupancy_by_hour GROUP BY run"))
    assert got == pytest.approx({"first": 18.5, "second": 10.0})


def engine_log(seed: int = 3, n: int = 60) -> tuple[list[Event], Engine]:
    """A busy two-team cluster driven by the real engine, with faults and cancels."""
    rng = random.Random(seed)
    mk = Inputs()
    eng = Engine()
    log: list[Event] = []

    def feed(e: Event) -> None:
        out = eng.process(e)
        if out is not None:
            log.append(e)
            log.extend(out)

    feed(mk.policy(team_depth=1))
    feed(mk.node("lab", managers=("admin",)))
    feed(mk.node("lab/a", shares=7))
    feed(mk.node("lab/b", shares=3))
    feed(mk.node("lab/a/x", shares=1))
    feed(mk.node("lab/a/y", shares=1))
    for h in range(4):
        feed(mk.host(f"h{h}"))
    leaves = ["lab/a/x", "lab/a/y", "lab/b"]
    t = 0
    for i in range(n):
        t += rng.randint(0, 900)
        if t > eng.state.now:  # only ticks move the scheduler's clock
            feed(mk.tick(t, cycle=False))
        hosts, per = rng.choice([(1, 1), (1, 2), (1, 4), (1, 8), (2, 8)])
        feed(mk.submit(f"w{i}", rng.choice(leaves), hosts * per, rng.choice([0, 600, 3600]), at=t,
                       hosts=hosts, resumable=rng.random() < 0.5, kind=rng.choice(["debug", "training"])))
        feed(mk.tick(t))
        running = sorted(eng.state.workloads.running)
        if running and rng.random() < 0.5:
            feed(mk.finish(rng.choice(running), at=t))
        if i == n // 2:
            feed(mk.fault("h1", at=t))
        if i == n // 2 + 5:
            feed(mk.repair("h1", at=t))
        if i % 17 == 0:
            feed(mk.cancel(f"w{i}", actor="admin", at=t))
        feed(mk.tick(t + 60))
    return log, eng


def test_engine_log_is_internally_consistent(tmp_path: Path) -> None:
    """Leaf GPU-hours, capacity, runs and workload states agree with each other and the engine."""
    log, eng = engine_log()
    path = tmp_path / "allot" / "events.jsonl"
    path.parent.mkdir()
    path.write_bytes(encode_lines(log))
    con = fresh_db()
    load_log(con, path)
    (from_runs,) = rows(con, "SELECT sum(gpus * duration_s) / 3600.0 FROM runs")[0]
    (leaves,) = rows(con, """SELECT sum(allocated_gpu_h + unallocated_gpu_h) FROM gpu_hours_by_node_hour
                             WHERE node IN (SELECT budget FROM workloads)""")[0]
    (root,) = rows(con, "SELECT sum(allocated_gpu_h + unallocated_gpu_h) FROM gpu_hours_by_node_hour WHERE node = 'lab'")[0]
    (capacity,) = rows(con, "SELECT sum(allocated_gpu_h + unallocated_gpu_h) FROM capacity_by_hour")[0]
    (slots,) = rows(con, "SELECT sum(gpus * (stop_at - start_at)) / 3600.0 FROM run_slots")[0]
    assert from_runs > 0
    assert leaves == pytest.approx(from_runs)
    assert root == pytest.approx(from_runs)
    assert capacity == pytest.approx(from_runs)
    assert slots == pytest.approx(from_runs)
    # Idle, busy and unavailable never exceed the hosts present, hour by hour.
    assert rows(con, """SELECT count(*) FROM capacity_by_hour
                        WHERE idle_gpu_h < -1e-9 OR unavailable_gpu_h < -1e-9""") == [(0,)]
    # The audit's picture of every workload is the engine's.
    states = {w.id: (w.status, w.preemptions) for w in eng.state.workloads.all.values()}
    audit = {w: (s, p) for w, s, p in rows(con, "SELECT workload, status, preemptions FROM workloads")}
    assert audit == states
    # Received never exceeds demand, and owed never exceeds either side.
    assert rows(con, """SELECT count(*) FROM owed_received
                        WHERE received_gpu_h > demand_gpu_h + 1e-9
                           OR owed_gpu_h > entitled_gpu_h + 1e-9
                           OR owed_gpu_h > demand_gpu_h + 1e-9""") == [(0,)]
    kinds = Counter(type(e).__struct_config__.tag for e in log)
    assert rows(con, "SELECT count(*) FROM runs") == [(kinds["workload.started"],)]
    assert rows(con, "SELECT sum(count) FROM preemptions") == [(kinds["workload.preempted"],)]


# -- metrics that count the starved (issue 9, item 4) ---------------------------------------


def gang_behind_a_small_job() -> Log:
    """Two 8-GPU hosts for two hours. small (3 GPUs) runs on h0 until 1800 while a 16-GPU
    gang waits for both hosts; the gang then runs until 3600; small2 (2 GPUs) runs on h0
    for the second hour with nothing waiting."""
    log = Log()
    mk = log.mk
    log.add(mk.policy(team_depth=1))
    log.add(mk.node("lab", managers=("admin",)))
    log.add(mk.node("lab/a"))
    log.add(mk.host("h0"))
    log.add(mk.host("h1"))
    log.add(mk.submit("small", "lab/a", 3, 600, at=0))
    log.add(mk.submit("gang", "lab/a", 16, 600, at=0, hosts=2))
    log.tick(0)
    log.start("small", 0, {"h0": 3})
    log.add(mk.finish("small", at=1800))
    log.tick(1800)
    log.start("gang", 1800, {"h0": 8, "h1": 8})
    log.add(mk.finish("gang", at=3600))
    log.add(mk.submit("small2", "lab/a", 2, 600, at=3600))
    log.tick(3600)
    log.start("small2", 3600, {"h0": 2})
    log.tick(7200)
    return log


def test_stranded_gpus_over_capacity_are_exact(tmp_path: Path) -> None:
    """Free GPUs on a partly free healthy host count as stranded only while a whole-host
    workload waits; wholly free hosts never do. The old figure is kept beside it."""
    con = gang_behind_a_small_job().con(tmp_path)
    got = rows(con, """SELECT hour, capacity_gpu_h, stranded_gpu_h, stranded_share
                       FROM stranded_by_hour ORDER BY hour""")
    # Hour 0: h0 has 5 free GPUs for 30 min while the gang waits (h1 is wholly free: not
    # stranded). Hour 1: h0 has 6 free GPUs all hour, but nothing that needs a host waits.
    assert near(got) == near([(0, 16.0, 2.5, 2.5 / 16), (3600, 16.0, 0.0, 0.0)])
    old = rows(con, "SELECT hour, fragmented_gpu_h, fragmentation FROM fragmentation_by_hour ORDER BY hour")
    assert near(old) == near([(0, 2.5, 2.5 / 6.5), (3600, 6.0, 6 / 14)])  # h1 free all hour 1
    s = summary(con, "r")
    assert s["fragmentation"] == pytest.approx(2.5 / 32)
    assert s["fragmentation_of_free"] == pytest.approx((2.5 / 6.5 + 6 / 14) / 2)


def test_owed_received_over_all_work_counts_unallocated_work(tmp_path: Path) -> None:
    """Beside the funded-only figure, owed and received over all of a team's work: team b's
    unallocated u1 (1 GPU, running 0-1800, then preempted for good) counts there."""
    con = two_teams().con(tmp_path)
    got = rows(con, """SELECT team, hour, demand_all_gpu_h, owed_all_gpu_h, received_all_gpu_h,
                              received_all_capped FROM owed_received ORDER BY team, hour""")
    assert near(got) == near([
        ("lab/a", 0, 8.0, 7.0, 8.0, 7.0), ("lab/a", 3600, 8.0, 7.0, 8.0, 7.0),
        # b1 in demand all along, running from 1800; u1 in demand and running 0-1800.
        ("lab/b", 0, 2.5, 2.5, 1.5, 1.5), ("lab/b", 3600, 1.0, 1.0, 1.0, 1.0),
    ])
    assert dict(rows(con, "SELECT team, ratio_all FROM owed_received_by_team")) == pytest.approx(
        {"lab/a": 1.0, "lab/b": 2.5 / 3.5})
    s = summary(con, "r")
    assert s["owed_received"]["total"] == pytest.approx(16 / 17)  # funded work, unchanged
    assert s["owed_received_all_work"]["total"] == pytest.approx(16.5 / 17.5)
    assert s["owed_received_all_work"]["worst"] == pytest.approx(2.5 / 3.5)


def test_a_warm_up_is_left_out_of_every_figure(tmp_path: Path) -> None:
    """With a one-hour warm-up, the two-team log is measured over its second hour only:
    occupancy, owed vs received, waits and preemptions all leave the first hour out."""
    con = two_teams().con(tmp_path)
    s = summary(con, "r", warmup_s=3600)
    assert (s["warmup_s"], s["measured_from"], s["measured_seconds"]) == (3600, 3600, 3600)
    assert s["occupancy"] == pytest.approx(0.9)  # 9 of 10 GPUs busy in hour 1
    assert s["owed_received"]["total"] == pytest.approx(1.0)  # a: 7 of 7, b: 1 of 1
    assert s["wait_s"]["all"]["n"] == 0  # every workload was submitted at 0
    assert s["preemptions"] == {} and s["lost_gpu_hours"] == 0  # u1 was preempted at 1800
    # The connection's own setting (none) is back afterwards.
    assert summary(con, "r")["warmup_s"] == 0
    assert rows(con, "SELECT hour, in_warmup FROM capacity_by_hour ORDER BY hour") == [
        (0, False), (3600, False)]


def test_the_default_warm_up_is_the_lookback_window(tmp_path: Path) -> None:
    """Without a setting, the warm-up is the policy's window_s, rounded up to a whole hour."""
    log = two_teams()
    log.events[0] = log.mk.policy(team_depth=1, host_gpus=10, window_s=1800)
    path = tmp_path / "r" / "events.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(encode_lines(log.events))
    con = duckdb.connect()
    create_views(con)
    load_log(con, path)
    assert rows(con, "SELECT warmup_s, measured_from, measured_s FROM warmup") == [(1800, 3600, 3600)]
    assert rows(con, "SELECT hour, in_warmup FROM occupancy_by_hour ORDER BY hour") == [
        (0, True), (3600, False)]
    assert summary(con, "r")["occupancy"] == pytest.approx(0.9)
