"""Preemption: the cheapest set of running workloads whose GPUs really place a candidate.

Only workloads that are not protected can be victims: unallocated work (never
protected) and allocated work past its minimum runtime. Which of those a
candidate may take is a rule (``scheduler.policy.rules``); this module finds, for the
hosts the candidate could use, the victims to stop.

**What a victim costs.** Stopping a workload loses the work it did since it
could last resume: all of its current run if it is not resumable, the run
since its last checkpoint if it is (``work_lost``; with no checkpoint interval
known, a resumable workload is taken to checkpoint continuously and loses
nothing, as the simulator's executor does). A plan's cost
compares, most significant first:

1. GPU-seconds of allocated work lost, then allocated GPUs taken (allocated
   work is charged and was admitted by fair share: it goes last);
2. GPU-seconds of unallocated work lost, then unallocated GPUs taken;
3. the number of victims;
4. a tie-break towards victims whose allocation is the most over-served
   (usage per entitlement; Kueue's fair-sharing preemption takes from the
   queue using the most).

Costs add up over victims, so the cheapest set is found exactly: per host by a
small knapsack over the victims there (at most one per GPU), and for a gang by
a knapsack over "components" (hosts linked by a victim gang spanning them)
that counts how many hosts each choice readies. So a 1-GPU request takes the
1-GPU victim rather than the 5-GPU one, and a 5-host gang takes two 2-host
gangs (exactly the hosts it needs) rather than a 3-host and a 2-host one. A
plan is returned only if it really places the candidate: nothing is ever
preempted in vain.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Iterable
from heapq import heapify, heappop, heappush
from itertools import combinations, count
from typing import TYPE_CHECKING, Any

from projections.workloads import Workload
from scheduler.policy.placement import pack
from scheduler.policy.rules import Rule

if TYPE_CHECKING:
    from scheduler.index.sole_leaf import SoleLeafVictims
    from scheduler.policy.placement import Capacity
    from scheduler.state import State

NEVER = 1 << 62
NEVER_COST = 1 << 400  # above any packed cost (see ``pack_cost``): "no victim here"

# A plan's cost packed into one integer (so costs add and compare as ints); the
# fields, least significant first, with room for any sum a cluster can reach.
_KEEP_BITS = 32     # tie-break: sum of the victims' keep values (Ranking.keep_value, < 2**20)
_COUNT_BITS = 24    # number of victims
_GPUS_BITS = 32     # GPUs taken
_LOST_BITS = 64     # GPU-seconds lost
_COUNT_AT = _KEEP_BITS
_UGPUS_AT = _COUNT_AT + _COUNT_BITS
_ULOST_AT = _UGPUS_AT + _GPUS_BITS
_AGPUS_AT = _ULOST_AT + _LOST_BITS
_ONE_VICTIM = 1 << _COUNT_AT
_ALLOCATED_LEAST = 1 << _AGPUS_AT  # no allocated victim costs less (it takes a GPU at least)


def pack_cost(lost: int, gpus: int, allocated: bool, keep: int) -> int:
    """One victim's cost as an integer; larger is more expensive (see the module docstring).

    Its GPU-seconds lost and GPUs taken go to the fields of its kind, the victim
    count is 1, ``keep`` is the tie-break; a plan's cost is the sum over its
    victims (the fields are wide enough that none carries into the next). A
    kind's GPUs and GPU-seconds are adjacent fields, GPUs below: two big-integer
    steps.
    """
    at = _AGPUS_AT if allocated else _UGPUS_AT
    return (((lost << _GPUS_BITS) | gpus) << at) | (_ONE_VICTIM | keep)


def work_lost(w: Workload, now: int, checkpoint_s: int | None) -> int:
    """GPU-seconds of work ``w`` loses if it is stopped at ``now``.

    Not resumable: its whole current run. Resumable: the run since its last
    checkpoint, every ``checkpoint_s`` seconds from its start; ``None`` (or 0)
    means it checkpoints continuously and loses nothing.
    """
    ran = now - (w.started_at if w.started_at is not None else now)
    if ran <= 0:
        return 0
    if not w.resumable:
        return w.gpus * ran
    if not checkpoint_s:
        return 0
    return w.gpus * (ran % checkpoint_s)


def checkpoint_rule(policy: Any) -> Callable[[Workload], int | None]:
    """The checkpoint interval of a resumable workload, in seconds, under ``policy``.

    The workload's own ``checkpoint_interval_s`` (from ``workload.submitted``),
    else a policy-wide default if the policy carries one (``PolicyConfigured``
    has none today), else None: it checkpoints continuously and loses nothing.
    The default is read once per policy: a cycle asks this rule for every victim
    it costs, and asking the policy each time for a field it does not have
    raised and caught an AttributeError per victim.
    """
    default = getattr(policy, "checkpoint_interval_s", None)

    def rule(w: Workload) -> int | None:
        own = getattr(w, "checkpoint_interval_s", None)
        return own if own else default

    return rule


class CostModel:
    """What stopping each workload costs in one cycle (memoised per workload)."""

    __slots__ = ("_costs", "_keep", "budgets_asked", "checkpoint", "keep_value", "now")

    def __init__(self, now: int, checkpoint: Callable[[Workload], int | None],
                 keep_value: Callable[[str], int]) -> None:
        self.now = now
        self.checkpoint = checkpoint
        self.keep_value = keep_value
        self._costs: dict[str, int] = {}
        self._keep: dict[str, int] = {}
        # When a set: the budgets of every workload costed, for a caller that must
        # later repeat the asks' one lasting effect (``fix_keep_value``) without the search.
        self.budgets_asked: set[str] | None = None

    def fix_keep_value(self, budget: str) -> None:
        """Fix ``budget``'s keep value now, as costing one of its workloads would."""
        if budget not in self._keep:
            self._keep[budget] = self.keep_value(budget)

    def ask(self, budget: str) -> None:
        """Every lasting effect of costing a workload of ``budget`` (``of``), without the cost.

        The cost itself is only a memo (a later ``of`` computes the same from the
        keep value fixed here); what lasts is the keep value and the entry in ``budgets_asked``.
        """
        if self.budgets_asked is not None:
            self.budgets_asked.add(budget)
        self.fix_keep_value(budget)

    def of(self, w: Workload) -> int:
        if self.budgets_asked is not None:
            self.budgets_asked.add(w.budget)
        c = self._costs.get(w.id)
        if c is None:
            lost = work_lost(w, self.now, self.checkpoint(w) if w.resumable else None)
            keep = self._keep.get(w.budget)
            if keep is None:
                keep = self._keep[w.budget] = self.keep_value(w.budget)
            c = self._costs[w.id] = pack_cost(lost, w.gpus, w.allocated, keep)
        return c


