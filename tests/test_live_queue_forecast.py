"""``allot queue --forecast`` and the forecast in ``allot explain``, over the real broker.

Two hosts run two jobs with known expected durations; two more wait. The
forecast start of the waiting ones is when the running ones are expected to
end; the verbs print it as a date (never Unix seconds), ``--json`` carries it,
and the state API forecasts only the rows it is asked to.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request

import pytest

from allot.cli import main
from events import BudgetNodeDefined, HostAdded, WorkloadSubmitted
from streams.state_cli import when
from tests.kafka import Live, unique_prefix, wait_until

# Its commands run the core the way a user's shell does (ALLOT_CORE unset: compiled when
# built), so they wait for a build that ``make test`` runs beside the tests.
pytestmark = [pytest.mark.kafka, pytest.mark.usefixtures("native_build_done")]
C = "qf"


def _get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def test_queue_forecast_and_explain_forecast(kafka: str, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    live = Live(kafka, unique_prefix()).start()
    try:
        now = int(time.time())
        env = dict(at=now, cluster=C, actor="root", source="test")
        durations = {"w0": 3600, "w1": 7200}  # w2, w3 (3 h each) wait
        live.send_many([
            BudgetNodeDefined(id="b0", path="lab", shares=1, managers=("root",), **env),
            BudgetNodeDefined(id="b1", path="lab/a", shares=1, managers=(), **env),
            BudgetNodeDefined(id="b2", path="lab/b", shares=1, managers=(), **env),
            HostAdded(id="h1", host="h1", gpus=8, **env),
            HostAdded(id="h2", host="h2", gpus=8, **env),
            *[WorkloadSubmitted(id=f"s{i}", workload=f"w{i}", budget="lab/a",
                                user="ann", gpus=8, hosts=1, gpus_per_host=8, min_runtime_s=600,
                                resumable=True, priority=0, kind="training",
                                expected_duration_s=durations[f"w{i}"], **env)
              for i in range(2)],
        ])
        worker = live.start_worker((C,), metrics_port=0)
        host, port = worker.metrics_address
        url = f"http://{host}:{port}"
        wait_until(lambda: len(worker.engines().get(C).state.workloads.running) == 2
                   if worker.engines().get(C) else False, 30, what="w0 and w1 running")
        live.send_many([WorkloadSubmitted(
            id=f"s{i}", workload=f"w{i}", budget="lab/a", user="ann",
            gpus=8, hosts=1, gpus_per_host=8, min_runtime_s=600, resumable=True, priority=0,
            kind="training", expected_duration_s=3 * 3600, **{**env, "at": int(time.time())})
            for i in (2, 3)])
        wait_until(lambda: _get(f"{url}/api/queue")[1].get("pending") == 2, 30,
                   what="w2 and w3 pending")
        running = worker.engines()[C].state.workloads.running
        ends = {running[w].started_at + durations[w] for w in ("w0", "w1")}

        _, q = _get(f"{url}/api/queue?forecast=1")
        assert q["forecast"]["rows"] == 2 and q["forecast"]["limit"] == 20
        starts = {r["forecast"]["start"] for r in q["rows"]}
        assert starts == ends  # each waits for one of the running jobs to end
        assert all(r["forecast"]["status"] == "pending" for r in q["rows"])
        _, q1 = _get(f"{url}/api/queue?forecast=1&forecast_rows=1")
        assert "forecast" in q1["rows"][0] and "forecast" not in q1["rows"][1]
        assert "forecast" not in _get(f"{url}/api/queue")[1]["rows"][0]  # only when asked
        code, err = _get(f"{url}/api/queue?forecast=1&forecast_rows=lots")
        assert code == 400 and "forecast_rows" in err["error"]

        for k in [k for k in os.environ if k.startswith("ALLOT_")
                  and k not in ("ALLOT_RUN_DIR", "ALLOT_CORE")]:
            monkeypatch.delenv(k)
        monkeypatch.setenv("ALLOT_STATE_URL", url)
        monkeypatch.setenv("COLUMNS", "240")

        def run(*argv: str) -> tuple[int, str, str]:
            capsys.readouterr()
            code = main(list(argv))
            out, err = capsys.readouterr()
            return code, out, err

        code, out, err = run("queue", "--forecast")
        assert code == 0, err
        assert "starts (est.)" in out and "first 2 row(s)" in out
        for t in ends:
            assert when(t) in out  # a date people read
        assert str(min(ends))[:6] not in out  # never epoch seconds
        code, out, _ = run("queue", "--forecast", "1")
        assert code == 0 and out.count(" (in ") == 1 and "first 1 row(s)" in out
        code, out, _ = run("queue", "--forecast", "--json")
        doc = json.loads(out)
        assert {r["forecast"]["start"] for r in doc["rows"]} == ends
        with pytest.raises(SystemExit) as exc:  # argparse's usage error: no traceback
            run("queue", "--forecast", "many")
        assert exc.value.code == 2
        assert "number of rows" in capsys.readouterr().err.splitlines()[-1]
        code, out, _ = run("queue")
        assert code == 0 and "starts (est.)" not in out

        # The explanation carries the forecast, in words with a date.
        first = q["rows"][0]
        code, out, err = run("explain", first["workload"], "--cluster", C)
        assert code == 0, err
        assert f"estimated start {when(first['forecast']['start'])}" in out
        assert "forecast: {" not in out and str(min(ends))[:6] not in out
    finally:
        live.close()
