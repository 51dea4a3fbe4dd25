"""Recorded forecasts in the audit: the forecast_errors view, its summary, and `allot audit forecasts`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from audit.database import open_db
from audit.errors import RunExists, UnknownRun
from audit.forecasts import load_forecasts, summary
from audit.load import load_log
from events import write_log
from events.factory import Inputs
from forecast.record import write_records
from forecast.score import ForecastRecord, first_starts, score
from scheduler import Engine

T0 = 1_767_225_600
H = 3600


def small_journal(tmp_path: Path) -> Path:
    """Two hosts full until T0+1h / T0+3h; a2 and b2 wait for them; c is cancelled unstarted."""
    eng = Engine("c")
    mk = Inputs(cluster="c", prefix="t")
    log = []

    def feed(e: object) -> None:
        log.append(e)
        log.extend(eng.process(e) or [])  # type: ignore[arg-type]

    for e in (mk.tick(T0, cycle=False), mk.policy(at=T0), mk.node("lab", managers=("admin",), at=T0),
              mk.node("lab/a", at=T0), mk.node("lab/b", at=T0), mk.host("h0", at=T0),
              mk.host("h1", at=T0)):
        feed(e)
    feed(mk.submit("a1", "lab/a", 8, 600, at=T0, expected_duration_s=H))
    feed(mk.submit("b1", "lab/b", 8, 600, at=T0, expected_duration_s=3 * H))
    feed(mk.tick(T0 + 1))
    for w in ("a2", "b2", "c"):
        feed(mk.submit(w, "lab/a" if w != "b2" else "lab/b", 8, 600, at=T0 + 1, kind="eval"
                       if w == "c" else "training", expected_duration_s=2 * H))
    feed(mk.tick(T0 + 1000, cycle=False))
    feed(mk.cancel("c", actor="a", at=T0 + 1000, reason="patience"))
    feed(mk.tick(T0 + H, cycle=False))
    feed(mk.finish("a1", at=T0 + H))
    feed(mk.tick(T0 + H))
    path = tmp_path / "events.jsonl"
    write_log(path, log)
    assert first_starts(log)["a2"] == T0 + H
    return path


def _records(tmp_path: Path) -> tuple[Path, list[ForecastRecord]]:
    recs = [
        ForecastRecord(workload="a2", kind="training", made_at=T0 + 1, start=T0 + H + 600),
        ForecastRecord(workload="a2", kind="training", made_at=T0 + 1, start=T0 + H - 300),
        ForecastRecord(workload="b2", kind="training", made_at=T0 + 1, start=None,
                       status="beyond_horizon"),
        ForecastRecord(workload="c", kind="eval", made_at=T0 + 1, start=T0 + 100),
        ForecastRecord(workload="ghost", kind="eval", made_at=T0 + 1, start=T0 + 5),
    ]
    path = tmp_path / "forecasts.jsonl"
    write_records(path, recs)
    return path, recs


@pytest.fixture
def db(tmp_path: Path):  # type: ignore[no-untyped-def]
    con = open_db(tmp_path / "a.duckdb")
    load_log(con, small_journal(tmp_path), "r")
    yield con
    con.close()


def test_each_forecast_is_paired_with_the_next_actual_start(db, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path, _ = _records(tmp_path)
    assert load_forecasts(db, path, "r") == 5
    rows = db.execute("SELECT workload, outcome, actual_start, error_s, abs_error_lower_s "
                      "FROM forecast_errors ORDER BY n").fetchall()
    assert rows == [
        ("a2", "scored", T0 + H, 600, None),
        ("a2", "scored", T0 + H, -300, None),
        # b2 never started in this log (b1 still runs): no start forecast and none happened.
        ("b2", "never_started", None, None, None),
        # c was cancelled at T0+1000, 900 s after its forecast start: the error is at least that.
        ("c", "never_started", None, None, 900),
        ("ghost", "unknown_workload", None, None, None),
    ]


def test_the_summary_agrees_with_the_python_scorer(db, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path, recs = _records(tmp_path)
    load_forecasts(db, path, "r")
    s = summary(db, "r")
    py = score(recs[:2], {"a2": T0 + H})
    assert s["training"]["scored"] == 2 and s["training"]["never_started"] == 1
    assert s["training"]["p50_abs_error_s"] == py["training"]["p50_abs_error_s"] == 450.0
    assert s["training"]["p90_abs_error_s"] == pytest.approx(py["training"]["p90_abs_error_s"])
    # Never-started work counts at its lower bound in the second pair of figures.
    assert s["eval"]["p50_abs_error_with_never_started_s"] == 900.0
    assert s["all"]["forecasts"] == 5 and s["all"]["unknown_workload"] == 1
    # Both a2 forecasts said it would wait: the "forecast to wait" figures are theirs.
    assert s["training"]["scored_waiting"] == 2
    assert s["training"]["p50_abs_error_waiting_s"] == 450.0


def test_a_run_keeps_its_forecasts_unless_replaced(db, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path, _ = _records(tmp_path)
    load_forecasts(db, path, "r")
    with pytest.raises(RunExists):
        load_forecasts(db, path, "r")
    assert load_forecasts(db, path, "r", replace=True) == 5
    assert db.execute("SELECT count(*) FROM forecasts").fetchone()[0] == 5


def test_forecasts_need_the_run_loaded_first(db, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path, _ = _records(tmp_path)
    with pytest.raises(UnknownRun):
        load_forecasts(db, path, "other")


def test_the_cli_loads_and_prints_json(tmp_path: Path) -> None:
    con = open_db(tmp_path / "a.duckdb")
    load_log(con, small_journal(tmp_path), "r")
    con.close()
    path, _ = _records(tmp_path)
    out = subprocess.run([sys.executable, "-m", "allot", "audit", "forecasts", str(path), "--run",
                          "r", "--db", str(tmp_path / "a.duckdb"), "--json"],
                         capture_output=True, text=True, check=True)
    doc = json.loads(out.stdout)
    assert doc["training"]["p50_abs_error_s"] == 450.0
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"workload": "a2"}\n')
    err = subprocess.run([sys.executable, "-m", "allot", "audit", "forecasts", str(bad), "--run",
                          "r", "--db", str(tmp_path / "a.duckdb"), "--replace"],
                         capture_output=True, text=True)
    assert err.returncode != 0 and "bad.jsonl:1" in err.stderr