def flat_costs(now: int) -> CostModel:
    """A cost model with no checkpoints and no over-service tie-break (the baseline's)."""
    return CostModel(now, lambda w: None, lambda leaf: 0)


class Victim:
    """A preemptible running workload, as the search sees it."""

    __slots__ = ("order", "span", "w")

    def __init__(self, w: Workload) -> None:
        self.w = w
        # A fixed scan order (ties between equally cheap plans go to the first found).
        self.order = (w.allocated, w.resumable is False, w.priority, -(w.started_at or 0), w.id)
        # What a rule's ``span`` is compared with: the hosts of allocated work (a
        # victim's placement is fixed while it runs), 0 for unallocated work.
        self.span = len(w.placement) if w.allocated else 0


# A host of ``VictimIndex.hosts_by_span``: (least span of its victims, host, its victims);
# hosts are unique, so entries compare by their first two fields.
HostBySpan = tuple[int, str, list[Victim]]

# The sole-leaf index of a victim index's hosts: (its ``on_host``, its ``hosts_by_span``)
# -> the index (``VictimIndex.sole_leaf``).
SoleLeafLookup = Callable[[dict[str, list[Victim]], list[HostBySpan]], "SoleLeafVictims[HostBySpan]"]


def _least(victims: list[Victim]) -> int:
    least = victims[0].span
    for v in victims:
        if v.span < least:
            least = v.span
    return least


class Plan:
    """Hosts to place on and the victims (with the reason each may be taken) to stop first."""

    __slots__ = ("cost", "hosts", "victims")

    def __init__(self, hosts: list[str], victims: list[tuple[Victim, str]], cost: int) -> None:
        self.hosts = hosts
        self.victims = victims
        self.cost = cost


# Given a running workload, the preemption reason when the candidate may take it, else None
# (``Rule.reason``), and the most hosts of allocated work it may take (``Rule.span``).
Eligibility = Rule

# Serial numbers of built victim indexes (a memo key, never part of a decision).
_BUILD_IDS = count(1)

# Earlier builds a victim index remembers (``VictimIndex.earlier_builds``).
_EARLIER_BUILDS_KEPT = 64

# Subsets of a component's victim gangs tried exhaustively up to this many; beyond
# it, only the cheapest-first prefixes (a bound on search cost, rarely reached).
_EXHAUSTIVE_GANGS = 6


