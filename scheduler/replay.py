"""Folding a journal: the one way a recorded log becomes an engine, and the check that it is honest.

A journal is a sequence of *groups*: an input, then the decisions the engine
derived from it (decision types, ``cause`` = that input's id, ids
``<cause>/<n>``). Nothing a producer writes can make a record a decision:
admission (``scheduler.admission``) keeps decision types, ``cause`` and ids
with ``/`` out of the journal, so a record is a decision exactly when the
journal's structure says so.

Three readers share this module:

- ``JournalFold`` / ``fold_log``: rebuild the state by folding each input the
  way the live engine did (admit, dedupe, validate, record, fold if valid) and
  each recorded decision as a fact, without re-deriving anything. The live
  worker's restart, ``allot explain`` and the snapshot tests use it. A record
  the live engine could not have written (an inadmissible input, a decision
  outside its input's group) is skipped and counted: the live state never
  held it, so the fold does not either.
- ``JournalFold.finish(recover=True)``: the restart of a worker that died
  between publishing an input and all of its decisions. The last input is
  processed again (the cycle is deterministic) and the decisions the journal
  lacks are returned, to be appended.
- ``verify_log``: the replay check. Every input is processed again and its
  derived decisions must equal, value for value and in order, the ones
  recorded after it; the first difference is reported with its line.

Duplicates (at-least-once publishing) are dropped by the engine's own dedupe
window, the same rule as live: an id re-used after ``dedupe_window_s`` is a new
event here exactly as it was live.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable

import msgspec

from events import DECISION_TYPES, ClockTicked, Event, MalformedEvent, tag_of
from events.codec import read_numbered
from events.errors import AllotError
from scheduler.admission import InputRefused
from scheduler.engine import Engine


class JournalError(AllotError):
    """A journal allot could not have written, where the caller needs it to be exact."""


def _group_index(d: Event, cause: str) -> int | None:
    """``n`` when ``d.id`` is ``<cause>/<n>``, else None."""
    head, sep, tail = d.id.rpartition("/")
    if not sep or head != cause or not tail.isdigit():
        return None
    return int(tail)


class JournalFold:
    """Folds one cluster's journal record by record, reaching the state the live engine had."""

    __slots__ = ("_decisions", "_input", "decisions", "duplicates", "engine", "inputs",
                 "orphans", "refused")

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._input: Event | None = None  # the last input, folded when its group is complete
        self._decisions: list[Event] = []
        self.inputs = 0
        self.decisions = 0
        self.duplicates = 0
        self.refused = 0   # inputs the live engine would have refused (never journaled by allot)
        self.orphans = 0   # decisions outside their input's group

    def add(self, e: Event) -> None:
        """The next journal record of this cluster, in journal order."""
        if type(e) in DECISION_TYPES:
            inp = self._input
            if inp is None or e.cause != inp.id or _group_index(e, inp.id) is None:
                self.orphans += 1
                return
            self._decisions.append(e)
            return
        self.flush()
        self._input = e

    def flush(self) -> None:
        """Fold the current group now (the caller knows all of its decisions were added)."""
        e = self._input
        if e is None:
            return
        decisions, self._input, self._decisions = self._decisions, None, []
        engine = self.engine
        try:
            verdict = engine.fold_input(e)
        except InputRefused:
            self.refused += 1
            self.orphans += len(decisions)
            return
        if verdict is False:
            self.duplicates += 1
        else:
            self.inputs += 1
        for d in decisions:
            if engine.fold_decision(d):
                self.decisions += 1
            else:
                self.duplicates += 1

    def finish(self, recover: bool = False) -> list[Event]:
        """Fold the last group. With ``recover``, re-run the last input and return what is missing.

        The returned decisions are the ones the engine derives for the last
        input after those the journal already holds (a crash in the middle of
        publishing them); the caller appends them. Raises JournalError when
        the recorded ones are not a prefix of what the engine derives.
        """
        e = self._input
        if not recover or e is None:
            self.flush()
            return []
        recorded = []
        seen: set[str] = set()
        for d in self._decisions:
            if d.id not in seen:
                seen.add(d.id)
                recorded.append(d)
        self.duplicates += len(self._decisions) - len(recorded)
        self._input, self._decisions = None, []
        try:
            derived = self.engine.process(e)
        except InputRefused:
            self.refused += 1
            return []
        if derived is None:  # the last input was itself a duplicate: its decisions were too
            self.duplicates += 1 + len(recorded)
            return []
        self.inputs += 1
        if derived[: len(recorded)] != recorded:
            raise JournalError(
                f"the journal's {len(recorded)} decision(s) for its last input {e.id!r} are not "
                f"what the engine derives from it; the journal was not written by this core")
        self.decisions += len(derived)
        return derived[len(recorded):]


def fold_log(events: Iterable[Event], until: int | None = None,
             cluster: str | None = None) -> Engine:
    """The engine a journal leaves behind (one cluster: ``cluster``, else the first record's).

    ``until`` stops before the first tick later than it: the state as of the
    trusted time ``until``. Records of other clusters are skipped.
    """
    fold: JournalFold | None = None
    for e in events:
        if fold is None:
            fold = JournalFold(Engine(cluster if cluster is not None else e.cluster))
        if e.cluster != fold.engine.state.cluster:
            continue
        if until is not None and type(e) is ClockTicked and e.at > until:
            break
        fold.add(e)
    if fold is None:
        return Engine(cluster if cluster is not None else "default")
    fold.finish()
    return fold.engine


