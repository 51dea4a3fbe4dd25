"""Generic rejection of an input the scheduler cannot act on.

Submissions and budget edits have their own rejection events; everything else
(a cancel of an unknown workload, a fault on an unknown host, an input from the
future) is answered with ``input.rejected``. Records that may not enter the
journal at all (a decision type sent as input, a ``cause``, a bad id, another
cluster) are not answered here: they are refused before the journal
(``scheduler.admission``) and the live worker dead-letters them.
"""

from __future__ import annotations

from events.base import Event
from events.limits import Text


class InputRejected(Event, frozen=True, kw_only=True, tag="input.rejected"):
    """An input (``cause``) was refused, and why."""

    reason: Text
    detail: Text = ""


class InputReason:
    """Stable reason codes for ``input.rejected``."""

    UNKNOWN_WORKLOAD = "unknown_workload"
    NOT_RUNNING = "not_running"
    ALREADY_ENDED = "already_ended"
    NOT_AUTHORISED = "not_authorised"
    UNKNOWN_HOST = "unknown_host"
    HOST_EXISTS = "host_exists"
    HOST_BUSY = "host_busy"
    BAD_HOST = "bad_host"
    HOST_HEALTHY = "host_healthy"
    BAD_POLICY = "bad_policy"
    TOO_MANY_HOSTS = "too_many_hosts"
    FUTURE_TIME = "future_time"
    NOT_STOPPING = "not_stopping"
    BAD_PRINCIPAL = "bad_principal"
    UNKNOWN_PRINCIPAL = "unknown_principal"
    KEY_IN_USE = "key_in_use"
