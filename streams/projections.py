"""The Faust projections: windowed GPU usage per budget node and per host, over the journal.

A faust-streaming app (``build_app``) whose one agent reads the journal topic
(every partition, in order, concurrency 1: faust #606 commits past an in-flight
message with more) and folds each record into one Faust table with
``streams.usage_windows.apply_record``. The table holds six sections: the
fence (latest claim per journal partition), the clock and the run state per
cluster, the GPUs held per key (rates), the closed GPU-seconds per key and
window, and the position (last record applied) per journal partition. One
table, not five: its single changelog keeps a record's writes in order, which
is what makes a crash leave a prefix of them (``streams.usage_windows`` has
the argument). Every value carries the journal offset it reflects, so a record
Faust re-delivers after a restart counts once; the position says which records
Faust committed without their writes (its flush can return early), and those
are read back from the journal before going on (``fill``). Windows: hourly
tumbling and daily hopping (every six hours) by default, any others with
``--window``.

The read endpoint, served by Faust's own web server bound to 127.0.0.1 (Faust
binds every interface unless told; ``web_bind`` and ``web_host`` are set here,
and ``allot projections`` refuses any other address):

- ``GET /usage?cluster=C&window=hourly&dim=node|host[&key=K]``: GPU-seconds and
  GPU-hours per key and window start (allocated and unallocated), as of the
  cluster's clock;
- ``GET /teams?cluster=C[&depth=2]``: per team, hourly usage against its
  entitlement (the current shares) times the cluster's GPUs;
- ``GET /status``: journal offsets applied, records counted, skipped and
  fenced, projection lag (append -> applied), recovery state, fetch wait;
- ``GET /healthz``; ``GET /`` the dashboard (usage against entitlement per
  team over time, one small HTML page, no external assets).

The fetch wait (docs/live-clients.md has the measurements): Faust hard-codes
``fetch_max_wait_ms=1500`` in its aiokafka driver, and on Tansu every fetch
waits its whole wait, so the projection would lag about a second behind the
journal; a very short wait, though, reads nothing from a long partition
(Tansu's fetch is time-limited; the notes saw recovery never progress at
10 ms). So a timer sets the running consumer's wait: ``recovery_wait_ms``
while Faust recovers its tables, ``tail_wait_ms`` once it is live.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections import deque
from typing import Any

import msgspec

from events import MalformedEvent, decode
from events.errors import AllotError
from streams.config import faust_credentials, kafka_client_options
from streams.journal import read_until, reader
from streams.logs import logger
from streams.records import JOURNAL, BadJournalRecord, parse_journal, topic
from streams.usage_windows import (
    DEFAULT_WINDOWS,
    DIMENSIONS,
    NODE,
    Stores,
    WindowSpec,
    advance,
    apply_record,
    entitlement,
    figures,
    held,
    load_state,
    missing,
    parse_window,
)

LOOPBACK = "127.0.0.1"
RECOVERY_WAIT_MS = 200
TAIL_WAIT_MS = 50
TABLE = "usage"
STORES = ("fence", "clock", "state", "rates", "windows", "position")


class ProjectionError(AllotError):
    """The projections cannot start: a bad address, no journal topic, a bad window."""


class Counters:
    """What the agent did, for ``/status`` (process-local, not a table)."""

    def __init__(self) -> None:
        self.records = 0
        self.skipped = 0
        self.fenced = 0
        self.unreadable = 0
        self.gaps: list[dict[str, Any]] = []  # journal ranges read back (see fill)
        self.lag_ms: deque[float] = deque(maxlen=2000)   # append -> applied, records since live
        self.started = time.time()
        self.first_record_at: float | None = None
        self.live_at: float | None = None

    def lag(self) -> dict[str, float | None]:
        xs = sorted(self.lag_ms)
        if not xs:
            return {"p50_ms": None, "p99_ms": None, "n": 0}
        return {"p50_ms": round(xs[len(xs) // 2], 1),
                "p99_ms": round(xs[min(len(xs) - 1, int(len(xs) * 0.99))], 1), "n": len(xs)}


def app_id(prefix: str) -> str:
    return f"{prefix}allot-projections"


def build_app(bootstrap: str, prefix: str = "", *, partitions: int, port: int,
              windows: tuple[WindowSpec, ...] = DEFAULT_WINDOWS,
              recovery_wait_ms: int = RECOVERY_WAIT_MS, tail_wait_ms: int = TAIL_WAIT_MS,
              session_timeout_s: float = 6.0, datadir: str | None = None) -> Any:
    """The Faust app of the projections (not started)."""
    import faust

    app = faust.App(
        app_id(prefix),
        broker=f"kafka://{bootstrap.split(',')[0]}",
        # SASL from the environment, like every allot client (None: plaintext).
        broker_credentials=faust_credentials(),
        store="memory://",
        topic_partitions=partitions,
        topic_replication_factor=1,
        consumer_auto_offset_reset="earliest",
        processing_guarantee="at_least_once",
        web_enabled=True, web_bind=LOOPBACK, web_host=LOOPBACK, web_port=port,
        web_in_thread=False,
        broker_session_timeout=session_timeout_s,
        broker_heartbeat_interval=1.0,
        broker_request_timeout=max(30.0, session_timeout_s + 10),
        broker_commit_interval=1.0,
        # Changelog writes: large batches, so one produce round trip carries many of them
        # (Faust's 16 KB default made a record's writes a round trip each on Tansu).
        producer_linger_ms=5,
        producer_max_batch_size=1024 * 1024,
        producer_max_request_size=4 * 1024 * 1024,
        table_standby_replicas=0,
        stream_wait_empty=False,
        key_serializer="raw", value_serializer="json",
        datadir=datadir or os.path.join(os.environ.get("TMPDIR", "/tmp"),
                                        f"{app_id(prefix)}-{os.getpid()}"),
    )
    journal_name = topic(JOURNAL, prefix)
    journal = app.topic(journal_name, key_type=bytes, value_type=bytes,
                        key_serializer="raw", value_serializer="raw", partitions=partitions)
    table = app.Table(TABLE, default=None, partitions=partitions, key_type=str,
                      help="usage projections: fence, clock, state, rates, windows, positions")
    tables = {TABLE: table}
    stores = Stores.shared(table)
    counters = Counters()
    app.allot = {"stores": stores, "counters": counters, "windows": windows,  # type: ignore[attr-defined]
                 "tables": tables}

    def fold(partition: int, offset: int, value: bytes | None, headers: Any) -> None:
        """One journal record into the tables (also one read back to fill a gap)."""
        try:
            rec = parse_journal(partition, offset, value, headers)
        except BadJournalRecord:
            counters.unreadable += 1
            advance(stores, partition, offset)
            return
        ev = None
        if rec.kind != "claim":
            try:
                ev = decode(rec.value)
            except MalformedEvent:
                counters.unreadable += 1
                advance(stores, partition, offset)
                return
        res = apply_record(stores, rec, windows, ev)
        counters.records += 1
        counters.skipped += res.skipped
        counters.fenced += res.fenced

    @app.agent(journal, concurrency=1)
    async def project(stream: Any) -> None:
        async for event in stream.events():
            msg = event.message
            gap = missing(stores, msg.partition, msg.offset)
            if gap:
                # Records Faust committed without their writes (see usage_windows.missing):
                # read them back, in order, before this one. Their writes go to this
                # event's changelog partition, which is theirs too.
                await fill(bootstrap, journal_name, msg.partition, gap, fold, counters)
            fold(msg.partition, msg.offset, msg.value, msg.headers)
            live_at = counters.live_at
            if msg.timestamp and live_at is not None and msg.timestamp >= live_at:
                # Appended after the projection went live: catching up is not lag.
                counters.lag_ms.append(max(0.0, (time.time() - msg.timestamp) * 1000))
            if counters.first_record_at is None:
                counters.first_record_at = time.time()

    @app.timer(interval=0.25)
    async def fetch_wait() -> None:
        recovering = bool(getattr(app, "in_recovery", False)) or not app.tables.recovery.completed.is_set()
        set_fetch_wait(app, recovery_wait_ms if recovering else tail_wait_ms)
        if not recovering and counters.live_at is None:
            counters.live_at = time.time()

    _pages(app, stores, counters, windows)
    return app


async def fill(bootstrap: str, journal: str, partition: int, gap: range,
               fold: Any, counters: Counters) -> None:
    """Read ``gap`` of a journal partition with a consumer of its own and ``fold`` each record."""
    consumer = reader(bootstrap, client_id="allot-projections-gap")
    await consumer.start()
    try:
        async for batch in read_until(consumer, journal, partition, gap.start, gap.stop - 1):
            for m in batch:
                fold(partition, m.offset, m.value, m.headers)
    finally:
        await consumer.stop()
    counters.gaps.append({"partition": partition, "from": gap.start, "to": gap.stop - 1,
                          "at": time.time()})
    logger(component="projections").warning("projections.gap_filled", partition=partition, first=gap.start,
                last=gap.stop - 1, records=len(gap))


def consumer_of(app: Any) -> Any:
    """The aiokafka consumer inside Faust's consumer thread (None before it starts)."""
    thread = getattr(getattr(app, "consumer", None), "_thread", None)
    return getattr(thread, "_consumer", None)


