"""``make demo`` in small: a few scheduler hours of the demo scenario through Kafka, then PASS."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.kafka import REPO

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def test_the_demo_plays_through_kafka_and_passes_its_audit_and_replay(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("ALLOT_") and k != "KAFKA_BOOTSTRAP_SERVERS"}
    out = tmp_path / "demo"
    proc = subprocess.run(
        [sys.executable, "-m", "allot", "up", "--demo", "--horizon-days", "0.15",
         "--time-scale", "1000", "--no-view", "--out", str(out), "--log-dir",
         str(tmp_path / "logs")], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "PASS" in proc.stdout + proc.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["passed"] and report["replay_ok"] and report["audit_ok"]
    assert report["submissions"] > 10 and report["finished"] > 0
    assert report["missing_inputs"] == []
    assert (out / "journal.jsonl").stat().st_size > 0
    assert (out / "audit.duckdb").exists()
