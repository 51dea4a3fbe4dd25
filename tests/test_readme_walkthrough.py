"""The README's live stack and its real-work walkthrough, typed as written, over a real broker.

Issue 24's "done when": start the embedded stack, a local executor on fake
GPUs and a monitor on a fake ``nvidia-smi``; submit a real command with a
budget; watch it run; fault its host through the monitor and see it
preempted with grace and requeued; read why (``allot explain``) and the
history (``allot history``): no traceback, no epoch seconds on screen.

The first block's ``allot`` lines run one by one (as
``../shared/tools/readme-live-check`` types them: ``top`` with ``--once``, the
projections left out so no fixed port is taken); the walkthrough block runs
whole in one ``bash``, as a person pastes it (its ``export`` and background
jobs carry from line to line), from a directory that holds the repository's
``tests/`` and ``examples/``.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.kafka import REPO

pytestmark = pytest.mark.kafka

# Unix seconds of 2020..2033, standing alone: not digits inside a hex id (the ids are random,
# so "…e9be5ddd1746420685b4…" once matched and failed the test).
EPOCH = re.compile(r"(?<![\w.])1[6-9]\d{8}(?![\w.])")


def _blocks() -> tuple[list[str], str]:
    """The first block's ``allot`` lines and the walkthrough block (shell), from the README."""
    text = (REPO / "README.md").read_text()
    section = text[text.index("## The live stack"):]
    section = section[:section.index("\n## ", 5)]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    first = [line.split("#", 1)[0].strip() for line in blocks[0].splitlines()]
    walk = next(b for b in blocks if "allot executor local" in b and "allot monitor" in b)
    return [line for line in first if line.startswith("allot ")], walk


def test_the_walkthrough_blocks_are_where_the_test_reads_them() -> None:
    first, walk = _blocks()
    assert first[0].startswith("allot up") and any(" submit " in f" {x} " for x in first)
    for step in ("allot policy set preemption_grace_s=", "--script examples/train.sh",
                 "lost-gpu.csv", "allot wait train-1 --for preempted", "allot explain train-1",
                 "allot history"):
        assert step in walk, step


def test_the_readme_walkthrough_runs_as_written(tmp_path: Path) -> None:
    first, walk = _blocks()
    for name in ("tests", "examples"):
        (tmp_path / name).symlink_to(REPO / name)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ALLOT_", "FAKE_NVIDIA")) and k != "KAFKA_BOOTSTRAP_SERVERS"}
    env.update(ALLOT_RUN_DIR=str(tmp_path / "run"), ALLOT_KEY_DIR=str(tmp_path / "keys"),
               XDG_STATE_HOME=str(tmp_path / "state"), USER="walker", COLUMNS="200",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}")
    up_line = re.sub(r"\s--projections\s+\d+", "", first[0])
    up = subprocess.Popen(["bash", "-c", f"exec {up_line}"], cwd=tmp_path, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          start_new_session=True)
    assert up.stdout is not None
    said = []
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            line = up.stdout.readline()
            said.append(line)
            if not line or "Ctrl-C stops everything" in line:
                break
        assert "Ctrl-C stops everything" in said[-1], "".join(said)
        screen = []
        for line in first[1:]:
            if " top" in f" {line} ":
                line += " --once"
            r = subprocess.run(["bash", "-c", line], cwd=tmp_path, env=env, text=True,
                               capture_output=True, timeout=90)
            screen.append(r.stdout + r.stderr)
            assert r.returncode == 0 and "Traceback" not in r.stdout + r.stderr, (line, r)
        # Its own process group: if a step fails, bash -e exits before the block's
        # `kill %1 %2`, and its background executor and monitor must not outlive the test.
        walker = subprocess.Popen(["bash", "-e", "-c", walk], cwd=tmp_path, env=env, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  start_new_session=True)
        try:
            stdout, stderr = walker.communicate(timeout=300)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(walker.pid, signal.SIGKILL)
        out = stdout + stderr
        assert walker.returncode == 0 and "Traceback" not in out, out
        screen.append(out)
    finally:
        os.killpg(up.pid, signal.SIGINT)
        try:
            up.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(up.pid, signal.SIGKILL)
    # What the person reads: the preemption, its grace used to checkpoint, the requeue,
    # the resumed run, the history; dates, never Unix seconds.
    assert "workload.started train-1 on g0:8" in out
    assert re.search(r"train-1: pending at .* UTC \(last preempted at .* host_failure by g0\)",
                     out), out
    assert "its host g0 failed" in out and "It was requeued: it resumes from its last" in out
    saved = re.search(r"SIGTERM: checkpoint saved at step (\d+)", out)
    assert saved and int(saved.group(1)) > 0, out
    assert f"run 2 of train-1 on GPUs 0,1,2,3,4,5,6,7: from step {saved.group(1)} of 20" in out
    assert "done: 20 steps" in out
    assert re.search(r"train-1\s+│ walker\s+│ lab/alice\s+│ 8\s+│ succeeded .*│ 2\s+│ 1", out), out
    for text in screen:
        assert not EPOCH.search(text), EPOCH.search(text)
    # The grace held: the executor reported the stop (the trap ran, it exited 0) and the
    # scheduler journaled it before the second start.
    log = (tmp_path / "out" / "g0" / "executor.log").read_text()
    assert '"executor.stopping"' in log and '"grace_s": 30' in log, log