class VictimIndex:
    """Preemptible running workloads per healthy host, as one cycle sees them.

    Building it walks every running workload, so the unshared part is built once
    per running set (``build``) and each cycle takes a cheap ``fork`` of it: the
    set changes only when work starts or stops, hosts change health, or a
    protection ends, and the memo key covers exactly those. Across starts,
    stops and protection ends on the same hosts and tree the next one is
    ``advanced`` from the last instead of built.
    """

    __slots__ = (
        "_base",
        "_cands",
        "_cands_at",
        "_cands_of",
        "_hosts_by_span",
        "_ids",
        "_mins",
        "_mins_costs",
        "_on_host",
        "_placed",
        "_protected",
        "_shared",
        "_usable",
        "_victims",
        "build_id",
        "by_node",
        "by_priority",
        "earlier_builds",
        "exact_fail",
        "fail_hosts",
        "fail_kind",
        "paths",
        "running_version",
        "size",
        "sole_leaf",
        "stopped_now",
        "unallocated_gpus",
        "victim_gpus",
    )

    def __init__(self) -> None:
        self.victim_gpus: dict[str, int] = {}  # upper bound on what preemption can free per host
        # Allocated victims' GPUs on healthy hosts per budget subtree (every node on
        # their path), and unallocated victims' GPUs: the cycle's cheap upper bound
        # on what a candidate could free before it pays for a search.
        self.by_node: dict[str, int] = {}
        # Per leaf, allocated victims' GPUs by priority: inside a leaf only lower
        # priority may be taken, so the bound counts only those.
        self.by_priority: dict[str, dict[int, int]] = {}
        self.unallocated_gpus = 0
        self.paths: dict[str, list[str]] = {}
        self.stopped_now: set[str] = set()
        self._usable: dict[str, int] = {}
        self._victims: dict[str, Workload] = {}
        self._ids: set[str] = set()
        # Only on a built index (``build``, ``advanced``): each victim's GPUs on
        # healthy hosts as counted (a stopped workload's placement is cleared),
        # the protected running work as a heap of (protected_until, id, run),
        # entries of runs since ended left in place, and the running set it was
        # built at.
        self._placed: dict[str, tuple[tuple[str, int], ...]] = {}
        self._protected: list[tuple[int, str, int]] = []
        self.running_version = -1
        self._on_host: dict[str, list[Victim]] | None = None  # built on the first search
        self._hosts_by_span: list[HostBySpan] | None = None  # built with ``_on_host`` (see ``hosts_by_span``)
        self._base: VictimIndex | None = None
        # Per host, at most the cost of its cheapest victim not stopped, under
        # ``_mins_costs`` (the cycle's cost model), once every one of them was asked
        # for: a lower bound on any plan there (see ``_search_host``).
        self._mins: dict[str, int] = {}
        self._mins_costs: CostModel | None = None
        # Per GPUs per host, the searches' candidate hosts before reservations,
        # for ``_cands_of`` at its version (cleared when a victim goes).
        self._cands: dict[int, list[str]] = {}
        self._cands_of: Capacity | None = None
        self._cands_at = -1
        self._shared = False  # the counts are the base's (a fork that discarded nothing yet)
        self.size = 0
        # Which built index this is (forks share their base's): two forks with the
        # same build_id and no workload stopped hold the same victims.
        self.build_id = 0
        # Set by ``search``: its None did not depend on any cost (see ``search``),
        # and what a later index needs to re-check it (``recheck``).
        self.exact_fail = False
        self.fail_kind = ""
        self.fail_hosts: frozenset[str] = frozenset()
        # Earlier builds of the same running set, healthy hosts and tree (the
        # same world but fewer protections ended): build_id -> the hosts of the
        # victims this build has and that one had not. See ``recheck``.
        self.earlier_builds: dict[int, frozenset[str]] = {}
        # Given by the cycle: the sole-leaf index of this index's hosts (an accelerator,
        # scheduler/index/sole_leaf.py, kept in the state's memos); None: every host is walked.
        self.sole_leaf: SoleLeafLookup | None = None

    @classmethod
    def build(cls, state: State) -> tuple[VictimIndex, int]:
        """The index of ``state`` (no workload stopped yet), and when a protection next ends."""
        idx = cls()
        idx.build_id = next(_BUILD_IDS)
        idx.running_version = state.workloads.running_version
        now = state.now
        idx.paths = state.budget.structure().paths
        idx._usable = state.cluster_state.usable
        protected = idx._protected
        for w in state.workloads.running.values():
            if w.protected_at(now):
                if w.protected_until is not None:
                    protected.append((w.protected_until, w.id, w.runs))
                continue
            idx._add(w)
        heapify(protected)
        idx.size = len(idx._victims)
        idx._ids = set(idx._victims)
        return idx, protected[0][0] if protected else NEVER

    def _add(self, w: Workload) -> bool:
        """Count ``w`` as a victim if it has GPUs on a healthy host; True if it did."""
        usable = self._usable
        placed = tuple([(host, g) for host, g in w.placement if host in usable])
        gpus = sum([g for _, g in placed])
        if not gpus:
            return False
        vg = self.victim_gpus
        for host, g in placed:
            vg[host] = vg.get(host, 0) + g
        self._victims[w.id] = w
        self._placed[w.id] = placed
        self._count(w, gpus)
        return True

    def advanced(self, state: State) -> tuple[VictimIndex, int] | None:
        """The index ``build`` would give for ``state``, from this built one, or None.

        Possible when only the running set and time moved since this one was
        built (the same healthy hosts and tree: the caller checks) and the
        running set's journal (``WorkloadsProjection.moves``) still reaches
        back to it. A victim is a running workload past its protection with
        GPUs on a healthy host, so between the two states the victims change
        only for the workloads that started or stopped (judged again as
        ``build`` judges them) and for those whose protection ended (popped
        off the protection heap, where a run that since ended is stale and
        skipped). Every count is a sum of one term per victim, so adding and
        taking back terms gives the integers a fresh build sums, and no count
        keeps a zero a fresh build would not have; the per-host victim lists
        are re-sorted where a victim came or went, by the same total order.
        Nothing a search reads depends on the order victims were added in.
        """
        wl = state.workloads
        behind = wl.running_version - self.running_version
        moves = wl.moves
        if behind < 0 or behind > len(moves):
            return None
        now = state.now
        running = wl.running
        idx = VictimIndex()
        idx.build_id = next(_BUILD_IDS)
        idx.running_version = wl.running_version
        idx.paths = self.paths
        idx._usable = self._usable
        idx._victims = dict(self._victims)
        idx._placed = dict(self._placed)
        idx.victim_gpus = dict(self.victim_gpus)
        idx.by_node = dict(self.by_node)
        idx.by_priority = dict(self.by_priority)  # a leaf's own dict is copied when it changes
        idx.unallocated_gpus = self.unallocated_gpus
        protected = idx._protected = list(self._protected)
        stopped_now: set[str] = set()
        came: list[Workload] = []
        touched = {m.id for m in moves[len(moves) - behind:]} if behind else set()
        for wid in sorted(touched):
            if wid in idx._victims:
                idx._take_back(wid)
                stopped_now.add(wid)
            w = running.get(wid)
            if w is None:
                continue
            if w.protected_at(now):
                if w.protected_until is not None:
                    heappush(protected, (w.protected_until, wid, w.runs))
            else:
                idx._unshare_priority(w.budget)
                if idx._add(w):
                    came.append(w)
        while protected:
            until, wid, run = protected[0]
            w = running.get(wid)
            if w is None or w.runs != run:  # that run ended: its entry is stale
                heappop(protected)
            elif until <= now:  # its protection ended: a victim now
                heappop(protected)
                idx._unshare_priority(w.budget)
                if idx._add(w):
                    came.append(w)
            else:
                break
        idx.size = len(idx._victims)
        idx._ids = set(idx._victims)
        if self._on_host is not None:
            idx._on_host, idx._hosts_by_span = self._moved_on_host(stopped_now, came, idx._placed)
        return idx, protected[0][0] if protected else NEVER

    def _unshare_priority(self, leaf: str) -> None:
        prio = self.by_priority.get(leaf)
        if prio is not None:
            self.by_priority[leaf] = dict(prio)

    def _take_back(self, wid: str) -> None:
        """Remove a victim of this (new, unshared) index with the GPUs it was counted with."""
        w = self._victims.pop(wid)
        vg = self.victim_gpus
        gpus = 0
        for host, g in self._placed.pop(wid):
            left = vg[host] - g
            if left:
                vg[host] = left
            else:
                del vg[host]
            gpus += g
        if not w.allocated:
            self.unallocated_gpus -= gpus
            return
        by_node = self.by_node
        for node in self.paths.get(w.budget, ()):
            left = by_node[node] - gpus
            if left:
                by_node[node] = left
            else:
                del by_node[node]
        self._unshare_priority(w.budget)
        prio = self.by_priority[w.budget]
        left = prio[w.priority] - gpus
        if left:
            prio[w.priority] = left
        else:
            del prio[w.priority]
            if not prio:
                del self.by_priority[w.budget]

    def _moved_on_host(self, stopped_now: set[str], came: list[Workload],
                       placed: dict[str, tuple[tuple[str, int], ...]]
                       ) -> tuple[dict[str, list[Victim]], list[HostBySpan]]:
        """This index's per-host lists and ``hosts_by_span``, ``stopped_now`` taken out and ``came`` put in."""
        assert self._on_host is not None and self._hosts_by_span is not None
        on_host = dict(self._on_host)
        changed: dict[str, list[Victim]] = {}
        for wid in stopped_now:
            for host, _ in self._placed[wid]:
                changed.setdefault(host, [])
        for w in came:
            v = Victim(w)
            for host, _ in placed[w.id]:
                changed.setdefault(host, []).append(v)
        by_span = list(self._hosts_by_span)  # (a bisection per changed host, not a sort)
        for host, new in changed.items():
            old = on_host.get(host)
            if old is not None:
                del by_span[bisect_left(by_span, (_least(old), host))]
            victims = [v for v in old or () if v.w.id not in stopped_now]
            victims += new
            if victims:
                victims.sort(key=_order)
                on_host[host] = victims
                insort(by_span, (_least(victims), host, victims))
            else:
                on_host.pop(host, None)
        return on_host, by_span

    @classmethod
    def for_cycle(cls, state: State, stopped_now: set[str]) -> VictimIndex:
        """A fork of the memoised index for ``state``, minus the workloads in ``stopped_now``."""
        key = (state.workloads.running_version, state.cluster_state.health_version,
               state.budget.version)
        cached = state.memos.victims
        now = state.now
        if cached is not None and cached[0] == key and cached[1] <= now < cached[2]:
            base = cached[3]
        else:
            made = None
            if cached is not None and cached[0][1:] == key[1:] and cached[1] <= now:
                made = cached[3].advanced(state)
            base, next_end = made if made is not None else cls.build(state)
            if cached is not None and cached[0] == key and cached[1] <= now:
                base._descend_from(cached[3])
            state.memos.victims = (key, now, next_end, base)
        return base.fork(stopped_now)

    def _descend_from(self, old: VictimIndex) -> None:
        """Record ``old`` (an earlier build of the same world) and what this one adds to it.

        In one world protections only end, so this build's victims are ``old``'s
        plus those whose protection ended since; the hosts they sit on are the
        only ones where a search can now do better (``recheck``).
        """
        if not old._ids <= self._ids:  # pragma: no cover - a protection never restarts
            return
        usable = self._usable
        added = frozenset(h for w in self._victims.values() if w.id not in old._ids
                          for h, _ in w.placement if h in usable)
        earlier_builds = {s: hs | added for s, hs in old.earlier_builds.items()}
        earlier_builds[old.build_id] = added
        if len(earlier_builds) > _EARLIER_BUILDS_KEPT:
            for s in sorted(earlier_builds)[: len(earlier_builds) - _EARLIER_BUILDS_KEPT]:
                del earlier_builds[s]
        self.earlier_builds = earlier_builds

    def fork(self, stopped_now: set[str]) -> VictimIndex:
        """A copy whose counts this cycle may change; the heavy parts are shared.

        The counts too are shared until the fork first discards a victim (most
        cycles stop nobody), then copied (``_unshare``).
        """
        idx = VictimIndex()
        idx.build_id = self.build_id
        idx.earlier_builds = self.earlier_builds
        idx.paths = self.paths
        idx._usable = self._usable
        idx._victims = self._victims
        idx._ids = self._ids
        idx._base = self._base or self
        idx._on_host = idx._base._on_host
        idx._hosts_by_span = idx._base._hosts_by_span
        idx.victim_gpus = self.victim_gpus
        idx.by_node = self.by_node
        idx.by_priority = self.by_priority
        idx._shared = True
        idx.unallocated_gpus = self.unallocated_gpus
        idx.size = self.size
        idx.stopped_now = stopped_now
        if stopped_now:
            for w in [w for w in self._victims.values() if w.id in stopped_now]:
                idx.discard(w)
        return idx

    def _unshare(self) -> None:
        self._ids = set(self._ids)
        self.victim_gpus = dict(self.victim_gpus)
        self.by_node = dict(self.by_node)
        self.by_priority = {leaf: dict(p) for leaf, p in self.by_priority.items()}
        self._shared = False

    @property
    def on_host(self) -> dict[str, list[Victim]]:
        """Victims per healthy host, in a fixed order (built when a search first needs it)."""
        if self._on_host is None:
            on_host: dict[str, list[Victim]] = {}
            usable = self._usable
            for w in self._victims.values():
                v = Victim(w)
                for host, _ in w.placement:
                    if host in usable:
                        on_host.setdefault(host, []).append(v)
            for victims in on_host.values():
                victims.sort(key=_order)
            self._on_host = on_host
            self._hosts_by_span = sorted((_least(vs), host, vs) for host, vs in on_host.items())
            if self._base is not None:
                self._base._on_host = on_host
                self._base._hosts_by_span = self._hosts_by_span
        return self._on_host

    @property
    def hosts_by_span(self) -> list[HostBySpan]:
        """Every host with victims as (their least ``Victim.span``, host, ``on_host`` list), sorted.

        A rule of span s can take victims only on the hosts of the prefix whose
        least span is at most s: the searches' feasibility checks, which sum
        what a rule could take, read only those. Built with ``on_host``.
        """
        if self._hosts_by_span is None:
            self.on_host  # noqa: B018 - builds both
        assert self._hosts_by_span is not None
        return self._hosts_by_span

    def _count(self, w: Workload, gpus: int) -> None:
        if not w.allocated:
            self.unallocated_gpus += gpus
            return
        by_node = self.by_node
        for node in self.paths.get(w.budget, ()):
            by_node[node] = by_node.get(node, 0) + gpus
        prio = self.by_priority.setdefault(w.budget, {})
        prio[w.priority] = prio.get(w.priority, 0) + gpus

    def lower_priority_gpus(self, leaf: str, priority: int) -> int:
        """GPUs of ``leaf``'s own victims with priority below ``priority``."""
        return sum(g for p, g in self.by_priority.get(leaf, {}).items() if p < priority)

    def discard(self, w: Workload) -> None:
        """``w`` stopped this cycle: it can no longer free anything."""
        if w.id not in self._ids:
            return
        if self._shared:
            self._unshare()
        self._ids.discard(w.id)
        self._cands = {}
        mins = self._mins
        gpus = 0
        for host, g in w.placement:
            mins.pop(host, None)
            if host in self.victim_gpus:
                self.victim_gpus[host] -= g
                gpus += g
        self.size -= 1
        self._count(w, -gpus)

    # ------------------------------------------------------------------ search

    def search(
        self,
        hosts: int,
        per_host: int,
        ends_by: int,
        capacity: Capacity,
        eligible: Eligibility,
        who: str = "",
        costs: CostModel | None = None,
    ) -> Plan | None:
        """The cheapest plan placing ``hosts`` x ``per_host`` GPUs for ``who``, or None.

        After a None, ``exact_fail`` says whether it held whatever the costs:
        always for one host (a plan exists iff some allowed host's free GPUs and
        eligible victims cover the request, which the knapsack finds whatever
        it costs), and for a gang when it failed before any cost was asked
        (too few hosts that eligible victims could ready, or it fits without
        preemption). The cycle's failure memo needs that.
        """
        model = costs if costs is not None else flat_costs(0)
        self.exact_fail = False
        self.fail_kind = ""
        self.fail_hosts = frozenset()
        if hosts > 1:
            return self._search_gang(hosts, per_host, ends_by, capacity, eligible, who, model)
        if costs is None or costs is not self._mins_costs:
            self._mins = {}
            self._mins_costs = costs
        # (None when no host is barred: mostly so, and then no lookup per host.)
        barred = (capacity.barred(ends_by, who) or None) if capacity.reserved else None
        if self._covered_nowhere(per_host, capacity, barred, eligible, costs):
            self.exact_fail = True
            self.fail_kind = "host"
            return None
        return self._search_host(per_host, capacity, barred, eligible, model, costs is not None)

    def _covered_nowhere(self, per_host: int, capacity: Capacity, barred: set[str] | None,
                         eligible: Eligibility, costs: CostModel | None) -> bool:
        """True when the single-host search would fail; then its lasting effects are repeated.

        Most single-host searches fail, and this decides that without a cost or
        a plan. ``_search_host`` returns a plan iff one of the hosts it examines
        (candidates with victims, not barred) has its request covered by free
        GPUs alone, or by free GPUs plus eligible victims there (``_cover``
        finds a subset iff their GPUs add up). While no host covers it, it has
        no best plan, so on each host it asks the cost of every eligible victim
        (not stopped) and of nothing else: failing, it has asked exactly those,
        on every examined host. The order of the asks does not matter (a keep
        value depends on the cycle's order, which no search changes), only the
        set, which ``CostModel.ask`` repeats here. Eligible work is the rule's
        to say, except that allocated work on more hosts than the rule's
        ``span`` is never eligible: it is skipped without asking, and hosts
        holding only such work are not visited (``hosts_by_span``). The hosts are
        visited in any order: False (the caller then runs the full search,
        which asks everything again) at the first that covers.
        """
        on_host = self.on_host
        by_free = capacity.by_free
        for f in range(per_host, capacity.max_gpus + 1):
            for host in by_free[f]:
                if host in on_host and not (barred and host in barred):
                    return False  # free GPUs alone cover it there
        span = eligible.span
        free_of = capacity.free
        bound = self.victim_gpus
        stopped_now = self.stopped_now
        anyone_stopped = bool(stopped_now)  # (mostly not: then no set lookup per victim)
        asked: list[str] = []
        for least, host, victims in self.hosts_by_span:
            if least > span:
                break  # nothing here or further on is the rule's to take
            deficit = per_host - free_of[host]
            # (Covered by free GPUs (above), barred, or not a candidate (``_candidates``' test).)
            if (deficit <= 0 or deficit > bound.get(host, 0)
                    or (barred is not None and host in barred)):
                continue
            have = 0
            for v in victims:
                if v.span <= span:
                    w = v.w
                    if not (anyone_stopped and w.id in stopped_now) and eligible.reason(w) is not None:
                        have += _gpus_on(v, host)
                        asked.append(w.budget)
            if have >= deficit:
                return False
        if costs is not None:
            for budget in asked:
                costs.ask(budget)
        return True

    def _search_host(self, per_host: int, capacity: Capacity, barred: set[str] | None,
                     eligible: Eligibility, costs: CostModel, keep_mins: bool) -> Plan | None:
        """The cheapest plan on one host, or None (the hosts by name, the first cheapest plan).

        ``keep_mins``: ``costs`` is the cycle's, so per-host minimums may be kept.
        """
        mins = self._mins
        stopped_now = self.stopped_now
        free_of = capacity.free
        best: tuple[tuple[int, int, str], list[tuple[Victim, str]]] | None = None
        on_host = self.on_host
        # The hosts with victims, by name (the candidates' order), whose free GPUs
        # and victims can reach the request: no other host passes the bound.
        for host in self._candidates(capacity, per_host):
            victims = on_host.get(host)  # type: ignore[assignment]
            if victims is None:
                continue
            free = free_of[host]
            deficit = per_host - free
            if barred and host in barred:
                continue
            if deficit <= 0:
                key = (0, free, host)
                if best is None or key < best[0]:
                    best = (key, [])
                continue
            if best is not None:
                # Costs only add up: a host whose cheapest victim alone costs more than
                # the best plan so far cannot beat it (checked before any rule is asked).
                limit = best[0][0]
                cheapest = mins.get(host)
                if cheapest is None:
                    # Ask the costs here in order until one is within the limit
                    # (the asks are those of ``all(cost > limit)``). Below the
                    # least cost of any allocated victim, an allocated victim's
                    # cost is not needed, only the ask's lasting effect (the
                    # plan found is returned, so only its keep value lasts).
                    low = NEVER_COST
                    for v in victims:
                        w = v.w
                        if w.id not in stopped_now:
                            if limit < _ALLOCATED_LEAST and w.allocated:
                                costs.ask(w.budget)
                                c = _ALLOCATED_LEAST
                            else:
                                c = costs.of(w)
                                if c <= limit:
                                    break
                            if c < low:
                                low = c
                    else:
                        # Every cost here was asked for (and is now fixed for the
                        # cycle), so a lower bound of their minimum can be kept:
                        # later searches ask nothing new here, as the full walk
                        # would not, and skip the host when it exceeds their limit.
                        if keep_mins:
                            mins[host] = low
                        continue
                elif cheapest > limit:
                    continue
            items: list[tuple[Victim, int, int, str]] = []
            for v in victims:
                if v.w.id in stopped_now:
                    continue
                why = eligible.reason(v.w)
                if why is not None:
                    items.append((v, _gpus_on(v, host), costs.of(v.w), why))
            if not items:
                continue
            found = _cover(items, deficit)
            if found is None:
                continue
            key = (found[0], free, host)
            if best is None or key < best[0]:
                best = (key, [(items[i][0], items[i][3]) for i in found[1]])
        if best is None:  # (not after ``_covered_nowhere`` said some host covers it)
            return None
        (cost, _, host), chosen = best
        return Plan([host], chosen, cost)

    def recheck(self, kind: str, seen: frozenset[str], since: int, hosts: int, per_host: int,
                ends_by: int, capacity: Capacity, eligible: Eligibility, who: str = ""
                ) -> tuple[str, frozenset[str], set[str]] | None:
        """Whether a search that failed exactly at build ``since`` of this world fails here too.

        ``kind`` and ``seen`` are what that search left in ``fail_kind`` and
        ``fail_hosts``. Returns None when this index might do better (the caller
        then searches), else the failure as ``search`` would have left it here:
        ``(fail_kind, fail_hosts, budgets)``, ``budgets`` being those of the
        victims a full search here would cost beyond the earlier one's.

        Why that is exact: between two builds of one world (``earlier_builds``) the
        free GPUs, reservations, fair-share order and hence every victim's
        eligibility are the same, and victims are only added, on the hosts
        ``earlier_builds[since]`` names. Every other host looks to the search exactly
        as it did, so it fails there again, costing the same victims. So:

        - one host: the full search fails iff no host of the earlier builds passes
          (free GPUs, the bound, allowed) with free GPUs plus eligible victims
          covering the request (``_cover`` finds a cover iff the GPUs add up); a
          failing search costs every eligible victim on every host that passes;
        - a gang, failed for too few hosts that eligible victims could ready
          (``seen``, every host was counted): those stay ready, and only hosts
          of the earlier builds can join them; that failure asked no cost;
        - a gang that fits without preemption: free GPUs alone decided it.
        """
        added = self.earlier_builds.get(since)
        if added is None:
            return None
        if kind == "fits":
            return (kind, seen, set())
        free_of = capacity.free
        bound = self.victim_gpus
        reserved = capacity.reserved
        stopped_now = self.stopped_now
        on_host = self.on_host
        if kind == "host":
            budgets: set[str] = set()
            for host in added:
                free = free_of.get(host)
                if free is None:
                    continue
                deficit = per_host - free
                if deficit > bound.get(host, 0) or (reserved and not capacity.allowed(host, ends_by, who)):
                    continue
                if deficit <= 0:
                    return None
                have = 0
                for v in on_host.get(host, ()):
                    if v.w.id not in stopped_now and eligible.reason(v.w) is not None:
                        have += _gpus_on(v, host)
                        budgets.add(v.w.budget)
                if have >= deficit:
                    return None
            return (kind, seen, budgets)
        joined: set[str] = set(seen)
        for h in added:
            f = free_of.get(h)
            if (h in joined or f is None or (f < per_host and per_host - f > bound.get(h, 0))
                    or (reserved and not capacity.allowed(h, ends_by, who))):
                continue
            have = f
            if have < per_host:
                for v in on_host.get(h, ()):
                    if v.w.id not in stopped_now and eligible.reason(v.w) is not None:
                        have += _gpus_on(v, h)
                        if have >= per_host:
                            break
            if have >= per_host:
                joined.add(h)
        if len(joined) >= hosts:
            return None
        return (kind, frozenset(joined), set())

    def _ready(self, hosts: int, per_host: int, capacity: Capacity, barred: set[str] | None,
               eligible: Eligibility) -> list[str]:
        """Hosts not barred that could be readied if every eligible victim there went.

        Stops at ``hosts`` of them; the caller needs how many (up to that) and,
        when too few, which. So any order: first the hosts with enough free GPUs,
        then those of ``hosts_by_span`` whose eligible victims make up the rest (no other
        host holds work the rule could take, and the rule is asked only where
        all the victims' GPUs would do: ``_candidates``' test).
        """
        ready: list[str] = []
        by_free = capacity.by_free
        for f in range(per_host, capacity.max_gpus + 1):
            for h in by_free[f]:
                if not (barred and h in barred):
                    ready.append(h)
        if len(ready) >= hosts:
            return ready
        span = eligible.span
        free = capacity.free
        bound = self.victim_gpus
        stopped_now = self.stopped_now
        anyone_stopped = bool(stopped_now)  # (mostly not: then no set lookup per victim)
        # A rule kept to its own leaf readies a whole host only where every other
        # piece of work is its to take: with nobody stopped in this cycle, only the hosts of
        # ``sole_leaf`` (scheduler/index/sole_leaf.py) can pass; the walk of each is
        # the same. (Whole hosts: ``per_host`` at least any host's GPUs.)
        own = eligible.own_leaf
        scans: tuple[list[HostBySpan], ...] = (self.hosts_by_span,)
        if (own is not None and self.sole_leaf is not None and not anyone_stopped
                and per_host >= capacity.max_gpus):
            scans = self.sole_leaf(self.on_host, self.hosts_by_span).lights(own)
        for scan in scans:
            for least, h, victims in scan:
                if least > span:
                    break  # nothing here or further on (in this list) is the rule's to take
                have = free[h]
                if (have >= per_host or per_host - have > bound.get(h, 0)
                        or (barred is not None and h in barred)):
                    continue  # (counted above; not even all its victims would do; or barred)
                for v in victims:
                    if (v.span <= span and not (anyone_stopped and v.w.id in stopped_now)
                            and eligible.reason(v.w) is not None):
                        have += _gpus_on(v, h)
                        if have >= per_host:
                            break
                if have >= per_host:
                    ready.append(h)
                    if len(ready) >= hosts:
                        return ready
        return ready

    def _candidates(self, capacity: Capacity, per_host: int) -> list[str]:
        """Healthy hosts, by name, whose free GPUs plus all their victims' reach ``per_host``.

        Whoever asks, before reservations: kept for the cycle's other searches
        until its capacity changes or a victim goes.
        """
        if self._cands_of is not capacity or self._cands_at != capacity.version:
            self._cands = {}
            self._cands_of = capacity
            self._cands_at = capacity.version
        found = self._cands.get(per_host)
        if found is None:
            free, bound = capacity.free, self.victim_gpus
            found = self._cands[per_host] = [
                h for h in capacity.names
                if (f := free[h]) >= per_host or per_host - f <= bound.get(h, 0)]
        return found

    def _search_gang(
        self,
        hosts: int,
        per_host: int,
        ends_by: int,
        capacity: Capacity,
        eligible: Eligibility,
        who: str,
        costs: CostModel,
    ) -> Plan | None:
        """The cheapest set of victims readying ``hosts`` hosts with ``per_host`` GPUs each.

        First the checks that fail most gang searches without a cost (too few
        hosts that eligible victims could ready, or no need to preempt), then
        the plan (``_plan_gang``).
        """
        # (None when no host is barred: mostly so, and then no lookup per host.)
        barred = (capacity.barred(ends_by, who) or None) if capacity.reserved else None
        ready = self._ready(hosts, per_host, capacity, barred, eligible)
        if len(ready) < hosts:
            self.exact_fail = True
            self.fail_kind = "ready"
            self.fail_hosts = frozenset(ready)
            return None
        # Candidates (at least the ready hosts, so enough), by name: ``capacity.names``
        # is ``free``'s keys already sorted, the same list as sorting those that pass.
        candidates = self._candidates(capacity, per_host)
        if barred:
            candidates = [h for h in candidates if h not in barred]
        free = capacity.free
        ready_free = [h for h in candidates if free[h] >= per_host]
        need = hosts - len(ready_free)
        if need <= 0:
            self.exact_fail = True
            self.fail_kind = "fits"
            return None  # it fits without preemption; the caller places it directly
        return self._plan_gang(hosts, per_host, need, candidates, ready_free, capacity, eligible,
                               costs)

    def _plan_gang(self, hosts: int, per_host: int, need: int, candidates: list[str],
                   ready_free: list[str], capacity: Capacity, eligible: Eligibility,
                   costs: CostModel) -> Plan | None:
        """The cheapest victims readying ``need`` more ``candidates`` (``ready_free`` are ready).

        Hosts linked by an eligible victim gang (one victim on several of them)
        form a component: within it every subset of its victim gangs is tried,
        the rest of each host's deficit covered by its single-host victims, which
        gives the cheapest way to ready 1, 2, ... of its hosts. A host without
        victim gangs is a component of one. A knapsack over components (at most
        one choice each) then finds the cheapest total readying enough hosts.
        """
        stopped_now = self.stopped_now
        free = capacity.free
        why: dict[str, str | None] = {}

        def reason(v: Victim) -> str | None:
            wid = v.w.id
            if wid in why:
                return why[wid]
            r = why[wid] = None if wid in stopped_now else eligible.reason(v.w)
            return r

        # 1. The eligible victims of each busy host: single-host ones, and gangs.
        busy = [h for h in candidates if free[h] < per_host]
        singles, gangs = _victims_on(busy, self.on_host, reason, costs)
        covers: dict[tuple[str, int], tuple[int, tuple[int, ...]] | None] = {}

        def cover(h: str, deficit: int) -> tuple[int, tuple[int, ...]] | None:
            key = (h, deficit)
            if key not in covers:
                covers[key] = _cover(singles[h], deficit) if singles[h] else None
            return covers[key]

        # 2. Components: busy hosts linked by victim gangs; per component, the
        #    cheapest choice for each number of hosts it can ready.
        lone: list[tuple[int, int, str, tuple[int, ...]]] = []  # one-host components
        multi: list[dict[int, _Choice]] = []
        for hs, vs in _components(busy, gangs):
            if not vs:
                h = hs[0]
                c = cover(h, per_host - free[h])
                if c is not None:
                    lone.append((c[0], free[h], h, c[1]))
                continue
            options = _component_options(hs, vs, per_host, free, cover, costs)
            if options:
                multi.append(options)
        # 3. The cheapest mix: a knapsack over the gang components, then the
        #    cheapest one-host components fill the rest.
        lone.sort()
        chosen = _cheapest_mix(multi, lone, need)
        if chosen is None:
            return None
        # 4. The victims of the chosen hosts, placed topology first.
        chosen_gangs, plan_hosts = chosen
        return _gang_plan(hosts, chosen_gangs, plan_hosts, singles, ready_free, free,
                          capacity, why, costs)


