"""The command line's gaps a first-time user hit, over the real broker (issue 24).

Duplicate submissions say so, ``--follow`` says "still pending", ``cancel
--user`` cancels each matching workload, ``host remove`` works, and ``top``
refuses an unknown cluster, names the faulty hosts, leaves them out of its
capacity and prints whole workload ids.
"""

from __future__ import annotations

import json
import time

import pytest

from allot.cli import main
from events import BudgetNodeDefined, HostAdded, HostRemoved, WorkloadCancelled
from tests.kafka import Live, unique_prefix, wait_until

# Its commands run the core the way a user's shell does (ALLOT_CORE unset: compiled when
# built), so they wait for a build that ``make test`` runs beside the tests.
pytestmark = [pytest.mark.kafka, pytest.mark.usefixtures("native_build_done")]
C = "gaps"


def test_cli_gaps(kafka: str, monkeypatch: pytest.MonkeyPatch,
                  capsys: pytest.CaptureFixture[str]) -> None:
    prefix = unique_prefix()
    live = Live(kafka, prefix).start()
    try:
        now = int(time.time())
        env = dict(at=now, cluster=C, actor="root", source="test")
        live.send_many([
            BudgetNodeDefined(id="b0", path="lab", shares=1, managers=("root",), **env),
            BudgetNodeDefined(id="b1", path="lab/a", shares=1, managers=(), **env),
            HostAdded(id="h1", host="h1", gpus=8, **env),
            HostAdded(id="h2", host="h2", gpus=8, **env),
        ])
        worker = live.start_worker((C,), metrics_port=0)
        host, port = worker.metrics_address
        for k in [k for k in __import__("os").environ if k.startswith("ALLOT_")
                  and k not in ("ALLOT_RUN_DIR", "ALLOT_CORE")]:
            monkeypatch.delenv(k)
        monkeypatch.setenv("ALLOT_STATE_URL", f"http://{host}:{port}")
        monkeypatch.setenv("COLUMNS", "220")
        conn = ["--bootstrap", kafka, "--topic-prefix", prefix]

        def run(*argv: str) -> tuple[int, str, str]:
            capsys.readouterr()
            code = main([*argv, *conn] + ([] if "--cluster" in argv else ["--cluster", C]))
            out, err = capsys.readouterr()
            return code, out, err

        def submit(*extra: str) -> tuple[int, str, str]:
            return run("submit", "--budget", "lab/a", "--gpus", "8", "--min-runtime", "1h",
                       "--actor", "bob", *extra)

        # A duplicate says so (and is not an error: the same contract, nothing changed).
        code, out, _ = submit("--workload", "wa")
        assert code == 0 and out.startswith("accepted"), out
        wait_until(lambda: "wa" in _hosts_workloads(live, port), 30, what="wa running")
        code, out, _ = submit("--workload", "wa")
        assert code == 0 and out.startswith("duplicate") and "accepted" not in out, out
        assert "already submitted with the same contract (running)" in out
        # A default id, to be read whole in top.
        code, out, _ = submit("--json")
        long_id = json.loads(out)["input"]["workload"]
        assert code == 0 and len(long_id) == 34
        wait_until(lambda: long_id in _hosts_workloads(live, port), 30, what="the second running")
        # Both hosts are busy and protected: a third stays pending; --follow says so, exit 3.
        code, out, _ = submit("--workload", "wc", "--follow", "--timeout", "3")
        assert code == 3 and "still pending after 3 s" in out and "allot explain wc" in out, out

        # top: an unknown cluster is an error naming the known ones.
        code, out, err = run("top", "--once", "--cluster", "typo")
        assert code == 2 and "unknown cluster 'typo'" in err and C in err and not out, err
        # A faulty host is named, and out of the capacity.
        code, out, _ = run("host", "fault", "h2", "--reason", "XID 79")
        assert code == 0, out
        code, out, _ = run("top", "--once")
        assert code == 0
        assert "8/8 GPUs busy on healthy hosts" in out, out
        assert "1 faulty host(s)" in out and "h2 (degraded: XID 79)" in out, out
        assert "8 GPUs still draining" in out
        assert long_id in out and "wa" in out  # whole ids, never cut
        code, out, _ = run("top", "--once", "--json")
        snap = json.loads(out)
        assert snap["capacity"] == 8 and [h["host"] for h in snap["faulty_hosts"]] == ["h2"]

        # host remove: refused while busy, accepted once empty (or never used).
        code, out, _ = run("host", "add", "h3", "--gpus", "4")  # too small for wc
        assert code == 0
        code, out, _ = run("host", "remove", "h3")
        assert code == 0 and out.startswith("accepted"), out
        live.wait_event(C, lambda e: isinstance(e, HostRemoved) and e.host == "h3", 10)
        code, out, _ = run("host", "remove", "h1")
        assert code == 1 and "host_busy" in out, out

        # cancel --user: one cancel per pending or running workload of bob (3 of them).
        code, out, _ = run("cancel", "--user", "bob", "--dry-run", "--actor", "bob")
        assert code == 0 and out.count("would cancel") == 3, out
        code, out, _ = run("cancel", "--budget", "lab/a", "--user", "bob", "--dry-run",
                           "--actor", "bob", "--json")
        assert code == 0 and {r["workload"] for r in json.loads(out)["would_cancel"]} == {
            "wa", "wc", long_id}
        code, out, _ = run("cancel", "--budget", "lab/zz", "--actor", "bob")
        assert code == 0 and "nothing to cancel" in out and "budget lab/zz" in out
        assert not [e for e in live.events(C) if isinstance(e, WorkloadCancelled)]
        code, out, _ = run("cancel", "--user", "bob", "--actor", "bob")
        assert code == 0 and "3 of 3 workload(s) of user bob cancelled" in out, out
        cancelled = {e.workload for e in live.events(C) if isinstance(e, WorkloadCancelled)}
        assert cancelled == {"wa", "wc", long_id}
        code, out, _ = run("cancel", "--user", "bob", "--actor", "bob")
        assert code == 0 and "nothing to cancel" in out
        code, _, err = run("cancel", "--actor", "bob")
        assert code == 2 and "--user" in err
    finally:
        live.close()


def _hosts_workloads(live: Live, port: int) -> set[str]:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/hosts?cluster={C}",
                                timeout=10) as r:
        data = json.loads(r.read())
    return {w for h in data["hosts"] for w in h["workloads"]}
