"""Benchmark: restart of a killed worker, this tree against an older one, in one run on one broker.

``benchmarks.bench_live``'s restart step (a journal of ``--events`` records,
written as a worker writes it; one cold start that folds it all and
snapshots; then ``--restarts`` kill -9 restarts that restore the snapshot),
run twice on the same Tansu broker, one right after the other: first with the
worker of ``--before-root`` (a checkout of an older commit), then with this
tree's. Each restart is timed from the process spawn to the first input the
new incarnation journals under its claim (a tick: the cluster is scheduled
again). Both run the same core form (``--core``; the older tree has no
compiled build, so ``pure`` by default) and the same settings (a static
member, ``instance_id``, as in bench_live, and ``worker_name`` set to it: a
restarted worker has the name it had). The load average is recorded with
each restart.

Usage: python -m benchmarks.bench_restart --before-root DIR [--events 200000] [--restarts 5]
       [--core pure|native] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
from pathlib import Path
from typing import Any

from benchmarks import bench_live
from benchmarks.common import machine

REPO = Path(__file__).resolve().parent.parent


def _named(settings_for: Any) -> Any:
    """bench_live's settings, with the worker named after its static member id.

    A restarted worker is the same worker: a fixed ``worker_name`` (as a
    StatefulSet's pod name would be) lets it recognise its own previous
    incarnation's heartbeats. Both phases run with it.
    """
    def settings(*args: Any, **kw: Any) -> dict[str, Any]:
        s = settings_for(*args, **kw)
        if s.get("instance_id"):
            s.setdefault("worker_name", str(s["instance_id"]))
        return dict(s)
    return settings


async def _phase(bootstrap: str, root: Path, events: int, restarts: int) -> dict[str, Any]:
    """bench_live's restart step with the worker processes started from ``root``."""
    saved_repo, saved_path = bench_live.REPO, os.environ.get("PYTHONPATH")
    saved_settings = bench_live.settings_for
    bench_live.REPO = root
    bench_live.settings_for = _named(saved_settings)
    os.environ["PYTHONPATH"] = str(root)
    try:
        return await bench_live.bench_restart(bootstrap, events, restarts)
    finally:
        bench_live.REPO = saved_repo
        bench_live.settings_for = saved_settings
        if saved_path is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved_path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before-root", type=Path, required=True,
                    help="a checkout of the older tree (git archive COMMIT | tar -x -C DIR)")
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--restarts", type=int, default=5)
    ap.add_argument("--core", choices=("pure", "native"), default="pure")
    ap.add_argument("--bootstrap")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    os.environ["ALLOT_CORE"] = args.core
    print(f"machine: {machine()}; load average {os.getloadavg()[0]:.1f}", flush=True)
    bench_live.simulated_journal(args.events)  # (made once, by this tree's core, and cached)
    out: dict[str, Any] = {}
    with bench_live.broker(args.bootstrap) as bs:
        for label, root in (("before", args.before_root.resolve()), ("after", REPO)):
            print(f"{label}: {root}", flush=True)
            r = asyncio.run(_phase(bs, root, args.events, args.restarts))
            out[label] = r
            firsts = r["warm_first_input_s"]
            print(f"{label}: restart -> scheduling median {statistics.median(firsts):.2f} s "
                  f"({min(firsts):.2f}-{max(firsts):.2f}), claim {r['warm_median_claim_s']:.2f} s, "
                  f"rebuild {r['warm_median_rebuild_s']:.2f} s, snapshot "
                  f"{r['snapshot_bytes'] / 1e6:.2f} MB, load {r['warm_load']}", flush=True)
    if args.json:
        print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
