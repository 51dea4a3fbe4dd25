"""``allot monitor --host NAME``: watch one host's GPUs and report faults and repairs.

Registered like the other verbs (``register(subparsers)``). The broker is
found as the publishing verbs find it (``streams.commands.discovered_settings``:
flags, environment, ``--config``, the running ``allot up``); with
``--key-file`` every event is signed as ``--actor``. Errors are one line on
stderr, exit status 2.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from events import Event
from events.errors import AllotError
from monitor.checks import Check, NvidiaSmiCheck, XidLogCheck
from monitor.hysteresis import MonitorState, Thresholds
from monitor.runner import LookResult, Monitor, initial_state

EXIT_ERROR = 2


class MonitorError(AllotError):
    """The monitor cannot start (bad flags, a key file that cannot be read)."""


def register(subparsers: Any) -> None:
    """Add ``allot monitor`` to the command line."""
    from streams.state_cli import duration_value

    p = subparsers.add_parser(
        "monitor", help="watch a host's GPUs; publish host.faulted / host.repaired",
        description="Run health checks of one host every --interval (default: nvidia-smi: "
                    "lost GPUs, uncorrected ECC errors, pending or failed row remapping, "
                    "temperature; optionally XIDs in a kernel log) and publish host.faulted "
                    "(degraded or failed, with the reason) after --fault-after bad checks in a "
                    "row, host.repaired after --repair-after good ones, never two transitions "
                    "less than --min-interval apart (a failed host is faulted at once). "
                    "See docs/monitor.md.")
    p.add_argument("--host", required=True, help="the host's name as the scheduler knows it")
    p.add_argument("--interval", type=seconds, default=30.0, metavar="DURATION",
                   help="time between checks: 30, 0.5, 30s, 1m (default 30s)")
    p.add_argument("--fault-after", type=int, default=3, metavar="N",
                   help="unhealthy checks in a row before a fault (default 3)")
    p.add_argument("--repair-after", type=int, default=5, metavar="M",
                   help="healthy checks in a row before a repair (default 5)")
    p.add_argument("--min-interval", type=duration_value, default=1800, metavar="DURATION",
                   help="least time between two transitions (default 30m)")
    p.add_argument("--gpus", type=int, default=8, help="GPUs the host should show (default 8)")
    p.add_argument("--max-temp", type=int, default=90, metavar="CELSIUS",
                   help="a GPU at or above this temperature is degraded (default 90)")
    p.add_argument("--nvidia-smi", default="nvidia-smi", metavar="PATH",
                   help="the nvidia-smi to run (default: the one on PATH)")
    p.add_argument("--xid-log", default=None, metavar="FILE",
                   help="also read new 'NVRM: Xid' lines of this kernel log (e.g. /var/log/kern.log)")
    p.add_argument("--once", action="store_true",
                   help="check once, print what was seen, publish nothing, exit 0 healthy / 1 not")
    p.add_argument("--looks", type=int, default=None, metavar="N",
                   help="stop after N checks (default: run until stopped)")
    p.add_argument("--url", default=None,
                   help="the state API, to start from the host's health as the scheduler holds "
                        "it (default: the running allot up's; without one: healthy)")
    g = p.add_argument_group("connection and identity")
    g.add_argument("--bootstrap", default=None, metavar="HOST:PORT",
                   help="Kafka bootstrap servers (else KAFKA_BOOTSTRAP_SERVERS, ALLOT_BOOTSTRAP, "
                        "--config, the running allot up, 127.0.0.1:9092)")
    g.add_argument("--topic-prefix", default=None, help="prefix of the topic names")
    g.add_argument("--config", default=None, metavar="FILE", help="the worker's TOML settings")
    g.add_argument("--cluster", default=None, help="the cluster (default: the first configured)")
    g.add_argument("--actor", default=None,
                   help="who publishes (default: allot.monitor when the local key directory "
                        "holds its key, as allot up makes it; else monitor-HOST)")
    g.add_argument("--key-file", default=None, metavar="FILE",
                   help="sign every event as --actor with the secret in FILE (first line; "
                        "default: --actor's key in the local key directory, if any)")
    g.add_argument("--timeout", type=float, default=30.0,
                   help="seconds to wait for the journal after publishing (default 30)")
    g.add_argument("--json", action="store_true", help="print each check as a JSON line")
    p.set_defaults(func=_guard(_monitor))


def seconds(text: str) -> float:
    """Seconds, fractional allowed (``0.5``), or a duration (``30s``, ``1m``, ``1:00``)."""
    from streams.state_cli import duration_value

    try:
        value = float(text)
    except ValueError:
        return float(duration_value(text))
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def _guard(fn: Any) -> Any:
    def run(args: Any) -> int:
        import logging

        logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
        try:
            return int(fn(args))
        except AllotError as exc:
            print(f"allot monitor: error: {exc}", file=sys.stderr)
            return EXIT_ERROR
        except ValueError as exc:
            print(f"allot monitor: error: {exc}", file=sys.stderr)
            return EXIT_ERROR
        except KeyboardInterrupt:
            return 130
    return run


def checks_of(args: Any) -> list[Check]:
    if args.gpus < 1:
        raise MonitorError("--gpus must be at least 1")
    out: list[Check] = [NvidiaSmiCheck(expected_gpus=args.gpus, max_temp_c=args.max_temp,
                                       binary=args.nvidia_smi)]
    if args.xid_log:
        out.append(XidLogCheck(args.xid_log))
    return out


def _default_actor(host: str) -> str:
    """``allot.monitor`` where this machine holds its key (``allot up`` made it), else monitor-HOST."""
    from identity.bootstrap import MONITOR
    from identity.local import Keychain

    return MONITOR if Keychain().secret(MONITOR) is not None else f"monitor-{host}"


def _signer(actor: str, key_file: str | None) -> tuple[str, bytes] | None:
    """Sign as ``actor`` with the key in ``key_file``, else with its key in the local key directory."""
    if not key_file:
        from identity.local import Keychain

        secret = Keychain().secret(actor)
        return (actor, secret) if secret is not None else None
    try:
        lines = open(key_file).read().splitlines()  # noqa: SIM115 - read once
    except OSError as exc:
        raise MonitorError(f"--key-file: {exc.strerror or exc}") from None
    if not lines or not lines[0].strip():
        raise MonitorError(f"--key-file: {key_file} is empty")
    return actor, lines[0].strip().encode()


def _known_health(url: str | None, cluster: str, host: str) -> str | None:
    """The host's health in the scheduler, if a state API answers; None otherwise."""
    from streams.state_cli import StateApiError, get, state_url

    try:
        data = get(state_url(url), "/api/hosts", cluster=cluster)
    except StateApiError:
        return None
    for h in data.get("hosts", ()):
        if h.get("host") == host:
            return str(h.get("health"))
    return None


