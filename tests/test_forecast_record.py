"""Recording forecasts: the seeded sample, the simulator's hook, the live API's file, the record format."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from audit.forecasts import ForecastLoadError, read_forecast_lines
from events import WorkloadSubmitted, encode_lines
from forecast.live import forecast_json, queue_forecasts
from forecast.record import RECORD_ENV, SubmissionForecasts, chosen, write_records
from forecast.score import ForecastRecord
from simulator.driver import Simulation
from simulator.scenario import load_scenario
from tests.test_forecast_many import busy_state

DEMO = Path("scenarios/demo.toml")


def test_the_sample_is_a_pure_function_of_seed_and_id() -> None:
    ids = [f"w{i}" for i in range(4000)]
    a = [w for w in ids if chosen(w, 0.1, seed=7)]
    assert a == [w for w in reversed(ids) if chosen(w, 0.1, seed=7)][::-1]  # order-free
    assert 300 < len(a) < 500                                                # about the rate
    assert a != [w for w in ids if chosen(w, 0.1, seed=8)]                   # the seed matters
    assert all(chosen(w, 1.0, 0) for w in ids[:50]) and not any(chosen(w, 0.0, 0) for w in ids[:50])


def test_the_hook_changes_no_decision() -> None:
    sc = load_scenario(DEMO)
    plain = Simulation(sc, "allot", DEMO.parent).run()
    rec = SubmissionForecasts(rate=0.1, seed=1)
    hooked = Simulation(sc, "allot", DEMO.parent, on_submit=rec).run()
    assert rec.records  # it did forecast
    assert encode_lines(hooked.log) == encode_lines(plain.log)


def test_the_hook_forecasts_each_sampled_submission_as_of_it() -> None:
    sc = load_scenario(DEMO)
    rec = SubmissionForecasts(rate=0.1, seed=1)
    res = Simulation(sc, "allot", DEMO.parent, on_submit=rec).run()
    subs = {e.workload: e for e in res.log if type(e) is WorkloadSubmitted}
    assert rec.submissions == len(subs)
    assert [r.workload for r in rec.records] == [w for w in subs if chosen(w, 0.1, 1)]
    for r in rec.records:
        assert r.made_at == subs[r.workload].at and r.kind == subs[r.workload].kind
        assert r.source == "simulator" and (r.start is None or r.start >= r.made_at)


def test_records_round_trip_and_a_bad_line_is_named(tmp_path: Path) -> None:
    recs = [ForecastRecord(workload="a", kind="debug", made_at=1, start=5),
            ForecastRecord(workload="b", kind="eval", made_at=2, start=None, status="unfinished",
                           not_before=9, source="api")]
    path = tmp_path / "f.jsonl"
    write_records(path, recs[:1])
    write_records(path, recs[1:], append=True)
    # The audit reads back every field the recorder wrote.
    assert [msgspec.to_builtins(r) for r in read_forecast_lines(path)] == \
        [msgspec.to_builtins(r) for r in recs]
    path.write_bytes(path.read_bytes() + b'{"workload": 3}\n')
    with pytest.raises(ForecastLoadError, match=r"f\.jsonl:3"):
        read_forecast_lines(path)


def test_the_live_api_records_what_it_serves(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "served.jsonl"
    monkeypatch.setenv(RECORD_ENV, str(path))
    eng = busy_state()
    pending = [w.id for w in eng.state.workloads.all.values() if w.status == "pending"]
    one = forecast_json(eng.state, pending[0])
    assert one is not None
    queue_forecasts(eng.state, [*pending[:3], "run0"])
    got = read_forecast_lines(path)
    # One for the explanation, three for the queue's rows; the running one is not a forecast.
    assert [r.workload for r in got] == [pending[0], *pending[:3]]
    assert got[0].start == one["start"] and got[0].made_at == one["now"]
    assert {r.source for r in got} == {"api"}
    assert got[0].kind == eng.state.workloads.all[pending[0]].kind


def test_the_live_api_records_nothing_unless_asked(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(RECORD_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    eng = busy_state()
    pending = [w.id for w in eng.state.workloads.all.values() if w.status == "pending"]
    assert forecast_json(eng.state, pending[0]) is not None
    assert list(tmp_path.iterdir()) == []


def test_allot_forecast_record_appends_what_it_printed(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    from tests.test_forecast_audit import T0, small_journal

    log = small_journal(tmp_path)
    out = tmp_path / "mine.jsonl"
    argv = [sys.executable, "-m", "allot", "forecast", "a2", "--log", str(log), "--at", str(T0 + 1),
            "--record", str(out)]
    shown = json.loads(subprocess.run([*argv, "--json"], capture_output=True, text=True,
                                      check=True).stdout)
    subprocess.run(argv, capture_output=True, check=True)
    got = read_forecast_lines(out)
    assert len(got) == 2 and {r.start for r in got} == {shown["start"]} == {T0 + 1 + 3600}
    assert got[0].made_at == T0 + 1 and got[0].kind == "training" and got[0].source == "cli"
