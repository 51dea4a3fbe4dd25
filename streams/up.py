"""The embedded default: ``allot up`` runs a whole live allot on this machine.

``Stack`` starts, in order:

1. the Tansu broker on 127.0.0.1 (``streams.broker``), unless a bootstrap
   server is configured (``--bootstrap``, ``KAFKA_BOOTSTRAP_SERVERS``,
   ``ALLOT_BOOTSTRAP`` or ``bootstrap`` in ``--config``): then that Kafka;
2. the topics (``streams.topics.ensure_topics``);
3. the worker (``allot worker``: the scheduling loop and the ticker), the
   simulated executor (``allot executor``) and, when asked, the usage
   projections (``allot projections``), each a child process logging JSON
   lines to ``<log dir>/<name>.log``.

``stop`` ends them in reverse order (SIGTERM, then SIGKILL after a grace
period) and the broker last. Children run in their own session, so Ctrl-C
reaches only ``allot up``, which stops them in that order; each child also gets
SIGTERM from the kernel if ``allot up`` itself dies (``PR_SET_PDEATHSIG``), so
nothing is left behind even after ``kill -9``.

What stopping keeps and loses: the embedded Tansu keeps everything in memory,
so every topic (inbox, journal, dead letter, snapshots, the projections'
changelogs) is gone when the stack stops. The journal outlives it in the
archive (``allot archive``, docs/archive.md; ``--archive DIR``, by default
``<log dir>/archive``): an archiver child is started first and stopped last
(after the worker, so it archives the journal to its end), and on the next
start the journal is restored from it, exact bytes at the same offsets,
before the worker starts, so the worker folds the same log and comes back
with the same budgets, hosts, queue and decisions. Snapshots are not kept
(the worker folds the restored journal), nor the dead letters. The demo runs
without an archive unless one is given.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

from events.errors import AllotError
from streams import config
from streams.config import WorkerSettings

LOOPBACK = "127.0.0.1"


class StackError(AllotError):
    """The stack could not start, or a part of it died."""


def _die_with_parent() -> None:
    """In a child: SIGTERM when ``allot up`` dies, however it dies (Linux)."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def bootstrap_configured(config_file: str | None, flag: str | None,
                         environ: dict[str, str] | None = None) -> bool:
    """Whether the user named a Kafka to use (else the embedded broker is started)."""
    env = os.environ if environ is None else environ
    if flag or env.get(config.BOOTSTRAP_ENV) or env.get(config.ENV_PREFIX + "BOOTSTRAP"):
        return True
    return bool(config_file) and "bootstrap" in config.read_file(config_file)


def child_env(settings: WorkerSettings, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment that hands ``settings`` to an ``allot`` child process (no flags in ps)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(config.ENV_PREFIX) and k != config.BOOTSTRAP_ENV}
    for name in config.FIELDS:
        value = getattr(settings, name)
        if name == "worker_name" and not value:
            continue
        env[config.ENV_PREFIX + name.upper()] = (",".join(value) if isinstance(value, tuple)
                                                 else str(value))
    env.update(extra or {})
    return env


