"""Who may take whom: the preemption rules of both policies, written once.

A *rule* answers, for one candidate workload and one running workload past
its protection, whether the candidate may take the other's GPUs, and why (the
preemption reason on the log), or ``None``. Protection itself is not the
rule's business: only unprotected work is ever offered to it as a victim, and
the reservation planner asks it about work that will be unprotected later.

The budget policy (allot) lets a candidate take:

- unallocated work: always (``reclaim_unallocated``);
- its own leaf's work: only of lower priority (``priority``);
- another leaf's work, under the default ``preemption_rule = "reclaim"``:
  when, at the level where their paths part, the victim's side holds more
  than its guaranteed fraction of the cluster and the candidate's side, with
  the candidate added, no more than its own (``reclaim``; Kueue's
  reclaimWithinCohort). Work within its share is never taken by another
  leaf;
- under ``"reclaim_room_checkpoint"`` (and ``"..._checkpoint_margin"``): as
  under ``reclaim_room``, but a victim is taken by reclaim only while it
  loses at most ``RECLAIM_LOSS_S`` seconds of work per GPU
  (``victims.work_lost``: since its last checkpoint, or its whole run), so
  borrowed work is reclaimed just after a checkpoint; ``"reclaim_room_margin"``
  asks the balanced test for a margin (``RECLAIM_MARGIN_PCT``);
- another leaf's work, under ``preemption_rule = "reclaim_balanced"``: when,
  at the level where their paths part, the candidate's side is strictly
  under its guarantee, and the victim's side has room to give
  (``Guarantees.node_room``: still at or above its own guarantee after the
  take, and no less used per guarantee than the candidate's side after it);
  the cycle checks the whole set's take per side (``Guarantees.balanced``).
  Its reservation planner may also plan on any borrowed work
  (``Guarantees.lockout``), which bounds how long such a candidate waits;
  ``preemption_rule = "reclaim_room"`` is the same take without those
  reservations (no lock-out bound; a fraction of the cost);
- another leaf's work, under ``preemption_rule = "fair_share"``: only when,
  at the level where their paths part, the candidate's side is still strictly
  less used per share than the victim's side after adding the candidate's own
  commitment (``fair_share``; Kueue's LessThanOrEqualToFinalShare, made
  strict, so that the victim cannot take the GPUs straight back);
- on the hosts of its due reservation, any other leaf's work and any work
  started after the reservation was made (``reservation``): the reservation
  was granted on exactly that work, so at ``until`` the holder gets its hosts
  whatever fair share says by then. Its own leaf's work that predates the
  reservation keeps the priority rule.

Whatever the reason, allocated work spread over more hosts than the candidate
uses is never its to take (backfill on a due reservation excepted): stopping
it would free hosts the candidate does not use and lose all of that gang's
progress for a smaller gain (a 4-GPU debug job once ended a 128-GPU job with
28 hours of work). Such a gang yields to gangs at least its size, and to
reservations, which plan with this same rule.

The same ``BudgetRule`` serves the cycle's victim search, the reservation
planner (which work frees a host for the candidate, and when) and, through
the cycle's recorded outcomes, ``allot explain``. ``less_used`` is the one
fair-share comparison; ``Ranking.may_preempt`` and the cycle's cheap search
bound both call it.

The lab's old scheduler (the baseline) has its own rule, ``baseline_rule``:
only preemptible (not opted-out) jobs are victims; a non-preemptible candidate
takes any of them, a preemptible candidate only those of lower priority.
"""

from __future__ import annotations

from collections.abc import Callable, Container
from typing import TYPE_CHECKING, NamedTuple, Protocol

from projections.workloads import Workload

if TYPE_CHECKING:
    from scheduler.policy.guarantee import Guarantees

RECLAIM_UNALLOCATED = "reclaim_unallocated"
PRIORITY = "priority"
FAIR_SHARE = "fair_share"
RESERVATION = "reservation"
RECLAIM = "reclaim"

# The policy's ``preemption_rule`` values that take another leaf's work by reclaim only.
RECLAIM_RULES = ("reclaim", "reclaim_balanced", "reclaim_room", "reclaim_room_checkpoint",
                 "reclaim_room_margin", "reclaim_room_checkpoint_margin")

