"""Checkpoint and restore hooks: how a session keeps its in-memory state across a preemption.

A workload declares them in its run spec as two entries of ``env`` (so a
submission without hooks is unchanged on the wire), each a shell command run
with ``sh -c`` (docs/executor.md, "Sessions that can be restored"):

- ``ALLOT_CHECKPOINT_HOOK``: on a preemption with a grace, the executor runs it
  *before* SIGTERM, for at most ``hook_budget_s(grace)`` (the rest of the grace
  is the command's, for its own SIGTERM handling), in the run's environment
  plus ``ALLOT_CHECKPOINT_DIR`` (this run's checkpoint directory, made at its start)
  and ``ALLOT_COMMAND_PID`` (the command's pid: a hook may signal it). Exit 0
  within its time completes the checkpoint: the directory gets a marker file,
  ``allot-checkpoint.json``. Anything else (a non-zero exit, the time running
  out, no grace at all) leaves no checkpoint, and says so in the run's log and
  the executor's.
- ``ALLOT_RESTORE_HOOK``: a later run of the workload whose host sees a
  completed checkpoint of an earlier run gets ``ALLOT_RESTORE_FROM`` (that
  directory), and the run's launcher runs the restore hook before the command
  (which then also gets ``ALLOT_RESTORE_STATUS``: ``ok`` or ``failed``).

``python -m executor.hooks SPEC_JSON DEADLINE`` is the process that runs a
checkpoint hook (spawned by the executor in a session of its own, like a
run's launcher, so the hook's outcome is recorded even if the executor
restarts meanwhile): it writes ``hook.json`` beside the run's ``spec.json``,
first ``{"outcome": "running", "pgid"}``, last the outcome.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, Any

from executor.launch import write_json
from executor.spec import safe_name

CHECKPOINT_HOOK = "ALLOT_CHECKPOINT_HOOK"
RESTORE_HOOK = "ALLOT_RESTORE_HOOK"
HOOK_STATUS = "hook.json"          # in the run directory: the checkpoint hook's outcome
RESTORE_STATUS = "restore.json"    # in the run directory: the restore hook's outcome
COMPLETE = "allot-checkpoint.json"  # in a checkpoint directory: the hook completed
# A hook's outcome: completed (exit 0 in time), failed (non-zero exit or a signal),
# timeout (killed when its time ran out), error (could not start: bad workdir...).
OUTCOMES = ("completed", "failed", "timeout", "error")


def declared(env: Iterable[str]) -> dict[str, str]:
    """The hooks among a workload's ``NAME=value`` entries (the last of a name wins; empty: none)."""
    found: dict[str, str] = {}
    for item in env:
        name, _, value = item.partition("=")
        if name in (CHECKPOINT_HOOK, RESTORE_HOOK):
            found[name] = value
    return {k: v for k, v in found.items() if v.strip()}


