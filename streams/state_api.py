"""The worker's state API: what the engines hold, shaped as JSON for the verbs and the dashboard.

``StateApi`` reads the engines of a worker (anything with ``engines()``) and
answers, per cluster:

- ``queue``: pending work in the order the next cycle serves it, each with
  its allocation's fair-share key level by level (``Ranking.levels``: usage
  fraction over share fraction of the parent; < 1 is under-served, served
  first) and what it waits for (one traced cycle, ``scheduler.policy.cycle.decide``);
- ``hosts``: health, GPUs free and used, drains and faults; capacity counts
  healthy hosts only;
- ``budgets``: the tree with shares, entitlement, windowed usage and the
  per-level ratio;
- ``explain``: ``scheduler.explain.explain`` of one workload;
- ``history``: ended workloads, filtered by user, budget and end time;
- ``usage`` and ``gantt``: the samples and runs ``RunLog`` collected;
- ``policy``: the knobs the cluster runs under, who set them and when.

``RunLog`` is fed by the worker with every journaled input and decision
(``observe``). It knows what this worker saw since it claimed the partition;
work that ended before (folded from the journal or a snapshot) appears in
``history`` with its end time unknown (``ended_at`` null).

Everything here runs on the worker's loop between two batches (the HTTP
thread hands the call over), so the engines are never read mid-fold.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Protocol

from events import (
    ClockTicked,
    Event,
    WorkloadCancelled,
    WorkloadFinished,
    WorkloadPreempted,
    WorkloadStarted,
)
from projections.workloads import ENDED, PENDING, RUNNING
from scheduler import Engine
from scheduler.index.fair_share_order import Ranking, commitments
from scheduler.state import State
from scheduler.time_text import date_text, duration_text

MAX_RUNS = 50_000
MAX_SAMPLES = 2_000


class StateError(Exception):
    """A request the API cannot answer (unknown cluster or workload, bad filter): a 4xx."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class EngineSource(Protocol):
    def engines(self) -> dict[str, Engine]: ...


