"""A live worker with a fault armed: it kills or freezes itself in the middle of a group.

The crash and failover tests need a worker that dies (SIGKILL) or stops
(SIGSTOP) between an input's journal record and the rest of its group, at a
point no outside signal can hit reliably. The worker offers one narrow hook
for that (``streams.worker.AfterJournalSend``, none in production); this
module is the only place that fills it, and its entrypoint the only way the
tests start such a worker::

    python -m tests.worker_faults --kill-after-sends 120   # settings from the environment

``tests.kafka.WorkerProcess(..., argv=faulty_worker(kill_after_sends=120))``
runs it like ``allot worker``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from collections.abc import Awaitable, Callable


class SignalAfterSends:
    """Once at least ``after`` journal records were handed over and the next one continues the
    same group, flush them and send this process ``sig`` (once)."""

    def __init__(self, after: int, sig: signal.Signals) -> None:
        if after < 1:
            raise ValueError(f"after must be at least 1 (got {after})")
        self.after = after
        self.sig = sig
        self.sent = 0
        self.fired = False

    async def __call__(self, mid_group: bool, flush: Callable[[], Awaitable[None]]) -> None:
        self.sent += 1
        if self.fired or not mid_group or self.sent < self.after:
            return
        # Whatever follows is written after a resume (SIGSTOP) or by the next worker (SIGKILL).
        await flush()
        self.fired = True
        os.kill(os.getpid(), self.sig)


def faulty_worker(kill_after_sends: int = 0, stop_after_sends: int = 0) -> list[str]:
    """The command line of a worker that SIGKILLs / SIGSTOPs itself mid-group after N sends."""
    argv = [sys.executable, "-m", "tests.worker_faults"]
    if kill_after_sends:
        argv += ["--kill-after-sends", str(kill_after_sends)]
    if stop_after_sends:
        argv += ["--stop-after-sends", str(stop_after_sends)]
    return argv


def main(argv: list[str] | None = None) -> int:
    from streams import config, logs
    from streams.worker import run_worker

    p = argparse.ArgumentParser(prog="python -m tests.worker_faults", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    faults = p.add_mutually_exclusive_group(required=True)
    faults.add_argument("--kill-after-sends", type=int, metavar="N",
                        help="SIGKILL itself mid-group once N journal records were handed over")
    faults.add_argument("--stop-after-sends", type=int, metavar="N",
                        help="SIGSTOP itself mid-group (once) after N journal records")
    args = p.parse_args(argv)
    hook = (SignalAfterSends(args.kill_after_sends, signal.SIGKILL) if args.kill_after_sends
            else SignalAfterSends(args.stop_after_sends, signal.SIGSTOP))
    settings = config.load()
    logs.configure(settings.log_format, settings.log_level)
    return asyncio.run(run_worker(settings, after_send=hook))


if __name__ == "__main__":
    sys.exit(main())
