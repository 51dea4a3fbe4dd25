"""The verbs that read a live allot's state API: ``queue``, ``hosts``, ``budget show``, ``history``, ``explain``, ``wait``.

Each asks the worker's HTTP server (``streams.state_api``) and prints a table,
or the JSON answer with ``--json``. Where the server is: ``--url``, else
``$ALLOT_STATE_URL``, else the run file ``allot up`` writes (``run_file()``:
``$ALLOT_RUN_DIR/up.json``, default ``$XDG_RUNTIME_DIR/allot`` or
``/tmp/allot-$UID``), which also names the broker for the publishing verbs.
Errors are one line, exit status 2.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from events.errors import AllotError

EXIT_ERROR = 2


class StateApiError(AllotError):
    """The state API could not be reached or refused the request."""


# -- the run file ------------------------------------------------------------------------------

def run_file() -> Path:
    base = os.environ.get("ALLOT_RUN_DIR") or (
        Path(os.environ["XDG_RUNTIME_DIR"]) / "allot" if os.environ.get("XDG_RUNTIME_DIR")
        else Path(f"/tmp/allot-{os.getuid()}"))
    return Path(base) / "up.json"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_run_file() -> dict[str, Any] | None:
    """What the running ``allot up`` wrote, or None (no file, or its process is gone)."""
    try:
        info = json.loads(run_file().read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict) or not _alive(int(info.get("pid", 0) or 0)):
        return None
    return info


def write_run_file(info: dict[str, Any]) -> Path:
    path = run_file()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(info, indent=1) + "\n")
    tmp.replace(path)
    return path


def remove_run_file(pid: int) -> None:
    info = None
    try:
        info = json.loads(run_file().read_text())
    except (OSError, ValueError):
        return
    if isinstance(info, dict) and info.get("pid") == pid:
        run_file().unlink(missing_ok=True)


def discovered_bootstrap() -> str | None:
    """The broker of the running ``allot up``, unless one is configured another way."""
    from streams import config

    if os.environ.get(config.BOOTSTRAP_ENV) or os.environ.get(config.ENV_PREFIX + "BOOTSTRAP"):
        return None
    info = read_run_file()
    return str(info["bootstrap"]) if info and info.get("bootstrap") else None


# -- talking to the API ------------------------------------------------------------------------

def state_url(flag: str | None) -> str:
    url = flag or os.environ.get("ALLOT_STATE_URL")
    if not url:
        info = read_run_file()
        url = info.get("state_url") if info else None
    if not url:
        raise StateApiError("no running allot found: start one with `allot up`, or pass --url "
                            "http://127.0.0.1:PORT (the worker's metrics_port)")
    return str(url).rstrip("/")


def get(url: str, route: str, **query: Any) -> dict[str, Any]:
    q = urllib.parse.urlencode({k: v for k, v in query.items() if v not in (None, "")})
    full = f"{url}{route}" + (f"?{q}" if q else "")
    try:
        with urllib.request.urlopen(full, timeout=15) as r:
            return json.loads(r.read())  # type: ignore[no-any-return]
    except urllib.error.HTTPError as exc:
        try:
            msg = json.loads(exc.read()).get("error")
        except Exception:
            msg = None
        raise StateApiError(msg or f"{full}: HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise StateApiError(f"cannot reach the state API at {url} ({reason})") from None


def when(t: int | None) -> str:
    """A cluster time for people (never epoch seconds)."""
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S") if t else "-"


def span(s: int | None) -> str:
    if s is None:
        return "-"
    s = max(0, int(s))
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    if s < 172800:
        return f"{s / 3600:.1f}h"
    return f"{s / 86400:.1f}d"


def date_value(text: str) -> int:
    """A date or time (ISO, ``2026-12-04``, ``2026-12-04T10:00``) or Unix seconds, as Unix seconds."""
    t = text.strip()
    if t.lstrip("-").isdigit():
        return int(t)
    try:
        d = datetime.fromisoformat(t.replace("Z", "+00:00"))
    except ValueError:
        raise StateApiError(f"not a date: {text!r} (try 2026-12-04 or 2026-12-04T10:00)") from None
    if d.tzinfo is None:
        d = d.replace(tzinfo=UTC)
    return int(d.timestamp())


def time_value(text: str) -> int:
    """``date_value`` for argparse: a bad date is a usage error (one line), not an exception."""
    import argparse

    try:
        return date_value(text)
    except StateApiError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def duration_value(text: str) -> int:
    """Seconds from ``3600``, ``90s``, ``10m``, ``2h``, ``1d``, ``1h30m`` or Slurm's ``1:00:00`` / ``2-00:00:00``."""
    import argparse
    import re

    t = text.strip().lower()
    if t.isdigit():
        return int(t)
    m = re.fullmatch(r"(?:(\d+)-)?(\d+):(\d{1,2})(?::(\d{1,2}))?", t)
    if m:
        d, a, b, c = m.groups()
        h, mi, se = (int(a), int(b), int(c)) if c is not None else (0, int(a), int(b))
        return int(d or 0) * 86400 + h * 3600 + mi * 60 + se
    parts = re.findall(r"(\d+(?:\.\d+)?)([dhms])", t)
    if parts and "".join(n + u for n, u in parts) == t:
        mult = {"d": 86400, "h": 3600, "m": 60, "s": 1}
        return int(sum(float(n) * mult[u] for n, u in parts))
    raise argparse.ArgumentTypeError(f"not a duration: {text!r} (try 3600, 10m, 2h, 1:00:00)")


