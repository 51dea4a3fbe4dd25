"""Tests for the audit report, its rendering, the `allot audit` command line, and the docs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import duckdb
import pytest
from rich.console import Console
from test_audit_views import engine_log, faulted_host, fresh_db, two_teams  # the hand-computed logs

from audit import UnknownRun, create_views, load_log, render, report, summary
from audit.cli import main
from events import encode_lines

DOCS = Path(__file__).resolve().parent.parent / "docs"


def loaded(tmp_path: Path, **logs: list) -> duckdb.DuckDBPyConnection:
    con = fresh_db()
    for run, events in logs.items():
        path = tmp_path / run / "events.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(encode_lines(events))
        load_log(con, path)
    return con


def test_summary_of_a_hand_computed_log(tmp_path: Path) -> None:
    """Every headline figure of the two-team log matches the numbers worked out by hand."""
    con = loaded(tmp_path, allot=two_teams().events)
    s = summary(con, "allot", wall_seconds=1.5)
    assert s["sim_seconds"] == 7200
    assert s["wall_seconds"] == 1.5
    assert s["occupancy"] == pytest.approx(18.5 / 20)
    assert s["unallocated_share"] == pytest.approx(0.5 / 18.5)
    assert s["owed_received"]["total"] == pytest.approx(16 / 17)
    assert s["owed_received"]["worst"] == pytest.approx(2 / 3)
    assert s["owed_received"]["teams"] == 2
    assert s["owed_received"]["teams_at_least_95"] == 1
    assert s["owed_received"]["by_team"] == pytest.approx({"lab/a": 1.0, "lab/b": 2 / 3})
    debug = s["wait_s"]["debug"]
    assert {k: debug[k] for k in ("p50", "p90", "p99", "n", "started", "never_started")} == {
        "p50": 1800.0, "p90": 1800.0, "p99": 1800.0, "n": 1, "started": 1, "never_started": 0}
    assert debug["p90_censored"] is False and debug["p90_started"] == 1800.0
    assert s["wait_s"]["all"]["p50"] == 0.0 and s["wait_s"]["all"]["n"] == 3
    assert s["preemptions"] == {"reclaim_unallocated": 1}
    assert s["lost_gpu_hours"] == pytest.approx(0.5)
    # The single 10-GPU host is never wholly free, so whatever is free is fragmented...
    assert s["fragmentation_of_free"] == pytest.approx(1.0)
    # ... but no workload that needs a whole host (10 GPUs) ever waits: nothing is stranded.
    assert s["fragmentation"] == 0.0
    # The largest funded workload (a1, 8 GPUs) started at once.
    assert s["largest_gang_wait_s"] == 0 and s["largest_gang_wait_started_s"] == 0
    assert s["largest_gang"]["gpus"] == 8 and s["largest_gang"]["started"] == 1
    assert (s["warmup_s"], s["measured_seconds"]) == (0, 7200)


def test_summary_matches_the_views_and_cleans_up(tmp_path: Path) -> None:
    """Snapshotting changes no figure, and leaves no temporary table or view behind."""
    log, _ = engine_log()
    con = loaded(tmp_path, allot=log, other=faulted_host().events)
    s = summary(con, "allot")
    (occupancy, share) = con.execute("""
        SELECT sum(allocated_gpu_h + unallocated_gpu_h) / sum(total_gpu_h - unavailable_gpu_h),
               sum(unallocated_gpu_h) / sum(allocated_gpu_h + unallocated_gpu_h)
        FROM occupancy_by_hour WHERE run = 'allot'""").fetchone()
    assert s["occupancy"] == pytest.approx(occupancy)
    assert s["unallocated_share"] == pytest.approx(share)
    ratios = dict(con.execute("SELECT team, ratio FROM owed_received_by_team WHERE run = 'allot'").fetchall())
    assert s["owed_received"]["by_team"] == pytest.approx(ratios)
    assert con.execute("SELECT count(*) FROM duckdb_tables() WHERE temporary").fetchone() == (0,)
    assert con.execute("SELECT count(*) FROM duckdb_views() WHERE temporary AND NOT internal").fetchone() == (0,)
    # And the other run is untouched by the scoping.
    assert con.execute("SELECT count(DISTINCT run) FROM workloads").fetchone() == (2,)


def test_largest_gang_wait_counts_gangs_that_never_started(tmp_path: Path) -> None:
    """A largest gang that never started contributes its censored wait, marked as such;
    the started-only figure (the old one) has nothing to report."""
    log = faulted_host()
    log.add(log.mk.submit("gang", "lab/a", 16, 600, at=3600, hosts=2))
    log.tick(3700)
    s = summary(loaded(tmp_path, r=log.events), "r")
    assert s["largest_gang_wait_s"] == 100 and s["largest_gang_wait_censored"] is True
    assert s["largest_gang_wait_started_s"] is None
    assert s["largest_gang"] == {"gpus": 16, "hosts": 2, "workloads": 1, "started": 0,
                                 "never_started": 1, "p50_wait_s": 100.0, "p50_wait_censored": True}


def test_unknown_run_is_an_error(tmp_path: Path) -> None:
    """Asking for a run that was never loaded raises UnknownRun."""
    con = loaded(tmp_path, allot=two_teams().events)
    with pytest.raises(UnknownRun, match="no run 'baseline'"):
        summary(con, "baseline")


def test_report_and_render_put_runs_side_by_side(tmp_path: Path) -> None:
    """report() covers every run; render() has one column per run and one row per figure."""
    con = loaded(tmp_path, allot=two_teams().events, baseline=faulted_host().events)
    both = report(con)
    assert list(both) == ["allot", "baseline"]
    assert list(report(con, ["baseline"])) == ["baseline"]
    table = render(both)
    assert [c.header for c in table.columns] == ["figure", "allot", "baseline"]
    console = Console(width=120, record=True)
    console.print(table)
    text = console.export_text()
    assert "occupancy" in text and "92.5%" in text and "76.9%" in text
    assert "preemptions: host_drain" in text


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_load_report_and_sql(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """load, report --json and sql --csv work end to end on a database file."""
    log = tmp_path / "out" / "allot" / "events.jsonl"
    log.parent.mkdir(parents=True)
    log.write_bytes(encode_lines(two_teams().events))
    db = str(tmp_path / "a.duckdb")
    code, out, _ = run_cli(capsys, "audit", "load", str(log), "--db", db)
    assert code == 0 and "as run allot" in out
    code, _, _ = run_cli(capsys, "audit", "load", str(log), "--db", db, "--run", "again")
    assert code == 0
    out_json = tmp_path / "report.json"
    code, out, _ = run_cli(capsys, "audit", "report", "--db", db, "--json", str(out_json),
                           "--run", "allot", "--warmup-s", "0")
    assert code == 0 and "received / owed" in out
    assert json.loads(out_json.read_text())["allot"]["owed_received"]["total"] == pytest.approx(16 / 17)
    code, out, _ = run_cli(capsys, "audit", "sql", "SELECT team, ratio FROM owed_received_by_team "
                           "WHERE run = 'allot' ORDER BY team", "--db", db, "--csv", "--warmup-s", "0")
    assert code == 0
    assert out.splitlines() == ["team,ratio", "lab/a,1.0", "lab/b,0.6666666666666666"]
    code, out, _ = run_cli(capsys, "audit", "sql", "SELECT count(*) AS n FROM events", "--db", db)
    assert code == 0 and "n" in out


@pytest.mark.parametrize("argv, message", [
    (["audit", "load", "missing.jsonl"], "no such log file"),
    (["audit", "report"], "no audit database"),
    (["audit", "sql", "SELECT 1"], "no audit database"),
])
def test_cli_errors_are_one_line_with_status_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch, argv: list[str],
                                               message: str) -> None:
    """Missing files exit 2 with a single error line, never a traceback."""
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(capsys, *argv)
    assert code == 2
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


def test_cli_bad_sql_and_unknown_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Bad SQL and unknown runs are user errors: one line, status 2."""
    con_path = tmp_path / "a.duckdb"
    log = tmp_path / "allot" / "events.jsonl"
    log.parent.mkdir()
    log.write_bytes(encode_lines(two_teams().events))
    assert main(["audit", "load", str(log), "--db", str(con_path)]) == 0
    capsys.readouterr()
    code, _, err = run_cli(capsys, "audit", "sql", "SELEKT nonsense", "--db", str(con_path))
    assert code == 2 and err.startswith("allot audit: error: Parser Error") and err.count("\n") == 1
    code, _, err = run_cli(capsys, "audit", "report", "--run", "nope", "--db", str(con_path))
    assert code == 2 and "no run 'nope'" in err


