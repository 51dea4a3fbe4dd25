"""The derived tables: load_log stores per run what the heavy views compute, and the
stored rows are exactly what the plain definitions (audit/sql/plain.sql) compute
straight from the events, on engine logs and on logs the engine would never write."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import duckdb
import pytest
from test_audit_net_figures import net_log
from test_audit_views import (
    Log,
    engine_log,
    faulted_host,
    fresh_db,
    gang_behind_a_small_job,
    two_teams,
)

from audit import create_views, load_log, open_db, summary
from audit.load import (
    DERIVED,
    create_plain_views,
    drop_plain_views,
    refresh_derived,
    stale_runs,
)
from audit.views import PLAIN_VIEWS, read_sql
from events import (
    HostDrained,
    InputRejected,
    WorkloadFinished,
    WorkloadRejected,
    encode_lines,
)
from events.base import Event

# Each view that reads a derived table, and a total order of its rows.
VIEWS: dict[str, str] = {
    "workloads": "run, workload",
    "runs": "run, start_seq",
    "waits": "run, workload",
    "host_intervals": "run, host, start_t",
    "cluster_hours": "run, hour",
    "team_demand_by_hour": "run, team, hour",
    "unproductive_by_hour": "run, team, hour",
    "requeue_waits": "run, workload, preempted_at",
}
# Views computed on top of them, compared too.
DOWNSTREAM: dict[str, str] = {
    "run_slots": "run, workload, host, start_at",
    "preemptions": "run, reason",
    "wait_percentiles": "run, kind",
    "capacity_by_hour": "run, hour",
    "fragmentation_by_hour": "run, hour",
    "gpu_hours_by_node_hour": "run, node, hour",
    "owed_received": "run, team, hour",
    "owed_received_by_team": "run, team",
    "teams": "run, team",
    "host_changes": "run, host, t, d_present, d_fault, d_alloc, d_unalloc",
    "stranded_by_hour": "run, hour",
    "largest_gang_waits": "run",
    "occupancy_by_hour": "run, hour",
    "unproductive_runs": "run, workload, from_t, what",
    "owed_received_net": "run, team, hour",
    "owed_received_net_by_team": "run, team",
    "requeue_wait_percentiles": "run, kind",
}


def write_log(tmp_path: Path, run: str, events: list[Event]) -> Path:
    path = tmp_path / run / "events.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(encode_lines(events))
    return path


def loaded(tmp_path: Path, **logs: list[Event]) -> duckdb.DuckDBPyConnection:
    con = fresh_db()
    for run, events in logs.items():
        load_log(con, write_log(tmp_path, run, events))
    return con


def snapshot(con: duckdb.DuckDBPyConnection, view: str, order: str) -> list[tuple]:
    return con.execute(f"SELECT * FROM {view} ORDER BY {order}").fetchall()


def same(a: Any, b: Any) -> bool:
    """Equal, except that floats may differ in the last bits (sums in another order)."""
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b) and type(a) is type(b)


def assert_derived_equals_plain(con: duckdb.DuckDBPyConnection, downstream: bool = True) -> None:
    """Every derived view, every view built on them, and every summary, both ways.

    ``downstream=False`` leaves out the views built on the derived ones: enough to show
    that a run was derived again rightly (those views are functions of the derived rows,
    compared on every kind of log by the first test).
    """
    runs = [r for (r,) in con.execute("SELECT DISTINCT run FROM events ORDER BY run").fetchall()]
    views = {**VIEWS, **DOWNSTREAM} if downstream else dict(VIEWS)
    fast = {v: snapshot(con, v, o) for v, o in views.items()}
    fast_summaries = {r: summary(con, r) for r in runs}
    # The plain definitions, each kept as a TEMP table in the order they are written (each
    # reads only the events and the ones before it): the same rows as the TEMP views of
    # create_plain_views, and DuckDB then plans every view built on them over tables, not
    # over the whole tree of plain views (0.1-0.7 s a view, whatever the log's length).
    con.execute(read_sql("plain.sql").replace("CREATE OR REPLACE TEMP VIEW",
                                              "CREATE OR REPLACE TEMP TABLE"))
    try:
        materialized = {v for (v,) in con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE temporary").fetchall()}
        assert materialized == set(PLAIN_VIEWS)
        plain = {v: snapshot(con, v, o) for v, o in views.items()}
        plain_summaries = {r: summary(con, r) for r in runs}
    finally:
        for view in PLAIN_VIEWS:
            con.execute(f"DROP TABLE IF EXISTS temp.main.{view}")
    for view in views:
        assert same(fast[view], plain[view]), view
    assert same(fast_summaries, plain_summaries)
    # And they are gone again: the views read the derived tables.
    assert con.execute("SELECT count(*) FROM duckdb_tables() WHERE temporary").fetchone() == (0,)


def odd_log() -> Log:
    """Lifecycles the engine never writes but the views still define.

    A re-sent identical submission, two starts in a row, a lifecycle of a workload
    never submitted, a run that ends with a second finish, a budget shallower than
    the team depth, a host removed during a fault and re-added bigger, a late input,
    several changes of one host at one instant, and a rejected cancel.
    """
    log = Log()
    mk = log.mk
    log.add(mk.policy(team_depth=2, host_gpus=4))
    log.add(mk.node("lab", managers=("admin",)))
    log.add(mk.node("lab/a", shares=2))
    log.add(mk.node("lab/a/x", shares=1))
    log.add(mk.node("lab/b", shares=1))
    log.add(mk.host("h0", gpus=4))
    log.add(mk.host("h1", gpus=4))
    log.add(mk.host("h2"))
    log.add(mk.submit("w1", "lab/a/x", 2, 600, at=0))
    log.add(mk.submit("w2", "lab/b", 4, 0, at=0, kind="eval"))
    log.add(mk.submit("w3", "lab", 1, 600, at=0, kind="debug"))  # shallower than the team depth
    again = mk.submit("w1", "lab/a/x", 2, 600, at=10)  # re-sent: ignored, not rejected
    log.add(again)
    bad = mk.submit("w5", "lab/nope", 1, 600, at=10)
    log.add(bad)
    log.add(WorkloadRejected(id=f"{bad.id}/r", at=10, cause=bad.id, workload="w5",
                             reason="unknown_budget"))
    log.tick(0)
    log.start("w1", 0, {"h0": 2}, protected_until=600)
    log.tick(100)
    log.start("w1", 100, {"h1": 2})  # a second start without a stop
    log.tick(200)
    log.preempt("w1", 200, "fair_share", requeued=True, by="w2")
    log.start("w2", 200, {"h0": 2, "h1": 2}, allocated=False)
    log.start("ghost", 200, {"h2": 1})  # never submitted
    log.add(mk.fault("h1", severity="failed", at=300, reason="xid 48"))
    log.add(mk.fault("h1", at=350, reason="xid 79"))
    log.tick(400)
    log.preempt("w2", 400, "host_failure", requeued=False, by="h1")
    log.add(HostDrained(id="drain-h1", at=400, cause=None, host="h1"))
    log.add(WorkloadFinished(id="ghost-done", at=400, workload="ghost"))
    log.add(mk.remove_host("h1", at=500))
    log.add(mk.host("h1", gpus=8, at=600))
    log.tick(600)
    log.start("w1", 600, {"h1": 8}, protected_until=1200)
    log.add(mk.submit("w4", "lab/a/x", 4, 600, at=50))  # late: takes effect at the clock (600)
    log.add(mk.finish("w1", at=700, outcome="failed"))
    log.add(mk.cancel("w3", actor="admin", at=700))
    log.add(mk.finish("w1", at=800))  # a second finish
    log.tick(900)
    log.start("w4", 900, {"h0": 4})
    cancel = mk.cancel("w4", actor="mallory", at=950)
    log.add(cancel)
    log.add(InputRejected(id=f"{cancel.id}/r", at=950, cause=cancel.id, reason="not_authorised"))
    log.add(mk.repair("h1", at=950))
    log.tick(3 * 3600 + 120)
    return log


def test_derived_views_equal_the_plain_views_on_every_kind_of_log(tmp_path: Path) -> None:
    """On a busy engine log (faults, cancels, preemptions), the net-figures log (idle holds,
    lost tails, restarts, requeue waits) and the hand-written ones (odd lifecycles,
    rejections, late inputs, host changes), both paths agree row for row, run by run.

    Every log is its own run of one database: the views never mix runs, and a view's cost
    here is DuckDB planning it (about 0.1-0.7 s a view, whatever the log's length), so one
    comparison over six runs costs what one over a single run does.
    """
    con = loaded(tmp_path, allot=engine_log(seed=5, n=200)[0], net=net_log().events,
                 odd=odd_log().events, two=two_teams().events, faulted=faulted_host().events,
                 gang=gang_behind_a_small_job().events)
    assert con.execute("SELECT count(*) FROM runs WHERE run = 'allot'").fetchone()[0] > 100
    assert con.execute("SELECT count(DISTINCT what) FROM unproductive_runs WHERE run = 'net'"
                       ).fetchone() == (4,)
    assert con.execute("SELECT count(*) FROM requeue_waits WHERE run = 'allot'").fetchone()[0] > 0
    for run in ("odd", "two", "faulted", "gang"):
        assert con.execute("SELECT count(*) FROM workloads WHERE run = ?", [run]).fetchone()[0] > 0, run
    assert_derived_equals_plain(con)


def test_summary_is_the_same_from_the_derived_tables_and_the_plain_views(tmp_path: Path) -> None:
    """summary() from the stored tables equals summary() computed from the events alone."""
    log, _ = engine_log(seed=3, n=300)
    con = loaded(tmp_path, allot=log)
    fast = summary(con, "allot")
    create_plain_views(con)
    plain = summary(con, "allot")
    drop_plain_views(con)
    assert fast["preemptions"] and fast["wait_s"]["all"]["n"] == 300
    assert same(fast, plain)


def test_odd_log_reads_as_the_plain_views_say(tmp_path: Path) -> None:
    """A few of the odd cases, spelled out: the duplicate counts once, the ghost has no runs,
    and the last lifecycle event (the second finish) gives the status."""
    con = loaded(tmp_path, r=odd_log().events)
    assert con.execute("SELECT workload, status, runs, preemptions FROM workloads ORDER BY workload"
                       ).fetchall() == [
        ("w1", "succeeded", 3, 1), ("w2", "preempted", 1, 1), ("w3", "cancelled", 0, 0),
        ("w4", "running", 1, 0)]
    assert con.execute("SELECT count(*) FROM runs WHERE workload = 'ghost'").fetchone() == (0,)
    # w1's first start (at the clock, 10, after the re-sent submission) is followed by
    # another start: that run stops there, as 'open'.
    assert con.execute("SELECT start_at, stop_at, stop_reason FROM runs WHERE workload = 'w1' "
                       "ORDER BY start_at").fetchall() == [
        (10, 100, "open"), (100, 200, "preempted"), (600, 700, "failed")]
    assert con.execute("SELECT team FROM workloads WHERE workload = 'w3'").fetchone() == ("lab",)


def test_each_run_has_its_own_derived_rows(tmp_path: Path) -> None:
    """Loading a run again replaces only its derived rows; other runs keep theirs."""
    con = loaded(tmp_path, a=two_teams().events, b=faulted_host().events)
    before_b = {v: snapshot(con, f"{v} WHERE run = 'b'", o) for v, o in VIEWS.items()}
    load_log(con, write_log(tmp_path, "a", faulted_host().events), replace=True)
    for view, order in VIEWS.items():
        assert snapshot(con, f"{view} WHERE run = 'b'", order) == before_b[view]
        # Run a is now the same log as b, so its rows are b's (but for the run name).
        a_rows = [row[1:] for row in snapshot(con, f"{view} WHERE run = 'a'", order)]
        assert a_rows == [row[1:] for row in before_b[view]], view
    assert con.execute(f"SELECT run, events FROM {'derived_status'} ORDER BY run").fetchall() == [
        ("a", len(faulted_host().events)), ("b", len(faulted_host().events))]


def test_a_failed_load_leaves_the_derived_rows_alone(tmp_path: Path) -> None:
    """A bad file changes neither the events nor the derived tables."""
    con = loaded(tmp_path, r=two_teams().events)
    before = {v: snapshot(con, v, o) for v, o in VIEWS.items()}
    bad = tmp_path / "r" / "bad.jsonl"
    bad.write_bytes(b'{"type": "clock.ticked", "id": "a", "at": 1}\n{oops\n'
                    b'{"type": "clock.ticked", "id": "b", "at": 2}\n')
    with pytest.raises(Exception, match="line 2 is not a valid event"):
        load_log(con, bad, "r", replace=True)
    assert {v: snapshot(con, v, o) for v, o in VIEWS.items()} == before
    assert stale_runs(con) == []


def test_events_edited_by_hand_are_derived_again(tmp_path: Path) -> None:
    """If events change other than through load_log, the run goes stale and is derived again."""
    con = loaded(tmp_path, r=two_teams().events)
    assert stale_runs(con) == []
    # Drop the last finish (a1 at 7200) and its tick: a1 is then still running.
    con.execute("DELETE FROM events WHERE run = 'r' AND seq >= (SELECT max(seq) - 1 FROM events)")
    assert stale_runs(con) == ["r"]
    s = summary(con, "r")  # summary derives the stale run first
    assert stale_runs(con) == []
    assert con.execute("SELECT status FROM workloads WHERE workload = 'a1'").fetchone() == ("running",)
    assert s["sim_seconds"] == 5400
    assert_derived_equals_plain(con, downstream=False)
    # A run deleted by hand is forgotten by the next refresh.
    con.execute("DELETE FROM events")
    refresh_derived(con)
    for view in DERIVED:
        assert con.execute(f"SELECT count(*) FROM derived_{view}").fetchone() == (0,)


def test_a_database_without_derived_tables_is_brought_up_to_date(tmp_path: Path) -> None:
    """A database written before the derived tables existed gets them when opened."""
    db = tmp_path / "old.duckdb"
    con = open_db(db)
    load_log(con, write_log(tmp_path, "allot", two_teams().events))
    expected = {v: snapshot(con, v, o) for v, o in VIEWS.items()}
    # Make it look old: no derived tables, no status.
    for view in DERIVED:
        con.execute(f"DROP VIEW IF EXISTS {view}")
        con.execute(f"DROP TABLE derived_{view}")
    con.execute("DROP TABLE derived_status")
    con.close()
    con = open_db(db, create=False)
    assert {v: snapshot(con, v, o) for v, o in VIEWS.items()} == expected
    assert stale_runs(con) == []
    con.close()
    # And the plain duckdb CLI reads it: tables and views only.
    plain = duckdb.connect(str(db), read_only=True)
    assert plain.execute("SELECT count(*) FROM runs").fetchone() == (3,)
    kinds = {t for (t,) in plain.execute(
        "SELECT DISTINCT table_type FROM information_schema.tables").fetchall()}
    assert kinds == {"BASE TABLE", "VIEW"}


def test_clock_and_order_on_a_log_of_several_row_groups(tmp_path: Path) -> None:
    """seq is the line number and t the running max of at, also when the insert runs in parallel."""
    import random

    from events.factory import Inputs

    rng = random.Random(7)
    mk = Inputs()
    ats, at = [], 0
    for _ in range(300_000):
        # Mostly forward; one line in fifty arrives late, up to ten minutes behind.
        at = at + rng.randint(0, 5) if rng.random() > 0.02 else max(0, at - rng.randint(1, 600))
        ats.append(at)
    events = [mk.tick(a) for a in ats]
    con = duckdb.connect()
    create_views(con)
    assert load_log(con, write_log(tmp_path, "big", events)) == len(events)
    clock, expected = 0, []
    for seq, (e, a) in enumerate(zip(events, ats, strict=True), 1):
        clock = max(clock, a)
        expected.append((seq, e.id, a, clock))
    assert con.execute('SELECT seq, id, "at", t FROM events ORDER BY seq').fetchall() == expected


def test_a_run_whose_derivation_failed_is_derived_again(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Events and derived rows are two steps: if the second fails, the run is stale, not wrong."""
    import audit.views

    con = loaded(tmp_path, r=two_teams().events)
    real = audit.views.derive_run_rows

    def broken(con: duckdb.DuckDBPyConnection, run: str) -> None:
        raise RuntimeError("derivation failed")

    monkeypatch.setattr(audit.views, "derive_run_rows", broken)
    with pytest.raises(RuntimeError, match="derivation failed"):
        load_log(con, write_log(tmp_path, "r", faulted_host().events), replace=True)
    # The new events are in, the old derived rows are gone, and the run is stale.
    assert con.execute("SELECT count(*) FROM events").fetchone() == (len(faulted_host().events),)
    assert con.execute("SELECT count(*) FROM workloads").fetchone() == (0,)
    assert stale_runs(con) == ["r"]
    monkeypatch.setattr(audit.views, "derive_run_rows", real)
    assert summary(con, "r")["preemptions"] == {"host_drain": 1}
    assert_derived_equals_plain(con, downstream=False)


def test_summary_on_a_read_only_database_with_stale_or_no_derived_rows(tmp_path: Path) -> None:
    """Read-only, a stale run is summarised from the plain views; an old database too."""
    db = tmp_path / "ro.duckdb"
    con = open_db(db)
    load_log(con, write_log(tmp_path, "r", two_teams().events))
    con.close()
    # Events edited by a plain connection, which does not derive anything.
    raw = duckdb.connect(str(db))
    raw.execute("DELETE FROM events WHERE seq >= (SELECT max(seq) - 1 FROM events)")
    raw.close()
    ro = duckdb.connect(str(db), read_only=True)
    assert stale_runs(ro) == ["r"]
    got = summary(ro, "r")
    assert got["sim_seconds"] == 5400
    ro.close()
    con = open_db(db)  # derives the stale run
    assert same(summary(con, "r"), got)
    # A database from before the derived tables: its views computed from the events.
    for view in ("waits", "runs", "workloads", "team_demand_by_hour", "cluster_hours",
                 "host_intervals"):
        con.execute(f"DROP VIEW {view}")
    for view in DERIVED:
        con.execute(f"DROP TABLE derived_{view}")
    con.execute("DROP TABLE derived_status")
    from audit.views import read_sql

    con.execute(read_sql("plain.sql").replace("CREATE OR REPLACE TEMP VIEW", "CREATE OR REPLACE VIEW"))
    con.close()
    ro = duckdb.connect(str(db), read_only=True)
    assert same(summary(ro, "r"), got)
