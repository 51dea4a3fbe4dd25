"""The Philly trace as a workload source: real submissions, with the scheduling contract filled in.

Microsoft's Philly trace (the Pollux subset in ``shared/traces/philly.csv``) records,
per GPU job, when it was submitted, how long it ran, how many GPUs it took and its
virtual cluster (VC). It says nothing about users, priorities, minimum runtimes or
resumability, which the allot contract needs. This module replays the real arrival
process and sizes unchanged and fills the missing fields by fixed, documented rules
(see ``docs/philly.md``):

- **Teams** are the VCs: budget nodes ``<root>/<vc>`` each with one leaf
  ``<root>/<vc>/jobs`` (so ``team_depth = 1``); a VC's shares are its GPU-hours in
  the loaded window ("funding followed historical demand"), or equal.
- **Debug**: ran <= 15 min on <= 8 GPUs. Short protection, not resumable.
- **Gangs**: > 8 GPUs. Allocated training, resumable.
- **The rest**: a seeded draw makes ~20% unallocated eval/batch work (minimum
  runtime 0) and the others allocated training, mostly resumable.
- **Priorities**: a seeded draw with the inflation the brief describes
  (70% HIGH, 20% NORMAL, 10% LOW).

Every random fill-in of a job depends only on the seed and its row in the file,
never on the window loaded, so a job looks the same in every window.
"""

from __future__ import annotations

import _csv
import csv
import datetime as dt
import math
import pathlib
import random
import re
from typing import Annotated, Literal

import msgspec

from events.errors import AllotError
from simulator.sources import SourceOutput
from simulator.spec import BudgetNodeSpec, WorkloadSpec

DAY_S = 86_400
HOUR_S = 3_600
MINUTE_S = 60

# Baseline priorities (events/workload.py: LOW=-1, NORMAL=0, HIGH=1).
HIGH, NORMAL, LOW = 1, 0, -1

# Columns the loader needs; gpu_time is only cross-checked when present.
REQUIRED_COLUMNS = ("timestamp", "duration", "num_gpus", "cluster")
GPU_TIME_COLUMN = "gpu_time"

# Same rule as the core's budget path segments (scheduler/validation.py), so a VC
# name the core would reject is reported here, with its row, instead of later.
_SEGMENT = re.compile(r"^[A-Za-z0-9_.\-]+$")

_EPOCH = dt.datetime(1970, 1, 1)

Fraction = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
PositiveInt = Annotated[int, msgspec.Meta(ge=1)]
NonNegativeInt = Annotated[int, msgspec.Meta(ge=0)]


class PhillyConfigError(AllotError, ValueError):
    """A philly source's knobs are out of range (for configs built in code; files get msgspec's errors)."""


class PhillyTraceError(AllotError, ValueError):
    """The trace file is missing or a row of it cannot be read; names the file, line and column."""

    def __init__(
        self,
        detail: str,
        *,
        path: pathlib.Path,
        line: int | None = None,
        column: str | None = None,
    ) -> None:
        where = str(path)
        if line is not None:
            where += f":{line}"
        if column is not None:
            where += f": column {column!r}"
        super().__init__(f"{where}: {detail}")
        self.detail = detail
        self.path = path
        self.line = line
        self.column = column

    def __reduce__(self) -> tuple[object, ...]:
        # Keyword-only arguments: the default pickling (``cls(*args)``) cannot
        # rebuild it, and a worker process (``--seeds``, the decision hashes)
        # would then report a broken pool instead of this error.
        return (_rebuild_trace_error, (self.detail, self.path, self.line, self.column))


def _rebuild_trace_error(detail: str, path: pathlib.Path, line: int | None,
                         column: str | None) -> PhillyTraceError:
    return PhillyTraceError(detail, path=path, line=line, column=column)


