"""Executors: the side that runs workloads, its contract, and a simulated one.

The contract (docs/live-clients.md, "Executors"):

- An executor reads its cluster's journal (``streams.journal_tail.JournalTail``:
  through the fence, copies dropped by id). ``workload.started`` tells it to
  run a workload on the hosts and GPUs of ``placement``; ``workload.preempted``
  tells it to stop that run now (``requeued``: it will be started again later,
  resumable work from where it stopped).
- When a run ends by itself it publishes ``workload.finished`` (``outcome``
  ``succeeded`` or ``failed``) on the inbox, with a deterministic id per run
  (``finish_id``), so a retry or a restarted executor's repeat is dropped.
- It reports a run only after every decision the journal holds up to the
  moment it decides: a stop the scheduler decided in the same cycle is seen
  first, so a stopped run is never reported. Concretely it decides when a
  cycle's group is complete, i.e. when the cluster's next input is journaled.
- It keeps no state of its own: everything it knows is a fold of the journal,
  so a restart rebuilds exactly what runs.

``ExecutorBook`` is that fold, pure. ``SimulatedExecutor`` plays the runs: a
workload runs for its ``expected_duration_s`` of the scheduler's time (the
ticks' ``at``, so at whatever speed the ticker runs), a resumable one keeps its
progress across preemptions, a non-resumable one starts over. A workload that
carries a ``command`` is real work: only a real executor (``allot executor
local``, executor/) runs it, so the simulated one leaves it alone, whatever
host it is placed on, and the two can serve one cluster side by side.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import msgspec

from events import (
    ClockTicked,
    Event,
    InputRejected,
    PolicyConfigured,
    WorkloadCancelled,
    WorkloadFinished,
    WorkloadPreempted,
    WorkloadRejected,
    WorkloadStarted,
    WorkloadStopped,
    WorkloadSubmitted,
)
from events.errors import AllotError

if TYPE_CHECKING:
    from identity.journal_seal import SealCheck

EXECUTOR_PRINCIPAL = "allot.executor"
EXECUTOR_SOURCE = "allot.executor"
_SAFE = re.compile(r"[A-Za-z0-9._-]{1,80}")


class ExecutorError(AllotError):
    """The executor cannot run (no broker, no journal)."""


def finish_id(cluster: str, workload: str, run: int) -> str:
    """The id of the finish report of ``workload``'s ``run``-th run: the same on every retry."""
    w = workload if _SAFE.fullmatch(workload) else \
        "h-" + hashlib.blake2b(workload.encode(), digest_size=12).hexdigest()
    c = cluster if _SAFE.fullmatch(cluster) else \
        "h-" + hashlib.blake2b(cluster.encode(), digest_size=8).hexdigest()
    return f"exec:{c}:{w}:{run}"


