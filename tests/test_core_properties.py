"""Property tests: random valid event sequences through Engine, with the core's invariants checked after every step."""

from __future__ import annotations

import importlib
import pkgutil
from collections import defaultdict
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from events import (
    ClockTicked,
    Event,
    HostFaulted,
    InputRejected,
    WorkloadCancelled,
    WorkloadFinished,
    WorkloadPreempted,
    WorkloadStarted,
    WorkloadSubmitted,
)
from events.factory import Inputs
from scheduler import Engine, State, decide
from scheduler.replay import JournalFold, fold_log


def _import_every_project_module() -> None:
    """Load every module of the project before Hypothesis draws anything.

    Hypothesis mixes constants found in the loaded local modules into the data it
    generates, even with ``derandomize``. So the examples depended on which
    modules earlier tests had imported, and a property could fail alone and pass
    in the suite (``test_no_thrash`` did). With every module loaded first, the
    examples are the same whatever ran before.
    """
    for name in ("events", "projections", "scheduler", "simulator", "audit", "allot",
                 "streams"):
        pkg = importlib.import_module(name)
        for info in pkgutil.walk_packages(pkg.__path__, f"{name}."):
            if not info.name.endswith("__main__"):
                importlib.import_module(info.name)


_import_every_project_module()

TREE = (
    ("lab", 1, ("admin",)),
    ("lab/p1", 2, ("lead-p1",)),
    ("lab/p1/x", 1, ()),
    ("lab/p1/y", 3, ()),
    ("lab/p2", 1, ()),
    ("lab/p2/z", 1, ()),
    ("lab/free", 1, ()),   # only ever gets unallocated work
)
LEAVES = ("lab/p1/x", "lab/p1/y", "lab/p2/z", "lab/free")
FREE_LEAF = "lab/free"
# (gpus, hosts): single-host shapes, whole-host gangs (twice as likely), a split gang, a
# 3-host gang.
SHAPES = ((1, 1), (2, 1), (4, 1), (8, 1), (16, 2), (16, 2), (8, 2), (24, 3))
MIN_RUNTIMES = (0, 0, 1, 60, 300, 600, 1800, 3600)
STEPS = (1, 30, 60, 299, 300, 600, 1800, 3600)

SETTINGS = settings(max_examples=200, deadline=None, derandomize=True, database=None)


# -- strategies ------------------------------------------------------------------------

configs = st.fixed_dictionaries({
    "hosts": st.lists(st.sampled_from([None, "r0", "r1"]), min_size=2, max_size=6),
    "fair_share_period_s": st.sampled_from([1, 300]),
    "preemption_searches": st.sampled_from([1, 32]),
    "reservations": st.sampled_from([1, 2, 0]),
    "queue_depth": st.sampled_from([1, 64]),
    # (preemption_rule, borrowed_protection_s): the default, the old policy, and mixes.
    "rule": st.sampled_from([("reclaim", 0), ("fair_share", None), ("reclaim", 600),
                             ("fair_share", 600), ("reclaim_balanced", 0), ("reclaim_room", 0),
                             ("reclaim_room_checkpoint_margin", 0)]),
})

OPS = {
    "submit": st.tuples(st.just("submit"), st.sampled_from(LEAVES), st.sampled_from(SHAPES),
                        st.sampled_from(MIN_RUNTIMES), st.booleans(), st.integers(0, 2)),
    "tick": st.tuples(st.just("tick"), st.sampled_from(STEPS)),
    # Jump to the next protection end, as the simulator jumps to the next schedulable moment.
    "next": st.tuples(st.just("next")),
    # Several cycles in a row with nothing but time passing (where the idle memo matters).
    "burst": st.tuples(st.just("burst"), st.lists(st.sampled_from(["next", 1, 30, 120]),
                                                  min_size=2, max_size=5)),
    "finish": st.tuples(st.just("finish"), st.integers(0, 30),
                        st.sampled_from(["succeeded", "failed"])),
    "cancel": st.tuples(st.just("cancel"), st.integers(0, 30)),
    "fault": st.tuples(st.just("fault"), st.integers(0, 5), st.sampled_from(["degraded", "failed"])),
    "repair": st.tuples(st.just("repair"), st.integers(0, 5)),
    "dup": st.tuples(st.just("dup"), st.integers(0, 100)),
    "remove": st.tuples(st.just("remove"), st.integers(0, 5)),
    "add": st.tuples(st.just("add"), st.sampled_from([None, "r0", "r1"])),
}
# Weighted by repetition: mostly submits and ticks, so the cluster stays contended.
KINDS = ["submit"] * 5 + ["tick"] * 2 + ["next"] * 2 + ["burst"] + ["finish"] * 2 + [
    "cancel", "fault", "repair", "dup"]
