"""The command-line verbs that publish inputs: ``allot submit``, ``cancel``, ``budget``, ``host``, ``policy``.

Each verb builds one input event, publishes it with ``streams.client.Client``
and waits for the journal (``Client.request``): it prints whether the input
was accepted or rejected (and why), and what it caused. Exit status: 0
accepted, 1 rejected or dead-lettered, 2 error (one line on stderr, never a
traceback).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from typing import Any

import msgspec

from events import Event, tag_of
from events.errors import AllotError
from streams.client import ID_BAD_CHARS, REJECTIONS, Client, Result, check_id, new_id
from streams.errors import ClientError


def default_actor() -> str:
    """Who the command line publishes as: ``$ALLOT_ACTOR``, else the login name."""
    name = os.environ.get("ALLOT_ACTOR") or os.environ.get("USER") or "unknown"
    return ID_BAD_CHARS.sub("-", name) or "unknown"


EXIT_REJECTED = 1
EXIT_ERROR = 2


def register(subparsers: Any) -> None:
    """Add ``submit``, ``cancel``, ``budget`` and ``host`` to the allot command line."""
    import argparse

    def common(p: argparse.ArgumentParser) -> None:
        g = p.add_argument_group("connection and identity")
        g.add_argument("--bootstrap", default=None, metavar="HOST:PORT",
                       help="Kafka bootstrap servers (else KAFKA_BOOTSTRAP_SERVERS, "
                            "ALLOT_BOOTSTRAP, --config, 127.0.0.1:9092)")
        g.add_argument("--topic-prefix", default=None, help="prefix of the topic names")
        g.add_argument("--config", default=None, metavar="FILE",
                       help="the worker's TOML settings file (bootstrap, topic_prefix, clusters)")
        g.add_argument("--cluster", default=None,
                       help="the cluster (default: the first of the setting `clusters`)")
        g.add_argument("--actor", default=None,
                       help="who publishes (default: $ALLOT_ACTOR or the login name)")
        g.add_argument("--key-file", default=None, metavar="FILE",
                       help="sign the input as --actor with the private key in FILE (first "
                            "line); default: the local key of --actor ($ALLOT_KEY_DIR, else "
                            "~/.config/allot/keys/ACTOR.key) when there is one")
        g.add_argument("--id", dest="event_id", default=None,
                       help="the input's id (default: a fresh one); re-using an id is a retry")
        g.add_argument("--timeout", type=float, default=30.0,
                       help="seconds to wait for the decisions (default 30)")
        g.add_argument("--json", action="store_true", help="print the outcome as JSON")

    p = subparsers.add_parser(
        "submit", help="submit a workload to a live allot and print what it caused",
        description="Publish workload.submitted on the inbox and wait for the journal: print "
                    "whether it was accepted or rejected (and why). With --follow, also wait "
                    "for the workload's first scheduling decision (started, with placement). "
                    "Exit status: 0 accepted (or a duplicate: the same workload with the same "
                    "contract, nothing changed), 1 rejected or dead-lettered, 2 error, 3 "
                    "still pending at the end of --timeout with --follow.")
    p.add_argument("--budget", required=True, help="the budget leaf, e.g. lab/llm/pretrain/alice")
    p.add_argument("--gpus", type=int, required=True, help="GPUs in total")
    p.add_argument("--hosts", type=int, default=1, help="hosts of a gang (default 1)")
    p.add_argument("--gpus-per-host", type=int, default=None, help="GPUs per host of a gang")
    from streams.state_cli import duration_value

    p.add_argument("--min-runtime", type=duration_value, default=3600, metavar="DURATION",
                   help="protected (and charged) minimum runtime: 3600, 10m, 2h, 1:00:00; "
                        "0 = unallocated (default 1h)")
    p.add_argument("--resumable", action="store_true", help="can resume after a preemption")
    p.add_argument("--priority", type=int, default=0, help="order inside its leaf (default 0)")
    p.add_argument("--kind", default="training", help="training, debug, eval, ... (default training)")
    p.add_argument("--workload", default=None, help="the workload id (default: a fresh one)")
    p.add_argument("--user", default=None, help="the owner (default: --actor)")
    p.add_argument("--expected-duration", type=duration_value, default=None, metavar="DURATION",
                   help="run time the simulated executor plays (the scheduler never reads it)")
    p.add_argument("--follow", action="store_true",
                   help="also wait for the workload's first decision (started, preempted, ...)")
    run = p.add_argument_group("what a real executor runs (allot executor local; docs/executor.md)")
    run.add_argument("argv", nargs="*", metavar="-- CMD ARGS",
                     help="the command and its arguments, after `--` (run without a shell)")
    run.add_argument("--workdir", default=None, metavar="DIR",
                     help="its working directory (default: this one, when a command is given)")
    run.add_argument("--script", default=None, metavar="FILE",
                     help="run a script file, like sbatch: its path (with `sh` when it is not "
                          "executable), arguments after `--`")
    run.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                     help="an environment variable for it (repeatable)")
    run.add_argument("--time", type=duration_value, default=None, metavar="DURATION",
                     help="wall-clock limit of a run, like Slurm's --time: 1:00:00, 90m, 3600")
    run.add_argument("--log", dest="log_path", default=None, metavar="PATH",
                     help="its log file; {workload}, {run}, {rank}, {host} are filled in "
                          "(default: one file per workload and run in the executor's log dir)")
    run.add_argument("--grace", type=duration_value, default=None, metavar="DURATION",
                     help="time it needs between SIGTERM and SIGKILL, if less than the policy's")
    run.add_argument("--checkpoint-hook", default=None, metavar="CMD",
                     help="a shell command the executor runs when the run is preempted, before "
                          "SIGTERM and within the grace, to save its state into "
                          "$ALLOT_CHECKPOINT_DIR ($ALLOT_COMMAND_PID is the command's pid); "
                          "sent as the env entry ALLOT_CHECKPOINT_HOOK")
    run.add_argument("--restore-hook", default=None, metavar="CMD",
                     help="a shell command run before the command of a requeued run when an "
                          "earlier run's checkpoint exists ($ALLOT_RESTORE_FROM names it); "
                          "sent as the env entry ALLOT_RESTORE_HOOK")
    common(p)
    p.set_defaults(func=_guarded(_submit))

    p = subparsers.add_parser(
        "cancel", help="cancel a workload, or every one of a user or budget (scancel -u)",
        description="Publish workload.cancelled and print what it caused (only the owner or a "
        "manager of its budget may cancel). With --user and/or --budget instead of an id: one "
        "cancel per pending or running workload that matches, as the worker's state API lists "
        "them (like scancel -u).")
    p.add_argument("workload", nargs="?", default=None, help="the workload id")
    p.add_argument("--reason", default="", help="why (free text)")
    p.add_argument("--user", dest="match_user", default=None, metavar="USER",
                   help="cancel every pending or running workload of USER")
    p.add_argument("--budget", dest="match_budget", default=None, metavar="PATH",
                   help="cancel every pending or running workload in PATH's subtree")
    p.add_argument("--dry-run", action="store_true",
                   help="with --user/--budget: list what would be cancelled, publish nothing")
    p.add_argument("--url", default=None,
                   help="with --user/--budget: the state API (default: the running allot up's)")
    common(p)
    p.set_defaults(func=_guarded(_cancel))

    b = subparsers.add_parser("budget", help="define budget nodes and change shares",
                              description="Budget edits on a live allot (managers only).")
    bsub = b.add_subparsers(title="budget commands", metavar="COMMAND")
    b.set_defaults(func=lambda _a: _usage(b))
    p = bsub.add_parser("define", help="define a budget node",
                        description="Publish budget.node_defined: PATH with its share under its "
                                    "parent and its managers.")
    p.add_argument("path", help="the node, e.g. lab/llm/pretrain")
    p.add_argument("--shares", type=int, default=1, help="weight among its siblings (default 1)")
    p.add_argument("--manager", action="append", default=[], help="a manager (repeatable)")
    common(p)
    p.set_defaults(func=_guarded(_define))
    p = bsub.add_parser("shares", help="change the shares of some children of a node",
                        description="Publish budget.shares_set: CHILD=SHARES for children of "
                                    "PARENT (children not named keep theirs).")
    p.add_argument("parent", help="the parent node")
    p.add_argument("shares", nargs="+", metavar="CHILD=SHARES", help="e.g. pretrain=40")
    common(p)
    p.set_defaults(func=_guarded(_shares))
    from streams.state_cli import register_budget_show

    register_budget_show(bsub)  # allot budget show [PATH]

    h = subparsers.add_parser("host", help="report host faults and repairs, add hosts",
                              description="Host events on a live allot.")
    hsub = h.add_subparsers(title="host commands", metavar="COMMAND")
    h.set_defaults(func=lambda _a: _usage(h))
    p = hsub.add_parser("fault", help="report a faulty host",
                        description="Publish host.faulted: degraded drains at minimum runtime, "
                                    "failed ends its work at once.")
    p.add_argument("host")
    p.add_argument("--severity", choices=("degraded", "failed"), default="degraded")
    p.add_argument("--reason", default="", help="what the monitor saw")
    common(p)
    p.set_defaults(func=_guarded(_fault))
    p = hsub.add_parser("repair", help="report a repaired host",
                        description="Publish host.repaired: the host takes work again.")
    p.add_argument("host")
    common(p)
    p.set_defaults(func=_guarded(_repair))
    p = hsub.add_parser("remove", help="remove a host from the cluster",
                        description="Publish host.removed (refused while workloads run on it: "
                                    "fault it first to drain it).")
    p.add_argument("host")
    common(p)
    p.set_defaults(func=_guarded(_remove_host))
    p = hsub.add_parser("add", help="add a host", description="Publish host.added.")
    p.add_argument("host")
    p.add_argument("--gpus", type=int, default=8, help="GPUs (default 8)")
    p.add_argument("--rack", default=None)
    p.add_argument("--block", default=None)
    common(p)
    p.set_defaults(func=_guarded(_add_host))

    pol = subparsers.add_parser("policy", help="show or change the live cluster's policy knobs",
                                description="The scheduling policy of a live cluster "
                                            "(docs/events.md, policy.configured).")
    psub = pol.add_subparsers(title="policy commands", metavar="COMMAND")
    pol.set_defaults(func=lambda _a: _usage(pol))
    p = psub.add_parser("show", help="every knob with its value, its default, who set it",
                        description="Every policy knob of the cluster as the worker holds it "
                                    "(its state API), marked where it differs from the default.")
    p.add_argument("--url", default=None, help="the state API (default: the running allot up's)")
    p.add_argument("--cluster", default=None, help="the cluster (default: the first)")
    p.add_argument("--json", action="store_true", help="print the API's JSON answer")
    p.set_defaults(func=_guarded(_policy_show))
    p = psub.add_parser("set", help="change some knobs (an admin's verb)",
                        description="Publish policy.configured: the cluster's current policy "
                                    "(read from the worker's state API) with each KNOB=VALUE "
                                    "replaced. Durations take 30, 30s, 10m, 2h, 7d, 1:00:00; "
                                    "`none` clears a knob that may be absent. Only an admin may "
                                    "configure the policy. Example: allot policy set "
                                    "preemption_grace_s=30s --actor admin")
    p.add_argument("knobs", nargs="+", metavar="KNOB=VALUE", help="e.g. preemption_grace_s=30s")
    p.add_argument("--url", default=None, help="the state API (default: the running allot up's)")
    p.add_argument("--from-defaults", action="store_true",
                   help="start from the defaults instead of the current policy (no state API "
                        "needed)")
    common(p)
    p.set_defaults(func=_guarded(_policy_set))


def _policy_show(args: Any) -> int:
    import json
    import sys

    from streams import policy_knobs
    from streams.state_cli import get, state_url, when

    data = get(state_url(args.url), "/api/policy", cluster=args.cluster)
    if args.json:
        sys.stdout.write(json.dumps(data, indent=1) + "\n")
        return 0
    from rich.console import Console
    from rich.table import Table

    base = policy_knobs.defaults()
    who = (f"set by {data['set_by']} at {when(data['set_at'])} UTC" if data.get("set_by")
           else "the defaults (no policy.configured on the log)")
    t = Table(title=f"policy of {data['cluster']}: {who}", title_justify="left",
              show_edge=False, pad_edge=False)
    for col in ("knob", "value", "default"):
        t.add_column(col)
    for name, value in data["knobs"].items():
        changed = name in base and value != base[name]
        t.add_row(name, (f"[bold]{policy_knobs.text(name, value)}[/]" if changed
                         else policy_knobs.text(name, value)),
                  policy_knobs.text(name, base.get(name)) if name in base else "")
    Console(highlight=False).print(t)
    return 0


def _policy_set(args: Any) -> int:
    from streams import policy_knobs
    from streams.state_cli import get, state_url

    ctx = _ctx(args)
    if args.from_defaults:
        current = policy_knobs.defaults()
    else:
        current = get(state_url(args.url), "/api/policy", cluster=ctx.cluster)["knobs"]
    event = policy_knobs.apply(current, list(args.knobs), **_envelope(ctx, "policy"))
    return _send(ctx, event)


def _usage(parser: Any) -> int:
    import sys

    parser.print_help(sys.stderr)
    return EXIT_ERROR


def _guarded(fn: Callable[[Any], int]) -> Callable[[Any], int]:
    def run(args: Any) -> int:
        import logging
        import sys

        # aiokafka logs each failed connection attempt; the command says it once, in one line.
        logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
        try:
            return fn(args)
        except AllotError as exc:
            print(f"allot {args.command}: error: {exc}", file=sys.stderr)
            return EXIT_ERROR
        except KeyboardInterrupt:
            return 130
    return run


class _Ctx(msgspec.Struct, kw_only=True):
    bootstrap: str
    prefix: str
    cluster: str
    actor: str
    signer: tuple[str, bytes] | None
    event_id: str | None
    timeout: float
    json: bool
    # Without --key-file: sign with the local key of --actor, if there is one (identity.local).
    keychain: Any = None


def _ctx(args: Any) -> _Ctx:

    settings = discovered_settings(args)
    actor = args.actor or default_actor()
    signer = None
    if args.key_file:
        try:
            lines = open(args.key_file).read().splitlines()  # noqa: SIM115 - read once
        except OSError as exc:
            raise ClientError(f"--key-file: {exc.strerror or exc}") from None
        if not lines or not lines[0].strip():
            raise ClientError(f"--key-file: {args.key_file} is empty")
        signer = (actor, lines[0].strip().encode())
    if args.event_id is not None:
        check_id(args.event_id)
    from identity.local import Keychain

    return _Ctx(bootstrap=settings.bootstrap, prefix=settings.topic_prefix,
                cluster=args.cluster or settings.clusters[0], actor=actor, signer=signer,
                event_id=args.event_id, timeout=args.timeout, json=args.json,
                keychain=None if signer is not None else Keychain())


def discovered_settings(args: Any) -> Any:
    """Settings from flags, env and --config; the running ``allot up``'s broker if none names one."""
    from streams import config
    from streams.state_cli import discovered_bootstrap, read_run_file

    bootstrap = args.bootstrap
    cfg_names = bool(args.config) and "bootstrap" in config.read_file(args.config)
    if bootstrap is None and not cfg_names:
        bootstrap = discovered_bootstrap()
    flags: dict[str, Any] = {"bootstrap": bootstrap, "topic_prefix": args.topic_prefix}
    info = read_run_file() if bootstrap is not None and bootstrap != args.bootstrap else None
    if info and info.get("clusters") and not args.config:
        flags["clusters"] = tuple(info["clusters"])
    return config.load(args.config, flags=flags)


