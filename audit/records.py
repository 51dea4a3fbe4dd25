"""Which lines of a log file are allot events: ``events.decode`` decides, line by line.

The audit loads logs with DuckDB's JSON reader, which is fast but has its own
idea of an event: it reads unknown types and ``v: 99``, fills in missing
fields, coerces ``"8"`` to 8, and refuses duplicate keys that msgspec takes.
So the reader never decides what is valid. Every line first goes through
``events.decode``, the decoder the core uses (``scan``); a line it refuses is a
*bad line*, named by its 1-based number in the (decompressed) file, blank lines
included. What the scan found decides what the loader does with the file
(``plan``), and the few files DuckDB's reader cannot take as they are are
written again, line by line, as the loader needs them (``write_lines``).

Bad lines (the rule, documented in docs/audit.md):

- A bad *last* line is a log cut mid-line: a writer that crashed in the middle
  of a record. The lines before it load, and the cut line is reported.
- A bad line with valid lines after it is refused, naming it: the log is
  corrupt, and a history with a hole in the middle reads as a plausible but
  wrong history (a dropped start turns its stop into an orphan, a dropped tick
  moves the clock). ``skip_bad`` loads every valid line instead, and the
  loader records each skipped line in the ``skipped_lines`` table.

Besides the decoder's verdict there is one storage rule: every integer must
be a signed 64-bit value (``events.limits``), because the ``events`` table
stores BIGINT. The decoder is being taught the same limit; until it is, a line
beyond it is found when DuckDB refuses the file (``storage_problem``).
"""

from __future__ import annotations

import gzip
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import msgspec

from events import ALL_TYPES, MalformedEvent, decode, encode, tag_of
from events.limits import INT64_MAX, INT64_MIN

_TAG: dict[type, str] = {cls: tag_of(cls) for cls in ALL_TYPES}


@dataclass(frozen=True, slots=True)
class BadLine:
    """A line of the file that is not an event the audit can store."""

    line: int  # 1-based line number in the (decompressed) file
    reason: str  # the decoder's reason (or the storage rule's)


@dataclass(slots=True)
class Scan:
    """What decoding every line of a log found."""

    lines: int = 0  # physical lines, blank ones included
    events: int = 0  # lines that decode to an event
    bad: list[BadLine] = field(default_factory=list)
    # Checks the loader runs on what DuckDB read: the same events, in the same number.
    by_type: Counter[str] = field(default_factory=Counter)
    at_sum: int = 0
    at_by_position: int = 0  # sum of position x at (positions 1.. among events): catches reordering
    last_event_line: int = 0  # the line of the last event (0 when there is none)

    def add_bad(self, line: int, reason: str) -> None:
        self.bad.append(BadLine(line, reason))

    def with_problems(self, problems: list[BadLine], written: Scan) -> Scan:
        """This scan, with lines the storage rule refused counted as bad (``written``: the rest)."""
        return Scan(self.lines, written.events, sorted([*self.bad, *problems], key=lambda b: b.line),
                    written.by_type, written.at_sum, written.at_by_position, written.last_event_line)


def open_lines(path: str | Path) -> IO[bytes]:
    """The file's bytes, decompressed when it is gzip (by its magic bytes, not its name)."""
    fh = open(path, "rb")  # noqa: SIM115 - returned to the caller, who closes it
    if fh.read(2) == b"\x1f\x8b":
        fh.close()
        return gzip.open(path, "rb")  # type: ignore[return-value]
    fh.seek(0)
    return fh


def scan(path: str | Path) -> Scan:
    """Decode every line of ``path`` with ``events.decode``; never raises for bad content.

    Blank (whitespace-only) lines are skipped, as ``events.iter_lines`` does
    and as DuckDB's reader does. Raises OSError when the file cannot be read.
    """
    with open_lines(path) as fh:
        return scan_lines(fh)


