"""Tests for the net figures (issue 22, "Honesty"): received net of idle holds and of
killed work, waits of requeued runs, and work refused as too large, on one hand-built
log whose every figure is worked out by hand below."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pytest
from test_audit_views import Log, fresh_db, near, rows

from allot.seeds import ROWS
from audit import create_views, load_log, summary
from events import WorkloadRejected, encode_lines
from simulator.seeds import flatten

H = 3600
DOCS = Path(__file__).resolve().parent.parent / "docs"


def net_log() -> Log:
    """Two teams (1 share each) on two 8-GPU hosts for two hours: 8 GPUs entitled each.

    Team a: a squatter's hold (kind squat, 2 GPUs, funded) and a1 (2 GPUs), both
    running 0-2 h, and a2 (2 GPUs), waiting all the time (the cluster is full):
    owed 6 GPU-h an hour, received 4, half of it idle.
    Team b:
      * b1 (4 GPUs, checkpoint every 1,000 s, restart 300 s) runs 0-2,500 s, is
        preempted with requeue (loses 2,500 % 1,000 = 500 s), restarts at 3,100 s
        (a 600 s requeue wait) and spends its first 300 s reloading; runs to 2 h;
      * b2 (2 GPUs) runs 0-1,800 s and is preempted without requeue: all lost;
      * b3 (eval, 1 GPU, continuous checkpoints) runs 0-1 h, is requeued and never
        restarts (a censored requeue wait of 1 h), loses nothing;
      * big (32 GPUs on 4 hosts, 2 h expected) is refused as too large at 100 s.
    """
    log = Log()
    mk = log.mk
    log.add(mk.policy(team_depth=1, host_gpus=8))
    log.add(mk.node("lab", managers=("admin",)))
    log.add(mk.node("lab/a", shares=1))
    log.add(mk.node("lab/b", shares=1))
    log.add(mk.host("h0", gpus=8))
    log.add(mk.host("h1", gpus=8))
    log.add(mk.submit("squat-x-0001", "lab/a", 2, H, at=0, kind="squat", user="x"))
    log.add(mk.submit("a1", "lab/a", 2, H, at=0, kind="training"))
    log.add(mk.submit("a2", "lab/a", 2, H, at=0, kind="training"))
    log.add(mk.submit("b1", "lab/b", 4, H, at=0, kind="training", resumable=True,
                      checkpoint_interval_s=1000, restart_overhead_s=300))
    log.add(mk.submit("b2", "lab/b", 2, H, at=0, kind="training"))
    log.add(mk.submit("b3", "lab/b", 1, H, at=0, kind="eval", resumable=True))
    log.tick(0)
    log.start("squat-x-0001", 0, {"h0": 2}, protected_until=H)
    log.start("a1", 0, {"h0": 2}, protected_until=H)
    log.start("b1", 0, {"h0": 4}, protected_until=H)
    log.start("b2", 0, {"h1": 2}, protected_until=H)
    log.start("b3", 0, {"h1": 1}, protected_until=H)
    log.add(mk.submit("big", "lab/b", 32, H, at=100, hosts=4, kind="training",
                      expected_duration_s=2 * H))
    log.add(WorkloadRejected(**log._derived(100), workload="big", reason="too_large",
                             detail="needs 4 hosts with 8 GPUs; the cluster has 2"))
    log.tick(1800)
    log.preempt("b2", 1800, "reclaim", requeued=False, by="a1")
    log.tick(2500)
    log.preempt("b1", 2500, "reclaim", requeued=True, by="a1")
    log.tick(3100)
    log.start("b1", 3100, {"h0": 4}, protected_until=3100 + H)
    log.tick(H)
    log.preempt("b3", H, "reclaim", requeued=True, by="a1")
    for w in ("squat-x-0001", "a1", "b1"):
        log.add(mk.finish(w, at=2 * H))
    log.tick(2 * H)
    return log


def loaded(tmp_path: Path) -> duckdb.DuckDBPyConnection:
    path = tmp_path / "r" / "events.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(encode_lines(net_log().events))
    con = fresh_db()
    load_log(con, path)
    return con


# By hand, per team (GPU-hours; hour 0 = 0-1 h, hour 1 = 1-2 h):
#   a: owed 6 + 6 = 12, received 8, idle hold 2 GPUs x 2 h = 4; without the hold
#      (its demand and its receipts), owed 4 + 4 = 8 and received 4.
#   b: demand hour 0 = b1 4 + b2 2 x 0.5 + b3 1 = 6, hour 1 = b1 4 + b3 1 (requeued,
#      still wanted) = 5: owed 11 (under the 8 entitled). Received hour 0 = b1
#      4 x 3,000 s + b2 2 x 1,800 s + b3 1 h = 10/3 + 1 + 1, hour 1 = 4: 28/3.
#      Killed: b1 4 x (500 + 300) s = 8/9, b2 2 x 1,800 s = 1: 17/9, all in hour 0.
OWED = {"lab/a": 12.0, "lab/b": 11.0}
OWED_NET = {"lab/a": 8.0, "lab/b": 11.0}  # net of idle holds: the hold's demand goes too
GROSS = {"lab/a": 8.0, "lab/b": 28 / 3}
NET_IDLE = {"lab/a": 4.0, "lab/b": 28 / 3}
NET_KILLED = {"lab/a": 8.0, "lab/b": 28 / 3 - 17 / 9}
NET = {"lab/a": 4.0, "lab/b": 28 / 3 - 17 / 9}


def test_unproductive_runs_are_the_hold_the_lost_tails_and_the_restart(tmp_path: Path) -> None:
    con = loaded(tmp_path)
    got = rows(con, "SELECT workload, what, gpus, from_t, until_t FROM unproductive_runs "
                    "ORDER BY workload, from_t")
    assert got == [
        ("b1", "since_checkpoint", 4, 2000, 2500),   # 2,500 s run, checkpoint at 2,000 s
        ("b1", "restart", 4, 3100, 3400),            # the next run reloads for 300 s
        ("b2", "lost_run", 2, 0, 1800),              # no requeue: the whole run
        ("squat-x-0001", "idle_hold", 2, 0, 2 * H),  # b3 (continuous checkpoints) loses nothing
    ]
    by_hour = rows(con, "SELECT team, hour, hold_gpu_h, killed_gpu_h FROM unproductive_by_hour "
                        "ORDER BY team, hour")
    assert near(by_hour) == near([("lab/a", 0, 2.0, 0.0), ("lab/a", H, 2.0, 0.0),
                                  ("lab/b", 0, 0.0, 17 / 9)])


def test_owed_received_net_by_team_is_worked_out_by_hand(tmp_path: Path) -> None:
    con = loaded(tmp_path)
    got = {t: r for t, *r in rows(con, """
        SELECT team, owed_gpu_h, received_capped, received_net_idle_capped,
               received_net_killed_capped, received_net_capped, hold_gpu_h, killed_gpu_h,
               owed_net_gpu_h, hold_demand_gpu_h, ratio_net_idle, ratio_net_killed, ratio_net
        FROM owed_received_net_by_team""")}
    for team in OWED:
        a = team == "lab/a"
        assert got[team] == pytest.approx([
            OWED[team], GROSS[team], NET_IDLE[team], NET_KILLED[team], NET[team],
            4.0 if a else 0.0, 0.0 if a else 17 / 9, OWED_NET[team], 4.0 if a else 0.0,
            NET_IDLE[team] / OWED_NET[team], NET_KILLED[team] / OWED[team],
            NET[team] / OWED_NET[team]]), team
    # The gross figure is the owed_received_by_team one, unchanged.
    gross = dict(rows(con, "SELECT team, ratio FROM owed_received_by_team"))
    assert gross == pytest.approx({t: GROSS[t] / OWED[t] for t in OWED})


def test_summary_reports_net_beside_gross(tmp_path: Path) -> None:
    s = summary(loaded(tmp_path), "r")
    owed, owed_net = sum(OWED.values()), sum(OWED_NET.values())
    assert s["owed_received"]["total"] == pytest.approx(sum(GROSS.values()) / owed)  # 52/3 of 23
    assert s["owed_received_net_idle"]["total"] == pytest.approx(sum(NET_IDLE.values()) / owed_net)
    assert s["owed_received_net_killed"]["total"] == pytest.approx(sum(NET_KILLED.values()) / owed)
    assert s["owed_received_net"]["total"] == pytest.approx(sum(NET.values()) / owed_net)
    assert s["owed_received"]["worst"] == pytest.approx(8 / 12)   # team a, gross
    assert s["owed_received_net"]["worst"] == pytest.approx(0.5)  # team a: half its receipts idle
    assert s["owed_received_net"]["by_team"] == pytest.approx({"lab/a": 0.5, "lab/b": 67 / 99})
    assert s["owed_received_net_killed"]["by_team"] == pytest.approx({"lab/a": 8 / 12, "lab/b": 67 / 99})
    assert (s["idle_hold_gpu_h"], s["killed_gpu_h"]) == pytest.approx((4.0, 17 / 9))


def test_requeue_waits_per_kind_with_censoring(tmp_path: Path) -> None:
    con = loaded(tmp_path)
    assert rows(con, "SELECT workload, preempted_at, restarted_at, wait_s, censored FROM requeue_waits "
                     "ORDER BY workload") == [("b1", 2500, 3100, 600, False), ("b3", H, None, H, True)]
    w = summary(con, "r")["requeue_wait_s"]
    assert (w["training"]["n"], w["training"]["p50"], w["training"]["p90"]) == (1, 600, 600)
    assert not w["training"]["p90_censored"]
    assert (w["eval"]["never_restarted"], w["eval"]["p50"], w["eval"]["p50_censored"]) == (1, H, True)
    assert (w["all"]["n"], w["all"]["restarted"]) == (2, 1)
    assert w["all"]["p50"] == pytest.approx((600 + H) / 2) and w["all"]["p50_censored"]
    # The first waits are unchanged: every training workload that started, started at once.
    assert summary(con, "r")["wait_s"]["training"]["p90_started"] == 0


def test_refused_as_too_large_is_counted_with_its_demand(tmp_path: Path) -> None:
    con = loaded(tmp_path)
    assert rows(con, "SELECT reason, refused, demand_gpu_h, with_duration, refused_all FROM refusals") == [
        ("too_large", 1, 64.0, 1, 1)]  # 32 GPUs x 2 h
    s = summary(con, "r")
    assert s["refused"] == {"too_large": 1} and s["refused_gpu_h"] == {"too_large": 64.0}
    # Refused work is in no other figure: not a workload, not in demand.
    assert rows(con, "SELECT count(*) FROM workloads WHERE workload = 'big'") == [(0,)]
    # After a warm-up that covers the refusal, it is left out (but kept in refused_all).
    con.execute("SET VARIABLE allot_warmup_s = 1")
    assert rows(con, "SELECT refused, refused_all FROM refusals") == [(0, 1)]


def test_multi_seed_rows_name_figures_the_summary_has(tmp_path: Path) -> None:
    flat = flatten(summary(loaded(tmp_path), "r"))
    for key in ("owed_received_net.total", "owed_received_net.worst", "owed_received_net_idle.total",
                "owed_received_net_killed.total", "requeue_wait_s.all.p90", "refused.too_large",
                "refused_gpu_h.too_large", "idle_hold_gpu_h", "killed_gpu_h"):
        assert key in flat and key in {k for k, _, _ in ROWS}, key


def test_docs_describe_the_new_views_and_columns() -> None:
    doc = (DOCS / "audit.md").read_text()
    documented = set(re.findall(r"`([a-z_0-9]+)`", doc))
    con = duckdb.connect()
    create_views(con)
    for view in ("unproductive_runs", "unproductive_by_hour", "owed_received_net",
                 "owed_received_net_by_team", "requeue_waits", "requeue_wait_percentiles", "refusals"):
        assert view in documented, view
        for (name, *_) in con.execute(f"DESCRIBE {view}").fetchall():
            assert name in documented, f"{view}.{name}"