def _envelope(ctx: _Ctx, prefix: str) -> dict[str, Any]:
    return {"id": ctx.event_id or new_id(prefix), "at": int(time.time()), "cluster": ctx.cluster,
            "actor": ctx.actor, "source": "allot-cli"}


EXIT_PENDING = 3


def _send(ctx: _Ctx, event: Event, follow: Callable[[Event], bool] | None = None,
          existing: str | None = None) -> int:
    """Publish and print; ``existing``: the status of the workload a submission repeats."""
    async def go() -> Result:
        async with Client(ctx.bootstrap, ctx.prefix, signer=ctx.signer,
                          keychain=ctx.keychain) as c:
            return await c.request(event, timeout=ctx.timeout, follow=follow)

    res = asyncio.run(go())
    if existing is not None and res.ok and not res.decisions:
        # The scheduler ignores an identical re-submission: say so, not "accepted".
        res.status = "duplicate"
    _print(res, ctx.json)
    if res.status == "duplicate":
        if not ctx.json:
            print(f"  {getattr(event, 'workload', '')} was already submitted with the same "
                  f"contract ({existing}); nothing changed")
        return 0
    if follow is not None and res.ok and not res.followed:
        if not ctx.json:
            print(f"still pending after {ctx.timeout:g} s: no decision yet for "
                  f"{getattr(event, 'workload', '')} (see `allot explain "
                  f"{getattr(event, 'workload', '')}`)")
        return EXIT_PENDING
    return 0 if res.ok else EXIT_REJECTED