def _print_look(r: LookResult, as_json: bool, host: str) -> None:
    import json

    from streams.state_cli import when

    o = r.observation
    if as_json:
        sys.stdout.write(json.dumps({
            "host": host, "at": int(r.at), "healthy": o.healthy, "severity": o.severity,
            "reasons": list(o.reasons), "bad": r.state.bad, "good": r.state.good,
            "faulted": r.state.faulted,
            "transition": r.transition.kind if r.transition else None,
            "published": r.published, "detail": r.detail}) + "\n")
        sys.stdout.flush()
        return
    what = "healthy" if o.healthy else f"{o.severity}: {o.reason}"
    line = f"{when(int(r.at))} UTC {host} {what}"
    if r.transition is not None:
        t = r.transition
        verb = "host.faulted" if t.kind == "fault" else "host.repaired"
        line += f" -> {verb} {r.published}" + (f" ({r.detail})" if r.detail else "")
    else:
        line += (f" (faulted, {r.state.good} good in a row)" if r.state.faulted
                 else f" ({r.state.bad} bad in a row)" if r.state.bad else "")
    print(line, flush=True)


def _monitor(args: Any) -> int:
    checks = checks_of(args)
    thresholds = Thresholds(fault_after=args.fault_after, repair_after=args.repair_after,
                            min_interval_s=float(args.min_interval))
    if args.once:
        from monitor.checks import worst

        obs = worst([c.run() for c in checks])
        _print_look(LookResult(at=__import__("time").time(), observation=obs,
                               state=MonitorState()), args.json, args.host)
        return 0 if obs.healthy else 1
    from streams import logs
    from streams.commands import discovered_settings

    logs.configure("auto", "info")
    settings = discovered_settings(args)
    cluster = args.cluster or settings.clusters[0]
    actor = args.actor or _default_actor(args.host)
    signer = _signer(actor, args.key_file)
    state = initial_state(_known_health(args.url, cluster, args.host))
    return asyncio.run(_run(settings.bootstrap, settings.topic_prefix, cluster, actor, signer,
                            checks, thresholds, state, args))


async def _run(bootstrap: str, prefix: str, cluster: str, actor: str,
               signer: tuple[str, bytes] | None, checks: list[Check], thresholds: Thresholds,
               state: MonitorState, args: Any) -> int:
    from streams.client import Client, Result

    async with Client(bootstrap, prefix, signer=signer, client_id="allot-monitor") as client:
        async def publish(e: Event) -> Result:
            return await client.request(e, timeout=args.timeout)

        mon = Monitor(args.host, cluster, checks, publish, thresholds=thresholds, actor=actor,
                      state=state)
        await mon.run(float(args.interval), looks=args.looks,
                      on_look=lambda r: _print_look(r, args.json, args.host))
    return 0


__all__ = ["MonitorError", "checks_of", "register"]