class RunLog:
    """Runs (start, end, how it ended) and usage samples, per cluster, as the worker journals them."""

    def __init__(self, max_runs: int = MAX_RUNS, max_samples: int = MAX_SAMPLES) -> None:
        self.runs: dict[str, deque[dict[str, Any]]] = {}
        self.open: dict[tuple[str, str], dict[str, Any]] = {}
        self.ended: dict[str, dict[str, tuple[int, str]]] = {}
        self.samples: dict[str, deque[dict[str, Any]]] = {}
        self.max_runs = max_runs
        self.max_samples = max_samples
        self._last_sample: dict[str, int] = {}

    def observe(self, event: Event, engine: Engine) -> None:
        """Note one journaled event, after the engine folded it."""
        c = event.cluster
        kind = type(event)
        st = engine.state
        if kind is WorkloadStarted:
            w = st.workloads.all.get(event.workload)
            run = {"workload": event.workload, "budget": w.budget if w else "",
                   "user": w.user if w else "", "start": st.now, "end": None,
                   "placement": [[s.host, s.gpus] for s in event.placement],
                   "allocated": event.allocated, "protected_until": event.protected_until,
                   "ended": None}
            self.open[(c, event.workload)] = run
            q = self.runs.setdefault(c, deque(maxlen=self.max_runs))
            q.append(run)
        elif kind in (WorkloadFinished, WorkloadPreempted, WorkloadCancelled):
            run = self.open.pop((c, event.workload), None)
            how = (event.outcome if kind is WorkloadFinished else
                   "preempted" if kind is WorkloadPreempted else "cancelled")
            if run is not None:
                run["end"] = st.now
                run["ended"] = how
            w = st.workloads.all.get(event.workload)
            if w is not None and w.status in ENDED:
                self.ended.setdefault(c, {})[event.workload] = (st.now, w.status)
        elif kind is ClockTicked:
            every = max(300, st.policy.window_s // 500)
            if st.now - self._last_sample.get(c, -every) >= every:
                self._last_sample[c] = st.now
                # Keep end times only of workloads the state still holds (the lapse rule):
                # the dict is in end order, so its first entry says when to trim.
                ended = self.ended.get(c)
                if ended and next(iter(ended.values()))[0] < st.forgotten_before():
                    held = st.workloads.all
                    self.ended[c] = {w: v for w, v in ended.items() if w in held}
                self.samples.setdefault(c, deque(maxlen=self.max_samples)).append(
                    usage_sample(st))


def usage_sample(st: State) -> dict[str, Any]:
    """Per budget node: its share of the window's usage and its entitlement (both of the cluster)."""
    tree = st.budget
    leaves = tree.leaves()
    use = st.usage.usage_of(leaves, st.now) if leaves else {}
    totals: dict[str, int] = {}
    for leaf, u in use.items():
        parts = leaf.split("/")
        for i in range(1, len(parts) + 1):
            node = "/".join(parts[:i])
            totals[node] = totals.get(node, 0) + u
    root = tree.root
    whole = totals.get(root, 0) if root else 0
    return {"at": st.now, "nodes": {p: [round(totals.get(p, 0) / whole, 4) if whole else 0.0,
                                        round(tree.entitlement(p), 4)]
                                    for p in tree.nodes}}


def _levels(ranking: Ranking, state: State, leaf: str) -> list[dict[str, Any]]:
    if leaf not in state.budget:
        return []
    return [{"node": lv.node, "usage_fraction": round(lv.usage_fraction, 4),
             "share_fraction": round(lv.share_fraction, 4),
             "ratio": None if lv.ratio == float("inf") else round(lv.ratio, 4),
             "position": lv.position, "siblings": lv.siblings}
            for lv in ranking.levels(leaf)]


class StateApi:
    """The JSON answers, read from ``source``'s engines and ``runs``."""

    def __init__(self, source: EngineSource, runs: RunLog | None = None) -> None:
        self.source = source
        self.runs = runs or RunLog()

    # -- helpers ------------------------------------------------------------------------------

    def _engine(self, cluster: str | None) -> tuple[str, Engine]:
        engines = self.source.engines()
        if not engines:
            raise StateError(503, "this worker schedules no cluster yet")
        if cluster is None:
            cluster = sorted(engines)[0]
        e = engines.get(cluster)
        if e is None:
            raise StateError(404, f"no cluster {cluster!r} here (clusters: "
                                  f"{', '.join(sorted(engines))})")
        return cluster, e

    def clusters(self) -> dict[str, Any]:
        return {"clusters": [{"cluster": c, "now": e.state.now,
                              "pending": e.state.workloads.pending_count(),
                              "running": len(e.state.workloads.running)}
                             for c, e in sorted(self.source.engines().items())]}

    # -- queue --------------------------------------------------------------------------------

    def queue(self, cluster: str | None = None, user: str | None = None,
              budget: str | None = None, limit: int = 2_000, reasons: bool = True) -> dict[str, Any]:
        from scheduler.policy.cycle import decide

        c, e = self._engine(cluster)
        st = e.state
        wl = st.workloads
        rows: list[dict[str, Any]] = []
        trace: dict[str, Any] = {}
        if reasons and wl.pending_count():
            decide(st, "explain", trace)
        ranking = Ranking(st, commitments(st)) if st.budget.root is not None else None
        order = [lf for lf in ranking.leaf_order()] if ranking else []
        rank = 0
        for allocated, queues in ((True, wl.pending), (False, wl.pending_free)):
            leaves = [lf for lf in order if queues.get(lf)] + sorted(
                lf for lf in queues if lf not in set(order) and queues[lf])
            for pos, leaf in enumerate(leaves, 1):
                levels = _levels(ranking, st, leaf) if ranking else []
                for i, (_, w) in enumerate(queues[leaf], 1):
                    rank += 1
                    if user and w.user != user:
                        continue
                    if budget and not (w.budget == budget or w.budget.startswith(budget + "/")):
                        continue
                    out = trace.get(w.id)
                    waits = None if out is None else (
                        "starts next cycle" if out.status == "started" else out.reason)
                    rows.append({
                        "rank": rank, "workload": w.id, "user": w.user, "budget": w.budget,
                        "allocated": allocated, "allocation_position": pos,
                        "queue_position": i, "gpus": w.gpus,
                        "shape": f"{w.hosts}x{w.gpus_per_host}", "priority": w.priority,
                        "kind": w.kind, "submitted_at": w.submitted_at,
                        "waited_s": st.now - w.submitted_at, "sort_metric": levels,
                        "waits_for": waits or "not reached by this cycle",
                        "until": getattr(out, "until", None) if out is not None else None,
                    })
                    if len(rows) >= limit:
                        break
        del rows[limit:]  # the break above leaves one allocation's queue, not the others'
        return {"cluster": c, "now": st.now, "pending": wl.pending_count(), "rows": rows,
                "legend": "sort_metric: per level, the allocation's usage fraction over its share "
                          "fraction of the parent; a ratio below 1 is under-served and is served "
                          "first (lower is better)"}

    def queue_forecast_input(self, cluster: str | None = None, user: str | None = None,
                             budget: str | None = None, limit: int = 2_000,
                             rows: int = 20) -> tuple[dict[str, Any], bytes | None, list[str]]:
        """The queue, plus what forecasting its first ``rows`` rows needs: a snapshot of the
        state (taken here, on the worker's loop) and their ids. The simulation runs elsewhere
        (``attach_forecasts``), so a forecast never holds the worker between two batches."""
        from scheduler.snapshot import snapshot_state

        body = self.queue(cluster, user, budget, limit)
        ids = [r["workload"] for r in body["rows"][:max(0, rows)]]
        _, e = self._engine(body["cluster"])
        return body, (snapshot_state(e.state) if ids else None), ids

    # -- active workloads (what ``allot cancel --user/--budget`` cancels) ---------------------

    def workloads(self, cluster: str | None = None, user: str | None = None,
                  budget: str | None = None) -> dict[str, Any]:
        """Every pending or running workload, optionally of one user and/or budget subtree."""
        c, e = self._engine(cluster)
        st = e.state
        rows = []
        for w in st.workloads.all.values():
            if w.status not in (PENDING, RUNNING):
                continue
            if user and w.user != user:
                continue
            if budget and not (w.budget == budget or w.budget.startswith(budget + "/")):
                continue
            rows.append({"workload": w.id, "user": w.user, "budget": w.budget, "gpus": w.gpus,
                         "kind": w.kind, "status": w.status, "submitted_at": w.submitted_at})
        rows.sort(key=lambda r: (r["submitted_at"], r["workload"]))
        return {"cluster": c, "now": st.now, "rows": rows}

    # -- hosts --------------------------------------------------------------------------------

    def hosts(self, cluster: str | None = None) -> dict[str, Any]:
        c, e = self._engine(cluster)
        cl = e.state.cluster_state
        rows = []
        for name in sorted(cl.hosts):
            h = cl.hosts[name]
            rows.append({"host": name, "gpus": h.gpus, "free": h.free, "used": h.gpus - h.free,
                         "health": h.health, "reason": h.fault_reason, "faulted_at": h.faulted_at,
                         "rack": h.rack, "block": h.block,
                         "draining": h.health != "ok" and bool(h.workloads),
                         "workloads": sorted(h.workloads)})
        healthy = [r for r in rows if r["health"] == "ok"]
        return {"cluster": c, "now": e.state.now, "hosts": rows,
                "capacity": sum(r["gpus"] for r in healthy),
                "free": sum(r["free"] for r in healthy),
                "used": sum(r["used"] for r in rows),
                "faulty": [r["host"] for r in rows if r["health"] != "ok"]}

    # -- budgets ------------------------------------------------------------------------------

    def budgets(self, cluster: str | None = None, path: str | None = None) -> dict[str, Any]:
        c, e = self._engine(cluster)
        st = e.state
        tree = st.budget
        if path is not None and path not in tree:
            raise StateError(404, f"no budget node {path!r}")
        ranking = Ranking(st, commitments(st)) if tree.root is not None else None
        nodes = []
        for p in sorted(tree.nodes, key=lambda q: (q.count("/"), q)):
            if path is not None and not (p == path or p.startswith(path + "/")):
                continue
            n = tree.nodes[p]
            lv = None
            if ranking is not None and n.parent is not None:
                levels = ranking.levels(p) if p in ranking.use else []
                lv = levels[-1] if levels else None
            pending = sum(len(q) for leaf, q in st.workloads.pending.items()
                          if leaf == p or leaf.startswith(p + "/"))
            running = sum(w.gpus for w in st.workloads.running.values()
                          if w.budget == p or w.budget.startswith(p + "/"))
            nodes.append({
                "path": p, "depth": p.count("/"), "shares": n.shares,
                "share_fraction": round(tree.sibling_fraction(p), 4),
                "entitlement": round(tree.entitlement(p), 4), "managers": list(n.managers),
                "usage_gpu_s": ranking.use.get(p, 0) if ranking else 0,
                "usage_fraction": round(lv.usage_fraction, 4) if lv else None,
                "ratio": (None if lv is None or lv.ratio == float("inf") else round(lv.ratio, 4)),
                "pending": pending, "running_gpus": running,
            })
        return {"cluster": c, "now": st.now, "window_s": st.policy.window_s, "nodes": nodes}

    # -- explain ------------------------------------------------------------------------------

    def explain(self, workload: str, cluster: str | None = None) -> dict[str, Any]:
        out, engine = self.explain_forecast_input(workload, cluster, snapshot=False)
        out["forecast"] = forecast_hook(engine, workload)
        return out

    def explain_forecast_input(self, workload: str, cluster: str | None = None,
                               snapshot: bool = True) -> tuple[dict[str, Any], Any]:
        """The explanation without its forecast, and a snapshot of the engine's state to
        forecast from (or the engine itself, ``snapshot=False``): the HTTP route takes both on
        the worker's loop and simulates outside it (``forecast_hook_from``)."""
        import msgspec

        from scheduler.explain import UnknownWorkload, explain
        from scheduler.snapshot import snapshot_state

        engines = self.source.engines()
        names = [cluster] if cluster else sorted(engines)
        for name in names:
            e = engines.get(name)
            if e is None:
                continue
            try:
                exp = explain(e.state, workload)
            except UnknownWorkload:
                continue
            out: dict[str, Any] = msgspec.to_builtins(exp)
            out["cluster"] = name
            return out, (snapshot_state(e.state) if snapshot else e)
        # An ended workload leaves the live state after its lapse (scheduler.state): say so.
        held = [engines[n] for n in names if n in engines]
        if len(held) == 1:
            raise StateError(404, held[0].state.absent_text(workload))
        raise StateError(404, f"no workload {workload!r} on "
                              f"{', '.join(names) if names else 'this worker'}"
                              + (f" (ended workloads leave the live state "
                                 f"{duration_text(held[0].state.lapse_s())} after they end; the "
                                 f"journal and the archive keep them)" if held else ""))

    # -- policy -------------------------------------------------------------------------------

    def policy(self, cluster: str | None = None) -> dict[str, Any]:
        """The cluster's policy knobs (every field of ``policy.configured`` but the envelope)."""
        from scheduler.state import DEFAULT_POLICY
        from streams.policy_knobs import KNOBS

        c, e = self._engine(cluster)
        p = e.state.policy
        knobs = {k: getattr(p, k) for k in KNOBS}
        configured = p.id != DEFAULT_POLICY.id
        return {"cluster": c, "now": e.state.now, "knobs": knobs,
                "set_at": p.at if configured else None,
                "set_by": p.actor if configured else None,
                "id": p.id if configured else None}

    # -- history ------------------------------------------------------------------------------

    def history(self, cluster: str | None = None, user: str | None = None,
                budget: str | None = None, since: int | None = None,
                until: int | None = None, limit: int = 5_000) -> dict[str, Any]:
        c, e = self._engine(cluster)
        st = e.state
        ended = self.runs.ended.get(c, {})
        rows = []
        for w in st.workloads.all.values():
            if w.status not in ENDED:
                continue
            if user and w.user != user:
                continue
            if budget and not (w.budget == budget or w.budget.startswith(budget + "/")):
                continue
            at, _ = ended.get(w.id, (None, w.status))
            t = at if at is not None else w.submitted_at
            if since is not None and t < since:
                continue
            if until is not None and t >= until:
                continue
            rows.append({"workload": w.id, "user": w.user, "budget": w.budget, "gpus": w.gpus,
                         "kind": w.kind, "status": w.status, "submitted_at": w.submitted_at,
                         "ended_at": at, "runs": w.runs, "preemptions": w.preemptions})
        rows.sort(key=lambda r: (r["ended_at"] or r["submitted_at"], r["workload"]))
        # Workloads that ended before ``forgotten_before`` left the live state (the lapse
        # rule): the answer says where its horizon is, not silently less.
        since_held = max(0, st.forgotten_before())
        return {"cluster": c, "now": st.now, "rows": rows[-limit:], "matched": len(rows),
                "forgotten_before": since_held,
                "note": (f"workloads that ended before {date_text(since_held)} have left the "
                         "live state; the journal and the archive keep them "
                         "(allot audit load ARCHIVE)")
                if since_held > 0 and (since is None or since < since_held) else None}

    # -- the dashboard's series ---------------------------------------------------------------

    def usage(self, cluster: str | None = None) -> dict[str, Any]:
        c, e = self._engine(cluster)
        samples = list(self.runs.samples.get(c, ()))
        if not samples or samples[-1]["at"] != e.state.now:
            samples.append(usage_sample(e.state))
        return {"cluster": c, "now": e.state.now, "samples": samples}

    def gantt(self, cluster: str | None = None, window_s: int = 6 * 3600) -> dict[str, Any]:
        c, e = self._engine(cluster)
        st = e.state
        lo = st.now - window_s
        runs = [r for r in self.runs.runs.get(c, ()) if r["end"] is None or r["end"] >= lo]
        seen = {r["workload"] for r in runs if r["end"] is None}
        for w in st.workloads.running.values():  # runs started before this worker saw them
            if w.id not in seen:
                runs.append({"workload": w.id, "budget": w.budget, "user": w.user,
                             "start": w.started_at, "end": None,
                             "placement": [list(p) for p in w.placement],
                             "allocated": w.allocated, "protected_until": w.protected_until,
                             "ended": None})
        hosts = [[h, st.cluster_state.hosts[h].gpus] for h in sorted(st.cluster_state.hosts)]
        starts = [r["start"] for r in runs if r["start"] is not None]
        if starts:  # a young cluster: the window starts at its first run, not hours before
            lo = max(lo, min(starts) - 60)
        return {"cluster": c, "now": st.now, "from": lo, "hosts": hosts, "runs": runs}


def forecast_hook(engine: Engine, workload: str) -> dict[str, Any] | None:
    """The forecast of ``workload`` if a ``forecast`` package provides one, else None.

    The hook: ``forecast.live.forecast_json(state, workload_id) -> dict``. Any
    failure there answers None rather than breaking the explanation.
    """
    try:
        from forecast.live import forecast_json  # type: ignore[import-not-found]
    except Exception:
        return None
    try:
        return forecast_json(engine.state, workload)  # type: ignore[no-any-return]
    except Exception:
        return None


def attach_forecasts(body: dict[str, Any], snapshot: bytes | None,
                     ids: list[str]) -> dict[str, Any]:
    """Add each forecast row's ``forecast`` (and a ``forecast`` summary) to a queue answer.

    One forward simulation answers all of ``ids`` (``forecast.live.queue_forecasts``);
    rows past them carry none, and the summary says how many rows were forecast.
    Without the ``forecast`` package, or when it fails, the summary says so in words.
    """
    summary: dict[str, Any] = {"rows": len(ids), "made_at": body.get("now")}
    found: dict[str, Any] = {}
    if snapshot is not None and ids:
        try:
            from forecast.live import queue_forecasts

            doc = queue_forecasts(snapshot, ids)
            found = doc.pop("forecasts")
            summary.update(doc)
        except Exception as exc:  # the explanation's rule: a forecast never breaks the answer
            summary["error"] = f"no forecast: {type(exc).__name__}: {exc}"
    for r in body["rows"]:
        if r["workload"] in found:
            r["forecast"] = found[r["workload"]]
    body["forecast"] = summary
    return body


def forecast_hook_from(snapshot: bytes, workload: str) -> dict[str, Any] | None:
    """``forecast_hook`` from a snapshot of the state (simulated off the worker's loop)."""
    try:
        from forecast.live import forecast_json
    except Exception:
        return None
    try:
        return forecast_json(snapshot, workload)
    except Exception:
        return None


_ = (PENDING, RUNNING)

__all__ = ["RunLog", "StateApi", "StateError", "attach_forecasts", "forecast_hook",
           "forecast_hook_from", "usage_sample"]


def http_routes(api: StateApi, on_loop: Any) -> Any:
    """The ``/api/...`` routes for ``streams.metrics.MetricsServer``; ``on_loop(fn)`` runs fn
    on the worker's loop between batches and returns its result."""
    import json

    def num(q: dict[str, str], name: str) -> int | None:
        v = q.get(name)
        if v in (None, ""):
            return None
        try:
            return int(float(v))  # type: ignore[arg-type]
        except ValueError:
            raise StateError(400, f"{name} must be Unix seconds, got {v!r}") from None

    def route(path: str, q: dict[str, str]) -> tuple[int, str, bytes] | None:
        cl = q.get("cluster") or None
        calls: dict[str, Any] = {
            "/api/clusters": lambda: api.clusters(),
            "/api/queue": lambda: api.queue(cl, q.get("user") or None, q.get("budget") or None,
                                            limit=num(q, "limit") or 2_000),
            "/api/hosts": lambda: api.hosts(cl),
            "/api/workloads": lambda: api.workloads(cl, q.get("user") or None,
                                                    q.get("budget") or None),
            "/api/budgets": lambda: api.budgets(cl, q.get("path") or None),
            "/api/history": lambda: api.history(cl, q.get("user") or None,
                                                q.get("budget") or None, num(q, "since"),
                                                num(q, "until")),
            "/api/usage": lambda: api.usage(cl),
            "/api/policy": lambda: api.policy(cl),
            "/api/gantt": lambda: api.gantt(cl, num(q, "window_s") or 6 * 3600),
        }
        if not path.startswith("/api/"):
            from dashboard.server import route as dashboard_route

            return dashboard_route(path)
        fn = calls.get(path)
        if path == "/api/queue" and q.get("forecast") not in (None, "", "0", "false", "no"):
            # ?forecast=1[&forecast_rows=N]: the first N rows (default 20, at most 200) get
            # their forecast start. The state is copied on the loop; the simulation runs
            # here, in the HTTP thread, so the worker keeps folding meanwhile.
            from forecast.live import DEFAULT_ROWS, MAX_ROWS

            try:
                raw = q.get("forecast_rows") or ""
                if raw and not raw.isdigit():
                    raise StateError(400, f"forecast_rows must be a row count, got {raw!r}")
                n = min(int(raw), MAX_ROWS) if raw else DEFAULT_ROWS
                body, snap, ids = on_loop(lambda: api.queue_forecast_input(
                    cl, q.get("user") or None, q.get("budget") or None,
                    limit=num(q, "limit") or 2_000, rows=n))
            except StateError as exc:
                return exc.status, "application/json", json.dumps({"error": str(exc)}).encode()
            body = attach_forecasts(body, snap, ids)
            body["forecast"]["limit"] = n
            return 200, "application/json", json.dumps(body).encode()
        if fn is None and path.startswith("/api/explain/"):
            wid = path[len("/api/explain/"):]
            if q.get("forecast") in ("0", "false", "no"):
                # ?forecast=0: the explanation alone (what `allot wait` polls), no
                # snapshot, no forward simulation.
                try:
                    body, _ = on_loop(lambda: api.explain_forecast_input(wid, cl,
                                                                        snapshot=False))
                except StateError as exc:
                    return exc.status, "application/json", json.dumps(
                        {"error": str(exc)}).encode()
                body["forecast"] = None
                return 200, "application/json", json.dumps(body).encode()
            # The explanation on the loop; its forecast (a forward simulation) here, in the
            # HTTP thread, from a snapshot taken with it, so the worker keeps folding.
            try:
                body, snap = on_loop(lambda: api.explain_forecast_input(wid, cl))
            except StateError as exc:
                return exc.status, "application/json", json.dumps({"error": str(exc)}).encode()
            body["forecast"] = forecast_hook_from(snap, wid)
            return 200, "application/json", json.dumps(body).encode()
        if fn is None:
            return None
        try:
            body = on_loop(fn)
        except StateError as exc:
            return exc.status, "application/json", json.dumps({"error": str(exc)}).encode()
        return 200, "application/json", json.dumps(body).encode()

    return route