# -- the verbs ---------------------------------------------------------------------------------

def register(subparsers: Any) -> None:
    """Add ``queue``, ``hosts``, ``history``, ``state-explain`` to the command line."""

    def common(p: Any) -> None:
        p.add_argument("--url", default=None, help="the state API (default: $ALLOT_STATE_URL, "
                                                   "else the running `allot up`)")
        p.add_argument("--cluster", default=None, help="the cluster (default: the first)")
        p.add_argument("--json", action="store_true", help="print the API's JSON answer")

    p = subparsers.add_parser(
        "queue", help="pending work in serving order, with its sort metric (squeue + sprio)",
        description="Pending workloads in the order the next cycle serves them: rank, owner, "
                    "budget, GPUs, wait, the fair-share sort metric level by level (usage over "
                    "share of the parent; below 1 is under-served and goes first) and what each "
                    "waits for.")
    p.add_argument("--user", default=None, help="only this user's work")
    p.add_argument("--budget", default=None, help="only this budget node and its subtree")
    p.add_argument("--limit", type=int, default=200, help="rows at most (default 200)")
    p.add_argument("--forecast", nargs="?", type=_forecast_rows, const=20, default=None,
                   metavar="N", help="add a column 'starts (est.)': the forecast start of the "
                   "first N listed rows (default 20, at most 200; later rows show '-'), from "
                   "one forward simulation with the same core (assumes running work ends at "
                   "its expected duration and nothing new arrives; see `allot forecast`)")
    common(p)
    p.set_defaults(func=_guard(_queue))

    p = subparsers.add_parser("hosts", help="hosts: health, GPUs free and used, drains (sinfo)",
                              description="Every host of the cluster with its health, GPUs free "
                                          "and used, whether it drains, and the fault's reason; "
                                          "capacity counts healthy hosts only.")
    common(p)
    p.set_defaults(func=_guard(_hosts))

    p = subparsers.add_parser("history", help="finished work by user, budget, date (sacct)",
                              description="Workloads that ended (succeeded, failed, cancelled, "
                                          "preempted, rejected), filtered by owner, budget and "
                                          "end time. --since/--until take dates "
                                          "(2026-12-04, 2026-12-04T10:00) or Unix seconds.")
    p.add_argument("--user", default=None)
    p.add_argument("--budget", default=None)
    p.add_argument("--since", type=str, default=None, metavar="DATE")
    p.add_argument("--until", type=str, default=None, metavar="DATE")
    common(p)
    p.set_defaults(func=_guard(_history))

    p = subparsers.add_parser(
        "wait", help="wait until a workload is running, pending, ended or preempted",
        description="Ask the state API until WORKLOAD reaches the state --for names (like "
                    "`kubectl wait`): running, pending, ended (any end), preempted (preempted "
                    "at least once, for example by a host fault), or one end: succeeded, "
                    "failed, cancelled. Exit status 0 reached, 3 not reached within --timeout, "
                    "2 error.")
    p.add_argument("workload")
    p.add_argument("--for", dest="state", required=True, choices=WAIT_STATES)
    p.add_argument("--timeout", type=duration_value, default=60, metavar="DURATION",
                   help="how long to wait: 60, 2m (default 60s)")
    common(p)
    p.set_defaults(func=_guard(_wait))


