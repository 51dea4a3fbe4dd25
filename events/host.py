"""Host events: the fleet, its health and its repairs.

Host monitors publish ``host.faulted`` and ``host.repaired``; operators publish
``host.added``/``host.removed``. The scheduler derives ``host.drained`` when a
faulty host has no workloads left, which is the signal for automated repair.
"""

from __future__ import annotations

from typing import Literal

from events.base import Event
from events.limits import HostGpus, Text


class HostAdded(Event, frozen=True, kw_only=True, tag="host.added"):
    """A host joins the cluster, healthy, with its GPUs and topology labels."""

    host: Text
    gpus: HostGpus = 8
    rack: Text | None = None
    block: Text | None = None


class HostRemoved(Event, frozen=True, kw_only=True, tag="host.removed"):
    """A host leaves the cluster (refused while workloads run on it)."""

    host: Text


class HostFaulted(Event, frozen=True, kw_only=True, tag="host.faulted"):
    """A host is unhealthy.

    ``degraded``: takes no new work; workloads drain when their protection ends
    (unallocated ones at once). ``failed``: workloads end at once.
    """

    host: Text
    severity: Literal["degraded", "failed"]
    reason: Text = ""


class HostDrained(Event, frozen=True, kw_only=True, tag="host.drained"):
    """A faulty host is empty and goes to automated repair."""

    host: Text


class HostRepaired(Event, frozen=True, kw_only=True, tag="host.repaired"):
    """A host is healthy again and takes work."""

    host: Text