# One component's choice for a number of hosts readied: (cost, gang victims taken,
# ((host, indices of its single-host victims taken), ...) readied).
_Choice = tuple[int, tuple[Victim, ...], tuple[tuple[str, tuple[int, ...]], ...]]
_Single = tuple[Victim, int, int, str]  # (victim, GPUs on the host, cost, reason)


def _victims_on(busy: list[str], on_host: dict[str, list[Victim]],
                reason: Callable[[Victim], str | None], costs: CostModel
                ) -> tuple[dict[str, list[_Single]], dict[str, Victim]]:
    """Per busy host its eligible single-host victims; and the eligible gangs, by id."""
    singles: dict[str, list[_Single]] = {}
    gangs: dict[str, Victim] = {}
    for h in busy:
        items: list[_Single] = []
        for v in on_host.get(h, ()):
            r = reason(v)
            if r is None:
                continue
            if len(v.w.placement) == 1:
                items.append((v, _gpus_on(v, h), costs.of(v.w), r))
            else:
                gangs.setdefault(v.w.id, v)
        singles[h] = items
    return singles, gangs


def _components(busy: list[str], gangs: dict[str, Victim]
                ) -> list[tuple[list[str], list[Victim]]]:
    """Busy hosts linked by victim gangs (union-find, smallest name as root), by root name:
    each component's hosts and the gangs on them (gangs by id)."""
    busy_set = set(busy)
    root = {h: h for h in busy}

    def find(h: str) -> str:
        while root[h] != h:
            root[h] = root[root[h]]
            h = root[h]
        return h

    gang_hosts: dict[str, list[str]] = {}
    for wid, v in gangs.items():
        hs = sorted(h for h, _ in v.w.placement if h in busy_set)
        gang_hosts[wid] = hs
        for h in hs[1:]:
            a, b = find(hs[0]), find(h)
            if a != b:
                root[max(a, b)] = min(a, b)
    members: dict[str, list[str]] = {}
    for h in busy:
        members.setdefault(find(h), []).append(h)
    comp_gangs: dict[str, list[Victim]] = {}
    for wid in sorted(gangs):
        hs = gang_hosts[wid]
        if hs:
            comp_gangs.setdefault(find(hs[0]), []).append(gangs[wid])
    return [(hs, comp_gangs.get(r, [])) for r, hs in sorted(members.items())]


