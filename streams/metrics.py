"""The worker's health and Prometheus metrics, served on loopback.

``WorkerMetrics`` holds one prometheus-client registry per worker (no global
registry, so tests can run several workers in one process). ``MetricsServer``
serves it on ``metrics_host:metrics_port`` (127.0.0.1 by default):

- ``GET /metrics``: Prometheus text format. Pending workloads per leaf,
  running GPUs, decisions by type, inputs by type, the cycle latency
  histogram, inbox lag per partition, dead letters by reason, journal records,
  snapshots, restarts of a partition (claims).
- ``GET /healthz``: 200 with a small JSON body while the processing loop ran
  recently, 503 when it is stuck or stopped.
- ``GET /readyz``: 200 once the worker owns its partitions, rebuilt, and
  every owned cluster's clock has ticked; 503 before (``ready`` false).
- ``GET /api/...`` and the dashboard: further routes (``streams.state_api``).
- ``GET /state``: per owned partition, the journal offset the engines reflect
  and each cluster's state fingerprint (a digest of the whole state), taken
  between two batches; for tests and operators comparing a worker with a fold
  of its journal.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest

from streams.config import bind_problem

CYCLE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class WorkerMetrics:
    """Every metric of one worker, in its own registry."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.inputs = Counter("allot_inputs_total", "Inputs journaled, by cluster and type",
                              ["cluster", "type"], registry=r)
        self.decisions = Counter("allot_decisions_total", "Decisions journaled, by cluster and type",
                                 ["cluster", "type"], registry=r)
        self.dead_letters = Counter("allot_dead_letters_total", "Records dead-lettered, by reason",
                                    ["reason"], registry=r)
        self.duplicates = Counter("allot_duplicate_inputs_total",
                                  "Inputs skipped because the engine saw their id", registry=r)
        self.journal_records = Counter("allot_journal_records_total",
                                       "Records appended to the journal", registry=r)
        self.cycle_seconds = Histogram("allot_cycle_seconds",
                                       "Engine.process time of a tick (one scheduling cycle)",
                                       ["cluster"], buckets=CYCLE_BUCKETS, registry=r)
        self.batch_seconds = Histogram("allot_batch_seconds",
                                       "Time to handle and journal one batch of inbox records",
                                       buckets=CYCLE_BUCKETS, registry=r)
        self.pending = Gauge("allot_pending_workloads", "Pending workloads per budget leaf",
                             ["cluster", "leaf"], registry=r)
        self.running_gpus = Gauge("allot_running_gpus", "GPUs held by running workloads",
                                  ["cluster"], registry=r)
        self.inbox_lag = Gauge("allot_inbox_lag", "Inbox records not handled yet, per partition",
                               ["partition"], registry=r)
        self.owned = Gauge("allot_owned_partitions", "Inbox partitions this worker owns",
                           registry=r)
        self.claims = Counter("allot_claims_total", "Partitions claimed (assignments)",
                              registry=r)
        self.snapshots = Counter("allot_snapshots_total", "Snapshots written", registry=r)
        self.fold_seconds = Histogram("allot_fold_seconds",
                                      "Time to rebuild a partition on assignment",
                                      buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60), registry=r)
        self.last_loop = time.monotonic()

    def beat(self) -> None:
        """The processing loop is alive."""
        self.last_loop = time.monotonic()

    def set_leaves(self, cluster: str, pending: dict[str, int], running_gpus: int) -> None:
        """Replace one cluster's per-leaf pending counts and its running GPUs."""
        for leaf, n in pending.items():
            self.pending.labels(cluster, leaf).set(n)
        self.running_gpus.labels(cluster).set(running_gpus)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class MetricsServer:
    """``/metrics`` and ``/healthz`` on one address, in a daemon thread."""

    def __init__(self, metrics: WorkerMetrics, host: str = "127.0.0.1", port: int = 0,
                 health: Callable[[], dict[str, Any]] | None = None,
                 stale_after_s: float = 30.0,
                 state: Callable[[], dict[str, Any]] | None = None,
                 ready: Callable[[], dict[str, Any]] | None = None,
                 routes: Callable[[str, dict[str, str]], tuple[int, str, bytes] | None] | None = None,
                 non_loopback: bool = False,
                 ) -> None:
        # Resolved, not compared as a string: "0", "0x0" or a name can mean any interface.
        problem = bind_problem(host, non_loopback)
        if problem is not None:
            raise ValueError(f"the metrics server may not bind {host!r}: {problem}")
        self.metrics = metrics
        self.health = health or (lambda: {})
        self.stale_after_s = stale_after_s
        self.state = state
        self.ready = ready
        # Further GET routes (the state API, the dashboard): path and query -> (code, type,
        # body), or None when the path is not theirs.
        self.routes = routes
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] == "/metrics":
                    self._send(200, CONTENT_TYPE_LATEST, server.metrics.render())
                elif self.path.split("?")[0] == "/healthz":
                    age = time.monotonic() - server.metrics.last_loop
                    body = {"ok": age < server.stale_after_s, "loop_age_s": round(age, 3),
                            **server.health()}
                    self._send(200 if body["ok"] else 503, "application/json",
                               json.dumps(body).encode())
                elif self.path.split("?")[0] == "/state" and server.state is not None:
                    try:
                        body = json.dumps(server.state()).encode()
                    except Exception as exc:  # the loop is busy or stopping
                        self._send(503, "text/plain", f"{type(exc).__name__}\n".encode())
                        return
                    self._send(200, "application/json", body)
                elif self.path.split("?")[0] == "/readyz":
                    body = {"ready": False, **(server.ready() if server.ready else {})}
                    self._send(200 if body["ready"] else 503, "application/json",
                               json.dumps(body).encode())
                else:
                    answer = None
                    if server.routes is not None:
                        from urllib.parse import parse_qsl, urlsplit

                        parts = urlsplit(self.path)
                        try:
                            answer = server.routes(parts.path, dict(parse_qsl(parts.query)))
                        except Exception as exc:  # the loop is busy or stopping
                            answer = (503, "text/plain", f"{type(exc).__name__}\n".encode())
                    if answer is not None and answer[0] == 302:
                        self.send_response(302)
                        self.send_header("Location", answer[2].decode().strip())
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                    elif answer is None:
                        self._send(404, "text/plain", b"not found\n")
                    else:
                        self._send(*answer)

            def _send(self, code: int, ctype: str, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                return

        self._httpd = ThreadingHTTPServer((host, port), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="allot-metrics",
                                        daemon=True)

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._httpd.server_address[:2]
        return str(host), int(port)

    def start(self) -> MetricsServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
