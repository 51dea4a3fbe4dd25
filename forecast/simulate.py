"""A forecast: when will a pending workload start, simulated forward from a state with the same core.

``forecast(engine, workload, now, assumptions)`` copies the engine (through its
snapshot, so the caller's state is never touched), then plays the world
forward the way the simulator does, under stated assumptions:

- running work ends at its start plus its ``expected_duration_s``; work past
  that, or without one, ends ``overrun_s`` from now, or at start plus
  ``assumed_runtime_s`` (``Assumptions``);
- work the forecast starts ends the same way, from its own start;
- nothing new arrives, nobody cancels, no host fails (the forecast is what the
  queue as it stands implies);
- cycles run when something finishes and when a protection ends.

It stops when the workload starts, at ``horizon_s``, or after ``max_cycles``
simulated cycles when set (status ``unfinished``: it starts no earlier than
``simulated_until``; a bound on the work, counted in cycles, not wall time, so
the answer stays a pure function of the state). A workload the cluster as it
stands cannot hold (fewer healthy hosts of its size than its gang: a forecast
repairs nothing) is answered ``beyond_horizon`` at once, ``unplaceable``
saying why, without simulating the horizon through. It returns the
estimated start, where it would run, and what it waits on: the explanation's
blocker at ``now`` (``scheduler.explain``) and the running workloads whose
expected ends free the hosts it starts on. Pure: no I/O, no wall clock.

``forecast_many(state, workload_ids)`` answers several workloads from one
forward simulation (continued until the last of them starts): each answer is
the one ``forecast`` gives for that workload alone. ``allot queue --forecast``
and the dashboard use it through ``forecast.live``.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

import msgspec

from events import ClockTicked, WorkloadFinished, WorkloadPreempted, WorkloadStarted
from events.errors import AllotError
from projections.cluster import OK
from projections.workloads import PENDING
from scheduler import Engine
from scheduler.explain import UnknownWorkload, explain
from scheduler.snapshot import snapshot_state
from scheduler.state import State


class ForecastError(AllotError, ValueError):
    """No forecast can be made (an unknown workload, one that is not pending)."""


class Assumptions(msgspec.Struct, frozen=True, kw_only=True):
    """What the forecast assumes about the future (stated in every answer)."""

    assumed_runtime_s: int = 4 * 3600   # run time of work with no expected duration
    overrun_s: int = 600                # work past its expected duration ends this long from now
    horizon_s: int = 14 * 86_400        # look this far ahead at most
    max_cycles: int = 0                 # simulate at most this many cycles (0: no bound)
    arrivals: bool = False              # new submissions (none: the queue as it stands)


class Forecast(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The estimated start of one workload and what it waits on."""

    workload: str
    now: int
    # "pending" | "running" (already started) | "beyond_horizon" | "unfinished" (max_cycles)
    status: str
    start: int | None = None         # estimated start (trusted Unix seconds)
    wait_s: int | None = None        # start - now
    placement: tuple[str, ...] = ()  # hosts it would start on
    blocked_by: str | None = None    # why it does not start now (scheduler.explain)
    waits_for: tuple[str, ...] = ()  # running workloads whose ends free its hosts
    ahead: int = 0                   # workloads the forecast starts before it
    cycles: int = 0                  # cycles simulated
    assumptions: Assumptions = Assumptions()
    simulated_until: int | None = None  # "unfinished": the simulation stopped here, not started
    # "beyond_horizon" proven without simulating: the cluster as it stands cannot hold it
    unplaceable: str | None = None


def _end_of(w: object, start: int, now: int, a: Assumptions) -> int:
    expected = getattr(w, "expected_duration_s", None)
    end = start + expected if expected else start + a.assumed_runtime_s
    return end if end > now else now + a.overrun_s


def forecast(engine: Engine, workload: str, now: int | None = None,
             assumptions: Assumptions | None = None) -> Forecast:
    """Simulate forward from ``engine``'s state until ``workload`` starts (see module docstring)."""
    return forecast_many(engine.state, (workload,), now, assumptions)[workload]