@pytest.mark.parametrize("argv", [["audit"], ["audit", "load"], ["audit", "report"], ["audit", "sql"]])
def test_every_command_has_help(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    """--help prints a description and exits 0."""
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "usage: allot audit" in out and len(out.splitlines()) > 4


def test_every_documented_example_query_runs(tmp_path: Path) -> None:
    """Each statement in docs/audit-queries.sql executes on a small loaded log."""
    log, _ = engine_log()
    con = loaded(tmp_path, allot=log, baseline=two_teams().events)
    statements = con.extract_statements((DOCS / "audit-queries.sql").read_text())
    assert len(statements) >= 8
    for statement in statements:
        con.execute(statement.query).fetchall()


VIEWS = ("accepted_events", "policy", "workloads", "runs", "run_slots", "gpu_hours_by_node_hour",
         "entitlement_by_hour", "capacity_by_hour", "owed_received", "owed_received_by_team",
         "waits", "wait_percentiles", "preemptions", "host_faults", "fragmentation_by_hour",
         "occupancy_by_hour", "log_span", "hours", "budget_nodes", "teams", "lifecycle",
         "host_changes", "host_intervals", "cluster_hours", "team_demand_by_hour", "entitlement_changes",
         "share_changes", "workload_events", "warmup", "stranded_by_hour", "largest_gang_waits",
         "node_usage_by_hour")


def test_docs_describe_every_view_column() -> None:
    """docs/audit.md names every view and every column of it (except the events passthroughs)."""
    doc = (DOCS / "audit.md").read_text()
    con = duckdb.connect()
    create_views(con)
    documented = set(re.findall(r"`([a-z_0-9]+)`", doc))
    for view in VIEWS:
        assert view in documented, view
        if view == "accepted_events":
            continue
        for (name, *_) in con.execute(f"DESCRIBE {view}").fetchall():
            assert name in documented, f"{view}.{name}"
    for name in ("run", "seq", "t", "child_shares", "reserved_hosts", "loaded_runs", "skipped_lines",
                 "source", "cut_line", "allot_warmup_s"):
        assert name in documented


def test_a_log_spanning_no_time_has_empty_figures(tmp_path: Path) -> None:
    """A log whose events all share one instant has no hours, so its ratios are None."""
    log = two_teams()
    log.events = log.events[:5]  # the policy, budget and host, all at t = 0
    s = summary(loaded(tmp_path, r=log.events), "r")
    assert (s["sim_seconds"], s["occupancy"], s["fragmentation"], s["delivered_gpu_h"]) == (0, None, None, None)
    empty = {"total": None, "worst": None, "teams": 0, "teams_at_least_95": 0, "by_team": {}}
    assert s["owed_received"] == empty and s["owed_received_all_work"] == empty


def test_one_duration_formatter_for_the_report_the_page_and_the_plots() -> None:
    """The terminal report, the HTML page and the plots print a duration the same way
    (before, the report said "90.0 min" where the page said "1.5 h")."""
    from audit import html_report, plots
    from audit.formatting import format_duration

    assert plots.format_duration is format_duration
    summary_like = {"run": "r", "scheduler": "allot", "events": 1, "sim_seconds": 5400,
                    "wall_seconds": 95.0, "warmup_s": 0, "measured_seconds": 5400,
                    "occupancy": None, "unallocated_share": None,
                    "owed_received": {}, "owed_received_all_work": {}, "wait_s": {},
                    "preemptions": {}, "lost_gpu_hours": 0.0, "fragmentation": None,
                    "fragmentation_of_free": None, "largest_gang_wait_s": None,
                    "largest_gang_wait_censored": False, "largest_gang_wait_started_s": None,
                    "largest_gang": {"gpus": None, "workloads": 0, "started": 0}}
    console = Console(width=120, record=True)
    console.print(render({"r": summary_like}))
    text = console.export_text()
    assert "1.5 h" in text and "1.6 min" in text and "90.0 min" not in text
    assert html_report.format_metric("sim_seconds", 5400) == format_duration(5400) == "1.5 h"


def _round(rows: list) -> list:
    return [tuple(round(v, 9) if isinstance(v, float) else v for v in r) for r in rows]


def test_usage_against_entitlement_for_a_date_range(tmp_path: Path) -> None:
    """The ready answer to "usage against entitlement per node", worked out by hand."""
    con = loaded(tmp_path, r=two_teams().events)
    got = con.execute("SELECT node, hours, entitled_gpu_h, allocated_gpu_h, unallocated_gpu_h, "
                      "ratio FROM usage_against_entitlement(0, 7200)").fetchall()
    assert _round(got) == _round([
        ("lab", 2, 20.0, 18.0, 0.5, 0.9),          # 10 GPUs x 2 h; a1 16 + b1 2; u1 0.5
        ("lab/a", 2, 14.0, 16.0, 0.0, 16 / 14),    # 70 %: 14 GPU-h; a1 8 GPUs x 2 h
        ("lab/b", 2, 6.0, 2.0, 0.5, 2 / 6),        # 30 %: 6 GPU-h; b1 2 GPUs 0.5-1.5 h
    ])
    second = con.execute("SELECT node, entitled_gpu_h, allocated_gpu_h FROM "
                         "usage_against_entitlement(3600, 7200) WHERE node <> 'lab'").fetchall()
    assert _round(second) == [("lab/a", 7.0, 8.0), ("lab/b", 3.0, 1.0)]
    # Its entitlement is the owed-vs-received one, hour by hour.
    assert con.execute("SELECT sum(n.entitled_gpu_h) - sum(o.entitled_gpu_h) FROM node_usage_by_hour "
                       "AS n JOIN owed_received AS o ON o.run = n.run AND o.team = n.node "
                       "AND o.hour = n.hour").fetchone()[0] == pytest.approx(0.0)


def test_the_default_warm_up_fits_the_log_and_csv_ends_lines_with_lf(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A log shorter than its 7-day window is measured from its start, and the command says so."""
    log = two_teams()
    log.events[0] = log.mk.policy(team_depth=1, host_gpus=10, window_s=7 * 86400)
    path = tmp_path / "short" / "events.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(encode_lines(log.events))
    db = str(tmp_path / "a.duckdb")
    assert run_cli(capsys, "audit", "load", str(path), "--db", db)[0] == 0
    code, out, err = run_cli(capsys, "audit", "sql", "SELECT warmup_s, window_skipped, measured_s "
                             "FROM warmup", "--db", db, "--csv")
    assert code == 0 and out == "warmup_s,window_skipped,measured_s\n0,True,7200\n"
    assert "\r" not in out
    assert "short: the log (2 h) is no longer than its lookback window (7 d): measured from its " \
           "start" in err
    code, out, err = run_cli(capsys, "audit", "report", "--db", db)
    assert code == 0 and "measured from its start" in err
    # Chosen by the user: nothing to say.
    code, out, err = run_cli(capsys, "audit", "sql", "SELECT 1 AS x", "--db", db, "--csv",
                             "--warmup-s", "0")
    assert (out, err) == ("x\n1\n", "")
    # A log longer than its window still leaves the window out, and says how much.
    log.events[0] = log.mk.policy(team_depth=1, host_gpus=10, window_s=1800)
    path.write_bytes(encode_lines(log.events))
    assert run_cli(capsys, "audit", "load", str(path), "--db", db, "--replace")[0] == 0
    code, out, err = run_cli(capsys, "audit", "sql", "SELECT warmup_s, window_skipped FROM warmup",
                             "--db", db, "--csv")
    assert out == "warmup_s,window_skipped\n1800,False\n"
    assert "the first 1 h of its 2 h (one lookback window, to the hour) left out" in err


def test_shared_tables_give_the_summary_the_views_give(tmp_path: Path) -> None:
    """summary() reads per-report TEMP copies of the views several figures share; the
    figures are those of the views themselves (to the last bits of a float sum), on an
    engine log, a faulted host and the net figures' log, and the copies are gone after."""
    from test_audit_derived import same
    from test_audit_net_figures import net_log

    from audit.report import SHARED_VIEWS

    con = loaded(tmp_path, allot=engine_log(seed=5, n=200)[0], hosts=faulted_host().events,
                 net=net_log().events)
    for run in ("allot", "hosts", "net"):
        for warmup_s in (None, 0, 3600):
            fast = summary(con, run, warmup_s=warmup_s)
            assert con.execute("SELECT count(*) FROM duckdb_tables() WHERE temporary").fetchone() == (0,)
            plain = summary(con, run, warmup_s=warmup_s, shared=False)
            assert same(fast, plain), (run, warmup_s)
    assert set(SHARED_VIEWS) <= {r[0] for r in con.execute(
        "SELECT view_name FROM duckdb_views() WHERE NOT temporary").fetchall()}