def _component_options(hs: list[str], vs: list[Victim], per_host: int, free: dict[str, int],
                       cover: Callable[[str, int], tuple[int, tuple[int, ...]] | None],
                       costs: CostModel) -> dict[int, _Choice]:
    """For each number of ``hs`` it can ready, the cheapest subset of the gangs ``vs``
    with the single-host victims that complete the hosts they leave short."""
    options: dict[int, _Choice] = {}
    for subset in _subsets(vs, costs):
        base = sum(costs.of(v.w) for v in subset)
        extra: dict[str, int] = {}
        for v in subset:
            for h, g in v.w.placement:
                extra[h] = extra.get(h, 0) + g
        zero: list[tuple[str, tuple[int, ...]]] = []
        paid: list[tuple[int, str, tuple[int, ...]]] = []
        for h in hs:
            d = per_host - free[h] - extra.get(h, 0)
            if d <= 0:
                zero.append((h, ()))
            else:
                c = cover(h, d)
                if c is not None:
                    paid.append((c[0], h, c[1]))
        paid.sort()
        total = base
        readied = list(zero)
        for n_ready in range(1, len(zero) + len(paid) + 1):
            if n_ready > len(zero):
                pc, ph, pidx = paid[n_ready - len(zero) - 1]
                total += pc
                readied.append((ph, pidx))
            best_r = options.get(n_ready)
            if best_r is None or total < best_r[0]:
                # Every host its gangs free is readied, even when n_ready is fewer.
                options[n_ready] = (total, tuple(subset), tuple(readied))
    return options


