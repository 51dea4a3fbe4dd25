"""Checkpoint and restore hooks over real processes: a session keeps its in-memory state across a preemption.

The journal is fed by hand (as in tests/test_executor_local.py); the session
is a small ``sh`` script holding a counter in memory that it writes out only
when asked (SIGUSR1), as a notebook kernel would be asked to dump its state.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from events import WorkloadStopped
from executor.hooks import COMPLETE, checkpoint_dir, declared, hook_budget_s, latest_checkpoint
from executor.local import LocalExecutor
from simulator.spec import hook_budget_s as sim_hook_budget_s
from tests.kafka import wait_until
from tests.test_executor_local import GPUS, Journal, T, reconcile_until

# The session: state only in memory (n), written to $ALLOT_CHECKPOINT_DIR on SIGUSR1;
# it starts from $ALLOT_RESTORE_FROM's state (via the restore hook's copy) if any.
SESSION = ('n=$(cat restored.txt 2>/dev/null || echo 0); '
           'echo "run $ALLOT_RUN from n=$n restore=${ALLOT_RESTORE_FROM:-none} '
           'status=${ALLOT_RESTORE_STATUS:-none}"; '
           'trap \'echo "$n" > "$ALLOT_CHECKPOINT_DIR/state.tmp" && '
           'mv "$ALLOT_CHECKPOINT_DIR/state.tmp" "$ALLOT_CHECKPOINT_DIR/state"\' USR1; '
           "trap 'echo TERM at n=$n; exit 0' TERM; "
           'while :; do n=$((n + 1)); sleep 0.05 & wait $!; done')
SAVE = ('kill -USR1 "$ALLOT_COMMAND_PID"; '
        'while [ ! -s "$ALLOT_CHECKPOINT_DIR/state" ]; do sleep 0.02; done')
RESTORE = 'cp "$ALLOT_RESTORE_FROM/state" restored.txt'


class Log:
    """Records the executor's structured log lines."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str, dict[str, Any]]] = []

    def info(self, what: str, **kw: Any) -> None:
        self.lines.append(("info", what, kw))

    def warning(self, what: str, **kw: Any) -> None:
        self.lines.append(("warning", what, kw))

    def named(self, what: str) -> list[dict[str, Any]]:
        return [kw for _, w, kw in self.lines if w == what]


def _session(tmp: Path, grace: int, *, save: str = SAVE, restore: str | None = RESTORE,
             command: tuple[str, ...] = ("sh", "-c", SESSION)) -> tuple[LocalExecutor, Journal, Log]:
    j = Journal()
    log = Log()
    env = [f"ALLOT_CHECKPOINT_HOOK={save}"] + ([f"ALLOT_RESTORE_HOOK={restore}"] if restore else [])
    workdir = tmp / "work"
    workdir.mkdir()
    ex = LocalExecutor("unused:1", "", "c", "h0", GPUS, tmp / "state",
                       base_env={"PATH": os.environ["PATH"]}, kill_wait_s=1.0, log=log)
    for e in (j.mk.policy(at=T, preemption_grace_s=grace),
              j.mk.submit("nb", "lab/a", 1, 0, at=T, resumable=True, kind="interactive",
                          command=command, workdir=str(workdir), env=tuple(env)),
              j.mk.tick(T), j.started("nb", (("h0", 1),))):
        ex.book.add(e)
    return ex, j, log


def _run_log(ex: LocalExecutor, run: int) -> str:
    s = ex.supervisor.runs[("nb", run)]
    path = ex.supervisor.log_of(s)
    return path.read_text() if path.exists() else ""


def _preempt(ex: LocalExecutor, j: Journal) -> float:
    """Wait until run 1 has counted a little, then preempt it; the wall time of the preemption."""
    assert ex.reconcile(time.time()) == []
    wait_until(lambda: "run 1" in _run_log(ex, 1), 10, what="the session to start")
    time.sleep(0.3)  # (it counts, and sets its traps)
    ex.book.add(j.preempted("nb"))
    ex.book.add(j.mk.tick(T + 1))
    return time.monotonic()


def _restart(ex: LocalExecutor, j: Journal) -> None:
    """Start run 2 of the session on this host; wait until it runs."""
    ex.book.add(j.started("nb", (("h0", 1),)))
    assert ex.reconcile(time.time()) == []
    wait_until(lambda: "run 2" in _run_log(ex, 2), 10, what="run 2 to start")


