"""Workloads: the queue per budget leaf, the running set, and every lifecycle.

Pending workloads are kept per leaf in the order the leaf serves them: higher
priority first, then earlier submission, then log order. Priority never crosses
leaves: fair share decides between leaves, priority only inside one.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import deque
from collections.abc import Mapping
from typing import NamedTuple

PENDING = "pending"
RUNNING = "running"
SUCCEEDED = "succeeded"
FAILED = "failed"
CANCELLED = "cancelled"
PREEMPTED = "preempted"  # ended by preemption (not resumable)
REJECTED = "rejected"

ENDED = frozenset({SUCCEEDED, FAILED, CANCELLED, PREEMPTED, REJECTED})


class Workload:
    """A workload's contract and where it is in its lifecycle."""

    __slots__ = (
        "allocated", "budget", "checkpoint_interval_s", "expected_duration_s", "gpus",
        "gpus_per_host", "hosts", "id", "kind", "min_runtime_s", "placement", "preemptions",
        "priority", "protected_until", "queue_key", "restart_overhead_s", "resumable", "runs",
        "started_at", "status", "submit_event", "submitted_at", "user",
    )

    def __init__(
        self,
        *,
        id: str,
        budget: str,
        user: str,
        gpus: int,
        hosts: int,
        gpus_per_host: int,
        min_runtime_s: int,
        resumable: bool,
        priority: int,
        kind: str,
        submitted_at: int,
        seq: int,
        submit_event: str,
        expected_duration_s: int | None = None,
        checkpoint_interval_s: int | None = None,
        restart_overhead_s: int = 0,
    ) -> None:
        self.id = id
        self.budget = budget
        self.user = user
        self.gpus = gpus
        self.hosts = hosts
        self.gpus_per_host = gpus_per_host
        self.min_runtime_s = min_runtime_s
        self.resumable = resumable
        self.priority = priority
        self.kind = kind
        self.submitted_at = submitted_at
        self.submit_event = submit_event
        self.expected_duration_s = expected_duration_s
        # The contract's cost of a preemption (see events.workload.WorkloadSubmitted).
        self.checkpoint_interval_s = checkpoint_interval_s
        self.restart_overhead_s = restart_overhead_s
        self.status = PENDING
        self.queue_key = (-priority, submitted_at, seq, id)
        self.allocated = min_runtime_s > 0
        self.started_at: int | None = None
        self.protected_until: int | None = None
        self.placement: tuple[tuple[str, int], ...] = ()
        self.runs = 0
        self.preemptions = 0

    def protected_at(self, now: int) -> bool:
        """True while the workload may not be preempted (except by a host failure)."""
        if self.status != RUNNING:
            return False
        return self.protected_until is None or now < self.protected_until

    def __repr__(self) -> str:
        return f"Workload({self.id!r}, {self.budget}, {self.gpus} GPUs, {self.status})"


MOVES_KEPT = 4096  # starts and stops the journal keeps (a cycle rarely makes more than a few hundred)


class Move(NamedTuple):
    """One change of the running set: a start (with what it started with) or a stop (``started_at`` None)."""

    id: str
    budget: str
    gpus: int
    allocated: bool
    protected_until: int | None
    started_at: int | None


# The queues hold (queue_key, workload) pairs and are searched without a key
# function: queue keys are unique (they end with the workload id), so tuple
# order is queue-key order and never compares two workloads, and ``(key,)``
# sorts just before ``(key, workload)``. (A key function is a Python call per
# comparison; the tuples compare in C.)