def forecast_many(state0: State, workloads: Iterable[str], now: int | None = None,
                  assumptions: Assumptions | None = None, blocked: bool = True,
                  copy: bool = True, shortcuts: bool = True) -> dict[str, Forecast]:
    """The forecasts of several workloads from one forward simulation of ``state0``.

    The simulation does not depend on which workload is asked about (nothing is
    steered towards it), so one run, continued until every target has started
    or the horizon is reached, answers each exactly as ``forecast`` would: its
    start, the starts ahead of it and the cycles simulated are read off at the
    moment it starts. ``blocked=False`` leaves out ``blocked_by`` (one traced
    cycle per workload: ``allot queue`` has its own "waits for"). ``copy=False``:
    ``state0`` is the caller's own copy and the simulation runs on it (it is
    consumed; the state API restores a snapshot taken under the worker's lock).
    Raises ``ForecastError`` for an unknown workload or one that is neither
    pending nor running. ``shortcuts=False`` is the plain twin the tests compare
    with: every pending workload is simulated, none answered by ``unplaceable``.
    """
    a = assumptions or Assumptions()
    ids = list(dict.fromkeys(workloads))
    now = state0.now if now is None else max(now, state0.now)
    out: dict[str, Forecast] = {}
    targets: dict[str, str | None] = {}     # pending workload -> its blocker now
    for wid in ids:
        w0 = state0.workloads.all.get(wid)
        if w0 is None:
            raise ForecastError(f"no workload {wid!r}")
        if w0.status == PENDING:
            try:
                targets[wid] = explain(state0, wid).blocked_by if blocked else None
            except UnknownWorkload:  # pragma: no cover - checked above
                targets[wid] = None
        elif w0.started_at is not None and w0.status == "running":
            out[wid] = Forecast(workload=wid, now=now, status="running", start=w0.started_at,
                                wait_s=0, placement=tuple(h for h, _ in w0.placement),
                                assumptions=a)
        else:
            raise ForecastError(f"{wid!r} is {w0.status}, not pending")
    for wid in list(targets) if shortcuts else ():
        why = unplaceable(state0, wid)
        if why is not None:
            out[wid] = Forecast(workload=wid, now=now, status="beyond_horizon",
                                blocked_by=targets.pop(wid), assumptions=a, unplaceable=why)
    if targets:
        out.update(_simulate(state0, copy, targets, now, a))
    return {wid: out[wid] for wid in ids}


def unplaceable(state: State, workload: str) -> str | None:
    """Why ``workload`` can never start in a forecast from ``state``, or None if it may.

    A gang needs ``hosts`` distinct healthy hosts of at least ``gpus_per_host``
    GPUs each (scheduler/policy/placement.py). A forecast feeds no repairs and
    no new hosts, so the healthy hosts never grow: with fewer than that now,
    the simulation could only run to its horizon to say so ("beyond_horizon").
    """
    w = state.workloads.all[workload]
    hosts = state.cluster_state.hosts
    ok = sum(1 for h in hosts.values() if h.health == OK and h.gpus >= w.gpus_per_host)
    if ok >= w.hosts:
        return None
    return (f"needs {w.hosts} healthy host(s) with {w.gpus_per_host} GPUs; the cluster has {ok} "
            f"and a forecast assumes no repairs")