def set_fetch_wait(app: Any, ms: int) -> None:
    """Set the fetch wait of Faust's running consumer (read by aiokafka for every fetch)."""
    fetcher = getattr(consumer_of(app), "_fetcher", None)
    if fetcher is not None and hasattr(fetcher, "_fetch_max_wait_ms"):
        fetcher._fetch_max_wait_ms = int(ms)


def fetch_wait_of(app: Any) -> int | None:
    fetcher = getattr(consumer_of(app), "_fetcher", None)
    return getattr(fetcher, "_fetch_max_wait_ms", None)


# -- reading ------------------------------------------------------------------------------------


def usage(stores: Stores, cluster: str, spec: WindowSpec, dim: str,
          key: str | None = None) -> dict[str, Any]:
    """The JSON body of ``/usage``."""
    clock = stores.clock.get(cluster)
    as_of = int(clock[0]) if clock is not None else None
    cells = figures(stores, cluster, spec, dim, as_of)
    out: dict[str, Any] = {}
    for k in sorted(cells):
        if key is not None and k != key:
            continue
        out[k] = [{"start": s, "end": s + spec.size_s, "alloc_gpu_s": a, "unalloc_gpu_s": u,
                   "gpu_hours": round((a + u) / 3600, 6)}
                  for s, (a, u) in sorted(cells[k].items())]
    return {"cluster": cluster, "window": spec.name, "kind": spec.kind, "size_s": spec.size_s,
            "step_s": spec.step_s, "dim": dim, "as_of": as_of,
            "offset": None if clock is None else int(clock[1]),
            "held_gpus": {k: {"alloc": a, "unalloc": u} for k, (a, u) in
                          held(stores, cluster, dim).items() if key is None or k == key},
            "usage": out}


