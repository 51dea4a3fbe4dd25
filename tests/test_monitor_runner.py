"""The monitor's loop with a scripted check and publisher: what is committed, what is retried."""

from __future__ import annotations

import asyncio

from events import Event, HostFaulted, HostRepaired
from monitor.checks import Observation
from monitor.hysteresis import MonitorState, Thresholds
from monitor.runner import Monitor, initial_state
from streams.client import Result
from streams.errors import ClientError

LOST = Observation(severity="failed", reasons=("1 of 8 GPUs lost (index 6)",))
OK = Observation()


class Script:
    name = "script"

    def __init__(self, seq: list[Observation]) -> None:
        self.seq = list(seq)

    def run(self) -> Observation:
        return self.seq.pop(0)


class Broken:
    name = "broken"

    def run(self) -> Observation:
        raise RuntimeError("plug-in bug")


def _result(e: Event, status: str = "accepted", reason: str | None = None) -> Result:
    decisions = [{"type": "input.rejected", "reason": reason, "detail": "x"}] if reason else []
    return Result(id=e.id, cluster=e.cluster, inbox_partition=0, inbox_offset=0, status=status,
                  decisions=decisions)


def test_a_lost_publish_is_retried_under_the_same_id_then_committed() -> None:
    sent: list[Event] = []
    answers = ["error", "accepted", "accepted"]

    async def publish(e: Event) -> Result:
        sent.append(e)
        if answers.pop(0) == "error":
            raise ClientError("cannot reach Kafka")
        return _result(e)

    clock = iter(range(0, 1000, 10))
    mon = Monitor("h1", "c", [Script([LOST, LOST, LOST, OK, OK])], publish,
                  thresholds=Thresholds(fault_after=2, repair_after=2, min_interval_s=0),
                  clock=lambda: float(next(clock)))

    async def go() -> list:
        return [await mon.look() for _ in range(5)]

    looks = asyncio.run(go())
    assert [lk.published for lk in looks] == [None, "error", "accepted", None, "accepted"]
    assert [type(e) for e in sent] == [HostFaulted, HostFaulted, HostRepaired]
    assert sent[0].id == sent[1].id == "monitor:h1:fault-failed-0"
    assert isinstance(sent[1], HostFaulted) and sent[1].severity == "failed"
    assert sent[0].actor == "host-monitor" and sent[0].source == "host-monitor"
    assert not mon.state.faulted


def test_a_refused_repair_of_a_healthy_host_is_agreement_a_refused_fault_is_not() -> None:
    async def healthy_already(e: Event) -> Result:
        return _result(e, "rejected", "host_healthy")

    mon = Monitor("h1", "c", [Script([OK])], healthy_already,
                  thresholds=Thresholds(fault_after=1, repair_after=1, min_interval_s=0),
                  state=initial_state("repairing"), clock=lambda: 5.0)
    r = asyncio.run(mon.look())
    assert r.published == "rejected" and not mon.state.faulted

    async def unknown(e: Event) -> Result:
        return _result(e, "rejected", "unknown_host")

    mon = Monitor("h9", "c", [Script([LOST])], unknown,
                  thresholds=Thresholds(fault_after=1, repair_after=1, min_interval_s=0),
                  clock=lambda: 5.0)
    r = asyncio.run(mon.look())
    assert r.published == "rejected" and "unknown_host" in r.detail and not mon.state.faulted


def test_a_check_that_raises_is_a_degraded_finding() -> None:
    async def publish(e: Event) -> Result:
        return _result(e)

    mon = Monitor("h1", "c", [Broken()], publish, thresholds=Thresholds(fault_after=1),
                  clock=lambda: 1.0)
    r = asyncio.run(mon.look())
    assert r.observation.severity == "degraded"
    assert r.observation.reason == "check broken raised RuntimeError: plug-in bug"
    assert mon.state.faulted and mon.state.severity == "degraded"


def test_initial_state_from_the_scheduler() -> None:
    assert initial_state(None) == MonitorState() == initial_state("ok")
    assert initial_state("degraded").severity == "degraded"
    assert initial_state("failed").faulted and initial_state("repairing").severity == "failed"
