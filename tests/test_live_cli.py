"""``allot worker`` as people start it: flags, a config file, and KAFKA_BOOTSTRAP_SERVERS."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from events import ClockTicked
from tests.kafka import REPO, TICK_KEY, Live, unique_prefix

pytestmark = pytest.mark.kafka


def _run(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith("ALLOT_") and k != "KAFKA_BOOTSTRAP_SERVERS"}
    return subprocess.Popen([sys.executable, "-m", "allot", "worker", *args], cwd=REPO,
                            env={**clean, **env}, stdout=log.open("wb"), stderr=subprocess.STDOUT)


@pytest.mark.parametrize("how", ["flag", "env"])
def test_allot_worker_ticks_its_cluster(kafka: str, tmp_path: Path, how: str) -> None:
    prefix = unique_prefix()
    cfg = tmp_path / "worker.toml"
    cfg.write_text(f'topic_prefix = "{prefix}"\nclusters = ["cli-a"]\npartitions = 4\n'
                   f'group = "{prefix}g"\ntick_key = "{TICK_KEY}"\n')
    args = ["--config", str(cfg)]
    env: dict[str, str] = {}
    if how == "flag":
        args += ["--bootstrap", kafka]
    else:
        env["KAFKA_BOOTSTRAP_SERVERS"] = kafka
    live = Live(kafka, prefix).start()
    proc = _run(args, env, tmp_path / "worker.log")
    try:
        live.wait_event("cli-a", lambda e: isinstance(e, ClockTicked), timeout=60,
                        what="a tick journaled by the worker")
    finally:
        proc.terminate()
        code = proc.wait(30)
        live.close()
    assert code == 0, (tmp_path / "worker.log").read_text()[-2000:]


def test_a_bad_setting_is_one_line_and_status_2(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "allot", "worker", "--partitions", "0"],
                          cwd=REPO, capture_output=True, text=True, timeout=60,
                          env={k: v for k, v in os.environ.items() if not k.startswith("ALLOT_")})
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "partitions" in proc.stderr