ops = st.lists(st.sampled_from(KINDS).flatmap(OPS.__getitem__), min_size=20, max_size=80)
# The same, with hosts leaving and joining the fleet.
churn_ops = st.lists(st.sampled_from([*KINDS, "remove", "add"]).flatmap(OPS.__getitem__),
                     min_size=20, max_size=80)


# -- the runner: live engine, memo-free twin, independent bookkeeping -------------------------


class Run:
    """Feeds one generated sequence through two engines and checks every invariant after each step."""

    def __init__(self, config: dict[str, Any], thrash: bool = False) -> None:
        self.I = Inputs()
        self.live = Engine()
        self.twin = Engine(accelerate=False)
        self.journal: list[Event] = []
        # Two fresh engines folding the recorded log as it grows (plain replay, no reaction):
        # after every step each holds the fold of the whole log so far.
        self.replays = (JournalFold(Engine()), JournalFold(Engine()))
        self.now = 0
        self.n = 0
        self.thrash = thrash  # check the no-thrash rule (its own property)
        hosts = [f"h{i}" for i in range(len(config["hosts"]))]
        # Independent bookkeeping, from the emitted events only.
        self.contract: dict[str, WorkloadSubmitted] = {}
        # wid -> (start, GPUs, allocated, protected until, hosts) of the current run
        self.runs: dict[str, tuple[int, int, bool, int | None, frozenset[str]]] = {}
        self.charged: dict[str, int] = defaultdict(int)  # leaf -> GPU-s of ended allocated runs
        # Fair-share preemptions of the last cycle: (victim, preemptor, preemptor's protection end).
        self.prev_fair_share: set[tuple[str, str, int]] = set()
        knobs = {k: v for k, v in config.items() if k not in ("hosts", "rule")}
        knobs["preemption_rule"], knobs["borrowed_protection_s"] = config.get(
            "rule", ("reclaim", 0))
        self.borrowed_protection_s: int | None = knobs["borrowed_protection_s"]
        self.feed(self.I.policy(team_depth=1, **knobs))
        for path, shares, managers in TREE:
            self.feed(self.I.node(path, shares=shares, managers=managers))
        for name, rack in zip(hosts, config["hosts"], strict=True):
            self.feed(self.I.host(name, rack=rack))

    @property
    def state(self) -> State:
        return self.live.state

    # -- driving ----------------------------------------------------------------------

    def op(self, op: tuple[Any, ...]) -> None:
        kind = op[0]
        st_ = self.state
        if kind == "submit":
            _, leaf, (gpus, hosts), min_runtime, resumable, priority = op
            if leaf == FREE_LEAF:
                min_runtime = 0
            self.n += 1
            self.feed(self.I.submit(f"w{self.n}", leaf, gpus, min_runtime, at=self.now,
                                    hosts=hosts, resumable=resumable, priority=priority))
        elif kind == "tick":
            self.now += op[1]
            self.feed(self.I.tick(self.now))
        elif kind == "next":
            ends = [w.protected_until for w in st_.workloads.running.values()
                    if w.protected_until is not None and w.protected_until > self.now]
            ends += [until for _, until, _ in st_.reservations.values() if until > self.now]
            self.now = min(ends, default=self.now + 1)
            self.feed(self.I.tick(self.now))
        elif kind == "burst":
            for step in op[1]:
                self.op(("next",) if step == "next" else ("tick", step))
        elif kind == "finish":
            running = sorted(st_.workloads.running)
            if running:
                self.feed(self.I.finish(running[op[1] % len(running)], at=self.now, outcome=op[2]))
        elif kind == "cancel":
            live = sorted(w.id for w in st_.workloads.all.values()
                          if w.status in ("pending", "running"))
            if live:
                wid = live[op[1] % len(live)]
                self.feed(self.I.cancel(wid, st_.workloads.all[wid].user, at=self.now))
        elif kind == "fault":
            hosts = sorted(st_.cluster_state.hosts)
            if hosts:
                self.feed(self.I.fault(hosts[op[1] % len(hosts)], op[2], at=self.now))
        elif kind == "repair":
            faulty = sorted(h for h, x in st_.cluster_state.hosts.items() if x.health != "ok")
            if faulty:
                self.feed(self.I.repair(faulty[op[1] % len(faulty)], at=self.now))
        elif kind == "remove":
            # Operators remove idle hosts, faulty ones first.
            idle = sorted(h for h, x in st_.cluster_state.hosts.items() if not x.workloads)
            idle = [h for h in idle if st_.cluster_state.hosts[h].health != "ok"] or idle
            if idle:
                self.feed(self.I.remove_host(idle[op[1] % len(idle)], at=self.now))
        elif kind == "add":
            self.n += 1
            self.feed(self.I.host(f"n{self.n}", rack=op[1], at=self.now))
        elif kind == "dup":
            recent = [e for e in self.journal if e.cause is None and e.at >= self.now - 3600]
            if recent:
                e = recent[op[1] % len(recent)]
                before = self.state.fingerprint()
                assert self.live.process(e) is None
                assert self.twin.process(e) is None
                assert self.state.fingerprint() == before

    def feed(self, event: Event) -> None:
        out = self.live.process(event)
        twin = self.twin.process(event)
        # The idle-cycle memo is invisible: the memo-free twin derives exactly the same events.
        assert out == twin, (event, out, twin)
        assert out is not None
        self.journal.append(event)
        self.journal.extend(out)
        for replay in self.replays:
            for e in (event, *out):
                replay.add(e)
            replay.flush()
        self.observe(event, out)
        if not self.thrash:  # the no-thrash property checks only that rule, to shrink fast
            self.check()
            if isinstance(event, ClockTicked) and event.cycle:
                self.check_no_idle_gpus(out)

    # -- bookkeeping from events ----------------------------------------------------------------

    def _end(self, wid: str, at: int) -> None:
        start, gpus, allocated, _, _ = self.runs.pop(wid)
        if allocated:
            self.charged[self.contract[wid].budget] += gpus * (at - start)

    def observe(self, event: Event, out: list[Event]) -> None:
        rejected = any(isinstance(d, InputRejected) and d.cause == event.id for d in out)
        if isinstance(event, WorkloadSubmitted) and not out:
            self.contract.setdefault(event.workload, event)
        if isinstance(event, (WorkloadFinished, WorkloadCancelled)) and not rejected \
                and event.workload in self.runs:
            self._end(event.workload, event.at)
        started_here = {d.workload: d for d in out if isinstance(d, WorkloadStarted)}
        fair_share: set[tuple[str, str, int]] = set()
        for d in out:
            if isinstance(d, WorkloadStarted):
                c = self.contract[d.workload]
                assert d.workload not in self.runs, f"{d.workload} started twice"
                assert d.allocated == (c.min_runtime_s > 0)
                full = d.at + c.min_runtime_s
                if self.borrowed_protection_s is None:
                    assert d.protected_until == full
                else:  # a borrowed start is protected at most borrowed_protection_s
                    assert d.protected_until in (
                        full, d.at + min(c.min_runtime_s, self.borrowed_protection_s)), d
                assert sum(s.gpus for s in d.placement) == c.gpus
                assert len({s.host for s in d.placement}) == c.hosts
                self.runs[d.workload] = (d.at, c.gpus, d.allocated, d.protected_until,
                                         frozenset(s.host for s in d.placement))
            elif isinstance(d, WorkloadPreempted):
                assert d.workload in self.runs, f"{d.workload} preempted while not running"
                _, _, allocated, until, hosts = self.runs[d.workload]
                if d.reason == "host_failure":
                    # Protection yields only to a host failure, in reaction to that very fault.
                    assert isinstance(event, HostFaulted) and event.severity == "failed"
                    assert d.by == event.host
                if d.reason in ("host_failure", "host_drain"):
                    assert d.by in hosts, (d, hosts)
                else:
                    # No protected workload is preempted before its minimum runtime.
                    assert until is not None and d.at >= until, (d, until)
                if d.reason == "reclaim_unallocated":
                    assert not allocated
                if d.reason in ("fair_share", "priority", "reclaim_unallocated", "reclaim"):
                    assert d.by in started_here, d
                    victim, preemptor = self.contract[d.workload], self.contract[d.by]
                    if d.reason == "priority":
                        assert victim.budget == preemptor.budget
                        assert victim.priority < preemptor.priority
                    if d.reason == "reclaim":
                        assert victim.budget != preemptor.budget
                    if d.reason == "fair_share":
                        assert victim.budget != preemptor.budget
                        fair_share.add((d.workload, d.by, started_here[d.by].protected_until))
                self._end(d.workload, d.at)
        if isinstance(event, ClockTicked) and self.thrash and event.cycle:
            self.check_no_thrash(event, out)
            self.prev_fair_share = fair_share
        elif isinstance(event, (WorkloadFinished, WorkloadCancelled, HostFaulted)):
            self.prev_fair_share = set()

    def check_no_thrash(self, event: ClockTicked, out: list[Event]) -> None:
        """A fair-share victim never takes its preemptor's GPUs back in the next cycle ...

        ... as long as nothing but the preemptor's own run changed the usage the two
        compare: no finish, cancel or fault in between (those reset the record), and,
        in this cycle, no other allocated work starting or stopping on either side of
        the level where their paths part before the victim's turn. (A repair, say,
        lets the preemptor's allocation start other work first; its commitment can
        legitimately make that side the more used one.)
        """
        back = {(v, p) for v, p, until in self.prev_fair_share if event.at <= until}
        if not back:
            return
        moved: list[str] = []  # leaves whose allocated work started or stopped so far
        for d in out:
            if isinstance(d, WorkloadPreempted) and d.reason == "fair_share" \
                    and (d.by, d.workload) in back:
                x, y = _sides(self.contract[d.workload].budget, self.contract[d.by].budget)
                assert any(_under(leaf, x) or _under(leaf, y) for leaf in moved), \
                    f"thrash at {event.at}: {d.by} took back from {d.workload}"
            started_alloc = isinstance(d, WorkloadStarted) and d.allocated
            # (a stop by the old victim itself is its taking back, not a change)
            stopped_alloc = isinstance(d, WorkloadPreempted) \
                and self.contract[d.workload].min_runtime_s > 0 \
                and not any(v == d.by for v, _ in back)
            if started_alloc or stopped_alloc:
                moved.append(self.contract[d.workload].budget)

    def check_no_idle_gpus(self, out: list[Event]) -> None:
        """After a cycle no healthy, unreserved host has g free GPUs while a single-host
        workload of at most g GPUs waits (one preempted in this very cycle restarts at the
        next: a requeued victim is not offered the GPUs of the cycle that stopped it)."""
        st_ = self.state
        now = st_.now
        wl = st_.workloads
        reserved = {h for wid, (hosts, until, _) in st_.reservations.items()
                    if until > now and wl.all[wid].status == "pending" for h in hosts}
        just_stopped = {d.workload for d in out if isinstance(d, WorkloadPreempted)}
        most = max((h.free for name, h in st_.cluster_state.hosts.items()
                    if h.health == "ok" and name not in reserved), default=0)
        waiting = [w for q in (*wl.pending.values(), *wl.pending_free.values()) for _, w in q
                   if w.hosts == 1 and w.id not in just_stopped]
        fits = [w.id for w in waiting if w.gpus <= most]
        assert not fits, f"at {now}: {most} GPUs free on a host while {fits} wait"

    # -- invariants -------------------------------------------------------------------------------

    def check(self) -> None:
        st_ = self.state
        now = st_.now
        # No GPU is double-booked, and Host.free agrees with the running placements.
        per_host: dict[str, dict[str, int]] = defaultdict(dict)
        for w in st_.workloads.running.values():
            assert w.placement, w
            for host, gpus in w.placement:
                per_host[host][w.id] = gpus
        for name, h in st_.cluster_state.hosts.items():
            used = sum(per_host[name].values())
            assert used <= h.gpus, (name, per_host[name])
            assert h.free == h.gpus - used, (name, h.free, per_host[name])
            assert h.workloads == per_host[name], (name, h.workloads, per_host[name])
        assert set(per_host) <= set(st_.cluster_state.hosts)
        assert st_.cluster_state.usable_free == sum(st_.cluster_state.usable.values())
        assert set(st_.workloads.running) == set(self.runs)
        # The indexes the projection keeps equal what they index, recomputed.
        wl = st_.workloads
        assert wl.protection_ends == sorted(w.protected_until for w in wl.running.values()
                                            if w.protected_until is not None)
        assert wl.queue == sorted([item for queues in (wl.pending, wl.pending_free)
                                   for q in queues.values() for item in q], key=lambda i: i[0])
        # Total charge == allocated run time, leaf by leaf, computed from the events alone.
        expected = dict(self.charged)
        for wid, (start, gpus, allocated, _, _) in self.runs.items():
            if allocated:
                leaf = self.contract[wid].budget
                expected[leaf] = expected.get(leaf, 0) + gpus * (now - start)
        for leaf in LEAVES:
            assert st_.usage.lifetime(leaf, now) == expected.get(leaf, 0), leaf
        assert sum(st_.usage.lifetime(leaf, now) for leaf in LEAVES) == sum(expected.values())
        # Unallocated work is never charged.
        assert st_.usage.lifetime(FREE_LEAF, now) == 0
        assert st_.usage.usage(FREE_LEAF, now) == 0
        # Folding the recorded log twice gives the live engine's fingerprint.
        live_print = st_.fingerprint()
        assert self.twin.state.fingerprint() == live_print
        assert [r.engine.state.fingerprint() for r in self.replays] == [live_print, live_print]
        # decide() is pure.
        first = decide(st_, "probe")
        assert decide(st_, "probe") == first
        assert st_.fingerprint() == live_print


