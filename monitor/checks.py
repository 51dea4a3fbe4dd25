"""Health checks: what one look at a host's GPUs found.

A check is anything with ``name`` and ``run() -> Observation`` (the ``Check``
protocol). An observation is healthy, or names a severity and the reasons:

- ``failed``: the host cannot run its work any more (a GPU is lost, the driver
  does not answer): the scheduler ends its workloads at once.
- ``degraded``: the host should take no new work and drain at minimum runtime
  (an uncorrected ECC error waiting for a reset, a GPU over its temperature
  limit, a row remapping pending, a critical XID in the kernel log).

``NvidiaSmiCheck`` queries ``nvidia-smi --query-gpu=...`` (CSV, no header, no
units) and counts the GPUs against the number expected; ``XidLogCheck`` reads
new ``NVRM: Xid`` lines of a kernel log file. ``worst`` combines several.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal, Protocol

import msgspec

Severity = Literal["degraded", "failed"]
_RANK: dict[str | None, int] = {None: 0, "degraded": 1, "failed": 2}


class Observation(msgspec.Struct, frozen=True, kw_only=True):
    """One check's verdict: ``severity`` None is healthy; ``reasons`` say what was seen."""

    severity: Severity | None = None
    reasons: tuple[str, ...] = ()

    @property
    def healthy(self) -> bool:
        return self.severity is None

    @property
    def reason(self) -> str:
        return "; ".join(self.reasons)


HEALTHY = Observation()


class Check(Protocol):
    """A pluggable health check of one host."""

    name: str

    def run(self) -> Observation:
        """Look once; never raise for a sick host (that is an observation)."""
        ...


def worst(observations: Sequence[Observation]) -> Observation:
    """The most severe of ``observations``, with every unhealthy one's reasons."""
    sev: Severity | None = None
    reasons: list[str] = []
    for o in observations:
        if _RANK[o.severity] > _RANK[sev]:
            sev = o.severity
        reasons.extend(o.reasons)
    return Observation(severity=sev, reasons=tuple(reasons)) if sev else HEALTHY


# -- nvidia-smi --------------------------------------------------------------------------------

# The fields asked of nvidia-smi, in order. Drivers without row remapping (pre-Ampere)
# answer "[N/A]" for the last two, which counts as "nothing to report".
QUERY_FIELDS = ("index", "uuid", "temperature.gpu", "ecc.errors.uncorrected.volatile.total",
                "remapped_rows.pending", "remapped_rows.failure")


class GpuRow(msgspec.Struct, frozen=True, kw_only=True):
    """One GPU as nvidia-smi reported it (None where it said N/A or Not Supported)."""

    index: int
    uuid: str
    temperature_c: int | None
    ecc_uncorrected: int | None
    remap_pending: bool | None
    remap_failure: bool | None


class ParseError(ValueError):
    """nvidia-smi's output is not the CSV that was asked for."""


def _num(text: str) -> int | None:
    t = text.strip()
    if not t or t.startswith("[") or t.upper() in ("N/A", "NOT SUPPORTED"):
        return None
    try:
        return int(float(t))
    except ValueError:
        return None


def _flag(text: str) -> bool | None:
    t = text.strip().lower()
    if t in ("yes", "1", "true"):
        return True
    if t in ("no", "0", "false"):
        return False
    return None


def parse_query(text: str) -> list[GpuRow]:
    """The rows of ``nvidia-smi --query-gpu=<QUERY_FIELDS> --format=csv,noheader,nounits``."""
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(QUERY_FIELDS):
            raise ParseError(f"line {n}: expected {len(QUERY_FIELDS)} fields, got {len(cells)}")
        index = _num(cells[0])
        if index is None:
            raise ParseError(f"line {n}: GPU index {cells[0]!r} is not a number")
        rows.append(GpuRow(index=index, uuid=cells[1], temperature_c=_num(cells[2]),
                           ecc_uncorrected=_num(cells[3]), remap_pending=_flag(cells[4]),
                           remap_failure=_flag(cells[5])))
    return rows


def judge(rows: Sequence[GpuRow], expected_gpus: int, max_temp_c: int) -> Observation:
    """The verdict on one nvidia-smi answer (pure: the thresholds are arguments)."""
    failed: list[str] = []
    degraded: list[str] = []
    if len(rows) < expected_gpus:
        seen = {r.index for r in rows}
        missing = [str(i) for i in range(expected_gpus) if i not in seen]
        failed.append(f"{expected_gpus - len(rows)} of {expected_gpus} GPUs lost"
                      + (f" (index {', '.join(missing)})" if missing else ""))
    for r in rows:
        if r.remap_failure:
            failed.append(f"GPU {r.index}: row remapping failed")
        if r.ecc_uncorrected:
            degraded.append(f"GPU {r.index}: {r.ecc_uncorrected} uncorrected ECC error(s)")
        if r.remap_pending:
            degraded.append(f"GPU {r.index}: row remapping pending (needs a reset)")
        if r.temperature_c is not None and r.temperature_c >= max_temp_c:
            degraded.append(f"GPU {r.index}: {r.temperature_c} C (limit {max_temp_c} C)")
    if failed:
        return Observation(severity="failed", reasons=tuple(failed + degraded))
    if degraded:
        return Observation(severity="degraded", reasons=tuple(degraded))
    return HEALTHY