def _simulate(state0: State, copy: bool, targets: dict[str, str | None], now: int,
              a: Assumptions) -> dict[str, Forecast]:
    """Play the world forward from ``state0`` (a copy of it unless ``copy`` is False) until every
    target starts, or the horizon."""
    if copy:
        eng = Engine.restore(snapshot_state(state0))
    else:
        eng = Engine()
        eng.state = state0
    state = eng.state
    cluster = state.cluster
    heap: list[tuple[int, int, str]] = []   # (time, kind 0 finish / 1 cycle, workload)
    holders: dict[str, str] = {}            # host -> last running workload seen leaving it
    # The expected end of each workload's current run: a run preempted inside the
    # forecast leaves its finish on the heap, and a later run of the same workload
    # must not end there (only the entry equal to this one finishes it).
    ends: dict[str, int] = {}

    def will_end(wid: str, at: int) -> None:
        ends[wid] = at
        heapq.heappush(heap, (at, 0, wid))

    for w in state.workloads.running.values():
        will_end(w.id, _end_of(w, w.started_at or now, now, a))
    for t in state.workloads.protection_ends:
        if t > now:
            heapq.heappush(heap, (t, 1, ""))
    n = 0

    def feed(e: object) -> list:
        out = eng.process(e)  # type: ignore[arg-type]
        return out or []

    def ident() -> str:
        nonlocal n
        n += 1
        return f"forecast-{n}"

    done: dict[str, Forecast] = {}
    cycles = 0
    ahead = 0
    limit = now + a.horizon_s
    # First, a cycle now: it may start at once (the live cycle has not run yet).
    t = now
    pending_ticks = [(now, True)]
    while True:
        for at, cycle in pending_ticks:
            if at > state.now or cycle:
                derived = feed(ClockTicked(id=ident(), at=at, cluster=cluster, actor="forecast",
                                           source="forecast", cycle=cycle))
                cycles += cycle
                for d in derived:
                    if type(d) is WorkloadStarted:
                        wid = d.workload
                        if wid in targets and wid not in done:
                            hosts = tuple(s.host for s in d.placement)
                            done[wid] = Forecast(
                                workload=wid, now=now, status="pending", start=at,
                                wait_s=at - now, placement=hosts, blocked_by=targets[wid],
                                waits_for=tuple(sorted({holders[h] for h in hosts
                                                        if h in holders})),
                                ahead=ahead, cycles=cycles, assumptions=a)
                            if len(done) == len(targets):
                                return done
                        # Every start counts as one ahead of the targets still waiting (a
                        # target that started counts for the others, as it would alone), and
                        # runs on like any other.
                        ahead += 1
                        will_end(wid, _end_of(state.workloads.all[wid], at, at, a))
                        if d.protected_until is not None and d.protected_until > at:
                            heapq.heappush(heap, (d.protected_until, 1, ""))
                    elif type(d) is WorkloadPreempted and d.requeued:
                        heapq.heappush(heap, (at + 1, 1, ""))
        if a.max_cycles and cycles >= a.max_cycles and heap and heap[0][0] <= limit:
            for wid, why in targets.items():
                if wid not in done:
                    done[wid] = Forecast(workload=wid, now=now, status="unfinished",
                                         blocked_by=why, ahead=ahead, cycles=cycles,
                                         assumptions=a, simulated_until=state.now)
            return done
        if not heap or heap[0][0] > limit:
            for wid, why in targets.items():
                if wid not in done:
                    done[wid] = Forecast(workload=wid, now=now, status="beyond_horizon",
                                         blocked_by=why, ahead=ahead, cycles=cycles,
                                         assumptions=a)
            return done
        t = heap[0][0]
        due = []
        while heap and heap[0][0] == t:
            due.append(heapq.heappop(heap))
        if t > state.now:
            feed(ClockTicked(id=ident(), at=t, cluster=cluster, actor="forecast",
                             source="forecast", cycle=False))
        for _, kind, wid in due:
            if kind == 0:
                leaving = state.workloads.running.get(wid)
                if leaving is None or ends.get(wid) != t:
                    continue  # (ended already, or this entry was an earlier run's end)
                for h, _ in leaving.placement:
                    holders[h] = wid
                feed(WorkloadFinished(id=ident(), at=t, cluster=cluster, actor="executor",
                                      source="forecast", workload=wid))
        pending_ticks = [(t, True)]


def forecast_for(engine: Engine, workload_id: str, now: int | None = None) -> Forecast:
    """The forecast of ``workload_id`` with the default assumptions (for the dashboard and queue)."""
    return forecast(engine, workload_id, now)


__all__ = ["Assumptions", "Forecast", "ForecastError", "forecast", "forecast_for", "forecast_many",
           "unplaceable"]
