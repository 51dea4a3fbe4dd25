"""The worker's state API and the verbs reading it, over the real broker.

Inputs are published before the worker starts: a cluster that never ticked
must take them (not reject them as ``future_time``), and ``/readyz`` must say
ready only once the worker owns its partitions and the clock has ticked.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request

import pytest

from events import BudgetNodeDefined, HostAdded, WorkloadCancelled, WorkloadSubmitted
from tests.kafka import REPO, Live, unique_prefix, wait_until

pytestmark = pytest.mark.kafka
C = "sa"


def _get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def _env(**kw: str) -> dict:
    e = {k: v for k, v in os.environ.items() if not k.startswith("ALLOT_")}
    return {**e, "ALLOT_CORE": "pure", **kw}


def test_state_api_and_verbs(kafka: str, tmp_path) -> None:
    live = Live(kafka, unique_prefix()).start()
    try:
        now = int(time.time())
        env = dict(at=now, cluster=C, actor="root", source="test")
        live.send_many([
            BudgetNodeDefined(id="b0", path="lab", shares=1, managers=("root",), **env),
            BudgetNodeDefined(id="b1", path="lab/a", shares=3, managers=(), **env),
            BudgetNodeDefined(id="b2", path="lab/b", shares=1, managers=(), **env),
            HostAdded(id="h1", host="h1", gpus=8, **env),
            HostAdded(id="h2", host="h2", gpus=8, **env),
            *[WorkloadSubmitted(id=f"s{i}", workload=f"w{i}", budget="lab/a" if i % 2 else "lab/b",
                                user="ann" if i % 2 else "bob", gpus=8, hosts=1,
                                gpus_per_host=8, min_runtime_s=3600, resumable=True,
                                priority=0, kind="training", **env) for i in range(4)],
        ])
        worker = live.start_worker((C,), metrics_port=0)
        host, port = worker.metrics_address
        url = f"http://{host}:{port}"
        _code, ready = wait_until(lambda: (r := _get(f"{url}/readyz"))[0] == 200 and r, 30,
                                 what="/readyz")
        assert ready["ready"] and ready["clusters"] == [C]
        # Nothing was rejected as future_time: two run, two wait.
        wait_until(lambda: _get(f"{url}/api/queue?cluster={C}")[1].get("pending") == 2, 30,
                   what="two started, two pending")
        events = live.events(C)
        assert not [e for e in events if getattr(e, "reason", "") == "future_time"]
        _, q = _get(f"{url}/api/queue")
        assert [r["rank"] for r in q["rows"]] == [1, 2]
        assert all(r["sort_metric"] and r["waits_for"] for r in q["rows"])
        _, hosts = _get(f"{url}/api/hosts")
        assert hosts["capacity"] == 16 and hosts["used"] == 16 and hosts["faulty"] == []
        _, b = _get(f"{url}/api/budgets?path=lab")
        assert {n["path"]: n["entitlement"] for n in b["nodes"]} == {
            "lab": 1.0, "lab/a": 0.75, "lab/b": 0.25}
        wid = q["rows"][0]["workload"]
        _, exp = _get(f"{url}/api/explain/{wid}")
        assert exp["status"] == "pending" and exp["summary"]
        assert _get(f"{url}/api/explain/nope")[0] == 404
        assert _get(f"{url}/api/queue?cluster=typo")[0] == 404
        live.send(WorkloadCancelled(id="c1", workload=wid, **{**env, "at": int(time.time())}))
        wait_until(lambda: _get(f"{url}/api/history")[1]["matched"] == 1, 30, what="history")
        _, h = _get(f"{url}/api/history?user=" + ("ann" if wid in ("w1", "w3") else "bob"))
        assert [r["workload"] for r in h["rows"]] == [wid]
        assert h["rows"][0]["status"] == "cancelled" and h["rows"][0]["ended_at"]
        _, h = _get(f"{url}/api/history?since={int(time.time()) + 3600}")
        assert h["rows"] == []
        # The verbs, as a user types them (the URL from the environment).
        for argv in (["queue"], ["hosts"], ["budget", "show", "lab"], ["history"],
                     ["explain", q["rows"][-1]["workload"]]):
            p = subprocess.run([sys.executable, "-m", "allot", *argv], cwd=REPO,
                               capture_output=True, text=True, timeout=60,
                               env=_env(ALLOT_STATE_URL=url, COLUMNS="200"))
            assert p.returncode == 0, (argv, p.stderr)
            assert "Traceback" not in p.stderr and "1796" not in p.stdout
        p = subprocess.run([sys.executable, "-m", "allot", "queue", "--json", "--user", "ann"],
                           cwd=REPO, capture_output=True, text=True, timeout=60,
                           env=_env(ALLOT_STATE_URL=url))
        assert {r["user"] for r in json.loads(p.stdout)["rows"]} <= {"ann"}
        p = subprocess.run([sys.executable, "-m", "allot", "hosts", "--cluster", "typo"],
                           cwd=REPO, capture_output=True, text=True, timeout=60,
                           env=_env(ALLOT_STATE_URL=url))
        assert p.returncode == 2 and p.stderr.count("\n") == 1 and "typo" in p.stderr
        # The dashboard is served beside the API.
        with urllib.request.urlopen(f"{url}/dashboard/", timeout=10) as r:
            assert b"allot dashboard" in r.read()
    finally:
        live.close()