# The values that reclaim by the balanced test (``Guarantees.node_room``); only
# "reclaim_balanced" also plans reservations on borrowed work (``Guarantees.lockout``).
BALANCED_RULES = ("reclaim_balanced", "reclaim_room", "reclaim_room_checkpoint",
                  "reclaim_room_margin", "reclaim_room_checkpoint_margin")

# The values that take a victim by reclaim only while it would lose at most
# ``RECLAIM_LOSS_S`` seconds of work per GPU (``victims.work_lost``): borrowed
# work mid-way between two checkpoints is left until just after the next one.
# Ten minutes: two of ai2-month's 5-minute ticks, so every hourly checkpoint is
# followed by a cycle that may take it (docs/simulation.md, the churn).
LOSS_RULES = ("reclaim_room_checkpoint", "reclaim_room_checkpoint_margin")
RECLAIM_LOSS_S = 600

# The values whose balanced test asks for a margin of ``RECLAIM_MARGIN_PCT``
# points of use per guarantee: defined beside the test (scheduler/policy/guarantee.py,
# ``Guarantees.node_room``, condition 3), which reads them.

# A rule's ``span`` when it may take allocated work spread over any number of hosts.
ANY_SPAN = 1 << 30


class Rule:
    """One candidate's rule: ``reason(v)``, the preemption reason when it may take ``v``, else None.

    ``span`` says that it never takes allocated work placed on more hosts than
    that, whatever else holds (``ANY_SPAN``: no such limit): the victim search
    skips such work without asking. ``own_leaf``, when not None, says that it
    takes no allocated work of any other leaf than that one (walks for whole
    hosts then visit only hosts that hold no other leaf's work:
    scheduler/index/sole_leaf.py). Calling a rule asks ``reason``.
    """

    __slots__ = ("own_leaf", "span")

    def __init__(self, span: int, own_leaf: str | None = None) -> None:
        self.span = span
        self.own_leaf = own_leaf

    def reason(self, v: Workload) -> str | None:
        raise NotImplementedError

    def __call__(self, v: Workload) -> str | None:
        return self.reason(v)


class FairShareAnswers(Protocol):
    """What a budget rule asks the fair-share order (``scheduler.index.fair_share_order.Ranking``).

    A narrow interface: the rule needs only these two answers, and naming them
    here keeps the policy from importing the index that accelerates it.
    """

    def fair_share_memo(self, leaf: str, commitment: int) -> dict[str, bool]:
        """The per-victim-leaf answers of ``may_preempt`` already worked out for this candidate."""
        ...

    def may_preempt(self, leaf: str, commitment: int, victim_leaf: str) -> bool:
        """May a candidate of ``leaf`` (with ``commitment`` GPUs added) take work of ``victim_leaf``?"""
        ...


class Due(NamedTuple):
    """A reservation that has come due: its hosts, and when it was made."""

    hosts: Container[str]
    since: int


