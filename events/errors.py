"""The one error base class of allot.

Every error allot raises on purpose (bad bytes, a bad scenario, a refused
input, a broken journal, a bad command line) derives from ``AllotError``, so
the command line and the live worker catch exactly one type: they print one
line (or dead-letter the record) and carry on. Anything else escaping is a bug.
"""

from __future__ import annotations


class AllotError(Exception):
    """Base of every deliberate allot error; ``str(exc)`` is the one-line message."""
