"""The command line's own error: a mistake in how allot was called."""

from __future__ import annotations

from events.errors import AllotError


class CliError(AllotError):
    """A user-facing error of the command line (a bad option, an unusable path), shown as one line."""