def hook_budget_s(grace_s: int) -> int:
    """How long a checkpoint hook may run in a grace of ``grace_s`` seconds.

    The grace minus what is kept for the command's own SIGTERM handling: a
    quarter of the grace, at most 30 s (``simulator.spec.hook_budget_s`` is the
    same rule). SIGKILL still comes when the grace ends, as without a hook.
    """
    return grace_s - min(grace_s // 4, 30)


def checkpoint_dir(root: Path, workload: str, run: int, rank: int = 0) -> Path:
    """Where run ``run`` of ``workload`` (this rank's share) puts its checkpoint."""
    return root / safe_name(workload) / (f"run{run}" + (f".rank{rank}" if rank else ""))


def latest_checkpoint(root: Path, workload: str, before_run: int, rank: int = 0) -> Path | None:
    """The completed checkpoint of the latest run before ``before_run`` (same rank), if any."""
    for run in range(before_run - 1, 0, -1):
        d = checkpoint_dir(root, workload, run, rank)
        if (d / COMPLETE).is_file():
            return d
    return None


def note(log: IO[bytes], text: str) -> None:
    """One line of allot's in the run's log (so its owner sees what happened to the hook)."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    log.write(f"[allot {stamp} UTC] {text}\n".encode())
    log.flush()


def _ended(proc: subprocess.Popen[bytes], code: int) -> dict[str, Any]:
    if code == 0:
        return {"outcome": "completed", "exit_code": 0, "signal": None}
    if code < 0:
        return {"outcome": "failed", "exit_code": None, "signal": signal.Signals(-code).name}
    return {"outcome": "failed", "exit_code": code, "signal": None}


def describe(outcome: Mapping[str, Any]) -> str:
    """A hook's outcome in a few words (for logs)."""
    what = outcome.get("outcome")
    if what == "completed":
        return f"completed in {outcome.get('seconds', 0):.1f} s"
    if what == "failed":
        how = f"exit {outcome['exit_code']}" if outcome.get("exit_code") is not None \
            else f"signal {outcome.get('signal')}"
        return f"failed ({how})"
    if what == "timeout":
        return f"timed out after {outcome.get('seconds', 0):.1f} s (killed)"
    return f"could not start: {outcome.get('error')}"


def run_checkpoint_hook(run_dir: Path, deadline: float) -> dict[str, Any]:
    """Run the checkpoint hook of the run in ``run_dir`` until wall time ``deadline``; its outcome."""
    spec = json.loads((run_dir / "spec.json").read_text())
    env: dict[str, str] = dict(spec["environment"])
    hook = env.get(CHECKPOINT_HOOK, "")
    ckpt = Path(env["ALLOT_CHECKPOINT_DIR"])
    command = _read_pid(run_dir / "command.json")
    if command is not None:
        env["ALLOT_COMMAND_PID"] = str(command)
    t0 = time.time()
    outcome: dict[str, Any]
    log_path = Path(spec["log_file"])
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        note(log, f"checkpoint hook: running {hook!r} into {ckpt} "
                   f"(at most {max(0.0, deadline - t0):.0f} s)")
        try:
            # (The command may have written there too: kept. Only this hook's exit 0
            # marks the directory complete, so a cut earlier attempt's mark goes.)
            ckpt.mkdir(parents=True, exist_ok=True)
            (ckpt / COMPLETE).unlink(missing_ok=True)
            proc = subprocess.Popen(["sh", "-c", hook], cwd=spec.get("workdir") or None, env=env,
                                    stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, process_group=0)
        except (OSError, ValueError, subprocess.SubprocessError) as exc:
            outcome = {"outcome": "error", "error": f"{type(exc).__name__}: {exc}",
                       "exit_code": None, "signal": None}
        else:
            write_json(run_dir / HOOK_STATUS, {"outcome": "running", "pgid": proc.pid})
            try:
                outcome = _ended(proc, proc.wait(timeout=max(0.0, deadline - time.time())))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(OSError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                outcome = {"outcome": "timeout", "exit_code": None, "signal": "SIGKILL"}
        outcome["seconds"] = round(time.time() - t0, 3)
        if outcome["outcome"] == "completed":
            write_json(ckpt / COMPLETE, {"workload": spec["spec"]["workload"],
                                         "run": spec["spec"]["run"], "host": spec["spec"]["host"],
                                         "completed_at": time.time()})
            note(log, f"checkpoint hook {describe(outcome)}: {ckpt}")
        else:
            note(log, f"checkpoint hook {describe(outcome)}: no checkpoint of this run "
                       "(the next run starts without one)")
    write_json(run_dir / HOOK_STATUS, outcome)
    return outcome


def run_restore_hook(env: dict[str, str], workdir: str | None, log: IO[bytes]) -> dict[str, Any]:
    """Run the restore hook before a command (in its process group: a stop reaches it too)."""
    hook = env.get(RESTORE_HOOK, "")
    source = env.get("ALLOT_RESTORE_FROM", "")
    note(log, f"restore hook: running {hook!r} from {source}")
    t0 = time.time()
    outcome: dict[str, Any]
    try:
        proc = subprocess.Popen(["sh", "-c", hook], cwd=workdir or None, env=env,
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        outcome = _ended(proc, proc.wait())
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        outcome = {"outcome": "error", "error": f"{type(exc).__name__}: {exc}",
                   "exit_code": None, "signal": None}
    outcome["seconds"] = round(time.time() - t0, 3)
    note(log, f"restore hook {describe(outcome)}" + (
        "" if outcome["outcome"] == "completed" else ": the command starts anyway, "
        "with ALLOT_RESTORE_STATUS=failed"))
    return outcome


def _read_pid(path: Path) -> int | None:
    try:
        return int(json.loads(path.read_text())["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def main(argv: list[str]) -> int:
    spec_path, deadline = Path(argv[0]), float(argv[1])
    signal.signal(signal.SIGTERM, lambda *_: None)  # only the deadline ends a hook
    run_checkpoint_hook(spec_path.parent, deadline)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


__all__ = ["CHECKPOINT_HOOK", "COMPLETE", "HOOK_STATUS", "OUTCOMES", "RESTORE_HOOK",
           "RESTORE_STATUS", "checkpoint_dir", "declared", "describe", "hook_budget_s",
           "latest_checkpoint", "note", "run_checkpoint_hook", "run_restore_hook"]
