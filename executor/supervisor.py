"""Process supervision: launch a run's process group, signal it, learn how it ended, survive a restart.

The state of the executor is a directory, one sub-directory per run share it
ever launched (``runs/<workload>.run<N>``):

- ``spec.json``   the ``RunSpec`` plus the full environment and log file; its
                  existence means "launched" (written before the process is
                  spawned), so a run is never started twice;
- ``pid.json``    the launcher's pid (= its process group) and wall-clock start;
- ``status.json`` how the command ended (written by ``executor.launch``);
- ``stop.json``   a stop the executor began: why, when SIGTERM went (None while
                  a checkpoint hook runs first: its pid and deadline), the
                  SIGKILL deadline, whether SIGKILL went;
- ``hook.json``   the checkpoint hook's outcome (written by ``executor.hooks``);
- ``reported.json`` the id of the report sent for it (nothing more to do).

A restarted executor reads these back (``Supervisor.load``): a process still
alive is supervised again (its pid is checked against the run directory in
its command line, so a reused pid is not mistaken for it); one that ended
while the executor was down has its ``status.json``; one that vanished
without it (the machine rebooted) is ``lost``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec

from executor.hooks import HOOK_STATUS, RESTORE_STATUS
from executor.launch import PID, SPEC, STATUS, write_json
from executor.spec import RunSpec, log_file, run_environment, safe_name

STOP, REPORTED = "stop.json", "reported.json"


class Exit(msgspec.Struct, frozen=True, kw_only=True):
    """How a run's command ended."""

    exit_code: int | None = None
    signal: str | None = None
    reason: str | None = None   # time_limit, cannot_start, lost (None: by itself)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and self.signal is None and self.reason is None


class Supervised:
    """One launched share: its directory, spec and process, and any stop under way."""

    def __init__(self, path: Path, spec: RunSpec) -> None:
        self.path = path
        self.spec = spec
        self.proc: subprocess.Popen[bytes] | None = None   # when this executor spawned it
        self.pid: int | None = None
        self.started_at: float | None = None
        self.stop: dict[str, Any] | None = None
        self.reported: str | None = None
        self.hook_proc: subprocess.Popen[bytes] | None = None  # its checkpoint hook's runner

    @property
    def key(self) -> tuple[str, int]:
        return (self.spec.workload, self.spec.run)

    @property
    def stopping(self) -> bool:
        return self.stop is not None