def teams(stores: Stores, cluster: str, spec: WindowSpec, depth: int = 2) -> dict[str, Any]:
    """The JSON body of ``/teams``: usage against entitlement per team and window."""
    st = load_state(stores.state.get(cluster))
    capacity = sum(st.hosts.values())
    cells = figures(stores, cluster, spec, NODE)
    names = sorted(n for n in st.shares if n.count("/") == depth - 1) or \
        sorted(n for n in cells if n.count("/") == depth - 1)
    rows = {}
    for n in names:
        ent = entitlement(st.shares, n)
        rows[n] = {"entitlement": round(ent, 6),
                   "entitled_gpu_h_per_window": round(ent * capacity * spec.size_s / 3600, 3),
                   "usage": [{"start": s, "gpu_hours": round((a + u) / 3600, 3),
                              "alloc_gpu_hours": round(a / 3600, 3)}
                             for s, (a, u) in sorted(cells.get(n, {}).items())]}
    clock = stores.clock.get(cluster)
    return {"cluster": cluster, "window": spec.name, "capacity_gpus": capacity,
            "as_of": None if clock is None else int(clock[0]), "teams": rows}


def _pages(app: Any, stores: Stores, counters: Counters, windows: tuple[WindowSpec, ...]) -> None:
    by_name = {w.name: w for w in windows}

    def pick(request: Any) -> tuple[str | None, WindowSpec | None, str]:
        q = request.query
        cluster = q.get("cluster")
        if cluster is None:
            known = sorted(k for k in list(stores.clock.keys()))
            cluster = known[0] if known else None
        spec = by_name.get(q.get("window", windows[0].name))
        return cluster, spec, q.get("dim", NODE)

    @app.page("/usage")
    async def usage_page(web: Any, request: Any) -> Any:
        cluster, spec, dim = pick(request)
        if spec is None or dim not in DIMENSIONS:
            return web.json({"error": f"window must be one of {sorted(by_name)}, dim one of "
                                      f"{list(DIMENSIONS)}"}, status=400)
        if cluster is None:
            return web.json({"error": "no cluster in the journal yet"}, status=404)
        return web.json(usage(stores, cluster, spec, dim, request.query.get("key")))

    @app.page("/teams")
    async def teams_page(web: Any, request: Any) -> Any:
        cluster, spec, _ = pick(request)
        if spec is None:
            return web.json({"error": f"window must be one of {sorted(by_name)}"}, status=400)
        if cluster is None:
            return web.json({"error": "no cluster in the journal yet"}, status=404)
        try:
            depth = int(request.query.get("depth", "2"))
        except ValueError:
            return web.json({"error": "depth must be an integer"}, status=400)
        return web.json(teams(stores, cluster, spec, depth))

    @app.page("/status")
    async def status_page(web: Any, request: Any) -> Any:
        return web.json(status(app, stores, counters, windows))

    @app.page("/healthz")
    async def healthz(web: Any, request: Any) -> Any:
        ok = counters.live_at is not None
        return web.json({"ok": ok, "recovering": not ok}, status=200 if ok else 503)

    @app.page("/")
    async def dashboard(web: Any, request: Any) -> Any:
        return web.html(DASHBOARD)