def _cheapest_mix(multi: list[dict[int, _Choice]], lone: list[tuple[int, int, str, tuple[int, ...]]],
                  need: int) -> tuple[list[Victim], dict[str, tuple[int, ...]]] | None:
    """The cheapest way to ready ``need`` hosts: at most one choice per gang component
    (a knapsack; states: hosts readied, capped at ``need``), then the cheapest of the
    one-host components ``lone`` (sorted by cost). The gangs taken and, per readied host,
    the indices of its single-host victims; None if no mix readies enough."""
    # (cost, ((component, n_ready), ...)) by hosts readied
    dp: dict[int, tuple[int, tuple[tuple[int, int], ...]]] = {0: (0, ())}
    for ci, options in enumerate(multi):
        nxt = dict(dp)
        for j, (cj, chain) in dp.items():
            if j >= need:
                continue
            for n_ready, (oc, _, _) in options.items():
                k = min(need, j + n_ready)
                cand = cj + oc
                cur = nxt.get(k)
                if cur is None or cand < cur[0]:
                    nxt[k] = (cand, (*chain, (ci, n_ready)))
        dp = nxt
    prefix = [0]
    for lc, _, _, _ in lone:
        prefix.append(prefix[-1] + lc)
    best: tuple[int, int] | None = None  # (cost, j)
    for j, (cj, _) in dp.items():
        rest = need - j
        if rest > len(lone):
            continue
        total = cj + prefix[max(0, rest)]
        if best is None or total < best[0]:
            best = (total, j)
    if best is None:
        return None
    _, j = best
    chosen_gangs: list[Victim] = []
    plan_hosts: dict[str, tuple[int, ...]] = {}  # host -> single-victim indices there
    for ci, n_ready in dp[j][1]:
        _, csubset, creadied = multi[ci][n_ready]
        chosen_gangs.extend(csubset)
        for rh, ridx in creadied:
            plan_hosts[rh] = ridx
    for _, _, h, idx in lone[: max(0, need - j)]:
        plan_hosts[h] = idx
    return chosen_gangs, plan_hosts