def _print(res: Result, as_json: bool) -> None:
    import sys

    if as_json:
        sys.stdout.write(msgspec.json.format(msgspec.json.encode(res)).decode() + "\n")
        return
    from rich.console import Console

    con = Console(highlight=False)
    what = (res.input or {}).get("type", "input")
    where = f"journal offset {res.journal_offset}" if res.journal_offset is not None else \
        f"inbox {res.inbox_partition}:{res.inbox_offset}"
    if res.status == "dead_letter":
        dl = res.dead_letter or {}
        con.print(f"[red]dead letter[/]: {res.id} was not taken: [bold]{dl.get('reason')}[/] "
                  f"({dl.get('detail', '')})")
        return
    colour = "green" if res.ok else "yellow" if res.status == "duplicate" else "red"
    con.print(f"[{colour}]{res.status}[/]: {what} {res.id} ({where}, {res.seconds * 1000:.0f} ms)")
    for d in [*res.decisions, *res.followed]:
        con.print("  " + describe(d))


def _when(t: Any) -> str:
    """A cluster time for people (never epoch seconds)."""
    from datetime import UTC, datetime

    return datetime.fromtimestamp(int(t), UTC).strftime("%Y-%m-%d %H:%M:%S") if t else "-"


def describe(d: dict[str, Any]) -> str:
    """One line for a decision (as plain data), the way people read it."""
    tag = d.get("type", "")
    w = d.get("workload", "")
    if tag == "workload.started":
        hosts = ", ".join(f"{s['host']}:{s['gpus']}" for s in d.get("placement", ()))
        prot = d.get("protected_until")
        extra = ("unallocated (free, never protected)" if not d.get("allocated") else
                 f"protected until {_when(prot)} UTC" if prot is not None else "protected until it ends")
        return f"workload.started {w} on {hosts}, {extra} (cause {d.get('cause')})"
    if tag == "workload.preempted":
        return (f"workload.preempted {w}: {d.get('reason')} by {d.get('by')}, "
                f"{'requeued' if d.get('requeued') else 'ended'}")
    if tag in REJECTIONS:
        return f"{tag}: [bold]{d.get('reason')}[/] {d.get('detail', '')}".rstrip()
    if tag == "workload.reserved":
        return f"workload.reserved {w}: hosts {', '.join(d.get('hosts', ()))} until {_when(d.get('until'))} UTC"
    if tag == "host.drained":
        return f"host.drained {d.get('host')}: empty, to automated repair"
    return f"{tag} {d.get('id')}"


