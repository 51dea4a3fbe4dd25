"""``allot executor local``: run this host's share of the schedule as real processes (docs/executor.md)."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from events.errors import AllotError
from streams.executor import EXECUTOR_PRINCIPAL, ExecutorError


class GpuDiscoveryError(ExecutorError):
    """No GPU ids were given and none could be discovered."""


def default_state_dir(host: str) -> Path:
    """``$XDG_STATE_HOME/allot/executor/HOST`` (``~/.local/state/...`` by default)."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "allot" / "executor" / host


def gpu_ids(count: int | None, ids: str | None) -> tuple[str, ...]:
    """The host's GPU ids: given, ``0..count-1``, or what ``nvidia-smi`` lists."""
    if ids:
        out = tuple(i.strip() for i in ids.split(",") if i.strip())
        if not out or (count is not None and count != len(out)):
            raise GpuDiscoveryError(f"--gpu-ids {ids!r} does not name {count} GPUs")
        return out
    if count is not None:
        if count < 1:
            raise GpuDiscoveryError("--gpus must be at least 1")
        return tuple(str(i) for i in range(count))
    smi = shutil.which("nvidia-smi")
    if smi is None:
        raise GpuDiscoveryError("no --gpus or --gpu-ids, and no nvidia-smi on PATH to list them")
    try:
        text = subprocess.run([smi, "--query-gpu=index", "--format=csv,noheader"], check=True,
                              capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise GpuDiscoveryError(f"nvidia-smi could not list the GPUs: {exc}") from exc
    found = tuple(line.strip() for line in text.splitlines() if line.strip())
    if not found:
        raise GpuDiscoveryError("nvidia-smi lists no GPUs")
    return found


def register(executor_parser: argparse.ArgumentParser) -> None:
    """Add ``local`` under ``allot executor``."""
    from streams.state_cli import duration_value

    sub = executor_parser.add_subparsers(title="executor kinds", metavar="KIND",
                                         dest="executor_kind")
    p = sub.add_parser(
        "local", help="run the work placed on this host as real processes",
        description="Read the cluster's journal; for every workload.started that places work on "
                    "--host, run the workload's command with CUDA_VISIBLE_DEVICES set to exactly "
                    "its GPUs (gangs: MASTER_ADDR, RANK, WORLD_SIZE), one log file per workload "
                    "and run; report workload.finished (exit 0: succeeded, else failed with the "
                    "code or signal). On workload.preempted: SIGTERM, the policy's grace, "
                    "SIGKILL, then workload.stopped (a checkpoint hook runs first, within the grace; "
                    "the requeued run gets ALLOT_RESTORE_FROM and its restore hook). Runs past their time limit are stopped and "
                    "reported failed, reason time_limit. Restart-safe: its state directory says "
                    "what it launched; it reports what ended while it was down and never starts "
                    "a run twice. Stopping the executor leaves its runs running. "
                    "See docs/executor.md.")
    p.add_argument("--host", required=True, help="this host's name in the cluster (host.added)")
    p.add_argument("--gpus", type=int, default=None, metavar="N",
                   help="GPUs of this host, ids 0..N-1 (default: --gpu-ids, else nvidia-smi)")
    p.add_argument("--gpu-ids", default=None, metavar="IDS",
                   help="the GPU ids to hand out, comma-separated (e.g. 0,1,2,3 or GPU UUIDs)")
    p.add_argument("--state-dir", default=None, metavar="DIR",
                   help="where it records its runs (default $XDG_STATE_HOME/allot/executor/HOST)")
    p.add_argument("--log-dir", default=None, metavar="DIR",
                   help="where run logs go when a workload names no log_path (default "
                        "STATE_DIR/logs)")
    p.add_argument("--checkpoint-dir", default=None, metavar="DIR",
                   help="where checkpoint hooks write, one directory per workload and run "
                        "(default STATE_DIR/checkpoints; a directory the hosts share lets a "
                        "run requeued on another host restore)")
    p.add_argument("--kill-wait", type=duration_value, default=10, metavar="DURATION",
                   help="SIGTERM to SIGKILL for stops other than preemptions (cancel, time "
                        "limit) when the workload asks for no grace (default 10s)")
    p.add_argument("--bootstrap", default=None, metavar="HOST:PORT",
                   help="Kafka bootstrap servers (default: settings, else the running allot up)")
    p.add_argument("--topic-prefix", default=None, help="prefix of the topic names")
    p.add_argument("--config", default=None, metavar="FILE", help="the worker's TOML settings")
    p.add_argument("--cluster", default=None,
                   help="the cluster (default: the first of the setting `clusters`)")
    p.add_argument("--principal", default=EXECUTOR_PRINCIPAL,
                   help=f"the actor of its reports (default {EXECUTOR_PRINCIPAL})")
    p.add_argument("--key-file", default=None, metavar="FILE",
                   help="sign reports as --principal with the Ed25519 secret in FILE (default: "
                        "--principal's key in the local key directory, if any)")
    p.add_argument("--log-format", default="auto", help="json, console or auto")
    p.set_defaults(func=_main)


def _main(args: Any) -> int:
    import asyncio
    import contextlib
    import signal
    import sys

    from executor.local import LocalExecutor
    from identity.journal_seal import reader_seals
    from streams import logs
    from streams.commands import discovered_settings

    try:
        ids = gpu_ids(args.gpus, args.gpu_ids)
        settings = discovered_settings(args)
        key = None
        if not args.key_file:
            from identity.local import Keychain

            key = Keychain().secret(args.principal)  # allot up made it; None: unsigned
        else:
            try:
                key = Path(args.key_file).read_text().splitlines()[0].strip().encode()
            except (OSError, IndexError) as exc:
                raise ExecutorError(f"--key-file: cannot read a key from {args.key_file}") from exc
        logs.configure(args.log_format, "info")
        log = logs.logger(component="executor.local")
        # Absolute: each run starts in its own workdir, and reads these paths from there.
        state_dir = (Path(args.state_dir) if args.state_dir else
                     default_state_dir(args.host)).absolute()
        ex = LocalExecutor(settings.bootstrap, settings.topic_prefix,
                           args.cluster or settings.clusters[0], args.host, ids, state_dir,
                           log_dir=Path(args.log_dir).absolute() if args.log_dir else None,
                           principal=args.principal, signing_key=key,
                           kill_wait_s=float(args.kill_wait), log=log,
                           checkpoint_root=Path(args.checkpoint_dir).absolute()
                           if args.checkpoint_dir else None,
                           seal_check=reader_seals(settings, log))

        async def go() -> None:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.add_signal_handler(sig, ex.stop)
            await ex.run()

        asyncio.run(go())
    except AllotError as exc:
        print(f"allot executor local: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"allot executor local: error: {exc}", file=sys.stderr)
        return 2
    log.info("executor.exit", reported=len(ex.reported))
    return 0


__all__ = ["GpuDiscoveryError", "default_state_dir", "gpu_ids", "register"]
