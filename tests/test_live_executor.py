"""The executor's fold of the journal (pure) and the simulated executor over Kafka."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from events import InputRejected, Slot, WorkloadFinished, WorkloadPreempted, WorkloadStarted
from events.factory import Inputs
from events.limits import INPUT_ID_PATTERN
from simulator.driver import Simulation
from simulator.scenario import load_scenario, with_overrides
from streams.executor import ExecutorBook, feed, finish_id

REPO = Path(__file__).resolve().parent.parent
T = 1_000_000


def _start(tick_id: str, at: int, workload: str, n: int = 1) -> WorkloadStarted:
    return WorkloadStarted(id=f"{tick_id}/{n}", at=at, cluster="c", cause=tick_id,
                           workload=workload, placement=(Slot(host="h0", gpus=1),),
                           allocated=True, protected_until=at + 60)


def _preempt(tick_id: str, at: int, workload: str, requeued: bool = True) -> WorkloadPreempted:
    return WorkloadPreempted(id=f"{tick_id}/1", at=at, cluster="c", cause=tick_id,
                             workload=workload, reason="fair_share", requeued=requeued)


def _run(book: ExecutorBook, events: list) -> list[tuple[str, int, int]]:
    return [(f.workload, f.run, f.due_at) for f in feed(book, events)]


def test_a_run_is_reported_once_its_duration_has_passed() -> None:
    mk = Inputs("c", prefix="i")
    t0 = mk.tick(T)
    ev = [mk.submit("w", "lab/a", gpus=1, min_runtime_s=60, at=T, expected_duration_s=100), t0,
          _start(t0.id, T, "w"), mk.tick(T + 99), mk.tick(T + 100), mk.tick(T + 101),
          mk.tick(T + 102)]
    book = ExecutorBook("c")
    assert _run(book, ev) == [("w", 1, T + 100)]


def test_a_stop_in_the_same_cycle_wins_over_the_finish() -> None:
    """The tick that makes the run due also preempts it: nothing is reported."""
    mk = Inputs("c", prefix="i")
    t0, t1 = mk.tick(T), mk.tick(T + 100)
    ev = [mk.submit("w", "lab/a", gpus=1, min_runtime_s=60, at=T, expected_duration_s=100), t0,
          _start(t0.id, T, "w"), t1, _preempt(t1.id, T + 100, "w"), mk.tick(T + 101)]
    assert _run(ExecutorBook("c"), ev) == []


def test_a_resumable_workload_keeps_its_progress_across_a_preemption() -> None:
    mk = Inputs("c", prefix="i")
    t0, t1, t2 = mk.tick(T), mk.tick(T + 40), mk.tick(T + 500)
    ev = [mk.submit("w", "lab/a", gpus=1, min_runtime_s=10, at=T, expected_duration_s=100,
                    resumable=True),
          t0, _start(t0.id, T, "w"), t1, _preempt(t1.id, T + 40, "w"),
          t2, _start(t2.id, T + 500, "w"), mk.tick(T + 559), mk.tick(T + 560), mk.tick(T + 561)]
    assert _run(ExecutorBook("c"), ev) == [("w", 2, T + 560)]


def test_a_workload_that_cannot_resume_starts_over() -> None:
    mk = Inputs("c", prefix="i")
    t0, t1, t2 = mk.tick(T), mk.tick(T + 40), mk.tick(T + 500)
    ev = [mk.submit("w", "lab/a", gpus=1, min_runtime_s=10, at=T, expected_duration_s=100),
          t0, _start(t0.id, T, "w"), t1, _preempt(t1.id, T + 40, "w"),
          t2, _start(t2.id, T + 500, "w"), mk.tick(T + 560), mk.tick(T + 600), mk.tick(T + 601)]
    assert _run(ExecutorBook("c"), ev) == [("w", 2, T + 600)]


@pytest.mark.parametrize(("rejected", "want"), [(True, [("w", 1, T + 100)]), (False, [])])
def test_only_an_accepted_cancel_stops_the_run(rejected: bool, want: list) -> None:
    mk = Inputs("c", prefix="i")
    t0 = mk.tick(T)
    cancel = mk.cancel("w", actor="mallory", at=T + 10)
    ev = [mk.submit("w", "lab/a", gpus=1, min_runtime_s=60, at=T, expected_duration_s=100), t0,
          _start(t0.id, T, "w"), cancel]
    if rejected:
        ev.append(InputRejected(id=f"{cancel.id}/1", at=T + 10, cluster="c", cause=cancel.id,
                                reason="not_authorised"))
    ev += [mk.tick(T + 100), mk.tick(T + 101)]
    assert _run(ExecutorBook("c"), ev) == want


def test_a_restarted_executor_repeats_only_an_unjournaled_finish_with_the_same_id() -> None:
    mk = Inputs("c", prefix="i")
    t0 = mk.tick(T)
    ev = [mk.submit("w", "lab/a", gpus=1, min_runtime_s=60, at=T, expected_duration_s=100), t0,
          _start(t0.id, T, "w"), mk.tick(T + 100), mk.tick(T + 101)]
    first = ExecutorBook("c")
    [sent] = [first.report(f) for f in feed(first, ev)]
    assert sent.id == finish_id("c", "w", 1)
    # Restarted before the report reached the journal: replay, catch up, report it again.
    again = ExecutorBook("c")
    feed(again, ev)
    again.caught_up()
    assert [again.report(f).id for f in feed(again, [mk.tick(T + 102)])] == [sent.id]
    # Restarted after: the journal holds the report, the run ended, nothing to send.
    done = ExecutorBook("c")
    feed(done, [*ev, sent])
    done.caught_up()
    assert feed(done, [mk.tick(T + 102), mk.tick(T + 103)]) == []


def test_under_a_grace_a_preempted_run_is_reported_stopped_once() -> None:
    mk = Inputs("c", prefix="i")
    t0, t1 = mk.tick(T), mk.tick(T + 40)
    for grace, want in ((0, []), (30, [("w", 1)])):
        book = ExecutorBook("c")
        feed(book, [mk.policy(at=T, preemption_grace_s=grace),
                    mk.submit("w", "lab/a", gpus=1, min_runtime_s=10, at=T,
                              expected_duration_s=100),
                    t0, _start(t0.id, T, "w"), t1, _preempt(t1.id, T + 40, "w"), mk.tick(T + 41)])
        assert book.take_stops() == want
        assert book.take_stops() == []
    e = book.stopped_report("w", 1)
    assert (e.workload, e.run_number, e.id) == ("w", 1, finish_id("c", "w", 1) + ":stopped")


def test_work_with_a_command_is_left_to_a_real_executor() -> None:
    """Runs nothing, reports nothing: not its finish, not its stop under a grace."""
    mk = Inputs("c", prefix="i")
    t0, t1 = mk.tick(T), mk.tick(T + 40)
    book = ExecutorBook("c", default_duration_s=10)
    ev = [mk.policy(at=T, preemption_grace_s=30),
          mk.submit("real", "lab/a", gpus=1, min_runtime_s=10, at=T, command=("sleep", "60")),
          mk.submit("sim", "lab/a", gpus=1, min_runtime_s=10, at=T),
          t0, _start(t0.id, T, "real", 1), _start(t0.id, T, "sim", 2),
          t1, _preempt(t1.id, T + 40, "real"), mk.tick(T + 41)]
    assert _run(book, ev) == [("sim", 1, T + 10)]
    assert book.take_stops() == [] and "real" not in book.running


def test_a_run_ends_failed_at_its_time_limit() -> None:
    mk = Inputs("c", prefix="i")
    t0 = mk.tick(T)
    ev = [mk.submit("w", "lab/a", gpus=1, min_runtime_s=10, at=T, expected_duration_s=100,
                    time_limit_s=30), t0, _start(t0.id, T, "w"),
          mk.tick(T + 29), mk.tick(T + 30), mk.tick(T + 31)]
    book = ExecutorBook("c")
    [f] = feed(book, ev)
    assert (f.due_at, f.outcome, f.reason) == (T + 30, "failed", "time_limit")
    assert book.report(f).reason == "time_limit"


@pytest.mark.parametrize("workload", ["w1", "a/b c", "é" * 10, "x" * 300])
def test_finish_ids_are_valid_input_ids(workload: str) -> None:
    fid = finish_id("demo", workload, 3)
    assert re.fullmatch(INPUT_ID_PATTERN, fid)
    assert fid != finish_id("demo", workload, 4)


def test_the_book_reports_exactly_what_the_simulators_executor_did() -> None:
    """Over a simulated journal, every finish the simulator made is due at that very moment."""
    sc = with_overrides(load_scenario(REPO / "scenarios" / "demo.toml"), horizon_days=1.0)
    log = Simulation(sc, "allot", REPO / "scenarios").run().log
    book = ExecutorBook(sc.cluster.id)
    reported: dict[tuple[str, int], int] = {}
    sim_finishes = 0
    for e in log:
        for f in feed(book, [e]):
            reported[(f.workload, f.run)] = f.due_at
        if type(e) is WorkloadFinished:
            sim_finishes += 1
            run = book.runs.get(e.workload)
            assert reported.get((e.workload, run)) == e.at, e
    assert sim_finishes > 50
    assert len(reported) == sim_finishes


# -- over Kafka --------------------------------------------------------------------------------

import time  # noqa: E402
from collections.abc import Iterator  # noqa: E402

from events import ClockTicked, Event  # noqa: E402
from streams.executor import SimulatedExecutor  # noqa: E402
from tests.kafka import Live, unique_prefix, wait_until  # noqa: E402

EX_CLUSTERS = ("ex-run", "ex-restart")


@pytest.fixture(scope="module")
def live(kafka: str) -> Iterator[Live]:
    lv = Live(kafka, unique_prefix()).start()
    lv.start_worker(EX_CLUSTERS, time_scale=20.0, tick_interval_s=0.25)
    try:
        yield lv
    finally:
        lv.close()


def _setup(live: Live, cluster: str) -> Inputs:
    live.wait_event(cluster, lambda e: isinstance(e, ClockTicked), what=f"{cluster}'s first tick")
    mk = Inputs(cluster=cluster, prefix=f"{cluster}-")
    now = int(time.time())
    evs: list[Event] = [mk.node("lab", managers=("admin",), at=now), mk.node("lab/a", at=now),
                        mk.host("h0", gpus=8, at=now)]
    live.send_many(evs)
    return mk


class _Running:
    def __init__(self, live: Live, clusters: tuple[str, ...]) -> None:
        self.live = live
        self.ex = live.bg.run(self._make(clusters))
        self.fut = live.bg.spawn(self.ex.run())
        wait_until(lambda: self.ex.ready.is_set() or self.fut.done(), 60, what="the executor")
        if self.fut.done():
            self.fut.result()

    async def _make(self, clusters: tuple[str, ...]) -> SimulatedExecutor:
        return SimulatedExecutor(self.live.bootstrap, self.live.prefix, clusters)

    def stop(self) -> object:
        self.live.bg.loop.call_soon_threadsafe(self.ex.stop)
        return self.fut.result(30)


def _finishes(live: Live, cluster: str, workload: str) -> list[Event]:
    return [e for e in live.events(cluster) if isinstance(e, WorkloadFinished)
            and e.workload == workload]


def _started(live: Live, cluster: str, workload: str) -> list[WorkloadStarted]:
    return [e for e in live.events(cluster) if isinstance(e, WorkloadStarted)
            and e.workload == workload]


@pytest.mark.kafka
def test_the_simulated_executor_finishes_each_run_after_its_duration(live: Live) -> None:
    mk = _setup(live, "ex-run")
    ex = _Running(live, ("ex-run",))
    try:
        now = int(time.time())
        live.send_many([mk.submit("w1", "lab/a", gpus=4, min_runtime_s=30, at=now,
                                  expected_duration_s=60),
                        mk.submit("w2", "lab/a", gpus=4, min_runtime_s=30, at=now,
                                  expected_duration_s=120)])
        for w in ("w1", "w2"):
            live.wait_event("ex-run", lambda e, w=w: isinstance(e, WorkloadFinished)
                            and e.workload == w, timeout=60, what=f"{w}'s finish")
    finally:
        stats = ex.stop()
    for w, dur in (("w1", 60), ("w2", 120)):
        [start] = _started(live, "ex-run", w)
        [fin] = _finishes(live, "ex-run", w)
        assert fin.at >= start.at + dur
        assert fin.at - (start.at + dur) <= 30  # a few ticks of 5 virtual seconds at most
    assert stats.reported == 2


@pytest.mark.kafka
def test_a_restarted_executor_rebuilds_its_runs_and_reports_once(live: Live) -> None:
    mk = _setup(live, "ex-restart")
    ex = _Running(live, ("ex-restart",))
    live.send(mk.submit("w3", "lab/a", gpus=2, min_runtime_s=10, at=int(time.time()),
                        expected_duration_s=100))
    live.wait_event("ex-restart", lambda e: isinstance(e, WorkloadStarted), timeout=30,
                    what="w3 to start")
    ex.stop()
    time.sleep(100 / 20 + 1)  # the run is due while no executor runs
    assert not _finishes(live, "ex-restart", "w3")
    ex = _Running(live, ("ex-restart",))
    try:
        live.wait_event("ex-restart", lambda e: isinstance(e, WorkloadFinished), timeout=30,
                        what="w3's finish after the restart")
        time.sleep(2)
    finally:
        ex.stop()
    raw = [r for r in live.admitted(live.partition_of("ex-restart"))
           if r.kind == "input" and b'"workload.finished"' in r.value]
    assert len(raw) == 1