class WorkloadsProjection:
    """The fold of workload lifecycle events."""

    __slots__ = ("_queue", "all", "by_shape", "ended", "free_by_shape", "free_shapes", "moves",
                 "pending", "pending_free", "protection_ends", "running", "running_version", "seq")

    def __init__(self) -> None:
        self.all: dict[str, Workload] = {}
        # Per leaf, in serving order: allocated work (min runtime > 0) and
        # unallocated work (min runtime 0) queue apart, since they are served
        # in different steps of the cycle.
        self.pending: dict[str, list[tuple[tuple[int, int, int, str], Workload]]] = {}
        self.pending_free: dict[str, list[tuple[tuple[int, int, int, str], Workload]]] = {}
        # ``queue`` (built on first read, then kept): see there.
        self._queue: list[tuple[tuple[int, int, int, str], Workload]] | None = None
        self.running: dict[str, Workload] = {}
        self.running_version = 0  # bumped whenever the running set changes (memo key)
        # The running set's ``protected_until`` values, sorted (one per protected
        # run): when the next protection ends is a bisection, not a sort of the
        # running set after each change. Derived, so not in a snapshot.
        self.protection_ends: list[int] = []
        # The latest changes of the running set, oldest first: the last
        # ``len(moves)`` of them, which took ``running_version`` from
        # ``running_version - len(moves)`` to where it is. A start records what
        # it was started with (a later stop resets the workload's fields), a
        # stop only the workload. Derived values kept incrementally across
        # starts and stops (the fair-share base, the victim index) replay them; a reader
        # further behind than the journal reaches recomputes. Bounded, and not
        # part of the state (a restored state starts it empty).
        self.moves: list[Move] = []
        self.seq = 0  # submissions seen: the last tie-breaker of the queue order
        # (hosts, GPUs per host) -> how many unallocated workloads wait with that shape
        self.free_shapes: dict[tuple[int, int], int] = {}
        # Allocated pending work per leaf, split by shape (each list in serving
        # order): a cycle visits only shapes that could start, so a small job is
        # not stuck behind a long line of large ones it would never be compared to.
        self.by_shape: dict[str, dict[tuple[int, int], list[tuple[tuple[int, int, int, str], Workload]]]] = {}
        # The same split for unallocated pending work: lending visits only the
        # shapes that still fit, however long a leaf's queue is.
        self.free_by_shape: dict[str, dict[tuple[int, int], list[tuple[tuple[int, int, int, str], Workload]]]] = {}
        # Ended workloads still in ``all``, as (trusted time it ended, id), in the
        # order they ended (so times never decrease): the lapse rule
        # (``State.forget_ended``) takes them off the front once nothing can refer
        # to them, so ``all`` holds live work plus a bounded recent past.
        self.ended: deque[tuple[int, str]] = deque()

    @property
    def queue(self) -> list[tuple[tuple[int, int, int, str], Workload]]:
        """Every pending workload of every leaf, both kinds, in one global order of ``queue_key``.

        The old scheduler's single queue: scheduler.policy.baseline reads its head every
        cycle (merging the leaves' queues anew cost a third of its time). Derived
        from the leaves' queues, so not in a snapshot; built on the first read
        and kept from then on, so a fold that never reads it (the budget
        policy's) never pays for keeping it: each insertion and removal moves
        the tail of a list as long as the whole backlog.
        """
        q = self._queue
        if q is None:
            q = self._queue = sorted([item for queues in (self.pending, self.pending_free)
                                      for leaf in queues.values() for item in leaf])
        return q

    def submit(self, w: Workload) -> None:
        self.all[w.id] = w
        self.seq += 1
        self._enqueue(w)

    def _queues(self, w: Workload) -> dict[str, list[tuple[tuple[int, int, int, str], Workload]]]:
        return self.pending if w.min_runtime_s > 0 else self.pending_free

    def _enqueue(self, w: Workload) -> None:
        w.status = PENDING
        insort(self._queues(w).setdefault(w.budget, []), (w.queue_key, w))
        if self._queue is not None:
            insort(self._queue, (w.queue_key, w))
        shape = (w.hosts, w.gpus_per_host)
        if w.min_runtime_s == 0:
            self.free_shapes[shape] = self.free_shapes.get(shape, 0) + 1
            index = self.free_by_shape
        else:
            index = self.by_shape
        insort(index.setdefault(w.budget, {}).setdefault(shape, []), (w.queue_key, w))

    def _dequeue(self, w: Workload) -> None:
        shape = (w.hosts, w.gpus_per_host)
        if w.min_runtime_s == 0:
            self.free_shapes[shape] -= 1
            if not self.free_shapes[shape]:
                del self.free_shapes[shape]
            index = self.free_by_shape
        else:
            index = self.by_shape
        shapes = index[w.budget]
        q = shapes[shape]
        del q[bisect_left(q, (w.queue_key,))]
        if not q:
            del shapes[shape]
            if not shapes:
                del index[w.budget]
        queues = self._queues(w)
        q = queues[w.budget]
        del q[bisect_left(q, (w.queue_key,))]
        if not q:
            del queues[w.budget]
        everyone = self._queue
        if everyone is not None:
            del everyone[bisect_left(everyone, (w.queue_key,))]

    def start(self, w: Workload, placement: tuple[tuple[str, int], ...], allocated: bool,
              protected_until: int | None, now: int) -> None:
        self._dequeue(w)
        w.status = RUNNING
        w.placement = placement
        w.allocated = allocated
        w.protected_until = protected_until
        w.started_at = now
        w.runs += 1
        if protected_until is not None:
            insort(self.protection_ends, protected_until)
        self.running[w.id] = w
        self.running_version += 1
        self._moved(Move(w.id, w.budget, w.gpus, allocated, protected_until, now))

    def _moved(self, move: Move) -> None:
        moves = self.moves
        moves.append(move)
        if len(moves) > MOVES_KEPT:
            del moves[: MOVES_KEPT // 2]

    def stop(self, w: Workload, status: str) -> None:
        """End a run: requeue (``PENDING``) or end with ``status``."""
        del self.running[w.id]
        self.running_version += 1
        self._moved(Move(w.id, w.budget, 0, False, None, None))
        if w.protected_until is not None:
            ends = self.protection_ends
            del ends[bisect_left(ends, w.protected_until)]
        w.placement = ()
        w.protected_until = None
        if status == PENDING:
            self._enqueue(w)
        else:
            w.status = status

    def cancel_pending(self, w: Workload) -> None:
        self._dequeue(w)
        w.status = CANCELLED

    def ended_at(self, w: Workload, now: int) -> None:
        """``w`` has just ended at trusted time ``now``: note it for the lapse rule."""
        self.ended.append((now, w.id))

    def forget_before(self, horizon: int,
                      stopping: Mapping[tuple[str, int], object]) -> list[Workload]:
        """Take the workloads that ended before ``horizon`` out of ``all``; return them.

        Oldest first, stopping at the first whose last run is still in
        ``stopping`` (preempted, its grace not over: its GPUs are still held under
        its name); the grace is bounded, so it and those behind it go at a later
        call. An ended workload is in no queue, index or running set, so taking
        it out of ``all`` is all there is to do here.
        """
        ended = self.ended
        every = self.all
        gone: list[Workload] = []
        while ended and ended[0][0] < horizon:
            w = every[ended[0][1]]
            if (w.id, w.runs) in stopping:
                break
            ended.popleft()
            del every[w.id]
            gone.append(w)
        return gone

    def pending_count(self) -> int:
        return sum(len(q) for q in self.pending.values()) + sum(
            len(q) for q in self.pending_free.values())

    def leaf_has_work(self, leaf: str) -> bool:
        return leaf in self.pending or leaf in self.pending_free or any(
            w.budget == leaf for w in self.running.values())

    def snapshot(self) -> list[tuple[object, ...]]:
        """A canonical, comparable view (for state fingerprints)."""
        return [
            (w.id, w.status, w.placement, w.allocated, w.started_at, w.protected_until, w.runs,
             w.preemptions)
            for _, w in sorted(self.all.items())
        ]
