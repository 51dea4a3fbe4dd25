"""The live view: the queue ranked by its sort metric and the running set, as the journal grows.

``LiveView`` folds one cluster's journal records (through
``scheduler.replay.JournalFold``: the state the worker has) and ``render``
draws the state with rich:

- **the queue**, allocations in the order the next cycle serves them
  (``scheduler.index.fair_share_order.Ranking.leaf_order``), each with its sort metric: the
  fair-share key level by level, usage fraction over share fraction of the
  parent (< 1: under-served), exactly as ``allot explain`` prints it
  (``Ranking.levels``), and the head of its queue;
- **unallocated work** waiting for idle GPUs, in the same order;
- **the running set**: GPUs, hosts, and whether each run is still protected.

``allot top`` runs it against a live allot; the demo shows it while it plays.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import UTC, datetime
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from events import Event
from scheduler import Engine
from scheduler.index.fair_share_order import Ranking, commitments
from scheduler.replay import JournalFold
from scheduler.state import State


class LiveView:
    """One cluster's state, folded from its journal as records arrive."""

    def __init__(self, cluster: str) -> None:
        self.cluster = cluster
        self.fold = JournalFold(Engine(cluster))
        self.records = 0
        self.last_at = 0

    def add(self, e: Event) -> None:
        if e.cluster != self.cluster:
            return
        self.fold.add(e)
        self.records += 1
        self.last_at = max(self.last_at, e.at)

    @property
    def state(self) -> State:
        """The state as of the last complete group (the open one is folded when it closes)."""
        return self.fold.engine.state


def _ago(seconds: int) -> str:
    s = abs(seconds)
    text = f"{s}s" if s < 120 else f"{s // 60}m" if s < 7200 else f"{s / 3600:.1f}h"
    return text


def _when(t: int) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if t else "-"


def queue_rows(state: State, limit: int = 12) -> list[dict[str, Any]]:
    """The ranked queue as data: one row per allocation with pending allocated work."""
    w = state.workloads
    if not w.pending or state.budget.root is None:
        return []
    ranking = Ranking(state, commitments(state))
    rows = []
    for pos, leaf in enumerate((lf for lf in ranking.leaf_order() if w.pending.get(lf)), 1):
        queue = w.pending[leaf]
        levels = ranking.levels(leaf) if leaf in state.budget else []
        head = [x for _, x in queue[:3]]
        rows.append({
            "position": pos, "leaf": leaf, "pending": len(queue),
            "gpus_wanted": sum(x.gpus for _, x in queue),
            "key": [(lv.node.rsplit("/", 1)[-1], lv.usage_fraction, lv.share_fraction, lv.ratio)
                    for lv in levels],
            "head": [(x.id, x.gpus, x.priority) for x in head],
        })
        if len(rows) >= limit:
            break
    return rows


