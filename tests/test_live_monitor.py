"""``allot monitor`` over the real broker: a fake nvidia-smi loses a GPU, then gets it back.

The monitor runs as people start it (a subprocess, the fake on PATH); the
worker's state API must show the host failed, its workload ended, and then the
host healthy again, and the journal must hold one ``host.faulted`` and one
``host.repaired`` from the monitor.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from events import (
    BudgetNodeDefined,
    HostAdded,
    HostFaulted,
    HostRepaired,
    WorkloadPreempted,
    WorkloadSubmitted,
)
from tests.kafka import REPO, Live, unique_prefix, wait_until

pytestmark = pytest.mark.kafka
C = "mon"
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "nvidia-smi"


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def _host(url: str, name: str) -> dict:
    return next(h for h in _get(f"{url}/api/hosts?cluster={C}")["hosts"] if h["host"] == name)


def test_monitor_faults_and_repairs_a_host(kafka: str, tmp_path: Path) -> None:
    prefix = unique_prefix()
    live = Live(kafka, prefix).start()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").symlink_to(FIXTURES / "fake-nvidia-smi")
    answer = tmp_path / "answer"
    answer.write_text((FIXTURES / "healthy.csv").read_text())
    proc = None
    try:
        now = int(time.time())
        env = dict(at=now, cluster=C, actor="root", source="test")
        live.send_many([
            BudgetNodeDefined(id="b0", path="lab", shares=1, managers=("root",), **env),
            BudgetNodeDefined(id="b1", path="lab/a", shares=1, managers=(), **env),
            HostAdded(id="h1", host="h1", gpus=8, **env),
            WorkloadSubmitted(id="s1", workload="w1", budget="lab/a", user="ann", gpus=8,
                              hosts=1, gpus_per_host=8, min_runtime_s=3600, resumable=True,
                              priority=0, kind="training", **env),
        ])
        worker = live.start_worker((C,), metrics_port=0)
        host, port = worker.metrics_address
        url = f"http://{host}:{port}"
        wait_until(lambda: _host(url, "h1")["used"] == 8, 30, what="w1 running on h1")
        penv = {k: v for k, v in os.environ.items()
                if not k.startswith("ALLOT_") and k != "KAFKA_BOOTSTRAP_SERVERS"}
        penv.update(ALLOT_CORE="pure", FAKE_NVIDIA_SMI_OUTPUT=str(answer),
                    PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
                    ALLOT_RUN_DIR=str(tmp_path / "run"),
                    ALLOT_KEY_DIR=str(tmp_path / "no-keys"))  # no local key: unsigned
        log = (tmp_path / "monitor.out").open("wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "allot", "monitor", "--host", "h1", "--interval", "0.2",
             "--fault-after", "3", "--repair-after", "3", "--min-interval", "0",
             "--bootstrap", kafka, "--topic-prefix", prefix, "--cluster", C, "--url", url,
             "--json"], cwd=REPO, env=penv, stdout=log, stderr=subprocess.STDOUT)
        time.sleep(1.0)  # a few healthy looks: nothing is published
        assert not [e for e in live.events(C) if isinstance(e, HostFaulted | HostRepaired)]
        answer.write_text((FIXTURES / "lost-gpu.csv").read_text())
        fault = live.wait_event(C, lambda e: isinstance(e, HostFaulted), timeout=30,
                                what="host.faulted from the monitor")
        assert isinstance(fault, HostFaulted)
        assert fault.host == "h1" and fault.severity == "failed"
        assert fault.reason == "1 of 8 GPUs lost (index 6)" and fault.actor == "monitor-h1"
        # Failed: its work ends at once, then (empty) it goes to repair.
        h = wait_until(lambda: (h := _host(url, "h1"))["health"] == "repairing" and h, 30,
                       what="h1 drained for repair in the worker's state")
        assert h["reason"] == fault.reason and h["used"] == 0
        pre = live.wait_event(C, lambda e: isinstance(e, WorkloadPreempted), timeout=10)
        assert isinstance(pre, WorkloadPreempted)
        assert (pre.workload, pre.reason, pre.requeued) == ("w1", "host_failure", True)
        wait_until(lambda: _get(f"{url}/api/hosts?cluster={C}")["capacity"] == 0, 30,
                   what="capacity without the failed host")
        answer.write_text((FIXTURES / "healthy.csv").read_text())
        live.wait_event(C, lambda e: isinstance(e, HostRepaired), timeout=30,
                        what="host.repaired from the monitor")
        wait_until(lambda: _host(url, "h1")["health"] == "ok", 30, what="h1 healthy again")
        # w1 was resumable: requeued by the failure, it runs again on the repaired host.
        wait_until(lambda: _host(url, "h1")["used"] == 8, 30, what="w1 back on h1")
        time.sleep(0.6)  # more healthy looks: no second repair, no second fault
        evs = live.events(C)
        assert [type(e).__name__ for e in evs if isinstance(e, HostFaulted | HostRepaired)] == [
            "HostFaulted", "HostRepaired"]
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(20)
        live.close()
    out = (tmp_path / "monitor.out").read_text()
    looks = [json.loads(line) for line in out.splitlines() if line.startswith("{\"host\"")]
    assert [lk["published"] for lk in looks if lk["transition"]] == ["accepted", "accepted"], out
    assert "Traceback" not in out


def test_a_signed_monitor_on_a_worker_that_requires_signatures(kafka: str, tmp_path: Path) -> None:
    """With --key-file the events are signed as the monitor's actor; unsigned ones are refused."""
    from identity import keys
    from streams import signing
    from tests.kafka import TICK_KEY

    root_secret, mon_secret = "root-secret", "monitor-h1-secret"
    ring = tmp_path / "keyring.toml"
    ring.write_text(f'[keys]\nroot = "{keys.public_hex(keys.public_of(root_secret.encode()))}"\n'
                    f'monitor-h1 = "{keys.public_hex(keys.public_of(mon_secret.encode()))}"\n'
                    f'"allot.ticker" = "{keys.public_hex(keys.public_of(TICK_KEY.encode()))}"\n')
    key_file = tmp_path / "monitor.key"
    key_file.write_text(mon_secret + "\n")
    prefix = unique_prefix()
    live = Live(kafka, prefix).start()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").symlink_to(FIXTURES / "fake-nvidia-smi")
    answer = tmp_path / "answer"
    answer.write_text((FIXTURES / "ecc-uncorrected.csv").read_text())
    try:
        now = int(time.time())
        env = dict(at=now, cluster=C, actor="root", source="test")
        from events import PrincipalRegistered

        mon_pub = keys.public_hex(keys.public_of(mon_secret.encode()))
        root_pub = keys.public_hex(keys.public_of(root_secret.encode()))
        # root is the configured first admin: it registers itself as operator and
        # manager too, then the monitor for h1 (ids are per signer: '<signer>:...').
        for e in (PrincipalRegistered(id="root:reg-root", principal="root", public_key=root_pub,
                                      key_id=keys.key_id(keys.public_from_hex(root_pub)),
                                      roles=("admin", "operator", "manager"), **env),
                  BudgetNodeDefined(id="root:b0", path="lab", shares=1, managers=("root",), **env),
                  HostAdded(id="root:h1", host="h1", gpus=8, **env),
                  PrincipalRegistered(id="root:reg-mon", principal="monitor-h1",
                                      public_key=mon_pub,
                                      key_id=keys.key_id(keys.public_from_hex(mon_pub)),
                                      roles=("monitor",), hosts=("h1",), **env)):
            live.send(e, sign_as=("root", root_secret))
        live.start_worker((C,), keyring_file=str(ring), require_signatures=True,
                          admin_principal="root")
        live.wait_event(C, lambda e: isinstance(e, HostAdded), timeout=30, what="h1 added")
        penv = {k: v for k, v in os.environ.items()
                if not k.startswith("ALLOT_") and k != "KAFKA_BOOTSTRAP_SERVERS"}
        penv.update(ALLOT_CORE="pure", FAKE_NVIDIA_SMI_OUTPUT=str(answer),
                    PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
                    ALLOT_RUN_DIR=str(tmp_path / "run"),
                    ALLOT_KEY_DIR=str(tmp_path / "no-keys"))  # no local key: unsigned
        base = [sys.executable, "-m", "allot", "monitor", "--host", "h1", "--interval", "0.1",
                "--fault-after", "2", "--looks", "2", "--bootstrap", kafka, "--topic-prefix",
                prefix, "--cluster", C, "--json", "--timeout", "15"]

        def looks(extra: list[str]) -> list[dict]:
            p = subprocess.run(base + extra, cwd=REPO, env=penv, capture_output=True, text=True,
                               timeout=90)
            assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
            return [json.loads(line) for line in p.stdout.splitlines()]

        unsigned = looks([])
        assert unsigned[-1]["transition"] == "fault" and unsigned[-1]["published"] == "rejected"
        assert signing.UNSIGNED in unsigned[-1]["detail"] and not unsigned[-1]["faulted"]
        signed = looks(["--key-file", str(key_file)])
        assert signed[-1]["published"] == "accepted" and signed[-1]["faulted"]
        fault = live.wait_event(C, lambda e: isinstance(e, HostFaulted), timeout=15)
        assert isinstance(fault, HostFaulted)
        assert (fault.actor, fault.severity, fault.reason) == (
            "monitor-h1", "degraded", "GPU 5: 2 uncorrected ECC error(s)")
        # The journaled input keeps the monitor's signature: an audit re-verifies it.
        from identity.audit_verify import verify_journal

        report = live.bg.run(verify_journal(live.bootstrap, signing.Keyring.from_file(ring),
                                            live.prefix))
        assert report.failed == 0 and report.by_signer.get("monitor-h1") == 1
    finally:
        live.close()
