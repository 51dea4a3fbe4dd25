"""The parent of one run's command: starts it, then records how it ended in the run directory.

``python -m executor.launch RUN_DIR`` is what the executor spawns, as the
leader of a new session and process group (its command is in that group, so
one ``killpg`` reaches the command and anything it started). It outlives a
restart of the executor: the exit of a command whose executor was down is
still recorded, in ``status.json``, because this process (not the executor)
is the command's parent.

- ``pid.json``: written first, ``{"pid", "started_at"}`` (wall-clock seconds).
- ``command.json``: the command's own pid, once it runs (a checkpoint hook may signal it).
- ``restore.json``: the restore hook's outcome, when the run restores a checkpoint
  (``executor.hooks``: the hook runs first, in this process group).
- ``status.json``: written last, ``{"exit_code", "signal", "error"}``.

SIGTERM to the group is meant for the command: this process ignores it (with
a handler, not SIG_IGN, which the command would inherit) and stays to record
the exit. SIGKILL ends both; the executor, which sent it, knows why.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

SPEC, PID, STATUS, COMMAND = "spec.json", "pid.json", "status.json", "command.json"


def write_json(path: Path, value: object) -> None:
    """Write ``value`` to ``path`` atomically (a reader sees all of it or nothing)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(value))
    os.replace(tmp, path)


def main(argv: list[str]) -> int:
    run_dir = Path(argv[0])
    spec = json.loads((run_dir / SPEC).read_text())
    signal.signal(signal.SIGTERM, lambda *_: None)  # the group's SIGTERM is for the command
    signal.signal(signal.SIGINT, lambda *_: None)
    write_json(run_dir / PID, {"pid": os.getpid(), "started_at": time.time()})
    log_path = Path(spec["log_file"])
    status: dict[str, object]
    try:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log:
            env = spec["environment"]
            if env.get("ALLOT_RESTORE_HOOK") and env.get("ALLOT_RESTORE_FROM"):
                from executor.hooks import RESTORE_STATUS, run_restore_hook

                restored = run_restore_hook(env, spec.get("workdir"), log)
                write_json(run_dir / RESTORE_STATUS, restored)
                env = {**env, "ALLOT_RESTORE_STATUS":
                       "ok" if restored["outcome"] == "completed" else "failed"}
            proc = subprocess.Popen(spec["argv"], cwd=spec.get("workdir") or None,
                                    env=env, stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=subprocess.STDOUT)
            write_json(run_dir / COMMAND, {"pid": proc.pid})
            while True:
                try:
                    code = proc.wait()
                    break
                except InterruptedError:  # pragma: no cover - PEP 475 retries for us
                    continue
        if code < 0:
            status = {"exit_code": None, "signal": signal.Signals(-code).name, "error": None}
        else:
            status = {"exit_code": code, "signal": None, "error": None}
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        # Could not start it (no such program, bad workdir, unwritable log).
        status = {"exit_code": None, "signal": None, "error": f"{type(exc).__name__}: {exc}"}
    write_json(run_dir / STATUS, status)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