def render(view: LiveView, limit: int = 12) -> RenderableType:
    """The view as a rich renderable: header, ranked queue, unallocated queue, running set."""
    st = view.state
    wl = st.workloads
    cl = st.cluster_state
    healthy = [h for h in cl.hosts.values() if h.health == "ok"]
    capacity = sum(h.gpus for h in healthy)  # a faulty host is no capacity, even while it drains
    busy = sum(h.gpus - h.free for h in healthy)
    faulty = sorted((h for h in cl.hosts.values() if h.health != "ok"), key=lambda h: h.name)
    draining = sum(h.gpus - h.free for h in faulty)
    head = Text.assemble(
        ("allot ", "bold"), (view.cluster, "bold cyan"), f"  {_when(st.now)}   ",
        (f"{busy}/{capacity}", "bold"), " GPUs busy on healthy hosts   ",
        (f"{wl.pending_count()}", "bold"), " pending   ",
        (f"{len(wl.running)}", "bold"), " running   ",
        f"{view.records:,} journal records")
    if faulty:
        shown = ", ".join(f"{h.name} ({h.health}" + (f": {h.fault_reason}" if h.fault_reason else "")
                          + ")" for h in faulty[:8]) + (f", ... {len(faulty) - 8} more"
                                                       if len(faulty) > 8 else "")
        head = Text.assemble(head, "\n", (f"{len(faulty)} faulty host(s)", "bold red"),
                             " (not in capacity" + (f"; {draining} GPUs still draining"
                                                     if draining else "") + "): ", shown)
    else:
        head = Text.assemble(head, "\n", "no faulty hosts")
    # Whole workload ids, never cut: they are what `allot cancel` and `allot explain` take.
    id_width = max([len(x.id) for x in wl.running.values()] + [8])
    q = Table(title="queue: allocations in the order the next cycle serves them",
              title_justify="left", expand=True, show_edge=False, pad_edge=False)
    q.add_column("#", justify="right", width=3)
    q.add_column("allocation")
    q.add_column("sort metric: used / entitled share of the parent, level by level", ratio=3)
    q.add_column("pending", justify="right")
    q.add_column("GPUs", justify="right")
    q.add_column("next in line", ratio=2, overflow="fold")
    for r in queue_rows(st, limit):
        key = "  ".join(f"{n} {u:.0%}/{s:.0%}={ratio:.2f}" if ratio != float("inf")
                        else f"{n} -" for n, u, s, ratio in r["key"])
        nxt = ", ".join(f"{i} ({g})" for i, g, _ in r["head"])
        q.add_row(str(r["position"]), r["leaf"], key, str(r["pending"]), str(r["gpus_wanted"]),
                  nxt)
    free_n = sum(len(v) for v in wl.pending_free.values())
    free = Text(f"unallocated, waiting for idle GPUs: {free_n} workload(s)"
                + (f" in {len(wl.pending_free)} allocation(s)" if free_n else ""), style="dim")
    r = Table(title="running", title_justify="left", expand=True, show_edge=False, pad_edge=False)
    r.add_column("workload", no_wrap=True, min_width=id_width)
    for c in ("allocation", "GPUs", "hosts", "for", "protection"):
        r.add_column(c, justify="right" if c in ("GPUs", "for") else "left")
    running = sorted(wl.running.values(), key=lambda x: (-(x.gpus), x.id))
    for x in running[:limit]:
        if not x.allocated:
            prot = Text("unallocated", style="yellow")
        elif x.protected_until is None or x.protected_until > st.now:
            left = "" if x.protected_until is None else f" {_ago(x.protected_until - st.now)}"
            prot = Text(f"protected{left}", style="green")
        else:
            prot = Text("time-sliced", style="magenta")
        hosts = ",".join(h for h, _ in x.placement[:4]) + ("..." if len(x.placement) > 4 else "")
        since = _ago(st.now - x.started_at) if x.started_at is not None else "-"
        r.add_row(x.id, x.budget, str(x.gpus), hosts, since, prot)
    if len(running) > limit:
        r.add_row(f"... {len(running) - limit} more", "", "", "", "", "")
    return Group(head, Text(""), q, free, Text(""), r)


def snapshot(view: LiveView) -> dict[str, Any]:
    """The view as plain data (``allot top --json``)."""
    st = view.state
    return {
        "cluster": view.cluster, "now": st.now, "records": view.records,
        "capacity": sum(h.gpus for h in st.cluster_state.hosts.values() if h.health == "ok"),
        "faulty_hosts": [{"host": h.name, "health": h.health, "reason": h.fault_reason}
                         for _, h in sorted(st.cluster_state.hosts.items()) if h.health != "ok"],
        "queue": queue_rows(st, limit=1_000),
        "unallocated_pending": sum(len(v) for v in st.workloads.pending_free.values()),
        "running": [{"workload": x.id, "budget": x.budget, "gpus": x.gpus,
                     "placement": list(x.placement), "allocated": x.allocated,
                     "protected_until": x.protected_until, "started_at": x.started_at}
                    for x in sorted(st.workloads.running.values(), key=lambda x: x.id)],
    }