def _run(config: dict[str, Any], steps: list[tuple[Any, ...]], thrash: bool = False) -> None:
    run = Run(config, thrash=thrash)
    for op in steps:
        run.op(op)
    # The tail: more cycles with time passing, still checked step by step.
    for op in (("next",), ("tick", 300), ("next",), ("tick", 3600), ("tick", 8 * 3600)):
        run.op(op)
    # And the whole log, folded from scratch twice, once more.
    for _ in range(2):
        assert fold_log(run.journal).state.fingerprint() == run.state.fingerprint()


@SETTINGS
@given(config=configs, steps=ops)
def test_invariants_hold_after_every_step(config, steps):
    """Random valid sequences of submits, finishes, cancels, faults, repairs, duplicates and ticks keep every core invariant."""
    _run(config, steps)


@SETTINGS
@given(config=configs, steps=churn_ops)
def test_invariants_hold_while_hosts_join_and_leave(config, steps):
    """The same invariants hold when idle hosts are removed and new hosts are added along the way."""
    _run(config, steps)


def _sides(a: str, b: str) -> tuple[str, str]:
    """The two nodes where the paths of leaves ``a`` and ``b`` part."""
    pa, pb = a.split("/"), b.split("/")
    i = 0
    while i < min(len(pa), len(pb)) and pa[i] == pb[i]:
        i += 1
    return "/".join(pa[: i + 1]), "/".join(pb[: i + 1])


