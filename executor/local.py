"""The local executor's loop: read the journal, reconcile this host's processes with it, report.

Each pass (every ``poll_ms`` once the journal is read to its end) compares
what the journal says this host runs (``executor.book.HostBook``) with the
processes it launched (``executor.supervisor.Supervisor``):

- a share the journal started and nobody launched is launched (once: its run
  directory is written first), on free GPU ids; if a stopping share still
  holds the ids it needs, that one is killed now;
- a live share the journal ended is stopped: SIGTERM to its process group,
  SIGKILL when its grace is over (the scheduler's grace for a preemption;
  ``kill_wait_s`` or the workload's ``grace_s`` otherwise); a preempted share
  with a checkpoint hook (``executor.hooks``) runs the hook first, within the
  grace, and gets SIGTERM when the hook ends or its share of the grace does;
- a share past its ``time_limit_s`` is stopped the same way, reason ``time_limit``;
- an ended share is reported once: ``workload.finished`` (with its run number,
  exit code or signal, and why) if the journal still has it running;
  ``workload.stopped`` (with this host) if it was preempted under a grace.

Report ids derive from cluster, workload, run (and host for ``stopped``): a
gang's hosts send the same finish id, so the first report counts and the rest
are dropped as copies; a restarted executor's repeat is dropped the same way.
Nothing is decided while the journal is being replayed after a start: the
end of the journal says what is already reported.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from events import Event, WorkloadFinished, WorkloadStopped
from events.limits import INPUT_ID_PATTERN
from executor.book import HostBook, Share
from executor.hooks import (
    CHECKPOINT_HOOK,
    checkpoint_dir,
    declared,
    describe,
    hook_budget_s,
    latest_checkpoint,
    note,
)
from executor.spec import RunSpec
from executor.supervisor import Exit, Supervised, Supervisor
from streams.executor import EXECUTOR_PRINCIPAL, EXECUTOR_SOURCE, ExecutorError, finish_id

if TYPE_CHECKING:
    from identity.journal_seal import SealCheck

_ID = re.compile(INPUT_ID_PATTERN)


def _bounded(event_id: str) -> str:
    """``event_id`` if it is a valid input id, else a digest of it (still deterministic)."""
    if _ID.fullmatch(event_id):
        return event_id
    return "exec:h-" + hashlib.blake2b(event_id.encode(), digest_size=20).hexdigest()


def finished_id(cluster: str, workload: str, run: int) -> str:
    """The finish report's id: the same from every host of a gang and on every retry."""
    return _bounded(finish_id(cluster, workload, run))


def stopped_id(cluster: str, workload: str, run: int, host: str) -> str:
    """The id of ``host``'s ``workload.stopped`` for that run."""
    return _bounded(f"{finish_id(cluster, workload, run)}:stopped:{host}")