class BudgetRule(Rule):
    """The budget policy's rule for one candidate, in one cycle (see the module docstring).

    The fair-share answer depends only on the victim's leaf, so it is worked out
    once per leaf, and shared (``Ranking.fair_share_memo``) with every rule of the
    cycle for the same leaf and commitment while usage stays the same.
    ``commitment`` is the candidate's own (GPUs x minimum runtime).

    With ``guarantees`` (the policy's ``preemption_rule = "reclaim"``), another
    leaf's work is taken by ``reclaim`` instead of by fair share: when, at the
    level where their paths part, the victim's side holds more than it is
    guaranteed and the candidate's side, with the candidate's GPUs added, holds
    no more than it is. Reclaiming takes borrowed work whatever its gang's
    size (the lender's share is owed now, and the borrower knew it borrowed).
    Work within its share is never taken by another leaf. A candidate whose
    own gang would take its side past its guarantee reclaims nothing: it waits
    for free GPUs or for a reservation (docs/simulation.md, the limit).
    """

    __slots__ = ("_by_leaf", "_locks", "_rooms", "_sides", "balanced", "budget", "commitment", "due",
                 "gpus", "guarantees", "hosts", "lockout", "loses_little", "per_host", "priority",
                 "ranking", "reclaiming")

    def __init__(self, ranking: FairShareAnswers, candidate: Workload, due: Due | None = None,
                 guarantees: Guarantees | None = None, balanced: bool = False,
                 lockout: bool = False,
                 loses_little: Callable[[Workload], bool] | None = None) -> None:
        # Without a due reservation, allocated work on more hosts than the
        # candidate's is never taken (``reason``); a due one may take any. A
        # reclaiming rule is asked about every gang and says itself which it
        # may take, unless the candidate can reclaim from nobody (then its
        # answers are the span-limited ones, ``Guarantees.may_reclaim``).
        self.balanced = balanced and guarantees is not None
        # (The balanced rule's reservation planner: ``lockout`` below.)
        self.lockout = lockout and self.balanced
        self.per_host = candidate.gpus_per_host
        if guarantees is None:
            reclaiming = False
        elif self.lockout:
            reclaiming = True  # (cheap enough: asked only by the reservation planner)
        elif self.balanced:
            reclaiming = guarantees.may_reclaim_balanced(candidate.budget, candidate.gpus,
                                                         candidate.gpus_per_host)
        else:
            reclaiming = guarantees.may_reclaim(candidate.budget, candidate.gpus)
        # Reclaiming from nobody, without a due reservation, it takes no other
        # leaf's allocated work (``reason``: only reclaim and the due reservation do).
        super().__init__(candidate.hosts if due is None and not reclaiming else ANY_SPAN,
                         candidate.budget if (due is None and guarantees is not None
                                              and not reclaiming) else None)
        self.ranking = ranking
        self.budget = candidate.budget
        self.priority = candidate.priority
        self.hosts = candidate.hosts
        self.gpus = candidate.gpus
        self.commitment = candidate.gpus * candidate.min_runtime_s
        self.due = due
        self.guarantees = guarantees  # None: the fair-share rule
        self.reclaiming = reclaiming  # False: ``reclaims`` says no to every leaf
        # ``RECLAIM_LOSS_S`` (``LOSS_RULES``) as a test of one victim: True when taking
        # it by reclaim now destroys little enough work (None: no bound). Only
        # ``reclaim`` answers ask it; the reservation planner's rules have none
        # (a due reservation takes its hosts' work with the reason ``reservation``).
        self.loses_little = loses_little
        # reclaims(), by victim leaf: shared by the cycle's rules of the same
        # leaf and GPUs until the guarantees' holdings move.
        self._sides: dict[str, bool] = (guarantees.reclaim_memo(self.budget, self.gpus)
                                        if reclaiming and guarantees is not None
                                        and not self.balanced else {})
        # Under the balanced rule: ``Guarantees.room`` by victim leaf, shared the same way.
        self._rooms: dict[str, int] = (guarantees.room_memo(self.budget, self.gpus)
                                       if reclaiming and guarantees is not None
                                       and self.balanced else {})
        # The planner's ``Guarantees.lockout`` by victim leaf, shared the same way.
        self._locks: dict[str, bool] = (guarantees.lockout_memo(self.budget)
                                        if self.lockout and guarantees is not None else {})
        self._by_leaf: dict[str, bool] = ranking.fair_share_memo(self.budget, self.commitment)

    def reclaims(self, victim_leaf: str) -> bool:
        """May the candidate take back borrowed GPUs from work of ``victim_leaf`` (another leaf)?"""
        g = self.guarantees
        if g is None or not self.reclaiming:
            return False
        # One answer per victim leaf for the rule's life (one search or plan):
        # what the guarantees hold moves only between searches.
        ok = self._sides.get(victim_leaf)
        if ok is None:
            ok = self._sides[victim_leaf] = g.reclaims(self.budget, self.gpus, victim_leaf)
        return ok

    def room(self, victim_leaf: str) -> int:
        """Under the balanced rule: how many GPUs the candidate may take from ``victim_leaf``'s side."""
        g = self.guarantees
        if g is None or not self.reclaiming:
            return 0
        r = self._rooms.get(victim_leaf)
        if r is None:
            r = self._rooms[victim_leaf] = g.room(self.budget, self.gpus, victim_leaf)
        return r

    def _balanced_reason(self, v: Workload, leaf: str, on_due: bool) -> str | None:
        """``reason`` under ``preemption_rule = "reclaim_balanced"`` (allocated work, not backfill).

        Another leaf's work is taken by reclaim when its side's ``room``
        (``Guarantees.node_room``: the three-part test) covers the victim's GPUs,
        and at least one host's worth of the candidate's (a side that could give
        less than one host's need is no help to it, and the cycle checks the
        whole set's take per side, ``Guarantees.balanced``, before stopping
        anything). On a due reservation's hosts the reservation's reason comes
        first: those victims were granted to the holder, whatever the balance.
        """
        if leaf == self.budget:  # (as under the other rules)
            if len(v.placement) > self.hosts:
                return RESERVATION if on_due else None
            return PRIORITY if v.priority < self.priority else None
        if on_due:
            return RESERVATION
        if self.reclaiming:
            gpus = v.gpus
            if self.room(leaf) >= (gpus if gpus > self.per_host else self.per_host) and (
                    self.loses_little is None or self.loses_little(v)):
                return RECLAIM
            if self.lockout and self.guarantees is not None:
                locked = self._locks.get(leaf)
                if locked is None:
                    locked = self._locks[leaf] = self.guarantees.lockout(self.budget, leaf)
                if locked:
                    return RECLAIM
        return None

    def fair_share(self, victim_leaf: str) -> bool:
        """May the candidate take work of ``victim_leaf`` (another leaf) by fair share?"""
        ok = self._by_leaf.get(victim_leaf)
        if ok is None:
            ok = self._by_leaf[victim_leaf] = self.ranking.may_preempt(
                self.budget, self.commitment, victim_leaf)
        return ok

    def reason(self, v: Workload) -> str | None:
        if not v.allocated:
            return RECLAIM_UNALLOCATED
        due = self.due
        on_due = due is not None and any(h in due.hosts for h, _ in v.placement)
        # Backfill on a due reservation's hosts is taken back at ``until``.
        if on_due and due is not None and (v.started_at or 0) >= due.since:
            return RESERVATION
        leaf = v.budget
        if self.balanced:
            return self._balanced_reason(v, leaf, on_due)
        if self.guarantees is not None:
            if leaf != self.budget and self.reclaims(leaf) and (
                    self.loses_little is None or self.loses_little(v)):
                return RECLAIM
            if len(v.placement) > self.hosts:
                return RESERVATION if on_due else None
            if leaf == self.budget:
                return PRIORITY if v.priority < self.priority else None
            # (A candidate whose own gang would take its side past its guarantee
            # takes nothing here: it waits for free GPUs or a due reservation.
            # Letting it share borrowed GPUs by fair share was tried and made
            # ai2-month several times slower to schedule; docs/simulation.md.)
            return RESERVATION if on_due else None
        if len(v.placement) > self.hosts:
            return None  # never tear down a gang larger than oneself: it frees hosts unused
        if leaf == self.budget:
            return PRIORITY if v.priority < self.priority else None
        # ``fair_share``, inlined (this runs per victim): on a miss, straight to
        # the comparison, not through a second lookup of the same key.
        ok = self._by_leaf.get(leaf)
        if ok is None:
            ok = self._by_leaf[leaf] = self.ranking.may_preempt(self.budget, self.commitment, leaf)
        if ok:
            return FAIR_SHARE
        return RESERVATION if on_due else None


class BaselineRule(Rule):
    """The old scheduler's rule for a candidate that runs opted out (``opt_out``) or not.

    Only preemptible jobs (those that did not opt out, ``allocated`` False on the
    log) are victims. A non-preemptible candidate may take any; a preemptible one
    only those of strictly lower priority. The reason on the log is ``priority``.
    """

    __slots__ = ("opt_out", "priority")

    def __init__(self, opt_out: bool, priority: int) -> None:
        super().__init__(0)  # no allocated (opted-out) job is ever a victim
        self.opt_out = opt_out
        self.priority = priority

    def reason(self, v: Workload) -> str | None:
        if v.allocated:
            return None
        return PRIORITY if self.opt_out or v.priority < self.priority else None


def baseline_rule(opt_out: bool, priority: int) -> Rule:
    """The old scheduler's rule for one candidate (see ``BaselineRule``)."""
    return BaselineRule(opt_out, priority)
