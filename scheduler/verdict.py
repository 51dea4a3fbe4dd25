"""What validation says about an input: apply it, ignore it, or reject it with a reason."""

from __future__ import annotations

import msgspec


class Reject(msgspec.Struct, frozen=True):
    """The input is refused. ``kind`` picks the rejection event type."""

    kind: str  # "workload" | "budget" | "input"
    reason: str
    detail: str = ""


class Ignore(msgspec.Struct, frozen=True):
    """The input is a harmless repeat (e.g. a re-sent identical submission): no effect, no answer."""

    detail: str = ""


Verdict = Reject | Ignore | None
