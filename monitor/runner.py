"""The monitor's loop: look, fold the observation, publish what the hysteresis decides.

``Monitor.look`` runs every check once, combines their verdicts (``worst``),
steps the hysteresis and, on a transition, publishes ``host.faulted`` or
``host.repaired`` through ``Publisher`` (``streams.client.Client.request``: on
the inbox, then waits for the journal). Only a transition the scheduler
accepted is committed; an unreachable broker or a lost answer leaves the
streak standing, so the next look proposes it again under the same event id.

The loop never raises for a sick host or a lost broker: both are logged and
looked at again next interval.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import msgspec

from events import Event, HostFaulted, HostRepaired
from events.errors import AllotError
from monitor.checks import Check, Observation, worst
from monitor.hysteresis import MonitorState, Thresholds, Transition, commit, step
from streams.client import ID_BAD_CHARS, Result
from streams.logs import logger

Publisher = Callable[[Event], Awaitable[Result]]

# A repair the scheduler refuses because the host is already healthy (a person repaired
# it by hand, or the monitor restarted): the scheduler and the monitor agree, so commit.
_AGREES = {"repair": "host_healthy"}


class LookResult(msgspec.Struct, kw_only=True):
    """One look: what was seen, the state after it, and what was published."""

    at: float
    observation: Observation
    state: MonitorState
    transition: Transition | None = None
    published: str | None = None        # accepted | rejected | error
    detail: str = ""


def _rejection(res: Result) -> tuple[str, str]:
    for d in res.decisions:
        if d.get("reason"):
            return str(d.get("reason")), str(d.get("detail", ""))
    if res.dead_letter:
        return str(res.dead_letter.get("reason")), str(res.dead_letter.get("detail", ""))
    return res.status, ""


class Monitor:
    """One host's monitor."""

    def __init__(self, host: str, cluster: str, checks: Sequence[Check], publish: Publisher, *,
                 thresholds: Thresholds | None = None, actor: str = "host-monitor",
                 state: MonitorState | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.host = host
        self.cluster = cluster
        self.checks = list(checks)
        self.publish = publish
        self.thresholds = thresholds or Thresholds()
        self.actor = actor
        self.state = state or MonitorState()
        self.clock = clock
        self.log = logger(component="monitor", host=host, cluster=cluster)

    def observe(self) -> Observation:
        out = []
        for c in self.checks:
            try:
                out.append(c.run())
            except Exception as exc:  # a broken plug-in is a finding, not a crash of the loop
                out.append(Observation(severity="degraded",
                                       reasons=(f"check {c.name} raised {type(exc).__name__}: {exc}",)))
        return worst(out)

    def event_for(self, t: Transition, now: float) -> Event:
        eid = ID_BAD_CHARS.sub("-", f"monitor:{self.host}:{t.key}")[:128]
        env: dict[str, Any] = {"id": eid, "at": int(now), "cluster": self.cluster,
                               "actor": self.actor, "source": "host-monitor"}
        if t.kind == "fault":
            assert t.severity is not None
            return HostFaulted(**env, host=self.host, severity=t.severity, reason=t.reason[:1000])
        return HostRepaired(**env, host=self.host)

    async def look(self) -> LookResult:
        """Check once, step the hysteresis, publish a transition if there is one."""
        now = self.clock()
        obs = await asyncio.to_thread(self.observe)  # nvidia-smi can take seconds
        state, t = step(self.state, obs, now, self.thresholds)
        out = LookResult(at=now, observation=obs, state=state, transition=t)
        if t is None:
            self.state = state
            self.log.debug("looked", healthy=obs.healthy, reason=obs.reason, bad=state.bad,
                           good=state.good)
            return out
        event = self.event_for(t, now)
        try:
            res = await self.publish(event)
        except AllotError as exc:
            self.state = state  # the streak stands: proposed again at the next look
            out.published, out.detail = "error", str(exc)
            self.log.warning("publish_failed", transition=t.kind, event_id=event.id,
                             error=str(exc))
            return out
        reason, detail = _rejection(res) if not res.ok else ("", "")
        if res.ok or _AGREES.get(t.kind) == reason:
            self.state = commit(state, t, now)
            out.state = self.state
            out.published = "accepted" if res.ok else "rejected"
            out.detail = detail
            self.log.info("host_" + ("faulted" if t.kind == "fault" else "repaired"),
                          event_id=event.id, severity=t.severity, reason=t.reason,
                          status=res.status)
        else:
            self.state = state
            out.published, out.detail = "rejected", f"{reason}: {detail}".strip(": ")
            self.log.warning("transition_rejected", transition=t.kind, event_id=event.id,
                             reason=reason, detail=detail)
        out.state = self.state
        return out

    async def run(self, interval_s: float, looks: int | None = None,
                  on_look: Callable[[LookResult], None] | None = None) -> None:
        """Look every ``interval_s`` (``looks`` times, or until cancelled)."""
        n = 0
        while looks is None or n < looks:
            started = time.monotonic()
            r = await self.look()
            n += 1
            if on_look is not None:
                on_look(r)
            if looks is not None and n >= looks:
                return
            await asyncio.sleep(max(0.0, interval_s - (time.monotonic() - started)))


def initial_state(health: str | None) -> MonitorState:
    """The state to start from, given the host's health as the scheduler holds it (if known)."""
    if health == "degraded":
        return MonitorState(faulted=True, severity="degraded")
    if health in ("failed", "repairing"):  # repairing: drained, nothing left to escalate for
        return MonitorState(faulted=True, severity="failed")
    return MonitorState()


__all__ = ["LookResult", "Monitor", "Publisher", "initial_state"]