def status(app: Any, stores: Stores, counters: Counters,
           windows: tuple[WindowSpec, ...]) -> dict[str, Any]:
    return {
        "app": app.conf.id,
        "records": counters.records, "skipped_redelivered": counters.skipped,
        "fenced": counters.fenced, "unreadable": counters.unreadable,
        # The last record applied per journal partition, as stored with the state.
        "offsets": {str(p): int(o) for p, o in sorted(list(stores.position.items()))},
        "gaps_filled": counters.gaps,
        "clusters": {c: {"t": int(v[0]), "offset": int(v[1])}
                     for c, v in sorted(list(stores.clock.items()))},
        "lag": counters.lag(),
        "started_at": counters.started,
        "live_at": counters.live_at,
        "ready_s": None if counters.live_at is None else round(counters.live_at - counters.started, 2),
        "recovering": counters.live_at is None,
        "fetch_wait_ms": fetch_wait_of(app),
        "windows": [msgspec.to_builtins(w) for w in windows],
        "keys": {name: len(getattr(stores, name)) for name in STORES},
    }


# -- allot projections ---------------------------------------------------------------------------


def register(subparsers: Any) -> None:
    """Add ``allot projections`` to the command line."""
    p = subparsers.add_parser(
        "projections", help="run the Faust usage projections and their loopback endpoint",
        description="A faust-streaming worker over the journal: GPU-hours per budget node and "
                    "per host in tumbling (hourly) and hopping (daily, every 6 h) windows, each "
                    "table value carrying the journal offset it reflects. Serves JSON and a "
                    "dashboard on 127.0.0.1:PORT (/usage, /teams, /status, /healthz, /).")
    p.add_argument("--bootstrap", default=None, metavar="HOST:PORT", help="Kafka bootstrap servers")
    p.add_argument("--topic-prefix", default=None, help="prefix of the topic names")
    p.add_argument("--config", default=None, metavar="FILE", help="the worker's TOML settings")
    p.add_argument("--port", type=int, default=6066, help="port of the endpoint (default 6066)")
    p.add_argument("--host", default=LOOPBACK, help="address of the endpoint (loopback only)")
    p.add_argument("--window", action="append", default=None, metavar="NAME=SIZE[/STEP]",
                   help="a window in seconds, tumbling (NAME=3600) or hopping (NAME=86400/3600); "
                        "repeatable; default hourly=3600 and daily=86400/21600")
    p.add_argument("--recovery-wait-ms", type=int, default=RECOVERY_WAIT_MS,
                   help=f"fetch wait while tables recover (default {RECOVERY_WAIT_MS})")
    p.add_argument("--tail-wait-ms", type=int, default=TAIL_WAIT_MS,
                   help=f"fetch wait once live (default {TAIL_WAIT_MS}; Faust's own is 1500)")
    p.add_argument("--loglevel", default="warning", help="Faust's log level (default warning)")
    p.set_defaults(func=_main)


