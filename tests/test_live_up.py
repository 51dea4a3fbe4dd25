"""``allot up``: the embedded stack starts, serves, and stops with nothing left behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from streams.up import bootstrap_configured
from tests.kafka import REPO, unique_prefix

pytestmark = pytest.mark.kafka


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if not k.startswith("ALLOT_") and k != "KAFKA_BOOTSTRAP_SERVERS"}


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status


def _start(tmp: Path, *args: str) -> tuple[subprocess.Popen[str], dict[str, int]]:
    proc = subprocess.Popen([sys.executable, "-m", "allot", "up", "--log-dir", str(tmp / "logs"),
                             "--cluster", "up-a", *args], cwd=REPO, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    pids: dict[str, int] = {}
    lines = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if line.startswith("pids "):
            pids = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", line)}
        if "Ctrl-C stops everything" in line:
            return proc, pids
    proc.kill()
    raise AssertionError("allot up did not come up:\n" + "".join(lines))


def _wait_gone(pids: dict[str, int], timeout: float = 20) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = [n for n, p in pids.items() if _alive(p)]
        if not left:
            return []
        time.sleep(0.2)
    return [n for n, p in pids.items() if _alive(p)]


def test_ctrl_c_stops_everything_cleanly(tmp_path: Path) -> None:
    proc, pids = _start(tmp_path)
    assert set(pids) == {"archive", "worker", "executor", "broker"}
    assert all(_alive(p) for p in pids.values())
    time.sleep(2)  # let the worker claim and tick
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert "topics are gone" in out
    assert _wait_gone(pids) == []
    assert '"worker.stopped"' in (tmp_path / "logs" / "worker.log").read_text()


def test_kill_9_of_allot_up_leaves_no_orphans(tmp_path: Path) -> None:
    proc, pids = _start(tmp_path)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    assert _wait_gone(pids) == []


def test_a_configured_broker_is_used_instead_of_the_embedded_one(kafka: str,
                                                                 tmp_path: Path) -> None:
    proc, pids = _start(tmp_path, "--bootstrap", kafka, "--topic-prefix", unique_prefix())
    try:
        assert "broker" not in pids
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert _wait_gone(pids) == []


@pytest.mark.parametrize(("flag", "env", "want"), [
    (None, {}, False), ("127.0.0.1:9", {}, True), (None, {"KAFKA_BOOTSTRAP_SERVERS": "x:1"}, True),
    (None, {"ALLOT_BOOTSTRAP": "x:1"}, True)])
def test_the_embedded_broker_starts_only_when_no_kafka_is_named(
        flag: str | None, env: dict[str, str], want: bool) -> None:
    assert bootstrap_configured(None, flag, env) is want


def test_a_config_file_naming_kafka_counts(tmp_path: Path) -> None:
    cfg = tmp_path / "w.toml"
    cfg.write_text('bootstrap = "127.0.0.1:9"\n')
    assert bootstrap_configured(str(cfg), None, {})
    cfg.write_text('partitions = 2\n')
    assert not bootstrap_configured(str(cfg), None, {})