def _submit(args: Any) -> int:
    from events import WorkloadSubmitted

    ctx = _ctx(args)
    workload = args.workload or new_id("w").replace(":", "-")[:40]
    env = _envelope(ctx, "submit")
    try:
        e = WorkloadSubmitted(**env, workload=workload, budget=args.budget,
                              user=args.user or ctx.actor, gpus=args.gpus, hosts=args.hosts,
                              gpus_per_host=args.gpus_per_host, min_runtime_s=args.min_runtime,
                              resumable=args.resumable, priority=args.priority, kind=args.kind,
                              expected_duration_s=args.expected_duration,
                              **run_spec(args))
    except (TypeError, msgspec.ValidationError) as exc:
        raise ClientError(str(exc)) from None
    from streams.state_cli import workload_status

    # Only a named workload can repeat one (a fresh id cannot): ask the state API, if any.
    existing = workload_status(workload, ctx.cluster, ctx.bootstrap) if args.workload else None
    follow = None
    if args.follow and existing is None:
        lifecycle = ("workload.started", "workload.preempted", "workload.rejected")
        follow = lambda d: tag_of(type(d)) in lifecycle and getattr(d, "workload", None) == workload  # noqa: E731
    return _send(ctx, e, follow, existing)


def run_spec(args: Any) -> dict[str, Any]:
    """The run-spec fields of ``allot submit`` (none when no command and no option names one)."""
    import os

    command = list(getattr(args, "argv", None) or [])
    if command and command[0] == "--":
        command = command[1:]
    script = getattr(args, "script", None)
    if script is not None:
        if not os.path.isfile(script):
            raise ClientError(f"--script: no such file {script!r}")
        path = os.path.abspath(script)
        command = [path, *command] if os.access(path, os.X_OK) else ["sh", path, *command]
    for item in args.env:
        if "=" not in item or item.startswith("="):
            raise ClientError(f"--env expects NAME=VALUE, got {item!r}")
    env = list(args.env)
    # The hooks travel as env entries (docs/events.md): a submission without them
    # is byte-identical to one from before they existed.
    for flag, name in (("checkpoint_hook", "ALLOT_CHECKPOINT_HOOK"),
                       ("restore_hook", "ALLOT_RESTORE_HOOK")):
        hook = getattr(args, flag, None)
        if hook is not None:
            if not hook.strip():
                raise ClientError(f"--{flag.replace('_', '-')}: an empty command")
            env.append(f"{name}={hook}")
    workdir = args.workdir
    if workdir is None and command:
        workdir = os.getcwd()
    return {"command": tuple(command) or None,
            "workdir": os.path.abspath(workdir) if workdir else None,
            "env": tuple(env) or None, "log_path": args.log_path,
            "time_limit_s": args.time, "grace_s": args.grace}