def _gang_plan(hosts: int, chosen_gangs: list[Victim], plan_hosts: dict[str, tuple[int, ...]],
               singles: dict[str, list[_Single]], ready_free: list[str], free: dict[str, int],
               capacity: Capacity, why: dict[str, str | None], costs: CostModel) -> Plan | None:
    """Place the gang on the readied hosts (and the free ones), topology first; the plan
    takes the chosen victims on the hosts picked (None: it fits without preemption)."""
    freed: dict[str, int] = {}
    for v in chosen_gangs:
        for h, g in v.w.placement:
            freed[h] = freed.get(h, 0) + g
    for h, idx in plan_hosts.items():
        freed[h] = freed.get(h, 0) + sum(singles[h][i][1] for i in idx)
    after = {h: free[h] + freed.get(h, 0) for h in (*ready_free, *plan_hosts)}
    usable = sorted(after, key=lambda h: (after[h], h))
    picked = pack(usable, hosts, after, capacity.labels)
    picked_set = set(picked)
    victims: list[tuple[Victim, str]] = []
    for v in chosen_gangs:
        if any(h in picked_set for h, _ in v.w.placement):
            victims.append((v, why[v.w.id] or ""))
    for h in sorted(plan_hosts):
        if h in picked_set:
            victims.extend((singles[h][i][0], singles[h][i][3]) for i in plan_hosts[h])
    if not victims:
        return None  # it fits without preemption; the caller places it directly
    return Plan(sorted(picked), victims, sum(costs.of(v.w) for v, _ in victims))


