"""An archiver with a fault armed: it kills itself at the n-th batch's commit point.

The archive's crash test needs an archiver that dies (SIGKILL) between a batch's
files and its manifest line, or between the line and the files' renames. The
archiver offers one narrow hook for that (``archive.writer.AtCommit``, none in
production); this module is the only place that fills it, and its entrypoint
the only way the tests start such an archiver::

    python -m tests.archiver_faults --kill-at before_commit:3 --dir D --bootstrap B \\
        --topic-prefix P --flush-s 0.1 --flush-records 700

It runs like ``allot archive`` (settings from the environment and the flags)
until the fault fires.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import get_args

from archive.writer import CommitPoint


class KillAtCommit:
    """SIGKILL this process at the ``n``-th time a batch reaches commit point ``where``."""

    def __init__(self, where: CommitPoint, n: int) -> None:
        if n < 1:
            raise ValueError(f"n must be at least 1 (got {n})")
        self.where = where
        self.n = n
        self.seen = 0

    def __call__(self, where: CommitPoint) -> None:
        if where != self.where:
            return
        self.seen += 1
        if self.seen >= self.n:
            os.kill(os.getpid(), signal.SIGKILL)


def _kill_at(text: str) -> KillAtCommit:
    where, _, n = text.partition(":")
    if where not in get_args(CommitPoint) or not n.isdigit():
        raise argparse.ArgumentTypeError(
            f"expected WHERE:N with WHERE one of {', '.join(get_args(CommitPoint))}")
    return KillAtCommit(where, int(n))  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> int:
    from archive.writer import Archiver
    from streams import config, logs

    p = argparse.ArgumentParser(prog="python -m tests.archiver_faults", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kill-at", type=_kill_at, required=True, metavar="WHERE:N",
                   help="SIGKILL at the N-th batch's WHERE (before_commit or after_commit)")
    p.add_argument("--dir", type=Path, required=True)
    p.add_argument("--bootstrap", default=None)
    p.add_argument("--topic-prefix", dest="topic_prefix", default=None)
    p.add_argument("--flush-s", type=float, default=5.0)
    p.add_argument("--flush-records", type=int, default=200_000)
    args = p.parse_args(argv)
    s = config.load(flags={"bootstrap": args.bootstrap, "topic_prefix": args.topic_prefix})
    logs.configure(s.log_format, s.log_level)
    archiver = Archiver(s.bootstrap, args.dir, s.topic_prefix, flush_records=args.flush_records,
                        flush_s=args.flush_s, fetch_wait_ms=s.fold_fetch_wait_ms,
                        at_commit=args.kill_at)
    asyncio.run(archiver.run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