class LocalExecutor:
    """Runs the work the journal places on ``host``; reports how it ended."""

    def __init__(self, bootstrap: str, prefix: str, cluster: str, host: str,
                 gpu_ids: tuple[str, ...], state_dir: Path, *, log_dir: Path | None = None,
                 principal: str = EXECUTOR_PRINCIPAL, signing_key: bytes | None = None,
                 kill_wait_s: float = 10.0, poll_ms: int = 100, log: Any = None,
                 base_env: dict[str, str] | None = None,
                 checkpoint_root: Path | None = None,
                 seal_check: SealCheck | None = None) -> None:
        self.bootstrap = bootstrap
        self.prefix = prefix
        self.cluster = cluster
        self.host = host
        self.principal = principal
        self.signing_key = signing_key
        self.kill_wait_s = kill_wait_s
        self.poll_ms = poll_ms
        self.log = log
        # Only decisions a worker signed start or stop a process here (None: unchecked).
        self.seal_check = seal_check
        self.book = HostBook(cluster, host)
        self.supervisor = Supervisor(state_dir, gpu_ids, log_dir, base_env)
        # Where checkpoint hooks write (one directory per workload and run): a
        # directory the hosts share lets a run requeued on another host restore.
        self.checkpoint_root = Path(checkpoint_root) if checkpoint_root is not None \
            else Path(state_dir) / "checkpoints"
        self._restores_seen: set[tuple[str, int]] = set()
        self.ready = asyncio.Event()
        self.caught_up = False
        self.reported: list[Event] = []
        self._refused: set[tuple[str, int]] = set()
        self._stop = asyncio.Event()

    def stop(self) -> None:
        self._stop.set()

    def _info(self, what: str, **kw: Any) -> None:
        if self.log is not None:
            self.log.info(what, cluster=self.cluster, host=self.host, **kw)

    # -- one pass -------------------------------------------------------------------------

    def reconcile(self, now: float) -> list[tuple[Supervised | None, Event]]:
        """One pass over this host's shares at wall time ``now``: the reports it makes."""
        out: list[tuple[Supervised | None, Event]] = []
        sup, book = self.supervisor, self.book
        for s in list(sup.runs.values()):
            w, run = s.key
            share = book.active.get(w)
            active = share is not None and share.run == run
            if sup.alive(s):
                if not active and not s.stopping:
                    order = book.stops.get(s.key)
                    if order is not None and order.reason == "preempted":
                        grace = float(order.grace_s)
                        if self._checkpoint_first(s, order.grace_s, now):
                            continue
                    else:
                        grace = float(s.spec.grace_s) if s.spec.grace_s else self.kill_wait_s
                    sup.terminate(s, grace, order.reason if order else "not_running", now)
                    self._info("executor.stopping", workload=w, run=run, grace_s=grace,
                               reason=order.reason if order else "not_running")
                elif s.stopping and sup.term_due(s, now):
                    self._hook_ended(s)
                elif active and s.spec.time_limit_s is not None and not s.stopping \
                        and sup.elapsed(s, now) >= s.spec.time_limit_s:
                    grace = float(s.spec.grace_s) if s.spec.grace_s else self.kill_wait_s
                    sup.terminate(s, grace, "time_limit", now)
                    self._info("executor.time_limit", workload=w, run=run,
                               limit_s=s.spec.time_limit_s)
                if s.spec.restore_from is not None and s.key not in self._restores_seen:
                    self._restore_seen(s)
                sup.kill_due(s, now)
                continue
            if s.reported is not None:
                continue
            if s.stop is not None and s.stop.get("term_at") is None:
                # The command ended while its checkpoint hook runs: the hook may
                # still need it gone, and a next run here needs the checkpoint
                # complete, so the report waits for the hook (or its time).
                if not sup.term_due(s, now):
                    continue
                self._hook_ended(s)
            with contextlib.suppress(OSError):  # leftovers of the group (a command's children)
                if s.pid is not None:
                    os.killpg(s.pid, signal.SIGKILL)
            ex = sup.exit_of(s)
            event = self._report(s, ex, active)
            if event is None:
                sup.mark_reported(s, "")
            else:
                out.append((s, event))
        for w, share in list(book.active.items()):
            if (w, share.run) in sup.runs or (w, share.run) in self._refused:
                continue
            event = self._launch(share, now)
            if event is not None:
                self._refused.add((w, share.run))
                out.append((None, event))
        return out

    def _checkpoint_first(self, s: Supervised, grace_s: int, now: float) -> bool:
        """Start a preempted share's checkpoint hook, if it has one and the grace allows.

        True when the hook started (SIGTERM waits for it); False to stop as usual.
        """
        hook = declared(s.spec.env).get(CHECKPOINT_HOOK)
        if hook is None:
            return False
        budget = hook_budget_s(grace_s)
        w, run = s.key
        if budget <= 0:
            self._warn("executor.checkpoint_hook_skipped", workload=w, run=run, grace_s=grace_s,
                       why="the preemption has no grace (policy preemption_grace_s, or the "
                           "workload's grace_s, is 0): stopped at once, no checkpoint")
            self._note_in_log(s, "checkpoint hook not run: the preemption has no grace; "
                                 "no checkpoint of this run")
            return False
        try:
            self.supervisor.checkpoint_first(s, float(grace_s), float(budget), now)
        except OSError as exc:  # (the fork failed): stop as if it had no hook
            self._warn("executor.checkpoint_hook_failed", workload=w, run=run,
                       why=f"{type(exc).__name__}: {exc}")
            s.stop = None
            return False
        self._info("executor.checkpoint_hook", workload=w, run=run, grace_s=grace_s,
                   hook_s=budget, checkpoint_dir=s.spec.checkpoint_dir)
        return True

    def _hook_ended(self, s: Supervised) -> None:
        """Say how a share's checkpoint hook ended (SIGTERM just went to the share)."""
        w, run = s.key
        # No outcome recorded: its runner was killed at its time (or died).
        out = self.supervisor.hook_outcome(s) or {
            "outcome": "timeout", "seconds": float((s.stop or {}).get("hook_s", 0.0))}
        if out.get("outcome") == "completed":
            self._info("executor.checkpoint_saved", workload=w, run=run,
                       checkpoint_dir=s.spec.checkpoint_dir, seconds=out.get("seconds"))
        else:
            self._warn("executor.checkpoint_hook_failed", workload=w, run=run,
                       outcome=out.get("outcome"), exit_code=out.get("exit_code"),
                       signal=out.get("signal"), error=out.get("error"),
                       why=describe(out) + ": the run is stopped without a checkpoint")
        self._info("executor.stopping", workload=w, run=run, reason="preempted",
                   kill_at=s.stop["kill_at"] if s.stop else None)

    def _restore_seen(self, s: Supervised) -> None:
        """Say how a restoring share's restore hook ended, once its launcher recorded it."""
        out = self.supervisor.restore_outcome(s)
        if out is None:
            return
        self._restores_seen.add(s.key)
        w, run = s.key
        if out.get("outcome") == "completed":
            self._info("executor.restored", workload=w, run=run, restore_from=s.spec.restore_from,
                       seconds=out.get("seconds"))
        else:
            self._warn("executor.restore_hook_failed", workload=w, run=run,
                       restore_from=s.spec.restore_from, outcome=out.get("outcome"),
                       exit_code=out.get("exit_code"), error=out.get("error"),
                       why=describe(out) + ": the command started anyway "
                           "(ALLOT_RESTORE_STATUS=failed)")

    def _note_in_log(self, s: Supervised, text: str) -> None:
        with contextlib.suppress(OSError), open(self.supervisor.log_of(s), "ab") as log:
            note(log, text)

    def _warn(self, what: str, **kw: Any) -> None:
        if self.log is not None:
            self.log.warning(what, cluster=self.cluster, host=self.host, **kw)

    def _report(self, s: Supervised, ex: Exit, active: bool) -> Event | None:
        w, run = s.key
        order = self.book.stops.get(s.key)
        if active:
            if ex.ok and s.spec.rank != 0:
                return None  # a gang's rank 0 reports the success
            return self._finished(w, run, ex)
        if order is not None and order.report_stopped:
            return WorkloadStopped(id=stopped_id(self.cluster, w, run, self.host),
                                   at=self.book.now, cluster=self.cluster, actor=self.principal,
                                   source=EXECUTOR_SOURCE, workload=w, run_number=run,
                                   exit_code=ex.exit_code, signal=ex.signal, host=self.host)
        return None

    def _finished(self, w: str, run: int, ex: Exit) -> WorkloadFinished:
        return WorkloadFinished(id=finished_id(self.cluster, w, run), at=self.book.now,
                                cluster=self.cluster, actor=self.principal, source=EXECUTOR_SOURCE,
                                workload=w, outcome="succeeded" if ex.ok else "failed",
                                exit_code=ex.exit_code, signal=ex.signal, reason=ex.reason,
                                run_number=run)

    def _launch(self, share: Share, now: float) -> Event | None:
        """Launch ``share``; a report when it cannot start (None: launched, or wait for GPUs)."""
        sup = self.supervisor
        submitted = self.book.specs.get(share.workload)
        if submitted is None or not submitted.command:
            self._info("executor.cannot_start", workload=share.workload, run=share.run,
                       why="the workload names no command")
            return self._finished(share.workload, share.run, Exit(reason="cannot_start"))
        if share.gpus > len(sup.gpu_ids):
            self._info("executor.cannot_start", workload=share.workload, run=share.run,
                       why=f"{share.gpus} GPUs asked, the host has {len(sup.gpu_ids)}")
            return self._finished(share.workload, share.run, Exit(reason="cannot_start"))
        free = sup.free_ids()
        if len(free) < share.gpus:
            # A stopping share still holds them: its GPUs are given away now, so it ends now.
            for s in sup.runs.values():
                if s.stopping and sup.alive(s):
                    sup.kill_now(s, "gpus_needed", now)
            return None
        env = tuple(submitted.env or ())
        ckpt = restore = None
        if declared(env):
            root = self.checkpoint_root
            ckpt = str(checkpoint_dir(root, share.workload, share.run, share.rank))
            found = latest_checkpoint(root, share.workload, share.run, share.rank)
            restore = None if found is None else str(found)
        spec = RunSpec(cluster=self.cluster, workload=share.workload, run=share.run,
                       host=self.host, rank=share.rank, world_size=len(share.hosts),
                       hosts=share.hosts, gpu_ids=tuple(free[: share.gpus]),
                       argv=tuple(submitted.command), workdir=submitted.workdir,
                       env=env, log_path=submitted.log_path or "",
                       time_limit_s=submitted.time_limit_s,
                       grace_s=submitted.grace_s or 0, checkpoint_dir=ckpt,
                       restore_from=restore)
        try:
            if ckpt is not None:
                Path(ckpt).mkdir(parents=True, exist_ok=True)
            s = sup.launch(spec)
        except OSError as exc:  # (the state directory is not writable, the fork failed)
            self._info("executor.cannot_start", workload=share.workload, run=share.run,
                       why=f"{type(exc).__name__}: {exc}")
            return self._finished(share.workload, share.run, Exit(reason="cannot_start"))
        self._info("executor.launched", workload=share.workload, run=share.run, rank=share.rank,
                   gpus=",".join(spec.gpu_ids), pid=s.pid, log=str(sup.log_of(s)),
                   **({"restore_from": restore} if restore else {}))
        return None

    # -- the loop ---------------------------------------------------------------------------

    async def run(self) -> list[Event]:
        from streams.client import Client, ClientError

        signer = (self.principal, self.signing_key) if self.signing_key else None
        client = Client(self.bootstrap, self.prefix, signer=signer,
                        client_id=f"allot-executor-{self.host}", seal_check=self.seal_check)
        try:
            await client.start()
        except ClientError as exc:
            raise ExecutorError(str(exc)) from exc
        tail = None
        try:
            found = self.supervisor.load()
            self._info("executor.state", runs=len(found),
                       alive=sum(1 for s in found if self.supervisor.alive(s)))
            try:
                tail = await client.tail(self.cluster, start="begin")
            except ClientError as exc:
                raise ExecutorError(str(exc)) from exc
            while not self._stop.is_set():
                for item in await tail.poll(timeout_ms=self.poll_ms):
                    self.book.add(item.event)
                if not self.caught_up:
                    if not tail.caught_up:
                        continue
                    self.caught_up = True
                    self.ready.set()
                    self._info("executor.ready", running=len(self.book.active))
                    known = self.book.host_gpus
                    if known != len(self.supervisor.gpu_ids) and self.log is not None:
                        self.log.warning(
                            "executor.host_mismatch", cluster=self.cluster, host=self.host,
                            cluster_gpus=known, gpu_ids=len(self.supervisor.gpu_ids),
                            hint="the cluster has no such host yet (allot host add)" if known
                            is None else "the cluster counts other GPUs than this executor has")
                for s, event in self.reconcile(time.time()):
                    await client.publish(event)
                    self.reported.append(event)
                    if s is not None:
                        self.supervisor.mark_reported(s, event.id)
                    self._info("executor.reported", type=type(event).__name__,
                               workload=getattr(event, "workload", None), event_id=event.id)
        finally:
            if tail is not None:
                await tail.stop()
            await client.close()
        return self.reported


__all__ = ["LocalExecutor", "finished_id", "stopped_id"]