class Config(msgspec.Struct, frozen=True, kw_only=True, tag="philly", forbid_unknown_fields=True):
    """The ``[[sources]]`` table with ``type = "philly"``: which part of the trace, and the fill-in knobs."""

    # CSV path, relative to the scenario file's directory (or absolute).
    path: str
    # Window: first submission kept (ISO date or date-time; default: the trace's
    # first submission) and its length in days (default: to the end of the trace).
    start: str | None = None
    days: Annotated[float, msgspec.Meta(gt=0, le=36_600)] | None = None
    # Keep only the first N submissions of the window (by submit time, then id).
    max_jobs: NonNegativeInt | None = None
    # Budget root the VC subtrees hang under (the scenario's [budget] root).
    root: str = "philly"
    # "demand": a VC's shares = its GPU-hours in the loaded window; "equal": 1 each.
    team_shares: Literal["demand", "equal"] = "demand"
    # GPUs per host of the target cluster: sets the gang shape of large jobs.
    gpus_per_host: PositiveInt = 8
    # Debug: ran at most this long on at most this many GPUs.
    debug_max_duration_s: NonNegativeInt = 15 * MINUTE_S
    debug_max_gpus: PositiveInt = 8
    # Debug protection: min(duration, this).
    debug_min_runtime_s: NonNegativeInt = 10 * MINUTE_S
    # Training protection: clamp(duration * fraction, floor, cap).
    training_min_runtime_fraction: Fraction = 0.25
    training_min_runtime_floor_s: NonNegativeInt = 15 * MINUTE_S
    # The policy's cap (PolicyConfigured.min_runtime_cap_s); nothing asks for more.
    min_runtime_cap_s: NonNegativeInt = 8 * HOUR_S
    # Share of single-host non-debug jobs that are unallocated eval/batch work.
    unallocated_fraction: Fraction = 0.2
    # Share of single-host allocated training jobs that checkpoint and can resume.
    training_resumable_fraction: Fraction = 0.8
    # Patience: a job not started this long after submission is cancelled by its
    # (simulated) user. The trace only holds jobs that ran, so it cannot say how
    # long people would have waited; without a bound, a 2.5x overloaded replay
    # piles up a backlog that would take most of a year to drain. None: forever.
    debug_patience_s: NonNegativeInt | None = 4 * HOUR_S
    patience_s: NonNegativeInt | None = 3 * 24 * HOUR_S
    # Priority mix, as relative weights of HIGH / NORMAL / LOW.
    priority_weights: tuple[
        Annotated[float, msgspec.Meta(ge=0.0, le=1e9)],
        Annotated[float, msgspec.Meta(ge=0.0, le=1e9)],
        Annotated[float, msgspec.Meta(ge=0.0, le=1e9)],
    ] = (0.7, 0.2, 0.1)


class _Job(msgspec.Struct, frozen=True):
    """One parsed trace row with its fill-in draws, before windowing."""

    row: int          # 0-based data row (file line = row + 2)
    submit: int       # seconds since 1970 (naive trace clock; only differences matter)
    duration: int
    gpus: int
    vc: str
    priority: int
    unallocated: bool
    resumable: bool