class Child:
    """One ``python -m allot ...`` child process."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log_path: Path) -> None:
        self.name = name
        self.argv = argv
        self.env = env
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def start(self) -> Child:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in wait()
        self.proc = subprocess.Popen([sys.executable, "-m", "allot", *self.argv], env=self.env,
                                     stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True,
                                     preexec_fn=_die_with_parent)
        return self

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def terminate(self) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGTERM)

    def wait(self, timeout: float) -> int | None:
        if self.proc is None:
            return None
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(10)
        if self._log is not None:
            self._log.close()
            self._log = None
        return code

    def tail(self, lines: int = 5) -> str:
        try:
            text = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])


class Restored:
    """What ``allot archive restore`` reported (records restored, seconds)."""

    def __init__(self, report: dict[str, Any]) -> None:
        self.records = sum(int(n) for n in report.get("restored", {}).values())
        self.seconds = float(report.get("seconds", 0.0))


def restore_archive(archive_dir: Path, env: dict[str, str], log_dir: Path) -> Restored:
    """Run ``allot archive restore --dir archive_dir`` to its end; StackError if it fails."""
    import json

    if not (archive_dir / "manifest.jsonl").is_file():
        return Restored({})
    log_dir.mkdir(parents=True, exist_ok=True)
    with open(log_dir / "restore.log", "ab") as log:
        done = subprocess.run([sys.executable, "-m", "allot", "archive", "restore", "--dir",
                               str(archive_dir), "--json"], env=env, stdout=subprocess.PIPE,
                              stderr=log, stdin=subprocess.DEVNULL, timeout=3600, check=False)
    if done.returncode != 0:
        tail = (log_dir / "restore.log").read_text(errors="replace").strip().splitlines()[-1:]
        raise StackError(f"restoring the journal from {archive_dir} failed: "
                         f"{tail[0] if tail else done.returncode}")
    return Restored(json.loads(done.stdout.decode().strip().splitlines()[-1]))


class Stack:
    """The broker (maybe), the topics, the worker, the executor and the projections."""

    def __init__(self, settings: WorkerSettings, *, embedded: bool, log_dir: Path,
                 executor: bool = True, projections_port: int | None = None,
                 executor_args: list[str] | None = None,
                 archive_dir: Path | None = None, keychain: Any = None) -> None:
        self.settings = settings
        # identity.local.Keychain: the keys this stack signs with (None: insecure_dev).
        self.keychain = keychain
        self._registrations: list[Any] = []
        # Where the journal is archived (archive/), and restored from on start: the history
        # that outlives the memory-only embedded broker. None: no archive.
        self.archive_dir = archive_dir
        self.restored: Any = None
        self.embedded = embedded
        self.log_dir = log_dir
        self.with_executor = executor
        self.projections_port = projections_port
        self.executor_args = executor_args or []
        self.broker: Any = None
        self.children: list[Child] = []

    @property
    def bootstrap(self) -> str:
        return self.settings.bootstrap

    def start(self) -> Stack:
        import asyncio

        from streams.broker import TansuBroker, wait_for_broker
        from streams.topics import ensure_topics

        try:
            if self.embedded:
                self.broker = TansuBroker(log_path=self.log_dir / "tansu.log")
                self.settings = self.settings.replace(bootstrap=self.broker.start())
            else:
                wait_for_broker(self.settings.bootstrap, timeout=30)
            s = self.settings
            if not (s.tick_key or s.tick_key_file):
                # One key for this stack's worker(s) and nobody else: only they can tick.
                # Kept in the key directory (in --insecure-dev too): the journal's seals
                # are made with it, so a restarted stack must fold its restored journal with
                # the same key; and an auditor checks every tick with one public key.
                from identity.local import Keychain

                kc = Keychain() if self.keychain is None else self.keychain
                if not s.insecure:
                    self.keychain = kc
                kc.ensure(s.ticker_principal)
                self.settings = s = s.replace(tick_key_file=str(kc.path(s.ticker_principal)))
            asyncio.run(ensure_topics(s.bootstrap, s.topic_prefix, s.partitions,
                                      s.replication_factor))
            if not s.insecure:
                self.settings = s = self._identity(s)
            env = child_env(s)
            if self.archive_dir is not None:
                # Before the worker starts: it folds the journal it finds, so it must find
                # the whole one (a fresh broker has none; a kept Kafka is left alone). Run as
                # ``allot archive restore`` (streams does not import the archive package).
                self.restored = restore_archive(self.archive_dir, env, self.log_dir)
                # First started, last stopped: on SIGTERM it archives to the journal's end,
                # after the worker has written its last batch.
                self.children.append(Child("archive", ["archive", "--dir", str(self.archive_dir),
                                                       "--flush-s", "1"], env,
                                           self.log_dir / "archive.log").start())
            if self._registrations:
                # After the restore (it needs an empty inbox), before the worker.
                self._publish_registrations(s)
            self.children.append(Child("worker", ["worker"], env,
                                       self.log_dir / "worker.log").start())
            if self.with_executor:
                self.children.append(Child("executor", ["executor", "--log-format", "json",
                                                        *self.executor_args], env,
                                           self.log_dir / "executor.log").start())
            if self.projections_port is not None:
                self.children.append(Child(
                    "projections", ["projections", "--port", str(self.projections_port)], env,
                    self.log_dir / "projections.log").start())
        except BaseException:
            self.stop()
            raise
        return self

    def _identity(self, s: WorkerSettings) -> WorkerSettings:
        """Keys for this stack's own signers, the first admin in the settings, registrations.

        Signatures are on by default, so the stack signs everything it sends: the
        executor with its key file, the command line with the local user's (see
        ``identity.bootstrap``). The registrations go to the inbox before the
        worker starts, so they are the first inputs it takes.
        """
        from identity.bootstrap import ADMIN, EXECUTOR, local_registrations
        from identity.local import Keychain
        from streams.commands import default_actor

        kc = self.keychain = self.keychain if self.keychain is not None else Keychain()
        kc.ensure(ADMIN)
        if not s.admin_principal:
            s = s.replace(admin_principal=ADMIN, admin_public_key=kc.public_hex(ADMIN))
        self._registrations = local_registrations(kc, s.clusters, default_actor())
        if self.with_executor and "--key-file" not in self.executor_args:
            self.executor_args = [*self.executor_args, "--key-file", str(kc.path(EXECUTOR))]
        return s

    def _publish_registrations(self, s: WorkerSettings) -> None:
        import asyncio

        from streams.client import Client

        async def publish() -> None:
            async with Client(s.bootstrap, s.topic_prefix, keychain=self.keychain,
                              client_id="allot-up") as c:
                await c.publish_many(list(self._registrations))

        asyncio.run(publish())

    def dead(self) -> list[Child]:
        """Children that exited on their own."""
        return [c for c in self.children if not c.alive()]

    def pids(self) -> dict[str, int]:
        out = {c.name: c.pid for c in self.children if c.pid is not None}
        if self.broker is not None and self.broker.pid is not None:
            out["broker"] = self.broker.pid
        return out

    def child(self, name: str) -> Child | None:
        return next((c for c in self.children if c.name == name), None)

    def stop_child(self, name: str, grace_s: float = 15.0) -> int | None:
        """Stop one child (SIGTERM, then SIGKILL after ``grace_s``); its exit code."""
        c = self.child(name)
        if c is None:
            return None
        c.terminate()
        code = c.wait(grace_s)
        self.children.remove(c)
        return code

    def stop(self, grace_s: float = 15.0) -> dict[str, int | None]:
        """Stop the children (last started first), then the broker; their exit codes."""
        codes: dict[str, int | None] = {}
        for c in reversed(self.children):
            c.terminate()
            codes[c.name] = c.wait(grace_s)
        self.children = []
        if self.broker is not None:
            self.broker.stop()
            self.broker = None
        return codes


# -- allot up ----------------------------------------------------------------------------------

UP_FLAGS: dict[str, tuple[str, type]] = {
    "bootstrap": ("Kafka bootstrap servers HOST:PORT (default: start the embedded broker)", str),
    "topic_prefix": ("prefix of every topic name", str),
    "partitions": ("partitions of the topics created", int),
    "time_scale": ("virtual seconds per wall second", float),
    "tick_interval_s": ("wall seconds between ticks", float),
}


def register(subparsers: Any, auditor: Any = None) -> None:
    """Add ``allot up`` to the command line; ``auditor`` audits the demo's journal (see demo.py)."""
    p = subparsers.add_parser(
        "up", help="run a whole live allot here: broker, topics, worker, ticker, executor",
        description="Start the embedded Tansu broker on 127.0.0.1 (unless a bootstrap server is "
                    "configured), create the topics, and run the worker (with its ticker) and "
                    "the simulated executor until Ctrl-C, which stops everything. The embedded "
                    "broker keeps everything in memory; the journal is archived to "
                    "LOG_DIR/archive and restored from there on the next start. With "
                    "--demo, play a scenario through Kafka and end with its audit and replay "
                    "check (this is `make demo`).")
    p.add_argument("--config", default=None, metavar="FILE", help="a TOML settings file")
    for name, (text, kind) in UP_FLAGS.items():
        p.add_argument(f"--{name.replace('_', '-')}", dest=name, type=kind, default=None,
                       help=text)
    p.add_argument("--cluster", dest="clusters", action="append", metavar="ID",
                   help="a cluster to schedule (repeatable; default: the setting, or the "
                        "demo scenario's)")
    p.add_argument("--log-dir", type=Path, default=Path("out/up"),
                   help="where the processes write their logs (default out/up)")
    p.add_argument("--no-executor", action="store_true", help="do not run the simulated executor")
    p.add_argument("--insecure-dev", dest="insecure_dev", action="store_const", const=True,
                   default=None,
                   help="DEVELOPMENT ONLY: no keys, unsigned inputs accepted, no role checked")
    p.add_argument("--archive", type=Path, default=None, metavar="DIR",
                   help="archive the journal into DIR and restore it from there on start, so "
                        "a restarted stack keeps its history (default LOG_DIR/archive; with "
                        "--demo: no archive unless given)")
    p.add_argument("--no-archive", action="store_true",
                   help="keep no archive: the embedded broker's history ends with it")
    p.add_argument("--projections", type=int, default=None, metavar="PORT",
                   help="also run the usage projections, their JSON and dashboard on "
                        "127.0.0.1:PORT (0: any free port)")
    p.add_argument("--demo", nargs="?", const="scenarios/demo.toml", default=None,
                   metavar="SCENARIO",
                   help="play SCENARIO through Kafka (default scenarios/demo.toml), print its "
                        "audit and replay check, and stop; exit 0 only if it passed")
    p.add_argument("--horizon-days", type=float, default=None,
                   help="with --demo: play only this much of the scenario")
    p.add_argument("--out", type=Path, default=Path("out/live-demo"),
                   help="with --demo: where the journal, the audit database and the report go")
    p.add_argument("--no-projections", action="store_true",
                   help="with --demo: do not run (and check) the Faust usage projections")
    p.add_argument("--no-view", action="store_true",
                   help="with --demo: print progress lines instead of the live view")
    p.set_defaults(func=_up, auditor=auditor)


