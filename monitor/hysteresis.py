"""Hysteresis: when a run of health observations becomes a fault or a repair.

A single bad reading is not a broken host, and a sensor that flaps between
good and bad must not drain a host twice an hour. The rules:

- **fault** after ``fault_after`` consecutive unhealthy observations, as
  ``failed`` if the last ``fault_after`` were all failed, else ``degraded``;
- **repair** after ``repair_after`` consecutive healthy ones;
- at least ``min_interval_s`` between two transitions (a fault soon after a
  repair waits, and so does a repair soon after a fault), except that a
  ``failed`` host (``fault_after`` failed looks in a row) is faulted without
  waiting: its work is already lost;
- a degraded host whose observations turn ``failed`` (``fault_after`` in a
  row) is faulted again as failed (escalation; never the other way round), so
  one slow nvidia-smi on a degraded host does not end its work.

``step`` is pure: the state, one observation and the time in, the new state
and the transition it proposes out. The proposal is applied with ``commit``
once it is published, so a failed publish is simply proposed again by the
next step (the streak still stands) under the same event id
(``Transition.key``), which the scheduler deduplicates.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from monitor.checks import Observation, Severity


class Thresholds(msgspec.Struct, frozen=True, kw_only=True):
    """How many looks in a row make a transition, and the least time between two."""

    fault_after: int = 3
    repair_after: int = 5
    min_interval_s: float = 1800.0

    def __post_init__(self) -> None:
        if self.fault_after < 1 or self.repair_after < 1:
            raise ValueError("fault_after and repair_after must be at least 1")
        if self.min_interval_s < 0:
            raise ValueError("min_interval_s must be zero or more")


class MonitorState(msgspec.Struct, frozen=True, kw_only=True):
    """What the monitor believes the scheduler holds, and the current streak."""

    faulted: bool = False
    severity: Severity | None = None      # the severity published while faulted
    bad: int = 0                          # consecutive unhealthy observations
    failed: int = 0                       # consecutive failed observations
    good: int = 0                         # consecutive healthy observations
    streak_since: float | None = None     # time of the current streak's first observation
    last_change_at: float | None = None   # time of the last published transition


class Transition(msgspec.Struct, frozen=True, kw_only=True):
    """A fault or a repair to publish."""

    kind: Literal["fault", "repair"]
    severity: Severity | None
    reason: str
    streak_since: float

    @property
    def key(self) -> str:
        """Stable for the same streak: a retried publish carries the same event id."""
        sev = f"-{self.severity}" if self.severity else ""
        return f"{self.kind}{sev}-{int(self.streak_since)}"


def _waited(state: MonitorState, now: float, th: Thresholds) -> bool:
    return state.last_change_at is None or now - state.last_change_at >= th.min_interval_s


def step(state: MonitorState, obs: Observation, now: float,
         th: Thresholds) -> tuple[MonitorState, Transition | None]:
    """Fold one observation made at ``now``; the new state and the transition it calls for."""
    if obs.healthy:
        s = msgspec.structs.replace(
            state, bad=0, failed=0, good=state.good + 1,
            streak_since=now if state.good == 0 else state.streak_since)
        if s.faulted and s.good >= th.repair_after and _waited(s, now, th):
            assert s.streak_since is not None
            return s, Transition(kind="repair", severity=None, reason=f"{s.good} healthy checks",
                                 streak_since=s.streak_since)
        return s, None
    s = msgspec.structs.replace(
        state, good=0, bad=state.bad + 1,
        failed=state.failed + 1 if obs.severity == "failed" else 0,
        streak_since=now if state.bad == 0 else state.streak_since)
    if s.bad < th.fault_after:
        return s, None
    assert s.streak_since is not None
    severity: Severity = "failed" if s.failed >= th.fault_after else "degraded"
    fault = Transition(kind="fault", severity=severity, reason=obs.reason,
                       streak_since=s.streak_since)
    if not s.faulted:
        if severity == "failed" or _waited(s, now, th):
            return s, fault
        return s, None
    if s.severity == "degraded" and severity == "failed":
        return s, fault  # escalation: the scheduler must end the host's work now
    return s, None


def commit(state: MonitorState, t: Transition, now: float) -> MonitorState:
    """The state once ``t`` is published (the streak counters carry on)."""
    if t.kind == "fault":
        return msgspec.structs.replace(state, faulted=True, severity=t.severity,
                                       last_change_at=now)
    return msgspec.structs.replace(state, faulted=False, severity=None, last_change_at=now)


__all__ = ["MonitorState", "Thresholds", "Transition", "commit", "step"]
