"""Replay: fold a recorded log through the pure core and re-derive every decision.

For every input in the log the engine reacts exactly as the live scheduler
did; its derived events must equal, value for value and in order, the
decisions recorded right after that input. The first difference is reported
with its position, so a tampered, truncated or reordered decision is caught
and named. Duplicate records (at-least-once transport) are tolerated: an input
or decision whose id was already seen is skipped, as every consumer does.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path

import msgspec

from events import Event, MalformedEvent, decode
from scheduler import Engine


class Divergence(msgspec.Struct, kw_only=True):
    """Where the log and the re-derived decisions part."""

    line: int                  # 1-based line in the log
    event_id: str | None       # the recorded event at that line (None at end of log)
    kind: str                  # changed | unexpected | missing | malformed
    detail: str
    recorded: dict | None = None
    rederived: dict | None = None


class ReplayResult(msgspec.Struct, kw_only=True):
    """What a replay found."""

    events: int
    inputs: int
    decisions: int
    duplicates: int
    divergence: Divergence | None = None

    @property
    def ok(self) -> bool:
        return self.divergence is None


def _fields(e: Event) -> dict:
    return msgspec.to_builtins(e)


def _diff(a: dict, b: dict) -> str:
    keys = [k for k in dict.fromkeys([*a, *b]) if a.get(k) != b.get(k)]
    return ", ".join(f"{k}: recorded {a.get(k)!r}, re-derived {b.get(k)!r}" for k in keys)


def replay(events: Iterable[tuple[int, Event]],
           progress: Callable[[int], None] | None = None) -> ReplayResult:
    """Replay ``(line, event)`` pairs; stop at the first divergence."""
    engines: dict[str, Engine] = {}
    expected: dict[str, deque[tuple[Event, int]]] = {}  # per cluster: (decision, input line)
    seen: set[str] = set()
    n = inputs = decisions = dups = 0
    last_line = 0

    def leftover(line: int) -> Divergence | None:
        for q in expected.values():
            if q:
                e, at_line = q[0]
                return Divergence(line=line, event_id=None, kind="missing",
                                  detail=f"the input at line {at_line} re-derives "
                                         f"{type(e).__struct_config__.tag} {e.id} "
                                         f"({len(q)} decision(s)) that the log does not record",
                                  rederived=_fields(e))
        return None

    for line, e in events:
        n += 1
        last_line = line
        if progress is not None and n % 50_000 == 0:
            progress(n)
        if e.id in seen:
            dups += 1
            continue
        seen.add(e.id)
        cluster = e.cluster
        eng = engines.get(cluster)
        if eng is None:
            eng = engines[cluster] = Engine(cluster)
            expected[cluster] = deque()
        q = expected[cluster]
        if e.cause is None:
            miss = leftover(line)
            if miss is not None:
                return ReplayResult(events=n, inputs=inputs, decisions=decisions,
                                    duplicates=dups, divergence=miss)
            inputs += 1
            out = eng.process(e)
            if out:
                q.extend((d, line) for d in out)
            continue
        decisions += 1
        if not q:
            return ReplayResult(
                events=n, inputs=inputs, decisions=decisions, duplicates=dups,
                divergence=Divergence(line=line, event_id=e.id, kind="unexpected",
                                      detail=f"{type(e).__struct_config__.tag} {e.id} is not a "
                                             f"decision the scheduler makes here",
                                      recorded=_fields(e)))
        want, _ = q.popleft()
        if want != e:
            a, b = _fields(e), _fields(want)
            return ReplayResult(
                events=n, inputs=inputs, decisions=decisions, duplicates=dups,
                divergence=Divergence(line=line, event_id=e.id, kind="changed",
                                      detail=_diff(a, b), recorded=a, rederived=b))
    miss = leftover(last_line + 1)
    return ReplayResult(events=n, inputs=inputs, decisions=decisions, duplicates=dups,
                        divergence=miss)


def numbered(path: str | Path) -> Iterable[tuple[int, Event]]:
    """``(line, event)`` from a JSON-lines log; a malformed line raises MalformedEvent naming it."""
    with open(path, "rb") as fh:
        for i, raw in enumerate(fh, 1):
            raw = raw.strip()
            if not raw:
                continue
            try:
                yield i, decode(raw)
            except MalformedEvent as exc:
                raise MalformedEvent(f"line {i}: {exc.reason}", raw) from exc


def replay_file(path: str | Path, progress: Callable[[int], None] | None = None) -> ReplayResult:
    """Replay a JSON-lines log file; a malformed line is reported as a divergence."""
    try:
        return replay(numbered(path), progress)
    except MalformedEvent as exc:
        line = int(exc.reason.split(":", 1)[0].removeprefix("line ")) if \
            exc.reason.startswith("line ") else 0
        return ReplayResult(events=0, inputs=0, decisions=0, duplicates=0,
                            divergence=Divergence(line=line, event_id=None, kind="malformed",
                                                  detail=exc.reason))