def _main(args: Any) -> int:
    from streams import config

    try:
        problem = config.loopback_problem(args.host)
        if problem is not None:
            raise ProjectionError(f"--host {args.host}: the endpoint binds loopback only ({problem})")
        settings = config.load(args.config, flags={"bootstrap": args.bootstrap,
                                                   "topic_prefix": args.topic_prefix})
        windows = tuple(parse_window(w) for w in args.window) if args.window else DEFAULT_WINDOWS
        if len({w.name for w in windows}) != len(windows):
            raise ProjectionError("window names must be unique")
        partitions = asyncio.run(_journal_partitions(settings.bootstrap, settings.topic_prefix))
    except AllotError as exc:
        print(f"allot projections: error: {exc}", file=sys.stderr)
        return 2
    import faust

    app = build_app(settings.bootstrap, settings.topic_prefix, partitions=partitions,
                    port=args.port, windows=windows, recovery_wait_ms=args.recovery_wait_ms,
                    tail_wait_ms=args.tail_wait_ms)
    app.conf.web_bind = args.host
    app.conf.web_host = args.host
    worker = faust.Worker(app, loglevel=args.loglevel)
    with contextlib.suppress(SystemExit):
        worker.execute_from_commandline()
    return 0


async def _journal_partitions(bootstrap: str, prefix: str, timeout: float = 60.0) -> int:
    """The journal's partition count (waits for the worker to create it)."""
    from aiokafka import AIOKafkaConsumer
    from aiokafka.errors import KafkaError

    name = topic(JOURNAL, prefix)
    deadline = time.monotonic() + timeout
    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, **kafka_client_options())
    try:
        await c.start()
    except KafkaError as exc:
        await c.stop()
        raise ProjectionError(f"cannot reach Kafka at {bootstrap}: {exc}") from exc
    try:
        while True:
            await c.topics()
            parts = c.partitions_for_topic(name)
            if parts:
                return len(parts)
            if time.monotonic() > deadline:
                raise ProjectionError(f"no topic {name} after {timeout:.0f} s: start a worker")
            await asyncio.sleep(0.5)
    finally:
        await c.stop()


DASHBOARD = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>allot: usage against entitlement</title>
<style>
body { font: 14px system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.2em; } .team { display: inline-block; margin: 0 1.5em 1.5em 0; }
.team h2 { font-size: 1em; margin: 0 0 .3em; } svg { background: #fafafa; border: 1px solid #ddd; }
.meta { color: #666; } .use { fill: none; stroke: #2a6fdb; stroke-width: 1.5; }
.ent { stroke: #d9534f; stroke-dasharray: 4 3; } .axis { stroke: #bbb; }
</style></head><body>
<h1>allot: GPU-hours per team per hour, against entitlement</h1>
<p class="meta" id="meta">loading ...</p><div id="teams"></div>
<script>
const W = 360, H = 140, P = 28;
function chart(name, t) {
  const xs = t.usage.map(u => u.start), ys = t.usage.map(u => u.gpu_hours);
  const ent = t.entitled_gpu_h_per_window;
  const x0 = Math.min(...xs), x1 = Math.max(...xs, x0 + 3600);
  const ymax = Math.max(ent, ...ys, 1) * 1.1;
  const X = x => P + (x - x0) / (x1 - x0) * (W - 2 * P), Y = y => H - P - y / ymax * (H - 2 * P);
  const pts = t.usage.map(u => X(u.start) + "," + Y(u.gpu_hours)).join(" ");
  const used = ys.reduce((a, b) => a + b, 0), owed = ent * ys.length;
  return `<div class="team"><h2>${name}</h2><svg width="${W}" height="${H}">
    <line class="axis" x1="${P}" y1="${H - P}" x2="${W - P}" y2="${H - P}"/>
    <line class="ent" x1="${P}" y1="${Y(ent)}" x2="${W - P}" y2="${Y(ent)}"/>
    <polyline class="use" points="${pts}"/>
    <text x="${P}" y="12" font-size="11">${(t.entitlement * 100).toFixed(1)}% entitled:
      ${ent.toFixed(1)} GPU-h/h; used ${used.toFixed(0)} of ${owed.toFixed(0)} GPU-h</text>
    </svg></div>`;
}
async function draw() {
  const r = await fetch("teams?window=hourly&depth=" + (new URLSearchParams(location.search).get("depth") || 2));
  if (!r.ok) { document.getElementById("meta").textContent = "no data yet"; return; }
  const d = await r.json();
  document.getElementById("meta").textContent = `cluster ${d.cluster}, ${d.capacity_gpus} GPUs, as of ` +
    new Date(d.as_of * 1000).toISOString() + " (scheduler time); blue: used, red dashes: entitled";
  document.getElementById("teams").innerHTML =
    Object.entries(d.teams).map(([n, t]) => chart(n, t)).join("");
}
draw(); setInterval(draw, 2000);
</script></body></html>
"""


__all__ = ["DASHBOARD", "build_app", "register", "set_fetch_wait", "status", "teams", "usage"]
