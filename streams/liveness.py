"""Liveness: who holds which inbox partition, from the heartbeats workers write, and when to take one over.

Every worker writes a ``Beat`` to ``allot.liveness`` every
``liveness_interval_s``: its incarnation, and for each partition it holds (or
is taking) the journal offset of its claim there. Every worker reads them all.
The consumer group stays the slow path (a dead member is noticed after its
session timeout, then Tansu or Kafka rebalance); this is the fast one: when the
worker holding a partition has not been heard for ``liveness_lapse_s``, one
live worker claims it at once. The claim fences the silent one, so a takeover
of an owner that is only frozen, or slow, is safe: whatever it writes after
waking counts for no reader, and it learns it is fenced from the newer claim
offset in the taker's beats.

This module is the rule alone, pure: time enters as numbers (a monotonic
clock the caller reads), nothing here does I/O. ``Liveness`` folds beats into
what each worker last said and the newest claim known per partition;
``decide`` answers which partitions this worker must take over and which it
must give up because a newer claim fenced it.

The rule, for partition ``p``:
- its *holder* is the worker whose beats named the highest claim offset for
  ``p`` (journal offsets grow, so the highest is the claim the fence admits);
- ``p`` is *orphaned* when the holder's latest beat still names ``p`` and that
  beat is older than the lapse (it died or froze holding ``p``; a holder that
  let ``p`` go, on a group revocation, leaves it to the group);
- silence is measured on the observer's own view: up to when it last heard
  its *own* beat back (plus one interval), not up to its clock. A worker that
  was frozen itself, or whose reader stalls, has heard nobody lately, itself
  included, so it sees nobody lapse until its view is current again (it must
  not take from the living what it merely failed to hear);
- an orphan goes to one live worker, the same one for every observer with the
  same view (rendezvous hashing over live incarnations), and never to a worker
  that the consumer group gave ``p`` (that worker takes it on the group path);
- a worker holding ``p`` under a claim offset lower than another worker's is
  *fenced* on ``p``;
- a worker the group gives ``p`` that does not hold it, while another holds
  it on the fast path (a cover taken while this one was silent: it was frozen
  or slow, not gone) or has lapsed, *reclaims* ``p``: the group's word stands
  over a cover.
  A worker that stalls longer than the lapse again and again therefore costs
  a claim and a fold each time (safe, not free): raise the lapse on machines
  where that happens.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Set

import msgspec

# A beat older than this many lapses by its writer's clock is history (read at start-up),
# not news: it is taken as heard that long ago, not as heard now.
HISTORY_LAPSES = 10.0


class Beat(msgspec.Struct, frozen=True, kw_only=True):
    """One worker's heartbeat on ``allot.liveness`` (JSON)."""

    worker: str                 # the incarnation: name + a random suffix, new at every start
    name: str                   # the worker's configured name (logs, claims)
    seq: int                    # beats of this incarnation so far
    at: float                   # the writer's wall clock (seconds), for history only
    held: dict[int, int] = {}   # partition -> journal offset of this worker's claim there
    fast: list[int] = []        # of those, the ones held outside the group's assignment


def encode_beat(beat: Beat) -> bytes:
    return msgspec.json.encode(beat)


def decode_beat(value: bytes) -> Beat:
    """The beat in ``value``; ``msgspec.ValidationError``/``DecodeError`` for anything else."""
    return msgspec.json.decode(value, type=Beat)


def heard_at(received: float, written_wall: float, wall_now: float, lapse: float) -> float:
    """When (on the caller's monotonic clock) to take a beat received at ``received`` as heard.

    A beat streamed live is heard when it arrives: that needs no clock agreement
    between machines. One written long before (by its writer's clock; the tail read
    at start-up) is heard as long ago as it was written, so the start-up read does
    not make a dead worker look alive for another lapse.
    """
    age = wall_now - written_wall
    return received - age if age > HISTORY_LAPSES * lapse else received


def rendezvous(partition: int, candidates: Set[str]) -> str:
    """The candidate that takes ``partition``: the highest hash of (partition, candidate)."""
    def score(w: str) -> bytes:
        return hashlib.blake2b(f"{partition}/{w}".encode(), digest_size=8).digest()
    return max(sorted(candidates), key=score)


