"""The envelope every allot event carries, and the small value types events share.

An event is a frozen fact. Every event, whatever its type, starts with the same
envelope fields so any consumer (a DuckDB query, a kcat pipeline, a Go service)
can route, dedupe and order it without knowing the body:

- ``type``: the stable tag that names the event (``workload.submitted``...).
- ``id``: unique per event; consumers dedupe on it (delivery is at-least-once).
- ``at``: event time, integer Unix seconds. Time enters the core only here.
- ``cluster``: the cluster the event belongs to; one scheduler state per cluster.
- ``actor``: who published it (a user, a manager, a host monitor, the scheduler).
- ``source``: which system published it (``cli``, ``host-monitor``, ``allot.scheduler``...).
- ``cause``: for events the scheduler derived, the id of the input it reacted to;
  ``null`` for inputs. Replay uses it to tell inputs from decisions.
- ``v``: the schema version of this event type (see docs/events.md, evolution rules).
"""

from __future__ import annotations

import msgspec

from events.limits import Int64, Shares, Text, Time

# Every event type starts at version 1. A version is bumped only for a breaking
# change, and then an upcaster in events/codec.py lifts old payloads.
SCHEMA_VERSION = 1


class Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """Base of every event: the envelope. Never instantiated directly."""

    id: Text
    at: Time
    cluster: Text = "default"
    actor: Text = "unknown"
    source: Text = "unknown"
    cause: Text | None = None
    v: Int64 = SCHEMA_VERSION


class Slot(msgspec.Struct, frozen=True, kw_only=True):
    """GPUs a workload holds on one host."""

    host: Text
    gpus: Int64


class ChildShare(msgspec.Struct, frozen=True, kw_only=True):
    """One child's proportional share under a budget node (a plain integer weight)."""

    child: Text
    shares: Shares