def register_budget_show(budget_sub: Any) -> None:
    """``allot budget show [PATH]`` under the existing ``budget`` command."""
    p = budget_sub.add_parser(
        "show", help="the budget tree with shares, entitlement, usage, fair-share ratio (sshare)",
        description="The tree (or PATH's subtree): shares, fraction of the parent, entitlement "
                    "(fraction of the cluster), usage over the window and the ratio usage "
                    "fraction / share fraction at its level (below 1: under-served).")
    p.add_argument("path", nargs="?", default=None)
    p.add_argument("--url", default=None, help="the state API (default: the running allot up)")
    p.add_argument("--cluster", default=None)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_guard(_budget_show))


def _guard(fn: Any) -> Any:
    def run(args: Any) -> int:
        try:
            return int(fn(args))
        except AllotError as exc:
            print(f"allot {args.command}: error: {exc}", file=sys.stderr)
            return EXIT_ERROR
        except KeyboardInterrupt:
            return 130
    return run


def _out(data: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(data, indent=1) + "\n")


def _table(title: str, cols: list[str], rows: list[list[str]]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    for c in cols:
        t.add_column(c)
    for r in rows:
        t.add_row(*r)
    # Piped into grep or a file, a table is not cut to 80 columns (rich's default
    # without a terminal): whole ids and dates, one row per line.
    wide = not sys.stdout.isatty() and not os.environ.get("COLUMNS")
    Console(highlight=False, width=200 if wide else None).print(t)


def metric_text(levels: list[dict[str, Any]]) -> str:
    return "  ".join(f"{lv['node'].rsplit('/', 1)[-1]} {lv['usage_fraction']:.0%}/"
                     f"{lv['share_fraction']:.0%}="
                     + ("-" if lv["ratio"] is None else f"{lv['ratio']:.2f}") for lv in levels)


def _forecast_rows(text: str) -> int:
    """``--forecast N``: a row count (argparse turns the error into one usage line)."""
    import argparse

    if not text.strip().isdigit():
        raise argparse.ArgumentTypeError(f"expected a number of rows such as 20, got {text!r}")
    return int(text)


def starts_text(f: dict[str, Any] | None) -> str:
    """A forecast (``/api/queue?forecast=1`` row) as a date and a wait, or why there is none."""
    if f is None:
        return "-"
    if f.get("status") == "running":
        return "running"
    if f.get("status") == "unfinished":
        return f"after {when(f.get('simulated_until'))}"
    if f.get("status") == "beyond_horizon" or f.get("start") is None:
        horizon = (f.get("assumptions") or {}).get("horizon_s")
        return f"not within {span(horizon)}" if horizon else "beyond the horizon"
    wait = int(f.get("wait_s") or 0)
    return f"{when(f['start'])} ({'now' if wait <= 0 else 'in ' + span(wait)})"


def _queue(args: Any) -> int:
    extra = {} if args.forecast is None else {"forecast": 1, "forecast_rows": args.forecast}
    data = get(state_url(args.url), "/api/queue", cluster=args.cluster, user=args.user,
               budget=args.budget, limit=args.limit, **extra)
    if args.json:
        _out(data)
        return 0
    asked = args.forecast is not None
    fc: dict[str, Any] = data.get("forecast") or {}
    horizon = (fc.get("assumptions") or {}).get("horizon_s")
    rows = [[str(r["rank"]), r["workload"], r["user"], r["budget"], str(r["gpus"]),
             span(r["waited_s"]), metric_text(r["sort_metric"]) if r["allocated"] else "unallocated",
             r["waits_for"] + (f" until {when(r['until'])}" if r.get("until") else "")]
            + ([] if not asked else [starts_text(
                None if r.get("forecast") is None else
                {"assumptions": {"horizon_s": horizon}, **r["forecast"]})])
            for r in data["rows"]]
    _table(f"{data['cluster']} at {when(data['now'])}: {data['pending']} pending "
           f"(sort metric: used/entitled share of the parent per level, lower goes first)",
           ["#", "workload", "user", "budget", "GPUs", "waited", "sort metric", "waits for"]
           + ([] if not asked else ["starts (est.)"]), rows)
    if asked:
        if fc.get("error"):
            print(f"starts (est.): {fc['error']}")
        elif "forecast" not in data:
            print("starts (est.): this worker gives no forecasts (an older allot)")
        else:
            print(f"starts (est.): forecast for the first {fc['rows']} row(s) in "
                  f"{float(fc.get('seconds') or 0):.2f} s, assuming running work ends at its "
                  f"expected duration and nothing new arrives, cancels or fails "
                  f"(`allot forecast` for one workload)")
    return 0


def _hosts(args: Any) -> int:
    data = get(state_url(args.url), "/api/hosts", cluster=args.cluster)
    if args.json:
        _out(data)
        return 0
    rows = [[h["host"], h["health"] + (" (draining)" if h["draining"] else ""), str(h["gpus"]),
             str(h["used"]), str(h["free"]), h["reason"] or "",
             when(h["faulted_at"]) if h["faulted_at"] else ""] for h in data["hosts"]]
    faulty = data["faulty"]
    _table(f"{data['cluster']} at {when(data['now'])}: capacity {data['capacity']} GPUs on "
           f"healthy hosts, {data['used']} used, {data['free']} free; "
           + (f"faulty: {', '.join(faulty)}" if faulty else "no faulty hosts"),
           ["host", "health", "GPUs", "used", "free", "reason", "faulted at"], rows)
    return 0


def _budget_show(args: Any) -> int:
    data = get(state_url(args.url), "/api/budgets", cluster=args.cluster, path=args.path)
    if args.json:
        _out(data)
        return 0
    rows = [["  " * n["depth"] + n["path"].rsplit("/", 1)[-1], str(n["shares"]),
             f"{n['share_fraction']:.1%}", f"{n['entitlement']:.1%}",
             f"{n['usage_gpu_s'] / 3600:.1f}",
             "-" if n["usage_fraction"] is None else f"{n['usage_fraction']:.1%}",
             "-" if n["ratio"] is None else f"{n['ratio']:.2f}", str(n["pending"]),
             str(n["running_gpus"])] for n in data["nodes"]]
    _table(f"{data['cluster']} budgets at {when(data['now'])} (window {span(data['window_s'])}; "
           "ratio = usage fraction / share fraction of the parent, below 1 is under-served)",
           ["node", "shares", "of parent", "entitlement", "GPU-h used", "usage of parent",
            "ratio", "pending", "running GPUs"], rows)
    return 0


def _history(args: Any) -> int:
    since = date_value(args.since) if args.since else None
    until = date_value(args.until) if args.until else None
    data = get(state_url(args.url), "/api/history", cluster=args.cluster, user=args.user,
               budget=args.budget, since=since, until=until)
    if args.json:
        _out(data)
        return 0
    rows = [[r["workload"], r["user"], r["budget"], str(r["gpus"]), r["status"],
             when(r["submitted_at"]), when(r["ended_at"]), str(r["runs"]),
             str(r["preemptions"])] for r in data["rows"]]
    _table(f"{data['cluster']}: {data['matched']} ended workload(s)",
           ["workload", "user", "budget", "GPUs", "status", "submitted", "ended", "runs",
            "preemptions"], rows)
    if data.get("note"):  # older ones left the live state (the lapse rule): say where to look
        print(data["note"])
    return 0


def state_url_for(bootstrap: str) -> str | None:
    """The state API of the stack on ``bootstrap``: ``$ALLOT_STATE_URL``, else ``allot up``'s if
    that is the broker in use; None when neither (a check that needs it is then skipped)."""
    url = os.environ.get("ALLOT_STATE_URL")
    if url:
        return url.rstrip("/")
    info = read_run_file()
    if info and info.get("state_url") and info.get("bootstrap") == bootstrap:
        return str(info["state_url"]).rstrip("/")
    return None


def workload_status(workload: str, cluster: str, bootstrap: str) -> str | None:
    """The status of ``workload`` on the live cluster, or None (unknown, or no state API)."""
    url = state_url_for(bootstrap)
    if url is None:
        return None
    try:
        data = get(url, f"/api/explain/{urllib.parse.quote(workload, safe='')}", cluster=cluster,
                   forecast=0)
    except StateApiError:
        return None
    return str(data.get("status") or "known")


def cancel_matching(args: Any) -> int:
    """``allot cancel --user U`` / ``--budget PATH``: one cancel per active workload that matches."""
    import asyncio

    from events import WorkloadCancelled
    from streams.client import Client
    from streams.commands import _ctx, _envelope, _print
    from streams.errors import ClientError

    if args.workload is not None:
        raise ClientError("give a workload id or --user/--budget, not both")
    if not (args.match_user or args.match_budget):
        raise ClientError("give a workload id, or --user USER and/or --budget PATH")
    ctx = _ctx(args)
    url = (args.url.rstrip("/") if args.url else state_url_for(ctx.bootstrap)) or state_url(None)
    data = get(url, "/api/workloads", cluster=ctx.cluster, user=args.match_user,
               budget=args.match_budget)
    rows = data["rows"]
    what = " and ".join(x for x in (f"user {args.match_user}" if args.match_user else "",
                                    f"budget {args.match_budget}" if args.match_budget else "") if x)
    if not rows:
        if args.json:
            _out({"cluster": data["cluster"], "matched": 0, "results": []})
        else:
            print(f"nothing to cancel: no pending or running workload of {what}")
        return 0
    if args.dry_run:
        if args.json:
            _out({"cluster": data["cluster"], "matched": len(rows), "would_cancel": rows})
        else:
            for r in rows:
                print(f"would cancel {r['workload']} ({r['status']}, {r['user']}, {r['budget']}, "
                      f"{r['gpus']} GPUs)")
        return 0

    async def go() -> list[Any]:
        out = []
        async with Client(ctx.bootstrap, ctx.prefix, signer=ctx.signer) as c:
            for r in rows:
                e = WorkloadCancelled(**_envelope(ctx, "cancel"), workload=r["workload"],
                                      reason=args.reason)
                out.append(await c.request(e, timeout=ctx.timeout))
        return out

    results = asyncio.run(go())
    if args.json:
        import msgspec

        _out({"cluster": data["cluster"], "matched": len(rows),
              "results": msgspec.to_builtins(results)})
    else:
        for res in results:
            _print(res, False)
        ok = sum(1 for r in results if r.ok)
        print(f"{ok} of {len(rows)} workload(s) of {what} cancelled"
              + (f", {len(rows) - ok} refused" if ok < len(rows) else ""))
    return 0 if all(r.ok for r in results) else 1


WAIT_STATES = ("running", "pending", "ended", "preempted", "succeeded", "failed", "cancelled")
EXIT_NOT_YET = 3
_ENDS = ("succeeded", "failed", "cancelled", "preempted", "rejected")


def reached(state: str, explanation: dict[str, Any]) -> bool:
    """Whether a workload (its ``/api/explain`` answer) is in ``state`` as ``allot wait`` means it."""
    status = explanation.get("status")
    if state == "ended":
        return status in _ENDS
    if state == "preempted":
        return explanation.get("last_preemption") is not None or status == "preempted"
    return bool(status == state)


def _wait(args: Any) -> int:
    import time

    url = state_url(args.url)
    route = f"/api/explain/{urllib.parse.quote(args.workload, safe='')}"
    deadline = time.monotonic() + args.timeout
    data: dict[str, Any] | None = None
    while True:
        try:
            data = get(url, route, cluster=args.cluster, forecast=0)
        except StateApiError:
            data = None  # not journaled yet (or the worker restarts): ask again
        if data is not None and reached(args.state, data):
            break
        if time.monotonic() >= deadline:
            if data is None:
                raise StateApiError(f"no workload {args.workload!r} after {span(args.timeout)}")
            if args.json:
                _out({"reached": False, **data})
            else:
                print(f"{args.workload}: still {data.get('status')} after "
                      f"{span(args.timeout)} (not {args.state}; see `allot explain "
                      f"{args.workload}`)")
            return EXIT_NOT_YET
        time.sleep(0.2)
    if args.json:
        _out({"reached": True, **data})
        return 0
    where = ""
    if data.get("status") == "running" and data.get("placement"):
        where = " on " + ", ".join(f"{host}:{gpus}" for host, gpus in data["placement"])
    last = data.get("last_preemption")
    why = (f" (last preempted at {when(last[2])} UTC: {last[0]}" +
           (f" by {last[1]}" if last[1] else "") + ")") if last else ""
    print(f"{args.workload}: {data.get('status')}{where} at {when(data.get('now'))} UTC{why}")
    return 0


def live_explain(args: Any) -> int:
    """``allot explain ID`` on the live cluster (no log file given)."""
    data = get(state_url(getattr(args, "url", None)), f"/api/explain/{args.workload}",
               cluster=getattr(args, "cluster", None))
    if args.json:
        _out(data)
        return 0
    from rich.console import Console
    from rich.markup import escape

    con = Console(highlight=False)
    con.print(f"[bold]{escape(data['workload'])}[/] ({escape(data['kind'])}, {data['gpus']} GPUs "
              f"as {escape(data['shape'])}, min runtime {span(data['min_runtime_s'])}) in "
              f"[bold]{escape(data['budget'])}[/]: [bold]{escape(data['status'])}[/] at "
              f"{when(data['now'])}")
    if data.get("blocked_by"):
        con.print(f"blocked by: [bold red]{escape(data['blocked_by'])}[/]"
                  + (f" until {when(data['until'])}" if data.get("until") else ""))
    for line in data.get("summary", []):
        con.print(f"- {escape(line)}")
    if data.get("forecast"):
        con.print(f"forecast: {escape(forecast_words(data['forecast']))}")
    return 0


def forecast_words(f: dict[str, Any]) -> str:
    """An ``/api/explain`` forecast in words with dates (never Unix seconds)."""
    a = f.get("assumptions") or {}
    if f.get("status") == "running":
        return f"running since {when(f.get('start'))} UTC"
    assumes = (f"assumes running work ends at its expected duration (else after "
               f"{span(a.get('assumed_runtime_s', 4 * 3600))}) and nothing new arrives, "
               f"cancels or fails")
    if f.get("status") == "unfinished":
        return (f"starts after {when(f.get('simulated_until'))} UTC at the earliest (the live "
                f"forecast stops after {f.get('cycles')} simulated cycles; "
                f"{int(f.get('ahead') or 0)} workload(s) start before then); " + assumes)
    if f.get("status") == "beyond_horizon" or f.get("start") is None:
        return (f"does not start within {span(a.get('horizon_s'))}; " + assumes)
    wait = int(f.get("wait_s") or 0)
    parts = [f"estimated start {when(f['start'])} UTC "
             f"({'now' if wait <= 0 else 'in ' + span(wait)})"]
    if f.get("placement"):
        parts.append("on " + ", ".join(f["placement"]))
    if f.get("waits_for"):
        held = f["waits_for"]
        parts.append(f"when {', '.join(held)} end{'s' if len(held) == 1 else ''}")
    text = " ".join(parts)
    ahead = int(f.get("ahead") or 0)
    text += f"; {ahead} workload(s) start before it" if ahead else "; nothing starts before it"
    return text + "; " + assumes


__all__ = [
    "StateApiError",
    "cancel_matching",
    "date_value",
    "discovered_bootstrap",
    "get",
    "live_explain",
    "reached",
    "read_run_file",
    "register",
    "register_budget_show",
    "remove_run_file",
    "run_file",
    "state_url",
    "state_url_for",
    "when",
    "workload_status",
    "write_run_file",
]