def _under(leaf: str, node: str) -> bool:
    return leaf == node or leaf.startswith(node + "/")


_SUBMIT_1 = ("submit", "lab/p1/x", (1, 1), 0, False, 0)


@SETTINGS
@given(config=configs, steps=ops)
# Found alone (and missed in the suite, see _import_every_project_module): after a
# repair, x starts other work before y's turn, and y may then take its gang back.
@example(
    config={"hosts": [None] * 4, "fair_share_period_s": 1, "preemption_searches": 1,
            "reservations": 1, "queue_depth": 64},
    steps=[_SUBMIT_1] * 11 + [
        ("submit", "lab/p1/x", (16, 2), 1, True, 0), ("tick", 1), _SUBMIT_1, _SUBMIT_1,
        ("submit", "lab/p1/x", (8, 1), 300, False, 0), ("submit", "lab/p1/y", (1, 1), 1800, False, 0),
        ("fault", 0, "degraded"), _SUBMIT_1, ("submit", "lab/p1/x", (1, 1), 3600, False, 0),
        ("submit", "lab/p1/y", (16, 2), 1, True, 0), ("tick", 299), ("tick", 1), ("next",),
        ("repair", 0)],
)
def test_no_thrash(config, steps):
    """A fair-share victim never preempts its preemptor in the next cycle, while only the preemptor's own run changed usage."""
    _run(config, steps, thrash=True)
