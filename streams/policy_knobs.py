"""Policy knobs as people type and read them: ``allot policy show`` and ``allot policy set``.

A ``policy.configured`` event carries every knob (events/policy.py), so a
change to one knob on a live cluster is the cluster's current policy with
that knob replaced, published whole. This module turns ``KNOB=VALUE`` words
into that event's fields and back into words:

- durations (knobs ending ``_s``) take ``30``, ``30s``, ``10m``, ``2h``,
  ``7d`` or Slurm's ``1:00:00``, and print the same way;
- ``none`` (or ``null``) sets a knob that may be absent (``borrowed_protection_s``);
- an unknown knob, or a value the event's constraints refuse, is a
  ``KnobError`` naming the knob and what it accepts.
"""

from __future__ import annotations

import argparse
from typing import Any

import msgspec

from events import Event, PolicyConfigured
from events.errors import AllotError

ENVELOPE = frozenset(Event.__struct_fields__)
KNOBS: tuple[str, ...] = tuple(f for f in PolicyConfigured.__struct_fields__ if f not in ENVELOPE)


class KnobError(AllotError):
    """A ``KNOB=VALUE`` the policy cannot take (unknown knob, bad value)."""


def defaults() -> dict[str, Any]:
    """Every knob at its default (the policy of a log with no ``policy.configured``)."""
    from scheduler.state import DEFAULT_POLICY

    return {k: getattr(DEFAULT_POLICY, k) for k in KNOBS}


def parse(word: str) -> tuple[str, Any]:
    """``KNOB=VALUE`` as the knob's name and its value (typed as the knob is)."""
    from streams.state_cli import duration_value

    if "=" not in word or word.startswith("="):
        raise KnobError(f"expected KNOB=VALUE, got {word!r}")
    name, raw = (part.strip() for part in word.split("=", 1))
    if name not in KNOBS:
        raise KnobError(f"no policy knob {name!r}; the knobs are: {', '.join(KNOBS)}")
    if raw.lower() in ("none", "null"):
        return name, None
    if name.endswith("_s"):
        try:
            return name, duration_value(raw)
        except argparse.ArgumentTypeError as exc:
            raise KnobError(f"{name}: {exc}") from None
    if raw.lstrip("-").isdigit():
        return name, int(raw)
    return name, raw


def apply(current: dict[str, Any], words: list[str], **envelope: Any) -> PolicyConfigured:
    """``current``'s knobs with ``words`` applied, as the event to publish (checked whole)."""
    knobs = {k: v for k, v in current.items() if k in KNOBS}
    for word in words:
        name, value = parse(word)
        knobs[name] = value
    try:
        return msgspec.convert({**knobs, **envelope, "type": "policy.configured"},
                               PolicyConfigured)
    except msgspec.ValidationError as exc:
        raise KnobError(f"the policy would not be valid: {exc}") from None


def text(name: str, value: Any) -> str:
    """A knob's value for people: durations as ``7d``, ``8h``, ``30s``; ``none`` for absent."""
    if value is None:
        return "none"
    if name.endswith("_s") and isinstance(value, int):
        return duration_words(value)
    return str(value)


def duration_words(s: int) -> str:
    """Seconds as the largest whole units: ``7d``, ``1h30m``, ``45s``, ``0s``."""
    if s == 0:
        return "0s"
    out = []
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)):
        n, s = divmod(s, size)
        if n:
            out.append(f"{n}{unit}")
    return "".join(out)


__all__ = ["KNOBS", "KnobError", "apply", "defaults", "duration_words", "parse", "text"]