def _read(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


class Supervisor:
    """The runs this executor launched on its host, kept in ``state_dir``."""

    def __init__(self, state_dir: Path, gpu_ids: tuple[str, ...], log_dir: Path | None = None,
                 base_env: Mapping[str, str] | None = None) -> None:
        self.state_dir = Path(state_dir)
        self.runs_dir = self.state_dir / "runs"
        self.log_dir = Path(log_dir) if log_dir is not None else self.state_dir / "logs"
        self.gpu_ids = gpu_ids
        self.base_env = dict(os.environ if base_env is None else base_env)
        self.runs: dict[tuple[str, int], Supervised] = {}
        self.runs_dir.mkdir(parents=True, exist_ok=True)

    # -- restart ------------------------------------------------------------------------

    def load(self) -> list[Supervised]:
        """Read back every run directory (after a restart); return them."""
        for d in sorted(p for p in self.runs_dir.iterdir() if p.is_dir()):
            raw = _read(d / SPEC)
            if raw is None:
                # Cut before its spec was written (the spawn comes after): nothing runs
                # it, so it is as if never launched, and it may be launched now.
                shutil.rmtree(d, ignore_errors=True)
                continue
            spec = msgspec.convert(raw["spec"], RunSpec)
            s = Supervised(d, spec)
            pid = _read(d / PID)
            if pid is not None:
                s.pid, s.started_at = int(pid["pid"]), float(pid["started_at"])
            else:
                s.pid = self._find(d)  # spawned, but died (or was killed) before writing it
            s.stop = _read(d / STOP)
            rep = _read(d / REPORTED)
            s.reported = None if rep is None else str(rep.get("id"))
            self.runs[s.key] = s
        return list(self.runs.values())

    def _find(self, run_dir: Path) -> int | None:
        """The launcher of ``run_dir`` in the process table, if it runs."""
        marker = str(run_dir).encode()
        for p in Path("/proc").iterdir():
            if p.name.isdigit() and marker in _cmdline(int(p.name)).split(b"\0"):
                return int(p.name)
        return None

    # -- launching ----------------------------------------------------------------------

    def busy_ids(self) -> set[str]:
        """GPU ids held by a live share (running or stopping)."""
        return {g for s in self.runs.values() if self.alive(s) for g in s.spec.gpu_ids}

    def free_ids(self) -> list[str]:
        busy = self.busy_ids()
        return [g for g in self.gpu_ids if g not in busy]

    def launch(self, spec: RunSpec) -> Supervised:
        """Spawn ``spec``'s launcher in a new session; the run directory is written first."""
        d = self.runs_dir / f"{safe_name(spec.workload)}.run{spec.run}"
        d.mkdir(parents=True, exist_ok=False)  # exists: launched before, never twice
        log = log_file(spec.log_path or None, self.log_dir, spec.workload, spec.run, spec.rank,
                       spec.host)
        write_json(d / SPEC, {"spec": msgspec.to_builtins(spec), "argv": list(spec.argv),
                              "workdir": spec.workdir, "log_file": str(log),
                              "environment": run_environment(spec, self.base_env)})
        s = Supervised(d, spec)
        s.proc = subprocess.Popen([sys.executable, "-m", "executor.launch", str(d)],
                                  start_new_session=True, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  cwd=str(Path(__file__).resolve().parent.parent))
        s.pid = s.proc.pid
        s.started_at = time.time()
        self.runs[s.key] = s
        return s

    def log_of(self, s: Supervised) -> Path:
        raw = _read(s.path / SPEC) or {}
        return Path(str(raw.get("log_file", "")))

    # -- state --------------------------------------------------------------------------

    def alive(self, s: Supervised) -> bool:
        """Whether the share's process group still has its launcher."""
        if s.reported is not None:
            return False  # reported only once it had ended
        if s.proc is not None:
            return s.proc.poll() is None
        if s.pid is None:
            return False
        # Not our child (adopted after a restart): alive if the pid is still its launcher.
        return str(s.path).encode() in _cmdline(s.pid).split(b"\0")

    def exit_of(self, s: Supervised) -> Exit:
        """How an ended share ended (call only when not ``alive``)."""
        st = _read(s.path / STATUS)
        stop = s.stop or {}
        reason = stop.get("reason") if stop.get("reason") == "time_limit" else None
        if st is not None:
            if st.get("error"):
                return Exit(reason="cannot_start", error=str(st["error"]))
            return Exit(exit_code=st.get("exit_code"), signal=st.get("signal"),
                        reason=reason)
        if stop.get("killed"):
            return Exit(signal="SIGKILL", reason=reason)
        if s.proc is not None and s.proc.returncode is not None and s.proc.returncode < 0:
            return Exit(signal=signal.Signals(-s.proc.returncode).name, reason="lost")
        return Exit(reason="lost")

    def elapsed(self, s: Supervised, now: float) -> float:
        if s.started_at is None:
            p = _read(s.path / PID)
            if p is not None:
                s.started_at = float(p["started_at"])
        return 0.0 if s.started_at is None else now - s.started_at

    # -- stopping -----------------------------------------------------------------------

    def _signal(self, s: Supervised, sig: int) -> None:
        if s.pid is None or not self.alive(s):
            return
        try:
            os.killpg(s.pid, sig)
        except ProcessLookupError:
            pass
        except PermissionError:  # pragma: no cover - not ours
            pass

    def terminate(self, s: Supervised, grace_s: float, reason: str, now: float) -> None:
        """SIGTERM the share's group now; ``kill_due`` sends SIGKILL ``grace_s`` later."""
        if s.stop is not None:
            return
        s.stop = {"reason": reason, "term_at": now, "kill_at": now + max(0.0, grace_s),
                  "killed": False}
        write_json(s.path / STOP, s.stop)
        self._signal(s, signal.SIGTERM)

    def checkpoint_first(self, s: Supervised, grace_s: float, hook_s: float, now: float) -> None:
        """Begin a preemption's stop with the checkpoint hook: SIGTERM waits for it (``term_due``).

        The hook runs for at most ``hook_s``; SIGKILL still comes ``grace_s`` from now.
        """
        if s.stop is not None:
            return
        s.stop = {"reason": "preempted", "term_at": None, "kill_at": now + max(0.0, grace_s),
                  "killed": False, "hook_until": now + hook_s, "hook_s": hook_s, "hook_pid": None}
        write_json(s.path / STOP, s.stop)
        s.hook_proc = subprocess.Popen(
            [sys.executable, "-m", "executor.hooks", str(s.path / SPEC), repr(now + hook_s)],
            start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, cwd=str(Path(__file__).resolve().parent.parent))
        s.stop["hook_pid"] = s.hook_proc.pid
        write_json(s.path / STOP, s.stop)

    def hook_running(self, s: Supervised) -> bool:
        """Whether the share's checkpoint hook (its runner) still runs."""
        if s.hook_proc is not None:
            return s.hook_proc.poll() is None
        pid = (s.stop or {}).get("hook_pid")
        # Adopted after a restart: alive if the pid is still the runner of this run.
        return pid is not None and str(s.path / SPEC).encode() in _cmdline(int(pid)).split(b"\0")

    def hook_outcome(self, s: Supervised) -> dict[str, Any] | None:
        """The checkpoint hook's recorded outcome (None: none recorded, or still running)."""
        out = _read(s.path / HOOK_STATUS)
        return None if out is None or out.get("outcome") == "running" else out

    def restore_outcome(self, s: Supervised) -> dict[str, Any] | None:
        """The restore hook's outcome, once the share's launcher recorded it."""
        return _read(s.path / RESTORE_STATUS)

    def kill_hook(self, s: Supervised) -> None:
        """SIGKILL the checkpoint hook and its runner (past its time; the runner should have)."""
        if self.hook_running(s):
            with contextlib.suppress(OSError):
                os.killpg(int(s.stop["hook_pid"]), signal.SIGKILL)  # type: ignore[index]
        out = _read(s.path / HOOK_STATUS) or {}
        if out.get("outcome") == "running" and out.get("pgid"):
            with contextlib.suppress(OSError):
                os.killpg(int(out["pgid"]), signal.SIGKILL)

    def term_due(self, s: Supervised, now: float) -> bool:
        """Send the SIGTERM a checkpoint hook held back, once it ended or its time is up.

        True when it went now (the caller reports the hook's outcome).
        """
        if s.stop is None or s.stop.get("term_at") is not None:
            return False
        if self.hook_running(s) and now < float(s.stop["hook_until"]):
            return False
        self.kill_hook(s)
        s.stop["term_at"] = now
        write_json(s.path / STOP, s.stop)
        self._signal(s, signal.SIGTERM)
        return True

    def kill_now(self, s: Supervised, reason: str, now: float) -> None:
        """SIGKILL at once (its GPUs are needed now)."""
        if s.stop is None:
            s.stop = {"reason": reason, "term_at": now, "kill_at": now, "killed": False}
        s.stop["kill_at"] = min(float(s.stop["kill_at"]), now)
        self.kill_due(s, now)

    def kill_due(self, s: Supervised, now: float) -> None:
        """Send SIGKILL if this share's grace is over and it still runs."""
        if s.stop is None or s.stop.get("killed") or now < float(s.stop["kill_at"]):
            return
        if s.stop.get("hook_pid") is not None:
            self.kill_hook(s)  # (its time ended before the grace's; belt and braces)
        if self.alive(s):
            s.stop["killed"] = True
            write_json(s.path / STOP, s.stop)
            self._signal(s, signal.SIGKILL)

    def mark_reported(self, s: Supervised, event_id: str) -> None:
        s.reported = event_id
        write_json(s.path / REPORTED, {"id": event_id})


__all__ = ["Exit", "Supervised", "Supervisor"]
