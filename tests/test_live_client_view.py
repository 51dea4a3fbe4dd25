"""The live view (``allot top``): the ranked queue with its sort metric, and the running set."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from events import ClockTicked, Event
from events.factory import Inputs
from scheduler.explain import explain
from scheduler.replay import fold_log
from simulator.driver import Simulation
from simulator.scenario import load_scenario, with_overrides
from streams.view import LiveView, queue_rows, render, snapshot
from tests.kafka import REPO, Live, unique_prefix

REPO_SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


@pytest.fixture(scope="module")
def busy_log() -> list[Event]:
    """Half a day of the demo: a queue of several allocations and a full cluster."""
    sc = with_overrides(load_scenario(REPO_SCENARIOS / "demo.toml"), horizon_days=0.5)
    return Simulation(sc, "allot", REPO_SCENARIOS).run().log


def test_the_view_folds_to_the_state_a_fold_of_the_journal_gives(busy_log: list[Event]) -> None:
    view = LiveView("demo")
    for e in busy_log:
        view.add(e)
    view.fold.flush()
    want = fold_log(busy_log)
    assert view.state.now == want.state.now
    assert sorted(view.state.workloads.running) == sorted(want.state.workloads.running)


def test_the_queue_carries_the_sort_metric_explain_gives(busy_log: list[Event]) -> None:
    engine = fold_log(busy_log)
    st = engine.state
    rows = queue_rows(st)
    assert len(rows) >= 2, "the scenario has a queue"
    assert [r["position"] for r in rows] == list(range(1, len(rows) + 1))
    for r in rows:
        wid = r["head"][0][0]
        exp = explain(st, wid)
        assert exp.allocation_position == r["position"]
        assert [(lv.node.rsplit("/", 1)[-1], lv.usage_fraction, lv.share_fraction, lv.ratio)
                for lv in exp.rank] == r["key"]


def test_render_and_snapshot_show_queue_and_running(busy_log: list[Event]) -> None:
    from rich.console import Console

    view = LiveView("demo")
    for e in busy_log:
        view.add(e)
    con = Console(width=200, record=True)
    con.print(render(view))
    text = con.export_text()
    assert "queue" in text and "running" in text and "protected" in text
    snap = snapshot(view)
    assert snap["running"] and snap["queue"]
    json.dumps(snap)


@pytest.mark.kafka
def test_allot_top_once_reads_a_live_journal(kafka: str) -> None:
    live = Live(kafka, unique_prefix()).start()
    try:
        live.start_worker(("top-a",), time_scale=20.0, tick_interval_s=0.25)
        live.wait_event("top-a", lambda e: isinstance(e, ClockTicked), what="a tick")
        mk = Inputs(cluster="top-a", prefix="t-")
        now = int(time.time())
        # The policy before 2026-12-04 (full protection, time slicing): big keeps its GPUs.
        live.send_many([mk.policy(at=now, preemption_rule="fair_share", borrowed_protection_s=None),
                        mk.node("lab", managers=("admin",), at=now), mk.node("lab/a", at=now),
                        mk.node("lab/b", at=now), mk.host("h0", at=now),
                        mk.submit("big", "lab/a", gpus=8, min_runtime_s=600, at=now),
                        mk.submit("wait1", "lab/b", gpus=4, min_runtime_s=600, at=now),
                        mk.submit("wait2", "lab/a", gpus=4, min_runtime_s=600, at=now)])
        live.wait_event("top-a", lambda e: getattr(e, "workload", None) == "big", what="a start")
        time.sleep(1)
        env = {k: v for k, v in os.environ.items() if not k.startswith("ALLOT_")}
        env.update(KAFKA_BOOTSTRAP_SERVERS=kafka, ALLOT_TOPIC_PREFIX=live.prefix)
        proc = subprocess.run([sys.executable, "-m", "allot", "top", "--cluster", "top-a",
                               "--once", "--json"], cwd=REPO, env=env, capture_output=True,
                              text=True, timeout=60)
    finally:
        live.close()
    assert proc.returncode == 0, proc.stderr
    snap = json.loads(proc.stdout)
    assert [r["workload"] for r in snap["running"]] == ["big"]
    # lab/b has used nothing: it is served before lab/a, whose big job runs.
    assert [r["leaf"] for r in snap["queue"]] == ["lab/b", "lab/a"]
    assert snap["queue"][0]["head"][0][0] == "wait1"