def shape(gpus: int, gpus_per_host: int = 8) -> tuple[int, int]:
    """The (hosts, gpus_per_host) gang shape a request of ``gpus`` GPUs gets.

    Up to one host's worth runs on one host as asked. Larger requests take
    ceil(gpus / gpus_per_host) hosts with the GPUs spread evenly, rounded up where
    they do not divide (12 -> 2 x 6, 24 -> 3 x 8, 20 -> 3 x 7 = 21): the core
    requires equal slices per host and rounding up never makes a job smaller
    than it was.
    """
    if gpus <= gpus_per_host:
        return 1, gpus
    hosts = -(-gpus // gpus_per_host)
    return hosts, -(-gpus // hosts)


def _check_config(config: Config) -> None:
    """Validate what msgspec.Meta only checks on decode, for configs built in code."""
    if not _SEGMENT.match(config.root):
        raise PhillyConfigError(f"philly: root {config.root!r} is not a valid budget path segment")
    if config.days is not None and not 0 < config.days <= 36_600:
        raise PhillyConfigError(f"philly: days must be > 0 and at most 36,600, got {config.days}")
    if config.max_jobs is not None and config.max_jobs < 0:
        raise PhillyConfigError(f"philly: max_jobs must be >= 0, got {config.max_jobs}")
    if config.gpus_per_host < 1 or config.debug_max_gpus < 1:
        raise PhillyConfigError("philly: gpus_per_host and debug_max_gpus must be >= 1")
    for name in ("unallocated_fraction", "training_resumable_fraction",
                 "training_min_runtime_fraction"):
        value = getattr(config, name)
        if not 0.0 <= value <= 1.0:
            raise PhillyConfigError(f"philly: {name} must be within [0, 1], got {value}")
    weights = config.priority_weights
    if len(weights) != 3 or min(weights) < 0 or not 0 < sum(weights) < math.inf:
        raise PhillyConfigError(f"philly: priority_weights must be 3 weights >= 0 with a positive sum, got {weights}")


def _parse_start(text: str) -> int:
    """Seconds since 1970 of an ISO date or date-time (naive, like the trace)."""
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError as exc:
        raise PhillyConfigError(f"philly: start {text!r} is not an ISO date") from exc
    if when.tzinfo is not None:
        # The trace clock is naive; compare in its terms.
        when = when.replace(tzinfo=None)
    return (when - _EPOCH) // dt.timedelta(seconds=1)


def _read(path: pathlib.Path, config: Config, seed: int) -> list[_Job]:
    """Parse every row of the trace, drawing each row's fill-ins in file order."""
    rng = random.Random(seed)
    try:
        handle = path.open(newline="", encoding="utf-8")
    except FileNotFoundError as exc:
        raise PhillyTraceError("trace file not found", path=path) from exc
    except OSError as exc:
        raise PhillyTraceError(f"cannot open trace file: {exc.strerror}", path=path) from exc
    try:
        with handle:
            return _parse(csv.reader(handle), path, config, rng)
    except UnicodeDecodeError as exc:
        raise PhillyTraceError("not UTF-8 text", path=path) from exc
    except csv.Error as exc:
        raise PhillyTraceError(f"not CSV: {exc}", path=path) from exc


def _parse(reader: _csv.Reader, path: pathlib.Path, config: Config,
           rng: random.Random) -> list[_Job]:
    """The jobs of every data row, in file order (``reader`` is a csv reader)."""
    w_high, w_normal, w_low = config.priority_weights
    total = w_high + w_normal + w_low
    p_high, p_normal = w_high / total, (w_high + w_normal) / total
    p_unallocated = config.unallocated_fraction
    p_resumable = config.training_resumable_fraction
    jobs: list[_Job] = []
    # Many rows share a submit second; caching halves the parse time.
    seconds_of: dict[str, int] = {}
    valid_vcs: set[str] = set()  # a handful of VCs: check each name once
    header = next(reader, None)
    if header is None:
        raise PhillyTraceError("empty file: no header row", path=path, line=1)
    header = [name.strip() for name in header]
    index: dict[str, int] = {}
    for name in REQUIRED_COLUMNS:
        if name not in header:
            raise PhillyTraceError("missing column in header", path=path, line=1, column=name)
        index[name] = header.index(name)
    i_ts, i_dur, i_gpus, i_vc = (index[name] for name in REQUIRED_COLUMNS)
    i_gt = header.index(GPU_TIME_COLUMN) if GPU_TIME_COLUMN in header else None
    width = len(header)
    row = -1
    for fields in reader:
        if not fields:
            continue  # a blank line (e.g. at the end of the file) is no job
        row += 1
        line = reader.line_num
        column = ""
        try:
            if len(fields) != width:
                # Name the first missing column, or the first extra field.
                column = header[len(fields)] if len(fields) < width else f"#{width + 1}"
                raise ValueError(f"expected {width} fields, got {len(fields)}")
            column = "timestamp"
            text = fields[i_ts]
            submit = seconds_of.get(text)
            if submit is None:
                submit = (dt.datetime.fromisoformat(text) - _EPOCH) // dt.timedelta(seconds=1)
                seconds_of[text] = submit
            column = "duration"
            seconds = float(fields[i_dur])
            if not (seconds >= 0 and math.isfinite(seconds)):
                raise ValueError(f"must be a finite number >= 0, got {fields[i_dur]!r}")
            # The executor needs something to run: 0 s becomes 1 s.
            duration = max(1, math.ceil(seconds))
            column = "num_gpus"
            gpus = int(fields[i_gpus])
            if gpus < 1:
                raise ValueError(f"must be >= 1, got {gpus}")
            column = "cluster"
            vc = fields[i_vc].strip()
            if vc not in valid_vcs:
                if not _SEGMENT.match(vc):
                    raise ValueError(f"{vc!r} is not a valid budget path segment")
                valid_vcs.add(vc)
            if i_gt is not None:
                # A derived column: a mismatch means shifted or corrupt fields.
                column = GPU_TIME_COLUMN
                gpu_time = float(fields[i_gt])
                if abs(gpu_time - seconds * gpus) > 1e-6 * max(1.0, gpu_time) + 1.0:
                    raise ValueError(
                        f"{gpu_time} != duration x num_gpus = {seconds * gpus}")
        except (ValueError, TypeError) as exc:
            # TypeError: a time-zone-aware timestamp cannot be mixed with naive ones.
            raise PhillyTraceError(f"row {row}: {exc}", path=path, line=line,
                                   column=column) from exc
        # Always three draws per row, whatever its class, so a job's fill-ins
        # depend only on (seed, row) and not on the window or other rows.
        u_priority, u_unallocated, u_resumable = rng.random(), rng.random(), rng.random()
        priority = HIGH if u_priority < p_high else NORMAL if u_priority < p_normal else LOW
        jobs.append(_Job(row, submit, duration, gpus, vc, priority,
                         u_unallocated < p_unallocated, u_resumable < p_resumable))
    return jobs


def _workload(job: _Job, config: Config, t0: int) -> WorkloadSpec:
    """Apply the fill-in rules to one job of the window starting at ``t0``."""
    hosts, per_host = shape(job.gpus, config.gpus_per_host)
    cap = config.min_runtime_cap_s
    training_min = min(cap, max(config.training_min_runtime_floor_s,
                                int(job.duration * config.training_min_runtime_fraction)))
    if hosts > 1:
        # Multi-host jobs are large trainings: allocated, checkpointed.
        kind, min_runtime, resumable = "training", training_min, True
    elif job.duration <= config.debug_max_duration_s and job.gpus <= config.debug_max_gpus:
        # Short and small: someone iterating on code. Needs a quick start and a
        # short protection; its state is in a terminal, so it cannot resume.
        kind, min_runtime, resumable = "debug", min(job.duration, config.debug_min_runtime_s, cap), False
    elif job.unallocated:
        # Opportunistic eval/batch work: free, never protected, restartable.
        kind, min_runtime, resumable = "eval", 0, True
    else:
        kind, min_runtime, resumable = "training", training_min, job.resumable
    return WorkloadSpec(
        workload=f"philly-{job.row:06d}",
        submit_at=job.submit - t0,
        budget=f"{config.root}/{job.vc}/jobs",
        user=f"{job.vc}-user",
        gpus=hosts * per_host,
        hosts=hosts,
        min_runtime_s=min_runtime,
        resumable=resumable,
        priority=job.priority,
        kind=kind,
        duration_s=job.duration,
        patience_s=config.debug_patience_s if kind == "debug" else config.patience_s,
    )


def load(config: Config, *, seed: int, base_dir: pathlib.Path) -> SourceOutput:
    """Read the trace window of ``config`` and return its VC budget subtrees and workloads."""
    _check_config(config)
    path = pathlib.Path(config.path)
    if not path.is_absolute():
        path = pathlib.Path(base_dir) / path
    start = _parse_start(config.start) if config.start is not None else None
    jobs = _read(path, config, seed)

    t0 = start if start is not None else min((job.submit for job in jobs), default=0)
    end = t0 + math.ceil(config.days * DAY_S) if config.days is not None else None
    kept = [job for job in jobs if job.submit >= t0 and (end is None or job.submit < end)]
    # Row order breaks ties; it is also the id order (ids are zero-padded rows).
    kept.sort(key=lambda job: (job.submit, job.row))
    if config.max_jobs is not None:
        kept = kept[: config.max_jobs]
    workloads = [_workload(job, config, t0) for job in kept]

    # Team shares from the loaded window only: a VC with no job in it gets no node.
    gpu_seconds: dict[str, int] = {}
    for job, spec in zip(kept, workloads, strict=True):
        gpu_seconds[job.vc] = gpu_seconds.get(job.vc, 0) + spec.gpus * spec.duration_s
    nodes: list[BudgetNodeSpec] = []
    for vc in sorted(gpu_seconds):
        shares = 1 if config.team_shares == "equal" else max(1, math.ceil(gpu_seconds[vc] / HOUR_S))
        # Parents before children, so the nodes can be defined in order.
        nodes.append(BudgetNodeSpec(path=f"{config.root}/{vc}", shares=shares,
                                    managers=(f"{vc}-lead",)))
        nodes.append(BudgetNodeSpec(path=f"{config.root}/{vc}/jobs", shares=1))
    return SourceOutput(nodes=nodes, workloads=workloads)


def mean_busy_gpus(workloads: list[WorkloadSpec], span_s: int | None = None) -> float:
    """Demand as average GPUs busy: total GPU-seconds over ``span_s`` (default: first submit to last end).

    This is what the cluster would need to run every job the moment it arrives;
    capacity is then chosen as a fraction of it (docs/philly.md). For a short
    window, pass the window length: long jobs run far past its end and the
    default span would dilute the demand.
    """
    if not workloads:
        return 0.0
    if span_s is None:
        first = min(w.submit_at for w in workloads)
        span_s = max(w.submit_at + w.duration_s for w in workloads) - first
    return sum(w.gpus * w.duration_s for w in workloads) / max(1, span_s)