def _cancel(args: Any) -> int:
    from events import WorkloadCancelled

    if args.match_user or args.match_budget or args.workload is None:
        from streams.state_cli import cancel_matching

        return cancel_matching(args)
    ctx = _ctx(args)
    return _send(ctx, WorkloadCancelled(**_envelope(ctx, "cancel"), workload=args.workload,
                                        reason=args.reason))


def _define(args: Any) -> int:
    from events import BudgetNodeDefined

    ctx = _ctx(args)
    return _send(ctx, BudgetNodeDefined(**_envelope(ctx, "budget"), path=args.path,
                                        shares=args.shares, managers=tuple(args.manager)))


def _shares(args: Any) -> int:
    from events import BudgetSharesSet, ChildShare

    ctx = _ctx(args)
    shares = []
    for item in args.shares:
        child, sep, n = item.partition("=")
        if not sep or not n.strip().lstrip("-").isdigit():
            raise ClientError(f"expected CHILD=SHARES, got {item!r}")
        shares.append(ChildShare(child=child.strip(), shares=int(n)))
    return _send(ctx, BudgetSharesSet(**_envelope(ctx, "budget"), parent=args.parent,
                                      shares=tuple(shares)))


def _fault(args: Any) -> int:
    from events import HostFaulted

    ctx = _ctx(args)
    return _send(ctx, HostFaulted(**_envelope(ctx, "host"), host=args.host,
                                  severity=args.severity, reason=args.reason))


def _repair(args: Any) -> int:
    from events import HostRepaired

    ctx = _ctx(args)
    return _send(ctx, HostRepaired(**_envelope(ctx, "host"), host=args.host))


def _add_host(args: Any) -> int:
    from events import HostAdded

    ctx = _ctx(args)
    return _send(ctx, HostAdded(**_envelope(ctx, "host"), host=args.host, gpus=args.gpus,
                                rack=args.rack, block=args.block))


def _remove_host(args: Any) -> int:
    from events import HostRemoved

    ctx = _ctx(args)
    return _send(ctx, HostRemoved(**_envelope(ctx, "host"), host=args.host))
