"""What the live clients raise: one base error for every failure a caller can act on."""

from __future__ import annotations

from events.errors import AllotError


class ClientError(AllotError):
    """The client could not do what was asked: no broker, no topic, a timeout, a bad id."""


class NotJournaled(ClientError):
    """An input did not reach the journal (nor the dead letter) in time."""