def _order(v: Victim) -> tuple[object, ...]:
    return v.order


def _gpus_on(v: Victim, host: str) -> int:
    for h, g in v.w.placement:
        if h == host:
            return g
    return 0


def _cover(items: list[tuple[Victim, int, int, str]], deficit: int
           ) -> tuple[int, tuple[int, ...]] | None:
    """The cheapest subset of ``items`` (victim, GPUs here, cost, reason) freeing ``deficit`` GPUs.

    A 0/1 knapsack over GPUs freed (capped at the deficit): a host holds at most
    one victim per GPU, so this is a few dozen steps. Returns (cost, indices).
    """
    if len(items) == 1:
        return (items[0][2], (0,)) if items[0][1] >= deficit else None
    best: dict[int, tuple[int, tuple[int, ...]]] = {0: (0, ())}
    for i, (_, g, c, _) in enumerate(items):
        for j, (cj, chosen) in list(best.items()):
            if j >= deficit:
                continue
            k = min(deficit, j + g)
            cand = cj + c
            cur = best.get(k)
            if cur is None or cand < cur[0]:
                best[k] = (cand, (*chosen, i))
    return best.get(deficit)


def _subsets(vs: list[Victim], costs: CostModel) -> Iterable[tuple[Victim, ...]]:
    """The subsets of a component's victim gangs worth trying (all of them when few)."""
    if len(vs) <= _EXHAUSTIVE_GANGS:
        for r in range(len(vs) + 1):
            yield from combinations(vs, r)
        return
    ranked = sorted(vs, key=lambda v: (costs.of(v.w), v.w.id))
    for r in range(len(ranked) + 1):
        yield tuple(ranked[:r])