class Decision(msgspec.Struct, frozen=True, kw_only=True):
    """What ``Liveness.decide`` tells one worker to do now."""

    take: frozenset[int] = frozenset()     # orphans this worker claims (fast path)
    fenced: frozenset[int] = frozenset()   # partitions a newer claim took from this worker
    reclaim: frozenset[int] = frozenset()  # the group's partitions a fast-path cover holds
    orphans: dict[int, str] = {}           # orphan -> its lapsed holder (for logs)


class Liveness:
    """What every worker last said, and the newest claim known per partition. Pure."""

    def __init__(self, me: str, lapse_s: float, interval_s: float = 0.5) -> None:
        self.me = me
        self.lapse = lapse_s
        self.interval = interval_s
        self.last: dict[str, tuple[float, Beat]] = {}     # worker -> (heard at, its latest beat)
        self.holder: dict[int, tuple[int, str]] = {}      # partition -> (claim offset, worker)

    def heard(self, beat: Beat, at: float) -> None:
        """Fold one beat, heard at ``at`` (monotonic). Beats of one worker may arrive late."""
        prev = self.last.get(beat.worker)
        if prev is None or beat.seq >= prev[1].seq:
            self.last[beat.worker] = (max(at, prev[0]) if prev else at, beat)
        for p, offset in beat.held.items():
            if p not in self.holder or offset > self.holder[p][0]:
                self.holder[p] = (offset, beat.worker)

    def claimed(self, partition: int, offset: int) -> None:
        """This worker appended a claim at ``offset``: known at once, before its next beat."""
        if partition not in self.holder or offset > self.holder[partition][0]:
            self.holder[partition] = (offset, self.me)

    def view_time(self, now: float) -> float | None:
        """How far this worker's view reaches: its own last beat heard back, plus an interval.

        None before its first beat came back (nothing is known to be current yet).
        """
        own = self.last.get(self.me)
        return None if own is None else min(now, own[0] + self.interval)

    def alive(self, now: float) -> set[str]:
        """The incarnations heard within their lapse (on this worker's view), and this worker."""
        ref = self.view_time(now)
        if ref is None:
            return set(self.last) | {self.me}
        return {w for w, (at, _) in self.last.items() if ref - at <= self.lapse} | {self.me}

    def decide(self, now: float, mine: Mapping[int, int], group: Set[int],
               busy: Set[int] = frozenset()) -> Decision:
        """This worker's fast-path moves at ``now``.

        ``mine``: partition -> this worker's claim offset, for what it holds or is
        taking; ``group``: what the consumer group assigned it (taken on the group
        path, never here); ``busy``: partitions it is about to take anyway.
        """
        fenced = frozenset(p for p, offset in mine.items()
                           if (h := self.holder.get(p)) is not None
                           and h[1] != self.me and h[0] > offset)
        live = self.alive(now)
        orphans: dict[int, str] = {}
        for p, (_, worker) in self.holder.items():
            if worker == self.me or worker in live:
                continue
            latest = self.last.get(worker)
            if latest is None or p not in latest[1].held:
                continue   # it let p go (a revocation): the group hands p on
            orphans[p] = worker
        take = frozenset(p for p in orphans
                         if p not in mine and p not in group and p not in busy
                         and rendezvous(p, live) == self.me)
        reclaim = frozenset(p for p in group
                            if (p not in mine or p in fenced) and p not in busy
                            and (h := self.holder.get(p)) is not None and h[1] != self.me
                            and (h[1] not in live
                                 or ((b := self.last.get(h[1])) is not None and p in b[1].fast)))
        return Decision(take=take, fenced=fenced, reclaim=reclaim, orphans=orphans)

    def forget(self, now: float, keep_s: float) -> None:
        """Drop incarnations silent for ``keep_s`` that hold nothing (bounded memory)."""
        holding = {w for _, w in self.holder.values()}
        for w in [w for w, (at, _) in self.last.items()
                  if now - at > keep_s and w not in holding and w != self.me]:
            del self.last[w]