def test_the_checkpoint_hook_runs_before_sigterm_and_the_next_run_restores(tmp_path: Path) -> None:
    ex, j, log = _session(tmp_path, grace=6)
    t0 = _preempt(ex, j)
    [report] = reconcile_until(ex, lambda r: r)
    assert isinstance(report, WorkloadStopped) and report.exit_code == 0
    assert time.monotonic() - t0 < 6, "stopped within the grace"
    ckpt = checkpoint_dir(tmp_path / "state" / "checkpoints", "nb", 1)
    saved = int((ckpt / "state").read_text())
    assert saved > 0 and (ckpt / COMPLETE).is_file()
    text = _run_log(ex, 1)
    # The hook ran (and completed) before SIGTERM reached the session.
    assert text.index("checkpoint hook completed") < text.index("TERM at n=")
    [done] = log.named("executor.checkpoint_saved")
    assert done["checkpoint_dir"] == str(ckpt)
    assert not log.named("executor.checkpoint_hook_failed")

    # The requeued run: the restore hook copies the state back before the command.
    _restart(ex, j)
    first = next(line for line in _run_log(ex, 2).splitlines() if line.startswith("run 2"))
    assert first == f"run 2 from n={saved} restore={ckpt} status=ok"
    assert ex.reconcile(time.time()) == []  # (a pass reads the restore hook's outcome)
    [restored] = log.named("executor.restored")
    assert restored["restore_from"] == str(ckpt)
    assert latest_checkpoint(tmp_path / "state" / "checkpoints", "nb", 2) == ckpt
    ex.supervisor.kill_now(ex.supervisor.runs[("nb", 2)], "test", time.time())


def test_a_failing_hook_is_reported_and_the_run_still_stops_in_time(tmp_path: Path) -> None:
    ex, j, log = _session(tmp_path, grace=6, save="echo cannot save; exit 3")
    t0 = _preempt(ex, j)
    [report] = reconcile_until(ex, lambda r: r)
    assert isinstance(report, WorkloadStopped)
    assert time.monotonic() - t0 < 6
    ckpt = checkpoint_dir(tmp_path / "state" / "checkpoints", "nb", 1)
    assert not (ckpt / COMPLETE).exists()
    [failed] = log.named("executor.checkpoint_hook_failed")
    assert failed["outcome"] == "failed" and failed["exit_code"] == 3
    assert "without a checkpoint" in failed["why"]
    text = _run_log(ex, 1)
    assert "cannot save" in text and "checkpoint hook failed (exit 3)" in text
    # The next run has nothing to restore: no hint, no restore hook.
    _restart(ex, j)
    assert "run 2 from n=0 restore=none status=none" in _run_log(ex, 2)
    ex.supervisor.kill_now(ex.supervisor.runs[("nb", 2)], "test", time.time())


def test_a_hook_that_outlasts_its_share_of_the_grace_is_killed_and_sigterm_follows(
        tmp_path: Path) -> None:
    pidfile = tmp_path / "hook.pid"
    ex, j, log = _session(tmp_path, grace=4, save=f"echo $$ > {pidfile}; sleep 60")
    t0 = _preempt(ex, j)
    [report] = reconcile_until(ex, lambda r: r, timeout=15)
    took = time.monotonic() - t0
    assert isinstance(report, WorkloadStopped) and report.exit_code == 0  # its TERM trap ran
    # The hook had hook_budget_s(4) = 3 s, then SIGTERM; all before the grace's 4 s.
    assert hook_budget_s(4) == 3 and 2.8 <= took < 4.0
    [failed] = log.named("executor.checkpoint_hook_failed")
    assert failed["outcome"] == "timeout"
    hook_pid = int(pidfile.read_text())
    wait_until(lambda: not Path(f"/proc/{hook_pid}").exists()
               or "zombie" in Path(f"/proc/{hook_pid}/status").read_text().lower(), 5,
               what="the hook to be killed")
    assert "timed out" in _run_log(ex, 1)
    assert not (checkpoint_dir(tmp_path / "state" / "checkpoints", "nb", 1) / COMPLETE).exists()


def test_without_a_grace_the_hook_is_skipped_and_says_so(tmp_path: Path) -> None:
    ex, j, log = _session(tmp_path, grace=0)
    _preempt(ex, j)
    ex.reconcile(time.time())
    s = ex.supervisor.runs[("nb", 1)]
    wait_until(lambda: not ex.supervisor.alive(s), 5, interval=0.02, what="the kill")
    [skipped] = log.named("executor.checkpoint_hook_skipped")
    assert "no grace" in skipped["why"]
    assert "checkpoint hook not run" in _run_log(ex, 1)
    assert not (tmp_path / "state" / "checkpoints" / "nb" / "run1" / COMPLETE).exists()