def scan_lines(lines: Iterable[bytes]) -> Scan:
    """``scan`` over lines already read (numbered from 1)."""
    out = Scan()
    by_type = out.by_type
    at_sum = 0
    at_by_position = 0
    events = 0
    last = 0
    n = 0
    for n, line in enumerate(lines, 1):
        try:
            event = decode(line)
        except MalformedEvent as exc:
            if line.strip():
                out.add_bad(n, exc.reason)
            continue
        except Exception as exc:
            # Until the decoder is hardened (issue 7), deep nesting or a `type`
            # that is an object raise other errors: still a bad line, not a crash.
            if line.strip():
                out.add_bad(n, f"the decoder failed: {type(exc).__name__}: {exc}")
            continue
        events += 1
        last = n
        by_type[_TAG[type(event)]] += 1
        at_sum += event.at
        at_by_position += events * event.at
    out.lines, out.events, out.at_sum, out.last_event_line = n, events, at_sum, last
    out.at_by_position = at_by_position
    return out


@dataclass(frozen=True, slots=True)
class Plan:
    """What to load from a scanned file."""

    keep: Callable[[int], bool] | None  # which lines to load; None: the file as it is
    skipped: tuple[BadLine, ...]  # bad lines left out (recorded in skipped_lines)
    cut: BadLine | None  # the last line, left out because the log ends mid-line


class BadLog(Exception):
    """The scan found a bad line the rules do not let the loader leave out."""

    def __init__(self, first: BadLine, count: int) -> None:
        super().__init__(first.reason)
        self.first, self.count = first, count


def plan(found: Scan, skip_bad: bool) -> Plan:
    """Apply the bad-line rule (module docstring) to a scan; raise BadLog to refuse the file."""
    if not found.bad:
        return Plan(None, (), None)
    if not found.events:
        raise BadLog(found.bad[0], len(found.bad))  # nothing in it is an event: not a log
    bad_lines = {b.line for b in found.bad}
    if skip_bad:
        return Plan(lambda n: n not in bad_lines, tuple(found.bad), None)
    first = found.bad[0]
    if len(found.bad) == 1 and first.line > found.last_event_line:
        return Plan(lambda n: n < first.line, (), first)
    raise BadLog(first, len(found.bad))


def storage_problem(event: Any) -> str | None:
    """Why the ``events`` table cannot hold this decoded event, or None when it can."""

    def walk(value: Any, where: str) -> str | None:
        if isinstance(value, bool):
            return None
        if isinstance(value, int):
            if not INT64_MIN <= value <= INT64_MAX:
                return f"integer {value} is outside the signed 64-bit range - at `{where}`"
            return None
        if isinstance(value, dict):
            for k, v in value.items():
                if (problem := walk(v, f"{where}.{k}")) is not None:
                    return problem
        elif isinstance(value, list):
            for i, v in enumerate(value):
                if (problem := walk(v, f"{where}[{i}]")) is not None:
                    return problem
        return None

    return walk(msgspec.to_builtins(event), "$")


def write_lines(src: str | Path, dst: IO[bytes], keep: Callable[[int], bool] | None,
                canonical: bool) -> tuple[list[BadLine], Scan | None]:
    """Copy the lines of ``src`` that ``keep`` accepts (all: None) to ``dst``, blank ones dropped.

    With ``canonical``, each line is written as ``events.encode`` writes its
    decoded event (every field, defaults filled in, no unknown or duplicate
    keys: the form DuckDB's reader takes exactly), and a line the events
    table cannot store is left out and returned as a BadLine. Without it the
    bytes are copied as they are. Returns the lines left out for the storage
    rule, and (canonical only) what was written, for the loader's check.
    """
    problems: list[BadLine] = []
    written = Scan() if canonical else None
    with open_lines(src) as fh:
        for n, line in _numbered(fh):
            if keep is not None and not keep(n):
                continue
            if not canonical:
                dst.write(line if line.endswith(b"\n") else line + b"\n")
                continue
            try:
                event = decode(line)
            except Exception as exc:
                # The scan took this line; decoding it again failed (until the decoder
                # bounds nesting, RecursionError depends on the stack): a bad line.
                problems.append(BadLine(n, f"the decoder failed: {type(exc).__name__}: {exc}"))
                continue
            problem = storage_problem(event)
            if problem is not None:
                problems.append(BadLine(n, problem))
                continue
            dst.write(encode(event) + b"\n")
            assert written is not None
            written.events += 1
            written.by_type[_TAG[type(event)]] += 1
            written.at_sum += event.at
            written.at_by_position += written.events * event.at
            written.last_event_line = n
    return problems, written


def _numbered(fh: IO[bytes]) -> Iterator[tuple[int, bytes]]:
    for n, line in enumerate(fh, 1):
        if line.strip():
            yield n, line
