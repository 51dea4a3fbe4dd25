"""The audit's deliberate errors: every one an ``events.errors.AllotError``.

Each is something the user can act on (a bad log, an existing run, a refused
query, an unknown run, a plot that cannot be drawn), so the command line
prints ``str(exc)`` as one line and exits non-zero. The message says what was
wrong and, where there is one, what to do instead.
"""

from __future__ import annotations

from events.errors import AllotError


class AuditError(AllotError):
    """Base of the audit's errors; ``str(exc)`` is the one-line message."""


class LogLoadError(AuditError):
    """A log file that cannot be loaded: missing, unreadable, or not a valid allot log."""


class RunExists(AuditError):
    """Loading would replace a run that is already in the database (pass ``replace``)."""


class NotAnAuditDatabase(AuditError):
    """The file is missing, or is not a database ``allot audit load`` wrote."""


class QueryRefused(AuditError):
    """A query the read-only audit does not run (several statements, none, or a write)."""


class UnknownRun(AuditError, KeyError):
    """The requested run has no events in the database."""

    def __str__(self) -> str:
        return f"no run {self.args[0]!r} in the database"