def test_a_restarted_executor_adopts_a_running_hook(tmp_path: Path) -> None:
    go = tmp_path / "go"
    ex, j, _ = _session(tmp_path, grace=20, save=f"while [ ! -e {go} ]; do sleep 0.02; done; {SAVE}")
    _preempt(ex, j)
    assert ex.reconcile(time.time()) == []  # the hook started; SIGTERM waits for it
    s = ex.supervisor.runs[("nb", 1)]
    assert s.stop is not None and s.stop["term_at"] is None
    # The executor restarts: a new one on the same state directory, the same journal.
    log = Log()
    again = LocalExecutor("unused:1", "", "c", "h0", GPUS, tmp_path / "state",
                          base_env={"PATH": os.environ["PATH"]}, kill_wait_s=1.0, log=log)
    again.book = ex.book
    again.supervisor.load()
    adopted = again.supervisor.runs[("nb", 1)]
    assert adopted.hook_proc is None
    # Adopted by its pid: running once the runner's process has exec'd (on a busy
    # machine that can trail the spawn a little; the pid's command line says so).
    wait_until(lambda: again.supervisor.hook_running(adopted), 10, interval=0.02,
               what="the adopted hook's runner")
    assert again.reconcile(time.time()) == []  # still waiting for the hook
    go.touch()
    [report] = reconcile_until(again, lambda r: r)
    assert isinstance(report, WorkloadStopped) and report.exit_code == 0
    assert log.named("executor.checkpoint_saved")
    assert s.hook_proc is not None and s.hook_proc.wait(5) == 0  # (reap the first one's child)


def test_hooks_are_env_entries_and_the_budget_keeps_time_for_sigterm() -> None:
    assert declared(("A=1", "ALLOT_CHECKPOINT_HOOK=save", "ALLOT_RESTORE_HOOK=",
                     "ALLOT_CHECKPOINT_HOOK=save2 --now")) == {"ALLOT_CHECKPOINT_HOOK": "save2 --now"}
    assert declared(("PATH=/bin",)) == {}
    assert [hook_budget_s(g) for g in (0, 1, 4, 10, 120, 600)] == [0, 1, 3, 8, 90, 570]
    for g in (0, 3, 7, 119, 121, 3600):  # the simulator models the same rule
        assert sim_hook_budget_s(g) == hook_budget_s(g)


def test_submit_sends_the_hooks_as_env_entries() -> None:
    from allot.cli import build_parser
    from streams.commands import run_spec
    from streams.errors import ClientError

    args = build_parser().parse_args([
        "submit", "--budget", "lab/a", "--gpus", "1", "--kind", "interactive", "--env", "A=1",
        "--checkpoint-hook", "jupyter-save --to $ALLOT_CHECKPOINT_DIR",
        "--restore-hook", "cp -r $ALLOT_RESTORE_FROM/. .", "--", "jupyter", "lab"])
    assert run_spec(args)["env"] == ("A=1",
                                     "ALLOT_CHECKPOINT_HOOK=jupyter-save --to $ALLOT_CHECKPOINT_DIR",
                                     "ALLOT_RESTORE_HOOK=cp -r $ALLOT_RESTORE_FROM/. .")
    with pytest.raises(ClientError, match="empty command"):
        run_spec(build_parser().parse_args(["submit", "--budget", "lab/a", "--gpus", "1",
                                            "--checkpoint-hook", " ", "--", "true"]))


def test_the_example_session_keeps_its_cells_across_a_preemption(tmp_path: Path) -> None:
    examples = Path(__file__).resolve().parent.parent / "examples"
    hook = examples / "session-hook.sh"
    ex, j, _ = _session(tmp_path, grace=10, save=f"{hook} checkpoint",
                        restore=f"{hook} restore", command=(str(examples / "session.sh"),))
    assert ex.reconcile(time.time()) == []
    wait_until(lambda: "session: run 1" in _run_log(ex, 1), 10, what="the session to start")
    time.sleep(1.5)  # (a cell or two)
    ex.book.add(j.preempted("nb"))
    ex.book.add(j.mk.tick(T + 1))
    [report] = reconcile_until(ex, lambda r: r)
    assert isinstance(report, WorkloadStopped)
    text = _run_log(ex, 1)
    saved = int(text.split("state saved at ")[1].split()[0])
    assert saved >= 1 and "SIGTERM at" in text
    _restart(ex, j)
    ckpt = checkpoint_dir(tmp_path / "state" / "checkpoints", "nb", 1)
    assert f"session: run 2 of nb, {saved} cells in memory (restored from: {ckpt})" in \
        _run_log(ex, 2)
    ex.supervisor.kill_now(ex.supervisor.runs[("nb", 2)], "test", time.time())