def wait_ready(stack: Stack, url: str, timeout_s: float = 120.0) -> None:
    """Until the worker's ``/readyz`` says ready for every configured cluster (or a child dies)."""
    import json
    import urllib.request

    deadline = time.monotonic() + timeout_s
    wanted = set(stack.settings.clusters)
    while time.monotonic() < deadline:
        dead = stack.dead()
        if dead:
            c = dead[0]
            raise StackError(f"the {c.name} exited with status "
                             f"{c.proc.returncode if c.proc else '?'} before it was ready; its "
                             f"log ({c.log_path}) ends with: {c.tail(1)}")
        try:
            with urllib.request.urlopen(f"{url}/readyz", timeout=2) as r:
                body = json.loads(r.read())
            if body.get("ready") and wanted <= set(body.get("clusters", ())):
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise StackError(f"the worker was not ready after {timeout_s:.0f} s ({url}/readyz)")


def _up(args: Any) -> int:
    from rich.console import Console

    con = Console(stderr=True, highlight=False)
    try:
        return _run_up(args, con)
    except AllotError as exc:
        print(f"allot up: error: {exc}", file=sys.stderr)
        return 2


def _run_up(args: Any, con: Any) -> int:
    from streams.broker import free_port

    flags: dict[str, Any] = {name: getattr(args, name) for name in UP_FLAGS}
    flags["insecure_dev"] = getattr(args, "insecure_dev", None)
    scenario = None
    if args.demo:
        from simulator.scenario import load_scenario

        scenario = load_scenario(args.demo)
        if args.clusters is None:
            flags["clusters"] = (scenario.cluster.id,)
        # The demo's defaults: three days in about a minute and a quarter, a cycle every
        # 0.1 s of wall time (six minutes of scheduler time, the scenario's own tick).
        if flags["time_scale"] is None:
            flags["time_scale"] = 3600.0
        if flags["tick_interval_s"] is None:
            flags["tick_interval_s"] = 0.1
    if args.clusters:
        flags["clusters"] = tuple(args.clusters)
    from streams.state_cli import read_run_file, run_file

    other = read_run_file()
    if other is not None:
        raise StackError(f"allot up is already running (pid {other.get('pid')}, broker "
                         f"{other.get('bootstrap')}, state {other.get('state_url')}); stop it "
                         f"first, or remove {run_file()} if that process is not allot")
    embedded = not bootstrap_configured(args.config, args.bootstrap)
    settings = config.load(args.config, flags={**flags, "log_format": "json"})
    if settings.metrics_port < 0:
        # The verbs and the dashboard read the worker's state API: always serve it.
        settings = settings.replace(metrics_port=free_port())
    port = args.projections
    if port is None and scenario is not None and not args.no_projections:
        port = 0  # the demo checks the Faust projections against the audit too
    if port == 0:
        port = free_port()
    archive_dir = args.archive
    if archive_dir is None and scenario is None:
        archive_dir = args.log_dir / "archive"
    if args.no_archive:
        archive_dir = None
    stack = Stack(settings, embedded=embedded, log_dir=args.log_dir, projections_port=port,
                  executor=not args.no_executor, archive_dir=archive_dir)
    stopping: dict[str, bool] = {"flag": False}

    def on_signal(signum: int, _frame: Any) -> None:
        stopping["flag"] = True
        raise KeyboardInterrupt

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    t0 = time.monotonic()
    code = 0
    try:
        stack.start()
        where = "embedded Tansu, memory only" if embedded else "configured Kafka"
        con.print(f"[bold]allot up[/]: broker {stack.bootstrap} ({where}); clusters "
                  f"{', '.join(stack.settings.clusters)}; time x{stack.settings.time_scale:g}; "
                  f"logs in {args.log_dir}/")
        if stack.archive_dir is not None:
            r = stack.restored
            con.print(f"archive {stack.archive_dir}/: "
                      + (f"restored {r.records:,} journal records in {r.seconds:.1f} s"
                         if r is not None and r.records else "nothing to restore"))
        con.print("pids " + " ".join(f"{k}={v}" for k, v in stack.pids().items()))
        if stack.keychain is not None:
            con.print(f"signed: keys in {stack.keychain.dir}/ (0600); the command line signs "
                      f"as --actor with its key there")
        else:
            con.print("[bold red]INSECURE DEVELOPMENT MODE[/]: unsigned inputs accepted, no "
                      "role checked")
        if port is not None:
            con.print(f"usage projections and dashboard: http://{LOOPBACK}:{port}/")
        if scenario is not None:
            from streams.demo import play

            ok = play(stack, scenario, args.demo, args.out, con,
                      horizon_days=args.horizon_days, view=not args.no_view,
                      projections_port=port, auditor=args.auditor)
            code = 0 if ok else 1
        else:
            from streams.state_cli import remove_run_file, write_run_file

            url = f"http://{stack.settings.metrics_host}:{stack.settings.metrics_port}"
            wait_ready(stack, url)
            path = write_run_file({"pid": os.getpid(), "bootstrap": stack.bootstrap,
                                   "topic_prefix": stack.settings.topic_prefix,
                                   "clusters": list(stack.settings.clusters),
                                   "state_url": url, "dashboard_url": f"{url}/dashboard/"})
            stopping["run_file"] = True
            con.print(f"state API {url}/api/  dashboard {url}/dashboard/  (address in {path})")
            con.print("running; Ctrl-C stops everything")
            while True:
                dead = stack.dead()
                if dead:
                    c = dead[0]
                    raise StackError(f"the {c.name} exited with status {c.proc.returncode if c.proc else '?'}"
                                     f"; its log ({c.log_path}) ends with:\n{c.tail()}")
                time.sleep(0.5)
    except KeyboardInterrupt:
        con.print("stopping ...")
    finally:
        if stopping.get("run_file"):
            from streams.state_cli import remove_run_file

            remove_run_file(os.getpid())
        for s, h in old.items():
            signal.signal(s, h)
        codes = stack.stop()
        bad = {k: v for k, v in codes.items() if v not in (0, None, -signal.SIGTERM)}
        con.print(f"stopped after {time.monotonic() - t0:.1f} s"
                  + (f"; exit codes {bad}" if bad else "")
                  + ("; the embedded broker's topics are gone" if embedded else "")
                  + (f" (the journal is archived in {stack.archive_dir}/)"
                     if embedded and stack.archive_dir is not None else ""))
    return code


__all__ = ["Child", "Stack", "StackError", "bootstrap_configured", "child_env", "register"]