# -- the replay check -------------------------------------------------------------------------


class Divergence(msgspec.Struct, kw_only=True):
    """Where the log and the re-derived decisions part."""

    line: int                  # 1-based line in the log
    event_id: str | None       # the recorded event at that line (None at end of log)
    kind: str                  # changed | unexpected | missing | refused | malformed
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


def _digest(e: Event) -> bytes:
    return hashlib.blake2b(msgspec.json.encode(e), digest_size=16).digest()


def _diff(a: dict, b: dict) -> str:
    keys = [k for k in dict.fromkeys([*a, *b]) if a.get(k) != b.get(k)]
    return ", ".join(f"{k}: recorded {a.get(k)!r}, re-derived {b.get(k)!r}" for k in keys)


class _Cluster:
    """One cluster's replay: its engine, the decisions still expected, what it recorded."""

    __slots__ = ("digests", "engine", "expected", "input_line")

    def __init__(self, cluster: str) -> None:
        self.engine = Engine(cluster)
        self.expected: list[Event] = []  # decisions the last input derives, not yet matched
        self.input_line = 0
        self.digests: dict[str, bytes] = {}  # decision id -> digest, within the dedupe window


def verify_log(events: Iterable[tuple[int, Event]],
               progress: Callable[[int], None] | None = None) -> ReplayResult:
    """Replay ``(line, event)`` pairs; stop at the first divergence."""
    clusters: dict[str, _Cluster] = {}
    n = inputs = decisions = dups = 0
    last_line = 0

    def result(div: Divergence | None) -> ReplayResult:
        return ReplayResult(events=n, inputs=inputs, decisions=decisions, duplicates=dups,
                            divergence=div)

    def missing(c: _Cluster, line: int) -> Divergence:
        e = c.expected[0]
        return Divergence(line=line, event_id=None, kind="missing",
                          detail=f"the input at line {c.input_line} re-derives {tag_of(type(e))} "
                                 f"{e.id} ({len(c.expected)} decision(s)) that the log does not "
                                 f"record", rederived=_fields(e))

    for line, e in events:
        n += 1
        last_line = line
        if progress is not None and n % 50_000 == 0:
            progress(n)
        c = clusters.get(e.cluster)
        if c is None:
            c = clusters[e.cluster] = _Cluster(e.cluster)
        if type(e) not in DECISION_TYPES:
            try:
                c.engine.admit(e)
            except InputRefused as exc:
                return result(Divergence(
                    line=line, event_id=e.id, kind="refused",
                    detail=f"the scheduler refuses this input ({exc}), so it cannot be in a "
                           f"journal", recorded=_fields(e)))
            if c.engine.state.has_seen(e.id):  # a copy of an input already replayed
                dups += 1
                continue
            if c.expected:
                return result(missing(c, line))
            out = c.engine.process(e)
            if out is None:
                dups += 1
                continue
            inputs += 1
            c.input_line = line
            c.expected = list(out)
            if len(c.digests) > 200_000:
                seen = c.engine.state.has_seen
                c.digests = {k: v for k, v in c.digests.items() if seen(k)}
            continue
        if c.expected:
            want = c.expected[0]
            if want == e:
                c.expected.pop(0)
                c.digests[e.id] = _digest(e)
                decisions += 1
                continue
        known = c.digests.get(e.id)
        if known is not None and c.engine.state.has_seen(e.id):
            if known != _digest(e):
                return result(Divergence(
                    line=line, event_id=e.id, kind="changed",
                    detail=f"a second copy of decision {e.id} differs from the first (duplicates "
                           f"must be exact)", recorded=_fields(e)))
            dups += 1
            continue
        if c.expected:
            want = c.expected[0]
            a, b = _fields(e), _fields(want)
            return result(Divergence(line=line, event_id=e.id, kind="changed",
                                     detail=_diff(a, b), recorded=a, rederived=b))
        return result(Divergence(line=line, event_id=e.id, kind="unexpected",
                                 detail=f"{tag_of(type(e))} {e.id} is not a decision the "
                                        f"scheduler makes here", recorded=_fields(e)))
    for c in clusters.values():
        if c.expected:
            return result(missing(c, last_line + 1))
    return result(None)


def numbered(path: str) -> Iterable[tuple[int, Event]]:
    """``(line, event)`` from a JSON-lines log; a malformed line raises MalformedEvent naming it."""
    return read_numbered(path)


def verify_file(path: str, progress: Callable[[int], None] | None = None) -> ReplayResult:
    """Replay a JSON-lines log file; a malformed line is reported as a divergence."""
    try:
        return verify_log(numbered(path), progress)
    except MalformedEvent as exc:
        return ReplayResult(events=0, inputs=0, decisions=0, duplicates=0,
                            divergence=Divergence(line=exc.line or 0, event_id=None,
                                                  kind="malformed", detail=str(exc)))


__all__ = ["Divergence", "JournalError", "JournalFold", "ReplayResult", "fold_log", "numbered",
           "verify_file", "verify_log"]
