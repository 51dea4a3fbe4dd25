"""Windowed GPU usage from the journal: the arithmetic behind the Faust projections, pure.

The live projections (``streams.projections``) keep, per cluster, GPU-seconds
per budget node (every leaf and each of its ancestors) and per host, in
tumbling windows (hourly by default) and hopping windows (a day, every six
hours, by default). This module holds everything those figures are made of,
so it is tested without a broker and the Faust agent only moves values:

- ``WindowSpec``: a tumbling or hopping window (size, step) and how an
  interval of constant use splits across its windows.
- ``UsageFold``: one journal event at a time, the audit's rules
  (``audit/sql/views.sql``): the clock ``t`` is the running maximum of ``at``;
  a run is a ``workload.started`` until the workload's next
  ``workload.preempted`` / ``workload.finished`` / ``workload.cancelled``; an
  input answered by a rejection never happened. Its output is *rate changes*:
  the GPUs held on a key (allocated or not) going up or down at an instant.
- ``apply_record``: folds one journal record into a ``Stores`` (six stores:
  fence, clock, cluster state, rates, windows and the position per journal
  partition; live, six sections of one table), writing each value with the
  journal offset it reflects. A value whose offset is at or past the record's
  already reflects it and is left alone, so a record re-delivered after a
  restart counts once.
- ``missing``: the records between the stored position and the one the
  consumer delivers, which the consumer will never deliver again; the live
  projection reads them from the journal and applies them first.
- ``figures``: the windows as of the cluster's clock: the closed GPU-seconds
  stored per window plus the open part of each rate since its last change.

Why rates and not an accrual per tick: a tick then writes one small clock
value instead of one value per running key and window; usage is written only
when a key's GPU count changes (a start or a stop), for the windows the
interval since that key's previous change spans.

Why the write order matters, and why one table: per record, each changed
rate key's windows are written before the rate itself, then the cluster state,
then the clock, then the position. A value at or past the record's offset is
trusted to mean that everything written before it for that record is stored
too, so the argument needs a restart to recover a *prefix* of the writes, and
the stores therefore share one mapping (``Stores.shared``: ``Section`` views
over one Faust table, keys ``f|``, ``c|``, ``s|``, ``r|``, ``w|``, ``p|``):

1. every write made while folding a record of journal partition *p* goes to
   partition *p* of that one table's changelog (Faust writes a table's
   changelog to the partition of the event being processed,
   ``Table._send_changelog``), in the order the fold made them;
2. Faust's producer buffer is a FIFO queue drained by one task, and aiokafka
   appends a partition's records to its batches in call order and keeps at
   most one produce request in flight per partition (the sender mutes a
   partition until its request completes, and re-enqueues a failed batch at
   the front), so the broker appends them in that order.

A kill -9 therefore leaves each changelog partition with a prefix of the
writes: the recovered table is the fold of the records up to the stored
position plus a prefix of the next one. Where the consumer resumes is a
separate matter (Faust's committed offset, which can be past the position:
``missing``), so the projection compares the two and reads back what lies
between. With five tables (five changelog topics) step 2 held per topic only:
each partition's batch is sent when its own linger expires, so a rate could be
stored and its windows lost (the kill -9 test once saw one host's daily
windows 48 GPU-s short). The pure tests replay records after cutting their
writes at every point, with re-delivery from before the cut or from past it,
and demand exactly-once figures.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any

import msgspec

from events import (
    DECISION_TYPES,
    BudgetNodeDefined,
    BudgetSharesSet,
    Event,
    HostAdded,
    HostRemoved,
    WorkloadCancelled,
    WorkloadFinished,
    WorkloadPreempted,
    WorkloadStarted,
    WorkloadSubmitted,
    decode,
)
from events.errors import AllotError
from streams.records import KIND_CLAIM, Claim, JournalRecord

HOUR = 3600
NODE = "node"
HOST = "host"
DIMENSIONS = (NODE, HOST)
# Ids of run events (starts, stops) remembered per cluster to drop exact
# duplicates. At-least-once publishing puts a retried batch right after the
# original (aiokafka keeps one request in flight per broker), so a short
# memory suffices; the run rules (no start of a running workload, no stop of a
# stopped one) cover the rest, and every other event is harmless when repeated
# (shares and hosts are set, not added). Kept short because the state value is
# rewritten, and sent to the changelog, at every run event.
RECENT_IDS = 32
_RUN_EVENTS = (WorkloadStarted, WorkloadPreempted, WorkloadFinished, WorkloadCancelled)
# The rejections that cancel the input they answer (the audit's ``accepted_events``).
REJECTIONS = frozenset({"workload.rejected", "budget.edit_rejected", "input.rejected"})


class WindowError(AllotError):
    """A window specification that cannot be used."""


class WindowSpec(msgspec.Struct, frozen=True, kw_only=True):
    """Windows ``[k*step, k*step + size)`` in event-time seconds; tumbling when ``step == size``."""

    name: str
    size_s: int
    step_s: int

    def __post_init__(self) -> None:
        if self.size_s <= 0 or self.step_s <= 0:
            raise WindowError(f"window {self.name!r}: size and step must be positive")
        if self.size_s % self.step_s:
            raise WindowError(f"window {self.name!r}: size {self.size_s} s is not a multiple of "
                              f"the step {self.step_s} s")
        if not self.name or "|" in self.name or "/" in self.name:
            raise WindowError(f"window name {self.name!r} must be non-empty, without '|' or '/'")

    @property
    def kind(self) -> str:
        return "tumbling" if self.size_s == self.step_s else "hopping"

    def starts(self, t: int) -> range:
        """The starts of every window that contains the instant ``t``."""
        step = self.step_s
        last = (t // step) * step
        return range(last - self.size_s + step, last + 1, step)

    def split(self, since: int, until: int, alloc: int,
              unalloc: int) -> Iterator[tuple[int, int, int]]:
        """``(window start, allocated GPU-s, unallocated GPU-s)`` of holding GPUs over [since, until).

        The interval is cut at step boundaries; each piece lies in exactly the
        windows that contain its first instant. Each window is yielded once.
        """
        if until <= since or (alloc == 0 and unalloc == 0):
            return
        step = self.step_s
        acc: dict[int, list[int]] = {}
        a = since
        while a < until:
            b = min(until, (a // step + 1) * step)
            d = b - a
            for s in self.starts(a):
                cell = acc.get(s)
                if cell is None:
                    acc[s] = [alloc * d, unalloc * d]
                else:
                    cell[0] += alloc * d
                    cell[1] += unalloc * d
            a = b
        for s in sorted(acc):
            yield s, acc[s][0], acc[s][1]


def tumbling(size_s: int = HOUR, name: str | None = None) -> WindowSpec:
    return WindowSpec(name=name or f"tumbling-{size_s}", size_s=size_s, step_s=size_s)


def hopping(size_s: int, step_s: int, name: str | None = None) -> WindowSpec:
    return WindowSpec(name=name or f"hopping-{size_s}-{step_s}", size_s=size_s, step_s=step_s)


DEFAULT_WINDOWS: tuple[WindowSpec, ...] = (tumbling(HOUR, "hourly"),
                                           hopping(24 * HOUR, 6 * HOUR, "daily"))


def parse_window(text: str) -> WindowSpec:
    """``NAME=SIZE`` (tumbling) or ``NAME=SIZE/STEP`` (hopping), in seconds: ``day=86400/3600``."""
    name, sep, rest = text.partition("=")
    if not sep:
        raise WindowError(f"expected NAME=SIZE or NAME=SIZE/STEP, got {text!r}")
    size, _, step = rest.partition("/")
    try:
        size_s = int(size)
        step_s = int(step) if step else size_s
    except ValueError:
        raise WindowError(f"window {text!r}: sizes are integer seconds") from None
    return WindowSpec(name=name.strip(), size_s=size_s, step_s=step_s)


# -- what the stores hold (lists and dicts, so they travel as plain JSON) --------------------
#
# fence[partition]     [token, offset]                          the partition's latest claim
# clock[cluster]       [t, offset]                              running max of ``at``
# state[cluster]       ClusterState as a dict (its "o": offset) runs, budgets, the open input
# rates[rate key]      [alloc GPUs, unalloc GPUs, since, offset]
# windows[window key]  [alloc GPU-s, unalloc GPU-s, offset]     closed up to each rate's since
# position[partition]  offset                                   the last record fully applied


def rate_key(cluster: str, dim: str, key: str) -> str:
    return f"{cluster}|{dim}|{key}"


def window_key(cluster: str, spec: str, dim: str, key: str, start: int) -> str:
    return f"{cluster}|{spec}|{dim}|{key}|{start}"


def split_window_key(wk: str) -> tuple[str, str, str, str, int]:
    """``(cluster, spec, dim, key, start)`` of a window key."""
    cluster, spec, dim, rest = wk.split("|", 3)
    key, _, start = rest.rpartition("|")
    return cluster, spec, dim, key, int(start)


class Section(MutableMapping[str, Any]):
    """The keys of one store inside a shared mapping, each stored as ``tag + '|' + key``.

    Reads that list a store (``items``, ``keys``, ``len``) scan the shared
    mapping; only the readers (``figures``, ``held``, ``/status``) list, and
    the fold itself only gets and sets single keys.
    """

    __slots__ = ("_base", "_prefix")

    def __init__(self, base: MutableMapping[str, Any], tag: str) -> None:
        if not tag or "|" in tag:
            raise WindowError(f"section tag {tag!r} must be non-empty, without '|'")
        self._base = base
        self._prefix = f"{tag}|"

    def __getitem__(self, key: str) -> Any:
        return self._base[self._prefix + key]

    def get(self, key: str, default: Any = None) -> Any:
        # The base's own get, not Mapping.get's KeyError path: a Faust table with
        # ``default=None`` answers a missing key with None rather than raising.
        v = self._base.get(self._prefix + key)
        return default if v is None else v

    def __setitem__(self, key: str, value: Any) -> None:
        self._base[self._prefix + key] = value

    def __delitem__(self, key: str) -> None:
        del self._base[self._prefix + key]

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self._base.get(self._prefix + key) is not None

    def __iter__(self) -> Iterator[str]:
        n = len(self._prefix)
        return iter([k[n:] for k in list(self._base.keys()) if k.startswith(self._prefix)])

    def __len__(self) -> int:
        return sum(1 for k in list(self._base.keys()) if k.startswith(self._prefix))


# Section tags in the shared mapping (one letter: they prefix every changelog key).
SECTION_TAGS = {"fence": "f", "clock": "c", "state": "s", "rates": "r", "windows": "w",
                "position": "p"}


class Stores:
    """The mappings a projection writes: plain dicts in tests, sections of one Faust table live."""

    __slots__ = ("clock", "fence", "position", "rates", "state", "windows")

    def __init__(self, fence: MutableMapping[str, Any] | None = None,
                 clock: MutableMapping[str, Any] | None = None,
                 state: MutableMapping[str, Any] | None = None,
                 rates: MutableMapping[str, Any] | None = None,
                 windows: MutableMapping[str, Any] | None = None,
                 position: MutableMapping[str, Any] | None = None) -> None:
        self.fence: MutableMapping[str, Any] = {} if fence is None else fence
        self.clock: MutableMapping[str, Any] = {} if clock is None else clock
        self.state: MutableMapping[str, Any] = {} if state is None else state
        self.rates: MutableMapping[str, Any] = {} if rates is None else rates
        self.windows: MutableMapping[str, Any] = {} if windows is None else windows
        self.position: MutableMapping[str, Any] = {} if position is None else position

    @classmethod
    def shared(cls, base: MutableMapping[str, Any]) -> Stores:
        """Every store as a section of ``base``: one changelog, so one ordered log of writes."""
        return cls(**{name: Section(base, tag) for name, tag in SECTION_TAGS.items()})


class ClusterState(msgspec.Struct, kw_only=True):
    """What the fold remembers between records of one cluster."""

    o: int = -1                                 # the journal offset this state reflects
    budgets: dict[str, str] = {}                # workload -> budget leaf (accepted, not ended)
    running: dict[str, list[Any]] = {}          # workload -> [allocated, [[host, gpus], ...]]
    pending: list[Any] | None = None            # [input JSON, t at it, id]: its group is open
    recent: list[str] = []                      # the last RECENT_IDS event ids
    shares: dict[str, int] = {}                 # budget node -> shares (for entitlements)
    hosts: dict[str, int] = {}                  # host -> GPUs (the cluster's capacity)


def load_state(raw: Mapping[str, Any] | None) -> ClusterState:
    return ClusterState() if raw is None else msgspec.convert(raw, ClusterState)


def dump_state(s: ClusterState) -> dict[str, Any]:
    return msgspec.to_builtins(s)


class RateChange(msgspec.Struct, frozen=True):
    """The GPUs held on ``key`` of ``dim`` change by (``alloc``, ``unalloc``) at ``t``."""

    dim: str
    key: str
    alloc: int
    unalloc: int
    t: int


def node_path(budget: str) -> list[str]:
    """A budget node and its ancestors, root first: ``lab``, ``lab/a``, ``lab/a/b``."""
    parts = budget.split("/")
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


class UsageFold:
    """The audit's run rules over one cluster's journal events, as rate changes."""

    @staticmethod
    def step(s: ClusterState, e: Event, t: int) -> tuple[list[RateChange], bool]:
        """Fold ``e`` (at clock ``t``) into ``s``; the rate changes and whether ``s`` changed.

        Inputs that can start or stop usage are held until their group closes
        (the cluster's next input, or a rejection naming them): only then is
        it known that they took effect, and they take effect at their own time.
        """
        if e.id in s.recent:
            return [], False
        out: list[RateChange] = []
        changed = False
        if type(e) in _RUN_EVENTS:
            s.recent = [*s.recent[-(RECENT_IDS - 1):], e.id]
            changed = True
        tag = type(e).__struct_config__.tag
        if type(e) in DECISION_TYPES:
            if tag in REJECTIONS:
                if s.pending is not None and e.cause == s.pending[2]:
                    s.pending = None
                    changed = True
                if tag == "workload.rejected":
                    changed |= s.budgets.pop(e.workload, None) is not None  # type: ignore[attr-defined]
            elif type(e) is WorkloadStarted:
                _start(s, e, t, out)
            elif type(e) is WorkloadPreempted:
                _stop(s, e.workload, t, out, ended=not e.requeued)
            return out, changed
        if s.pending is not None:  # the previous input's group is complete: it was accepted
            held, at_t, _ = s.pending
            _accept(s, decode(held), int(at_t), out)
            s.pending = None
            changed = True
        if type(e) in _HELD:
            s.pending = [msgspec.json.encode(e).decode(), t, e.id]
            changed = True
        return out, changed


# Inputs whose effect waits for their group to close (a rejection would cancel it).
_HELD = (WorkloadSubmitted, WorkloadFinished, WorkloadCancelled, BudgetNodeDefined,
         BudgetSharesSet, HostAdded, HostRemoved)


def _accept(s: ClusterState, e: Event, t: int, out: list[RateChange]) -> None:
    """An input whose group closed without a rejection: it took effect at ``t``."""
    if type(e) is WorkloadSubmitted:
        s.budgets.setdefault(e.workload, e.budget)
    elif type(e) in (WorkloadFinished, WorkloadCancelled):
        _stop(s, e.workload, t, out, ended=True)  # type: ignore[attr-defined]
    elif type(e) is BudgetNodeDefined:
        s.shares[e.path] = e.shares
    elif type(e) is BudgetSharesSet:
        for cs in e.shares:
            s.shares[f"{e.parent}/{cs.child}"] = cs.shares
    elif type(e) is HostAdded:
        s.hosts[e.host] = e.gpus
    elif type(e) is HostRemoved:
        s.hosts.pop(e.host, None)


def entitlement(shares: Mapping[str, int], node: str) -> float:
    """``node``'s fraction of the cluster: the product of normalised shares along its path."""
    f = 1.0
    parts = node.split("/")
    for i in range(1, len(parts)):
        parent = "/".join(parts[:i])
        me = "/".join(parts[: i + 1])
        sibs = [p for p in shares if p.rsplit("/", 1)[0] == parent and p.count("/") == i]
        total = sum(shares[p] for p in sibs)
        if me not in shares or total <= 0:
            return 0.0
        f *= shares[me] / total
    return f


def _changes(budget: str, allocated: bool, slots: list[list[Any]], sign: int,
             t: int) -> list[RateChange]:
    gpus = sum(int(g) for _, g in slots)
    a, u = (gpus, 0) if allocated else (0, gpus)
    out = [RateChange(NODE, n, sign * a, sign * u, t) for n in node_path(budget)]
    for host, g in slots:
        ga, gu = (int(g), 0) if allocated else (0, int(g))
        out.append(RateChange(HOST, str(host), sign * ga, sign * gu, t))
    return out


def _start(s: ClusterState, e: WorkloadStarted, t: int, out: list[RateChange]) -> None:
    if e.workload in s.running:
        return  # a copy of a start already counted
    budget = s.budgets.get(e.workload)
    if budget is None:
        return  # no accepted submission in this journal: the audit has no such run either
    slots = [[sl.host, sl.gpus] for sl in e.placement]
    s.running[e.workload] = [bool(e.allocated), slots]
    out.extend(_changes(budget, bool(e.allocated), slots, +1, t))


def _stop(s: ClusterState, workload: str, t: int, out: list[RateChange], ended: bool) -> None:
    run = s.running.pop(workload, None)
    budget = s.budgets.get(workload)
    if ended:
        s.budgets.pop(workload, None)
    if run is not None and budget is not None:
        out.extend(_changes(budget, bool(run[0]), run[1], -1, t))


# -- one record into the stores -------------------------------------------------------------


class Applied(msgspec.Struct, kw_only=True):
    """What ``apply_record`` did with one record (counters and tests read it)."""

    fenced: bool = False        # written under a claim that is not the partition's latest
    skipped: bool = False       # already reflected in the stores (a re-delivery)
    claim: bool = False
    cluster: str | None = None
    changes: int = 0
    t: int | None = None        # the cluster's clock after the record


def apply_record(stores: Stores, rec: JournalRecord, windows: tuple[WindowSpec, ...],
                 event: Event | None = None) -> Applied:
    """Fold one journal record into ``stores``; every value written carries ``rec.offset``.

    The record's last write is its partition's position (``advance``), so a
    stored position means every write of that record is stored too.
    """
    res = _apply(stores, rec, windows, event)
    advance(stores, rec.partition, rec.offset)
    return res


def advance(stores: Stores, partition: int, offset: int) -> None:
    """Record that the journal record at ``offset`` of ``partition`` is fully applied.

    Called for every record, also for one that changes nothing (a fenced or
    unreadable record, a tick at the same time), so that ``missing`` can tell
    a record the consumer skipped from one that changed nothing.
    """
    p = str(partition)
    pos = stores.position.get(p)
    if pos is None or int(pos) < offset:
        stores.position[p] = offset


def missing(stores: Stores, partition: int, offset: int) -> range:
    """The offsets before ``offset`` of ``partition`` never applied: empty unless records were skipped.

    The consumer resumes from its committed offset, and Faust can commit an
    offset whose changelog writes a crash then loses: ``ProducerBuffer.flush``
    returns after 0.1 s without progress, and does not wait for the message its
    sender has taken off the queue but not yet handed to aiokafka. The records
    in between would never come again. The position, stored with the state it
    describes (the tracking record of pyeventsourcing), says where the state
    really is; the caller reads the missing records from the journal and
    applies them before ``offset``.
    """
    pos = stores.position.get(str(partition))
    start = 0 if pos is None else int(pos) + 1
    return range(start, max(start, offset))


def _apply(stores: Stores, rec: JournalRecord, windows: tuple[WindowSpec, ...],
           event: Event | None) -> Applied:
    p = str(rec.partition)
    o = rec.offset
    fence = stores.fence.get(p)
    if rec.kind == KIND_CLAIM:
        if fence is not None and int(fence[1]) >= o:
            return Applied(skipped=True, claim=True)
        try:
            claim = msgspec.json.decode(rec.value, type=Claim)
        except msgspec.DecodeError:
            return Applied(fenced=True, claim=True)
        if claim.token != rec.owner:
            return Applied(fenced=True, claim=True)
        stores.fence[p] = [claim.token, o]
        return Applied(claim=True)
    if fence is None or rec.owner != fence[0]:
        return Applied(fenced=True)
    e = event if event is not None else decode(rec.value)
    cluster = e.cluster
    clock = stores.clock.get(cluster)
    if clock is not None and int(clock[1]) >= o:
        return Applied(skipped=True, cluster=cluster, t=int(clock[0]))
    t_old = None if clock is None else int(clock[0])
    t = e.at if t_old is None else max(t_old, e.at)
    st = load_state(stores.state.get(cluster))
    res = Applied(cluster=cluster, t=t)
    if st.o >= o:
        res.skipped = True
    else:
        changes, changed = UsageFold.step(st, e, t)
        for ch in _merge(changes):
            _apply_rate(stores, cluster, ch, o, windows)
        res.changes = len(changes)
        if changed:
            st.o = o
            stores.state[cluster] = dump_state(st)
    if t_old is None or t != t_old:
        stores.clock[cluster] = [t, o]
    return res


def _merge(changes: list[RateChange]) -> list[RateChange]:
    """One change per key and instant, in first-seen order (zero sums dropped)."""
    acc: dict[tuple[str, str, int], list[int]] = {}
    for c in changes:
        cell = acc.setdefault((c.dim, c.key, c.t), [0, 0])
        cell[0] += c.alloc
        cell[1] += c.unalloc
    return [RateChange(d, k, a, u, t) for (d, k, t), (a, u) in acc.items() if a or u]


def _apply_rate(stores: Stores, cluster: str, ch: RateChange, o: int,
                windows: tuple[WindowSpec, ...]) -> None:
    rk = rate_key(cluster, ch.dim, ch.key)
    r = stores.rates.get(rk)
    if r is not None and int(r[3]) >= o:
        return
    a, u, since = (0, 0, ch.t) if r is None else (int(r[0]), int(r[1]), int(r[2]))
    for spec in windows:
        for start, ga, gu in spec.split(since, ch.t, a, u):
            wk = window_key(cluster, spec.name, ch.dim, ch.key, start)
            w = stores.windows.get(wk)
            if w is None:
                stores.windows[wk] = [ga, gu, o]
            elif int(w[2]) < o:
                stores.windows[wk] = [int(w[0]) + ga, int(w[1]) + gu, o]
    stores.rates[rk] = [a + ch.alloc, u + ch.unalloc, max(since, ch.t), o]


# -- reading -------------------------------------------------------------------------------


def figures(stores: Stores, cluster: str, spec: WindowSpec, dim: str,
            as_of: int | None = None) -> dict[str, dict[int, tuple[int, int]]]:
    """``key -> window start -> (alloc GPU-s, unalloc GPU-s)`` as of ``as_of`` (default: the clock).

    The stored windows hold what closed up to each rate's last change; the
    open part (the GPUs held since then) is added up to ``as_of``.
    """
    if as_of is None:
        clock = stores.clock.get(cluster)
        as_of = int(clock[0]) if clock is not None else 0
    out: dict[str, dict[int, tuple[int, int]]] = {}

    def add(key: str, start: int, a: int, u: int) -> None:
        cells = out.setdefault(key, {})
        a0, u0 = cells.get(start, (0, 0))
        cells[start] = (a0 + a, u0 + u)

    prefix = f"{cluster}|{spec.name}|{dim}|"
    for wk, w in list(stores.windows.items()):
        if wk.startswith(prefix):
            key, _, start = wk[len(prefix):].rpartition("|")
            add(key, int(start), int(w[0]), int(w[1]))
    rprefix = f"{cluster}|{dim}|"
    for rk, r in list(stores.rates.items()):
        if rk.startswith(rprefix):
            key = rk[len(rprefix):]
            for start, ga, gu in spec.split(int(r[2]), as_of, int(r[0]), int(r[1])):
                add(key, start, ga, gu)
    return out


def held(stores: Stores, cluster: str, dim: str) -> dict[str, tuple[int, int]]:
    """GPUs held right now per key of ``dim``: (allocated, unallocated), nonzero only."""
    rprefix = f"{cluster}|{dim}|"
    return {rk[len(rprefix):]: (int(r[0]), int(r[1])) for rk, r in list(stores.rates.items())
            if rk.startswith(rprefix) and (int(r[0]) or int(r[1]))}


def prune_windows(stores: Stores, cluster: str, windows: tuple[WindowSpec, ...],
                  before: int) -> int:
    """Delete ``cluster``'s windows that ended at or before ``before``; how many went."""
    sizes = {w.name: w.size_s for w in windows}
    gone = 0
    for wk in list(stores.windows.keys()):
        c, spec, _, _, start = split_window_key(wk)
        size = sizes.get(spec)
        if c == cluster and size is not None and start + size <= before:
            del stores.windows[wk]
            gone += 1
    return gone


__all__ = [
    "DEFAULT_WINDOWS",
    "DIMENSIONS",
    "HOST",
    "HOUR",
    "NODE",
    "SECTION_TAGS",
    "Applied",
    "ClusterState",
    "RateChange",
    "Section",
    "Stores",
    "UsageFold",
    "WindowError",
    "WindowSpec",
    "advance",
    "apply_record",
    "entitlement",
    "figures",
    "held",
    "hopping",
    "load_state",
    "missing",
    "node_path",
    "parse_window",
    "prune_windows",
    "tumbling",
]
