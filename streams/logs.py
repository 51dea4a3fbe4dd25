"""Structured logs of the live pipeline: JSON lines in production, readable lines on a terminal.

Every log line is an event name plus key/value fields. The worker binds what
locates a record (``event_id``, ``cluster``, ``partition``, ``offset``) so any
line can be traced to the journal. ``configure`` is called once by the command
that starts a process (``allot worker``, ``allot up``); library code only asks
``logger(...)`` for a bound logger and never configures anything.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
          "error": logging.ERROR}


def configure(fmt: str = "auto", level: str = "info", stream: TextIO | None = None) -> None:
    """Set up structlog for this process: ``json``, ``console`` or ``auto`` (console on a tty)."""
    out = stream if stream is not None else sys.stderr
    if fmt == "auto":
        fmt = "console" if out.isatty() else "json"
    renderer: Any
    if fmt == "json":
        renderer = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=out.isatty())
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(LEVELS.get(level, logging.INFO)),
        logger_factory=structlog.PrintLoggerFactory(out),
        cache_logger_on_first_use=False,
    )
    # aiokafka logs through the standard library: keep its warnings, quietly.
    logging.basicConfig(level=logging.WARNING, stream=out, format="%(name)s %(levelname)s %(message)s")


def logger(**bound: Any) -> Any:
    """A structlog logger with ``bound`` fields on every line."""
    return structlog.get_logger("allot").bind(**bound)
