"""HostFreeTimes advanced over starts and stops (``HostFreeTimes.advanced``) are ``host_frees`` made afresh.

Reservation planning reads, per host, when the work there stops being
protected (``scheduler.policy.reservations.host_frees``). The state keeps that in its
memo and, after starts and stops on the same host set, remakes only the lists
of the hosts the moved workloads were or are on. These tests compare every
advanced result with a fresh ``host_frees`` (the same lists: the same entries,
the same workload objects, in the same order) and with a fresh build of the
sums and hosts per workload beside them: after random sequences of starts,
stops, faults and new hosts folded straight into a state, and in whole
scenarios. They check that advancing really happened (so the comparison proves
something), that a mutant which skips it is caught, and that the logs are the
same when every list is made afresh.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sim_helpers import shipped_log

from events import Slot, WorkloadPreempted, WorkloadStarted
from events.factory import Inputs
from scheduler.index.host_free_times import HostFreeTimes
from scheduler.policy.reservations import host_frees
from scheduler.state import State

SETTINGS = settings(max_examples=150, deadline=None, derandomize=True, database=None)

# (hosts, GPUs per host, minimum runtime): unallocated work, single hosts, gangs.
SHAPES = ((1, 1, 0), (1, 2, 600), (1, 4, 60), (1, 8, 3600), (2, 8, 600), (3, 4, 0), (2, 2, 1800))


class Seen:
    def __init__(self) -> None:
        self.advanced = 0
        self.redone = 0  # advanced frees that made at least one list again
        self.gaps = 0    # frees too far behind the journal to advance
        self.wrong: list[int] = []        # times where anything differed
        self.wrong_lists: list[int] = []  # ... where the lists themselves did


def _lists(frees: HostFreeTimes) -> dict[str, object]:
    """The ``host_frees`` lists ``frees`` holds, per host."""
    return {h: listed for h, (_, listed) in frees.per_host.items()}


def _view(frees: HostFreeTimes) -> tuple[object, ...]:
    on = {wid: sorted(hosts) for wid, hosts in frees.on.items()}
    return _lists(frees), {h: n for h, (n, _) in frees.per_host.items()}, sorted(on.items())


def _check(state: State, frees: HostFreeTimes, seen: Seen) -> None:
    """``frees`` against ``host_frees`` and a fresh build, for ``state``."""
    fresh = HostFreeTimes.build(state, frees.world)
    if _lists(frees) != host_frees(state.cluster_state.hosts, state.workloads.running):
        seen.wrong_lists.append(state.now)
    if seen.wrong_lists or _view(frees) != _view(fresh) \
            or frees.running_version != state.workloads.running_version:
        seen.wrong.append(state.now)


def _watch(monkeypatch: pytest.MonkeyPatch) -> Seen:
    seen = Seen()
    advanced = HostFreeTimes.advanced

    def checked(self: HostFreeTimes, state: State) -> HostFreeTimes | None:
        behind = state.workloads.running_version - self.running_version
        made = advanced(self, state)
        if made is None:
            seen.gaps += behind > len(state.workloads.moves)
            return None
        seen.advanced += 1
        seen.redone += any(made.per_host[h] is not self.per_host[h] for h in made.per_host)
        _check(state, made, seen)
        return made

    monkeypatch.setattr(HostFreeTimes, "advanced", checked)
    return seen


# -- random moves folded into a state ------------------------------------------------------


class Moves:
    """A state fed starts, stops and host changes directly (no cycle), with frees asked now and then."""

    def __init__(self, hosts: int) -> None:
        self.I = Inputs()
        self.state = State()
        self.n = 0
        self.now = 0
        for path in ("lab", "lab/a", "lab/b"):
            self.state.apply(self.I.node(path))
        for i in range(hosts):
            self.state.apply(self.I.host(f"h{i}", gpus=8 if i % 3 else 4))

    def _derived(self) -> dict[str, Any]:
        self.n += 1
        return {"id": f"d{self.n}", "at": self.now, "cause": "e0"}

    def op(self, op: tuple[Any, ...]) -> None:
        kind = op[0]
        state = self.state
        wl = state.workloads
        cs = state.cluster_state
        if kind == "start":
            _, (hosts, per, min_runtime), leaf, pick, protected = op
            self.n += 1
            wid = f"w{self.n}"
            state.apply(self.I.submit(wid, leaf, hosts * per, min_runtime, at=self.now,
                                      hosts=hosts, gpus_per_host=per))
            room = sorted(h for h, f in cs.usable.items() if f >= per)
            if len(room) < hosts:
                return
            first = pick % len(room)
            chosen = [room[(first + i) % len(room)] for i in range(hosts)]
            allocated = min_runtime > 0
            until = None if allocated and not protected else self.now + min_runtime
            state.apply(WorkloadStarted(**self._derived(), workload=wid, allocated=allocated,
                                        protected_until=until,
                                        placement=tuple(Slot(host=h, gpus=per) for h in chosen)))
        elif kind == "stop":
            running = sorted(wl.running)
            if running:
                wid = running[op[1] % len(running)]
                state.apply(WorkloadPreempted(**self._derived(), workload=wid, reason="priority",
                                              requeued=op[2]))
        elif kind == "restart":  # a requeued workload started again, elsewhere
            pending = sorted(w.id for w in wl.all.values() if w.status == "pending")
            if pending:
                w = wl.all[pending[op[1] % len(pending)]]
                room = sorted(h for h, f in cs.usable.items() if f >= w.gpus_per_host)
                if len(room) >= w.hosts:
                    state.apply(WorkloadStarted(
                        **self._derived(), workload=w.id, allocated=w.min_runtime_s > 0,
                        protected_until=self.now + w.min_runtime_s,
                        placement=tuple(Slot(host=h, gpus=w.gpus_per_host)
                                        for h in room[-w.hosts:])))
        elif kind == "finish":
            running = sorted(wl.running)
            if running:
                state.apply(self.I.finish(running[op[1] % len(running)], at=self.now))
        elif kind == "time":
            self.now += op[1]
        elif kind == "fault":
            state.apply(self.I.fault(sorted(cs.hosts)[op[1] % len(cs.hosts)], at=self.now))
        elif kind == "add":
            state.apply(self.I.host(f"n{self.n}", at=self.now))
            self.n += 1


OPS = {
    "start": st.tuples(st.just("start"), st.sampled_from(SHAPES), st.sampled_from(["lab/a", "lab/b"]),
                       st.integers(0, 20), st.booleans()),
    "stop": st.tuples(st.just("stop"), st.integers(0, 40), st.booleans()),
    "restart": st.tuples(st.just("restart"), st.integers(0, 40)),
    "finish": st.tuples(st.just("finish"), st.integers(0, 40)),
    "time": st.tuples(st.just("time"), st.integers(1, 900)),
    "fault": st.tuples(st.just("fault"), st.integers(0, 10)),
    "add": st.tuples(st.just("add")),
    "ask": st.tuples(st.just("ask")),  # a cycle plans a reservation: the frees are read
}
KINDS = ["start"] * 6 + ["stop"] * 2 + ["restart", "finish", "finish", "time"] + ["ask"] * 3 + [
    "fault", "add"]
ops = st.lists(st.sampled_from(KINDS).flatmap(OPS.__getitem__), min_size=10, max_size=120)


@SETTINGS
@given(hosts=st.integers(2, 7), ops=ops)
def test_frees_advanced_over_random_moves_are_made_afresh(hosts: int, ops: list[tuple[Any, ...]]) -> None:
    run = Moves(hosts)
    seen = Seen()
    advanced = HostFreeTimes.advanced
    for op in ops:
        if op[0] != "ask":
            run.op(op)
            continue
        state = run.state
        before = state.memos.frees
        frees = HostFreeTimes.of(state)
        if isinstance(before, HostFreeTimes) and before.world == frees.world \
                and before.running_version != frees.running_version:
            seen.advanced += 1
            assert advanced(before, state) is not None  # (the journal reaches back here)
        _check(state, frees, seen)
        assert not seen.wrong, (op, seen.wrong)


def test_random_moves_advance_often() -> None:
    """The property above compares advanced frees, not only fresh builds."""
    run = Moves(5)
    counts = Seen()
    for i in range(400):
        run.op(("start", SHAPES[i % len(SHAPES)], "lab/a", i * 7, i % 5 != 0))
        if i % 3 == 0:
            run.op(("stop", i, i % 2 == 0))
        if i % 4 == 0:
            run.op(("restart", i))
        run.op(("time", 60))
        if i % 2:
            before = run.state.memos.frees
            frees = HostFreeTimes.of(run.state)
            counts.advanced += isinstance(before, HostFreeTimes) and before.world == frees.world \
                and before.running_version != frees.running_version
            _check(run.state, frees, counts)
    assert not counts.wrong
    assert counts.advanced > 100


# -- whole scenarios -------------------------------------------------------------------


@pytest.mark.parametrize(("name", "days", "least"), [("ai2-month", 4.0, 50),
                                                     ("ai2-month-heavy", 2.0, 100),
                                                     ("demo", None, 100)])
def test_advanced_frees_equal_host_frees_in_scenarios(name: str, days: float | None, least: int,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _watch(monkeypatch)
    shipped_log(name, days)
    assert not seen.wrong, seen.wrong[:5]
    assert seen.advanced >= least
    assert seen.redone > seen.advanced // 2


def test_frees_that_ignore_the_journal_are_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A mutant that only moves the version forward (no list made again) must disagree with a fresh one."""

    def stale(self: HostFreeTimes, state: State) -> HostFreeTimes | None:
        return HostFreeTimes(self.per_host, self.on, state.workloads.running_version, self.world)

    monkeypatch.setattr(HostFreeTimes, "advanced", stale)
    seen = _watch(monkeypatch)
    shipped_log("demo")
    assert seen.wrong_lists


def test_frees_that_forget_where_stopped_work_was_are_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A mutant that remakes only the hosts moved work is on now (not where it was) must disagree."""
    advanced = HostFreeTimes.advanced

    def forgetful(self: HostFreeTimes, state: State) -> HostFreeTimes | None:
        return advanced(HostFreeTimes(self.per_host, {}, self.running_version, self.world), state)

    monkeypatch.setattr(HostFreeTimes, "advanced", forgetful)
    seen = _watch(monkeypatch)
    shipped_log("demo")
    assert seen.wrong_lists


def test_the_log_is_the_same_when_every_frees_is_made_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    kept = shipped_log("ai2-month-heavy", 1.0)
    monkeypatch.setattr(HostFreeTimes, "advanced", lambda self, state: None)
    assert shipped_log("ai2-month-heavy", 1.0) == kept


def test_frees_behind_the_journal_are_made_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("projections.workloads.MOVES_KEPT", 4)
    seen = _watch(monkeypatch)
    shipped_log("demo")
    assert seen.gaps > 0
    assert seen.advanced > 0
    assert not seen.wrong