def fails(workload: str, fraction: float, seed: str = "") -> bool:
    """Whether the simulated run of ``workload`` fails: a seeded, per-workload draw."""
    if fraction <= 0:
        return False
    h = hashlib.blake2b(f"{seed}:{workload}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "big") / 2**64 < fraction


class Run(msgspec.Struct, kw_only=True):
    """One run of a workload, as the executor plays it."""

    workload: str
    run: int                       # 1 for the first start, 2 after one preemption, ...
    started_at: int                # the scheduler's time of the start
    needs_s: int | None            # run time still needed (None: runs until stopped)
    placement: tuple[tuple[str, int], ...]

    limit_s: int | None = None     # the workload's time_limit_s

    def due_at(self) -> int | None:
        ends = [x for x in (self.needs_s, self.limit_s) if x is not None]
        return self.started_at + min(ends) if ends else None

    def limited(self) -> bool:
        """It ends at its time limit, not by itself."""
        return self.limit_s is not None and (self.needs_s is None or self.limit_s < self.needs_s)


class Finish(msgspec.Struct, frozen=True, kw_only=True):
    """A run that ended by itself (or at its time limit): what the executor reports."""

    workload: str
    run: int
    due_at: int
    outcome: str
    reason: str | None = None    # time_limit: stopped at the workload's time_limit_s


class ExecutorBook:
    """What runs on one cluster, folded from its journal (fenced, copies already dropped)."""

    def __init__(self, cluster: str, default_duration_s: int | None = None,
                 fail_fraction: float = 0.0, seed: str = "") -> None:
        self.cluster = cluster
        self.default_duration_s = default_duration_s
        self.fail_fraction = fail_fraction
        self.seed = seed
        self.now = 0                                   # the latest tick's time
        self.specs: dict[str, tuple[int | None, bool]] = {}   # workload -> (duration, resumable)
        self.progress: dict[str, int] = {}             # run time done by earlier runs (resumable)
        self.runs: dict[str, int] = {}                 # starts seen per workload
        self.running: dict[str, Run] = {}
        self.reported: set[tuple[str, int]] = set()
        self._open: Event | None = None                # the last input: its group may be open
        self.ended = 0
        # Preemption takes time (policy.preemption_grace_s): a simulated run stops
        # at once, so under a grace each preempted run is reported stopped.
        self.grace_s = 0
        self.limits: dict[str, int] = {}               # workload -> time_limit_s
        self.stops: list[tuple[str, int]] = []         # preempted runs to report stopped
        # Workloads with a command: a real executor's to run and report, never played here.
        self.real: set[str] = set()

    # -- the fold ---------------------------------------------------------------------------

    def add(self, e: Event) -> None:
        """The next journal event of this cluster (inputs and decisions, in journal order)."""
        if e.cluster != self.cluster:
            return
        if e.cause is None:  # an input: the previous input's group is complete
            self.close_group()
            self._open = e
            if type(e) is ClockTicked:
                self.now = max(self.now, e.at)
            elif type(e) is WorkloadSubmitted:
                dur = e.expected_duration_s if e.expected_duration_s is not None \
                    else self.default_duration_s
                self.specs.setdefault(e.workload, (dur, e.resumable))
                if e.time_limit_s is not None:
                    self.limits.setdefault(e.workload, e.time_limit_s)
                if e.command:
                    self.real.add(e.workload)
            return
        if type(e) in (InputRejected, WorkloadRejected) and self._open is not None \
                and e.cause == self._open.id:
            self._open = None  # the input had no effect
            return
        if type(e) is WorkloadStarted:
            self._start(e)
        elif type(e) is WorkloadPreempted:
            run = self.running.get(e.workload)
            if run is not None and self.grace_s > 0:
                self.stops.append((e.workload, run.run))
            self._stop(e.workload, e.at, requeued=e.requeued)

    def close_group(self) -> None:
        """The open input took effect (no rejection followed it): apply it."""
        e, self._open = self._open, None
        if type(e) is PolicyConfigured:
            self.grace_s = e.preemption_grace_s
        if type(e) in (WorkloadFinished, WorkloadCancelled):
            self._stop(e.workload, self.now, requeued=False)  # type: ignore[union-attr]

    def _start(self, e: WorkloadStarted) -> None:
        if e.workload in self.running or e.workload in self.real:
            return
        dur, _ = self.specs.get(e.workload, (self.default_duration_s, False))
        n = self.runs.get(e.workload, 0) + 1
        self.runs[e.workload] = n
        needs = None if dur is None else max(1, dur - self.progress.get(e.workload, 0))
        self.running[e.workload] = Run(workload=e.workload, run=n, started_at=e.at, needs_s=needs,
                                       placement=tuple((s.host, s.gpus) for s in e.placement),
                                       limit_s=self.limits.get(e.workload))

    def _stop(self, workload: str, at: int, requeued: bool) -> None:
        run = self.running.pop(workload, None)
        if run is None:
            return
        _, resumable = self.specs.get(workload, (None, False))
        if requeued and resumable:
            self.progress[workload] = self.progress.get(workload, 0) + max(0, at - run.started_at)
        elif requeued:
            self.progress.pop(workload, None)  # not resumable: it starts over
        else:
            self.progress.pop(workload, None)
            self.ended += 1

    # -- what to report ---------------------------------------------------------------------

    def due(self) -> list[Finish]:
        """Runs that have ended by themselves by ``now``, each reported once.

        Call it only where every group before is complete (``feed`` calls it
        right before each input): then any stop the scheduler decided in the
        cycle at ``now`` has been folded already, and a stopped run is never
        reported.
        """
        out = []
        for run in self.running.values():
            due = run.due_at()
            if due is None or due > self.now or (run.workload, run.run) in self.reported:
                continue
            self.reported.add((run.workload, run.run))
            if run.limited():
                out.append(Finish(workload=run.workload, run=run.run, due_at=due,
                                  outcome="failed", reason="time_limit"))
                continue
            outcome = "failed" if fails(run.workload, self.fail_fraction, self.seed) else "succeeded"
            out.append(Finish(workload=run.workload, run=run.run, due_at=due, outcome=outcome))
        return sorted(out, key=lambda f: (f.due_at, f.workload))

    def caught_up(self) -> None:
        """The journal is read to its end after a (re)start: forget what replay decided.

        While replaying history the book decides finishes it must not send: the
        journal further on says whether each was reported (the run ended). What
        still runs at the end is decided again at the next complete group.
        """
        self.reported = set()
        self.stops = []

    def take_stops(self) -> list[tuple[str, int]]:
        """Preempted runs (under a grace) not yet reported stopped; each returned once."""
        out, self.stops = self.stops, []
        return out

    def stopped_report(self, workload: str, run: int,
                       principal: str = EXECUTOR_PRINCIPAL) -> WorkloadStopped:
        """The input that reports a preempted run's processes gone (simulated: at once)."""
        return WorkloadStopped(id=f"{finish_id(self.cluster, workload, run)}:stopped",
                               at=self.now, cluster=self.cluster, actor=principal,
                               source=EXECUTOR_SOURCE, workload=workload, run_number=run)

    def report(self, f: Finish, principal: str = EXECUTOR_PRINCIPAL) -> WorkloadFinished:
        """The input that reports ``f``."""
        return WorkloadFinished(id=finish_id(self.cluster, f.workload, f.run), at=self.now,
                                cluster=self.cluster, actor=principal, source=EXECUTOR_SOURCE,
                                workload=f.workload, outcome=f.outcome,  # type: ignore[arg-type]
                                reason=f.reason)


def feed(book: ExecutorBook, events: Iterable[Event]) -> list[Finish]:
    """Add ``events`` in order; return the runs due, decided only at complete groups."""
    out: list[Finish] = []
    for e in events:
        if e.cluster == book.cluster and e.cause is None:
            book.close_group()      # everything before this input is complete...
            out.extend(book.due())  # ...so what is due now is known
        book.add(e)
    return out


# -- the loop ----------------------------------------------------------------------------------


class Stats(msgspec.Struct, kw_only=True):
    """What the simulated executor did (``allot executor`` logs it at exit)."""

    reported: int = 0
    lateness_s: list[int] = []          # scheduler seconds between a run's due time and its report
    decide_ms: list[float] = []         # wall ms from reading the closing record to the report sent


class SimulatedExecutor:
    """Runs each started workload for its expected duration in the scheduler's time; reports finishes."""

    def __init__(self, bootstrap: str, prefix: str, clusters: Iterable[str], *,
                 principal: str = EXECUTOR_PRINCIPAL, signing_key: bytes | None = None,
                 fail_fraction: float = 0.0, default_duration_s: int | None = None,
                 seed: str = "", log: Any = None, seal_check: SealCheck | None = None) -> None:
        self.bootstrap = bootstrap
        self.prefix = prefix
        self.clusters = tuple(clusters)
        self.principal = principal
        self.signing_key = signing_key
        # Only what a worker signed is acted on (None: unchecked; see ``reader_seals``).
        self.seal_check = seal_check
        self.books = {c: ExecutorBook(c, default_duration_s, fail_fraction, seed)
                      for c in self.clusters}
        self.stats = Stats()
        self.ready = asyncio.Event()
        self._stop = asyncio.Event()
        self.log = log

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> Stats:
        from streams.client import Client, ClientError, partition_for

        signer = (self.principal, self.signing_key) if self.signing_key else None
        client = Client(self.bootstrap, self.prefix, signer=signer, client_id="allot-executor",
                        seal_check=self.seal_check)
        try:
            await client.start()
        except ClientError as exc:
            raise ExecutorError(str(exc)) from exc
        tails = {}
        try:
            n = await client.partitions(client.journal)
            by_partition: dict[int, list[str]] = {}
            for c in self.clusters:
                by_partition.setdefault(partition_for(c, n), []).append(c)
            for p in by_partition:
                tails[p] = await client.tail(by_partition[p][0], start="begin")
            caught: set[int] = set()
            while not self._stop.is_set():
                polls = await asyncio.gather(*(t.poll(timeout_ms=200) for t in tails.values()))
                for (p, tail), items in zip(tails.items(), polls, strict=True):
                    t_read = time.monotonic()
                    due: list[tuple[ExecutorBook, Finish]] = []
                    for item in items:
                        book = self.books.get(item.event.cluster)
                        if book is None:
                            continue
                        due += [(book, f) for f in feed(book, [item.event])]
                    if p not in caught:
                        # Replaying history: the journal further on says what was reported.
                        due = []
                        if tail.caught_up:
                            for c in by_partition[p]:
                                if c in self.books:
                                    self.books[c].caught_up()
                            caught.add(p)
                            if len(caught) == len(tails):
                                self.ready.set()
                    if p in caught:
                        for c in by_partition[p]:
                            sbook = self.books.get(c)
                            if sbook is None:
                                continue
                            for w, run in sbook.take_stops():
                                await client.publish(sbook.stopped_report(w, run, self.principal))
                    for book, f in due:
                        e = book.report(f, self.principal)
                        await client.publish(e)
                        self.stats.reported += 1
                        self.stats.lateness_s.append(book.now - f.due_at)
                        self.stats.decide_ms.append((time.monotonic() - t_read) * 1000)
                        if self.log is not None:
                            self.log.info("executor.finished", cluster=book.cluster,
                                          workload=f.workload, run=f.run, outcome=f.outcome,
                                          due_at=f.due_at, now=book.now, event_id=e.id)
        finally:
            for t in tails.values():
                await t.stop()
            await client.close()
        return self.stats


# -- allot executor ---------------------------------------------------------------------------


def register(subparsers: Any) -> None:
    """Add ``allot executor`` (the simulated executor) to the command line."""
    p = subparsers.add_parser(
        "executor", help="run the simulated executor on a live allot",
        description="Read each cluster's journal from the start; play every started workload "
                    "for its expected_duration_s of the scheduler's time (resumable work keeps "
                    "its progress across preemptions) and publish workload.finished when it "
                    "ends. Restart-safe: it rebuilds what runs from the journal. The contract: "
                    "docs/live-clients.md.")
    p.add_argument("--bootstrap", default=None, metavar="HOST:PORT", help="Kafka bootstrap servers")
    p.add_argument("--topic-prefix", default=None, help="prefix of the topic names")
    p.add_argument("--config", default=None, metavar="FILE", help="the worker's TOML settings")
    p.add_argument("--cluster", dest="clusters", action="append", metavar="ID",
                   help="a cluster to execute for (repeatable; default: the setting `clusters`)")
    p.add_argument("--principal", default=EXECUTOR_PRINCIPAL,
                   help=f"the actor of its reports (default {EXECUTOR_PRINCIPAL})")
    p.add_argument("--key-file", default=None, metavar="FILE",
                   help="sign reports as --principal with the secret in FILE")
    p.add_argument("--fail-fraction", type=float, default=0.0,
                   help="share of runs that end `failed` (seeded per workload; default 0)")
    p.add_argument("--default-duration", type=int, default=None, metavar="SECONDS",
                   help="run time of workloads submitted without expected_duration_s "
                        "(default: they run until stopped)")
    p.add_argument("--log-format", default="auto", help="json, console or auto")
    p.set_defaults(func=_main)


def _main(args: Any) -> int:
    import signal
    import sys

    from identity.journal_seal import reader_seals
    from streams import config, logs

    try:
        settings = config.load(args.config, flags={"bootstrap": args.bootstrap,
                                                   "topic_prefix": args.topic_prefix})
        key = None
        if args.key_file:
            try:
                key = open(args.key_file).read().splitlines()[0].strip().encode()  # noqa: SIM115
            except (OSError, IndexError) as exc:
                raise ExecutorError(f"--key-file: cannot read a key from {args.key_file}") from exc
        logs.configure(args.log_format, "info")
        log = logs.logger(component="executor")
        ex = SimulatedExecutor(settings.bootstrap, settings.topic_prefix,
                               args.clusters or settings.clusters, principal=args.principal,
                               signing_key=key, fail_fraction=args.fail_fraction,
                               default_duration_s=args.default_duration, log=log,
                               seal_check=reader_seals(settings, log))

        async def go() -> Stats:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.add_signal_handler(sig, ex.stop)
            return await ex.run()

        stats = asyncio.run(go())
    except AllotError as exc:
        print(f"allot executor: error: {exc}", file=sys.stderr)
        return 2
    late = sorted(stats.lateness_s)
    log.info("executor.stopped", reported=stats.reported,
             lateness_p50_s=late[len(late) // 2] if late else None)
    return 0


__all__ = [
    "EXECUTOR_PRINCIPAL",
    "ExecutorBook",
    "Finish",
    "Run",
    "SimulatedExecutor",
    "fails",
    "feed",
    "finish_id",
    "register",
]