def _first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:200]
    return ""


class NvidiaSmiCheck:
    """The default check: ``nvidia-smi --query-gpu`` against the GPUs expected."""

    name = "nvidia-smi"

    def __init__(self, expected_gpus: int = 8, max_temp_c: int = 90,
                 binary: str = "nvidia-smi", timeout_s: float = 20.0) -> None:
        self.expected_gpus = expected_gpus
        self.max_temp_c = max_temp_c
        self.binary = binary
        self.timeout_s = timeout_s

    def command(self) -> list[str]:
        return [self.binary, f"--query-gpu={','.join(QUERY_FIELDS)}",
                "--format=csv,noheader,nounits"]

    def run(self) -> Observation:
        try:
            proc = subprocess.run(self.command(), capture_output=True, text=True,
                                  timeout=self.timeout_s, check=False)
        except FileNotFoundError:
            return Observation(severity="failed", reasons=(f"{self.binary}: not found (no driver?)",))
        except subprocess.TimeoutExpired:
            # A driver that hangs on a query is a driver that hangs the jobs too.
            return Observation(severity="failed",
                               reasons=(f"{self.binary} did not answer in {self.timeout_s:.0f} s",))
        except OSError as exc:
            return Observation(severity="failed", reasons=(f"{self.binary}: {exc.strerror or exc}",))
        if proc.returncode != 0:
            said = _first_line(proc.stdout) or _first_line(proc.stderr) or "no output"
            return Observation(severity="failed",
                               reasons=(f"{self.binary} exited {proc.returncode}: {said}",))
        try:
            rows = parse_query(proc.stdout)
        except ParseError as exc:
            return Observation(severity="failed",
                               reasons=(f"{self.binary}: unreadable output ({exc})",))
        return judge(rows, self.expected_gpus, self.max_temp_c)


# -- XIDs in the kernel log --------------------------------------------------------------------

# XIDs that mean the GPU needs attention (NVIDIA's XID catalogue): the first set ends
# the host's work, the second drains it. Others (13 graphics engine exception, 31 MMU
# fault, 43 a stopped app...) are usually the application's own fault and are ignored.
XID_FAILED = frozenset({79, 74, 95, 119, 120})   # fallen off the bus, NVLink, uncontained ECC, GSP
XID_DEGRADED = frozenset({48, 63, 64, 92, 94})   # DBE, row remap event/failure, high SBE, contained
_XID = re.compile(r"NVRM: Xid \(([^)]*)\): (\d+)")


class XidLogCheck:
    """New ``NVRM: Xid (PCI:...): N`` lines in a kernel log file since the last look.

    An XID is one line, once; the host stays unhealthy for ``hold_s`` after it
    (so the hysteresis can count it, and a repair waits for that long).
    """

    name = "xid"

    def __init__(self, path: str | Path, hold_s: float = 900.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.path = Path(path)
        self.hold_s = hold_s
        self.clock = clock
        self.offset: int | None = None  # the first look starts at the end: old XIDs are history
        self.seen: list[tuple[float, Severity, str]] = []  # (when, severity, reason)

    def run(self) -> Observation:
        now = self.clock()
        try:
            size = self.path.stat().st_size
            if self.offset is None or size < self.offset:  # first look, or the log rotated
                self.offset = size if self.offset is None else 0
            with self.path.open("rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
            self.offset += len(data)
        except OSError as exc:
            return Observation(severity="degraded",
                               reasons=(f"{self.path}: {exc.strerror or exc}",))
        for m in _XID.finditer(data.decode("utf-8", "replace")):
            xid = int(m.group(2))
            sev: Severity | None = ("failed" if xid in XID_FAILED else
                                    "degraded" if xid in XID_DEGRADED else None)
            if sev is not None:
                self.seen.append((now, sev, f"XID {xid} on {m.group(1)}"))
        self.seen = [s for s in self.seen if now - s[0] < self.hold_s]
        return worst([Observation(severity=sev, reasons=(why,)) for _, sev, why in self.seen])


__all__ = ["HEALTHY", "QUERY_FIELDS", "Check", "GpuRow", "NvidiaSmiCheck", "Observation",
           "ParseError", "XidLogCheck", "judge", "parse_query", "worst"]
