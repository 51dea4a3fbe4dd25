"""Loopback means loopback: the metrics host is resolved, and every address must be loopback."""

from __future__ import annotations

import pytest

from streams import config
from streams.metrics import MetricsServer, WorkerMetrics


@pytest.mark.parametrize("host", ["0", "0.0.0.0", "::", "10.1.2.3", "192.168.0.1",
                                  "nonexistent.invalid", "0x0"])
def test_a_host_that_is_not_loopback_is_refused(host: str) -> None:
    with pytest.raises(config.ConfigError, match="metrics_host"):
        config.load(environ={}, flags={"metrics_host": host})


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "127.0.0.2"])
def test_loopback_hosts_are_accepted(host: str) -> None:
    assert config.load(environ={}, flags={"metrics_host": host}).metrics_host == host


def test_an_explicit_flag_allows_another_address() -> None:
    s = config.load(environ={"ALLOT_METRICS_NON_LOOPBACK": "true"},
                    flags={"metrics_host": "10.1.2.3"})
    assert s.metrics_host == "10.1.2.3"
    # Every interface stays refused, flag or not.
    with pytest.raises(config.ConfigError):
        config.load(environ={"ALLOT_METRICS_NON_LOOPBACK": "true"}, flags={"metrics_host": "::"})


def test_the_metrics_server_resolves_too() -> None:
    with pytest.raises(ValueError, match="loopback"):
        MetricsServer(WorkerMetrics(), "0", 0)
    server = MetricsServer(WorkerMetrics(), "localhost", 0).start()
    try:
        assert server.address[0] in ("127.0.0.1", "::1")
    finally:
        server.stop()