# -- allot top ---------------------------------------------------------------------------------


def register(subparsers: Any) -> None:
    """Add ``allot top`` to the command line."""
    p = subparsers.add_parser(
        "top", help="the live queue (ranked, with its sort metric) and the running set",
        description="Fold a cluster's journal from the start and show the queue in the order "
                    "the next cycle serves it, each allocation with its fair-share key level "
                    "by level, and the running set; refreshed as the journal grows. Ctrl-C "
                    "quits.")
    p.add_argument("--bootstrap", default=None, metavar="HOST:PORT", help="Kafka bootstrap servers")
    p.add_argument("--topic-prefix", default=None, help="prefix of the topic names")
    p.add_argument("--config", default=None, metavar="FILE", help="the worker's TOML settings")
    p.add_argument("--cluster", default=None, help="the cluster (default: the first configured)")
    p.add_argument("--once", action="store_true",
                   help="read the journal to its end, print one view and exit")
    p.add_argument("--json", action="store_true", help="with --once: print the view as JSON")
    p.add_argument("--rows", type=int, default=12, help="rows per table (default 12)")
    p.set_defaults(func=_top)


def _top(args: Any) -> int:
    import sys

    from events.errors import AllotError
    from streams.commands import discovered_settings

    try:
        settings = discovered_settings(args)  # the running ``allot up``'s broker if none is named
        cluster = args.cluster or settings.clusters[0]
        known = _api_clusters(settings.bootstrap)
        return asyncio.run(_run_top(settings.bootstrap, settings.topic_prefix, cluster, args,
                                    known=known if known is not None else tuple(settings.clusters)))
    except AllotError as exc:
        print(f"allot top: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0


def _api_clusters(bootstrap: str) -> tuple[str, ...] | None:
    """The clusters the stack's state API schedules, if one answers for this broker."""
    from streams.state_cli import StateApiError, get, state_url_for

    url = state_url_for(bootstrap)
    if url is None:
        return None
    try:
        return tuple(c["cluster"] for c in get(url, "/api/clusters").get("clusters", ()))
    except (StateApiError, KeyError, TypeError):
        return None


async def _run_top(bootstrap: str, prefix: str, cluster: str, args: Any,
                   known: tuple[str, ...] = ()) -> int:
    import logging
    import sys

    import msgspec
    from rich.console import Console
    from rich.live import Live

    from streams.client import Client

    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    view = LiveView(cluster)
    async with Client(bootstrap, prefix, client_id="allot-top") as c:
        tail = await c.tail(cluster, start="begin")
        try:
            seen: set[str] = set()  # clusters whose records share this journal partition
            while not tail.caught_up:
                for item in await tail.poll(500):
                    seen.add(item.event.cluster)
                    view.add(item.event)
            if cluster not in known and cluster not in seen:
                from events.errors import AllotError

                names = sorted(set(known) | seen)
                raise AllotError(f"unknown cluster {cluster!r}: nothing in the journal and not "
                                 f"configured (known: {', '.join(names) or 'none'})")
            if args.once:
                for item in await tail.poll(200):
                    view.add(item.event)
                if args.json:
                    sys.stdout.write(msgspec.json.encode(snapshot(view)).decode() + "\n")
                else:
                    Console().print(render(view, args.rows))
                return 0
            with Live(render(view, args.rows), refresh_per_second=2, screen=False) as live:
                last = 0.0
                while True:
                    for item in await tail.poll(300):
                        view.add(item.event)
                    if time.monotonic() - last > 0.5:
                        live.update(render(view, args.rows))
                        last = time.monotonic()
        finally:
            with contextlib.suppress(Exception):
                await tail.stop()


__all__ = ["LiveView", "queue_rows", "register", "render", "snapshot"]
