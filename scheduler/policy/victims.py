"""Preemption: the cheapest set of running workloads whose GPUs really place a candidate.

Only workloads that are not protected can be victims: unallocated work (never
protected) and allocated work past its minimum runtime. Which of those a
candidate may take is a rule (``scheduler.policy.rules``); this module finds, for the
hosts the candidate could use, the victims to stop (``cheapest_plan``). It reads
the victims per host and their counts from the victim index
(``scheduler.index.victim_index``, an accelerator kept across cycles).

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

from collections.abc import Callable, Container, Iterable
from itertools import combinations
from typing import TYPE_CHECKING, Any

from projections.workloads import Workload
from scheduler.index.victim_index import HostBySpan, Victim, VictimIndex
from scheduler.policy.placement import pack
from scheduler.policy.rules import Rule

if TYPE_CHECKING:
    from scheduler.policy.placement import Capacity

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


class Plan:
    """Hosts to place on and the victims (with the reason each may be taken) to stop first."""

    __slots__ = ("cost", "hosts", "victims")

    def __init__(self, hosts: list[str], victims: list[tuple[Victim, str]], cost: int) -> None:
        self.hosts = hosts
        self.victims = victims
        self.cost = cost



# Subsets of a component's victim gangs tried exhaustively up to this many; beyond
# it, only the cheapest-first prefixes (a bound on search cost, rarely reached).
_EXHAUSTIVE_GANGS = 6


class Miss:
    """A search that found no plan whatever the costs: what the cycle's failure memo keeps.

    ``kind``: ``host`` (one host: no allowed host's free GPUs and eligible
    victims cover the request), ``ready`` (a gang: too few hosts eligible
    victims could ready; ``hosts`` are those it could) or ``fits`` (a gang
    that fits without preemption). ``fails_again`` re-checks one at a later
    index of the same world.
    """

    __slots__ = ("hosts", "kind")

    def __init__(self, kind: str, hosts: frozenset[str] = frozenset()) -> None:
        self.kind = kind
        self.hosts = hosts


def cheapest_plan(
    idx: VictimIndex,
    hosts: int,
    per_host: int,
    ends_by: int,
    capacity: Capacity,
    eligible: Rule,
    who: str = "",
    costs: CostModel | None = None,
) -> Plan | Miss | None:
    """The cheapest plan placing ``hosts`` x ``per_host`` GPUs for ``who`` on ``idx``'s victims.

    No plan: a ``Miss`` when that held whatever the costs (always for one
    host: a plan exists iff some allowed host's free GPUs and eligible victims
    cover the request, which the knapsack finds whatever it costs; for a gang
    when it failed before any cost was asked: too few hosts that eligible
    victims could ready, or it fits without preemption), else None.
    """
    model = costs if costs is not None else flat_costs(0)
    if hosts > 1:
        return _search_gang(idx, hosts, per_host, ends_by, capacity, eligible, who, model)
    floors = idx.cost_floors(costs)
    # (None when no host is barred: mostly so, and then no lookup per host.)
    barred = (capacity.barred(ends_by, who) or None) if capacity.reserved else None
    if _covered_nowhere(idx, per_host, capacity, barred, eligible, costs):
        return Miss("host")
    return _search_host(idx, per_host, capacity, barred, eligible, model, floors,
                        costs is not None)


def _covered_nowhere(idx: VictimIndex, per_host: int, capacity: Capacity,
                     barred: set[str] | None, eligible: Rule, costs: CostModel | None) -> bool:
    """True when the single-host search would fail; then its lasting effects are repeated.

    Most single-host searches fail, and this decides that without a cost or
    a plan. ``_search_host`` returns a plan iff one of the hosts it examines
    (candidates with victims, not barred) has its request covered by free
    GPUs alone, or by free GPUs plus eligible victims there (``cheapest_cover``
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
    on_host = idx.on_host
    by_free = capacity.by_free
    for f in range(per_host, capacity.max_gpus + 1):
        for host in by_free[f]:
            if host in on_host and not (barred and host in barred):
                return False  # free GPUs alone cover it there
    span = eligible.span
    free_of = capacity.free
    bound = idx.victim_gpus
    stopped_now = idx.stopped_now
    anyone_stopped = bool(stopped_now)  # (mostly not: then no set lookup per victim)
    asked: list[str] = []
    for least, host, victims in idx.hosts_by_span:
        if least > span:
            break  # nothing here or further on is the rule's to take
        deficit = per_host - free_of[host]
        # (Covered by free GPUs (above), barred, or not a candidate (``VictimIndex.candidates``' test).)
        if (deficit <= 0 or deficit > bound.get(host, 0)
                or (barred is not None and host in barred)):
            continue
        have = 0
        for v in victims:
            if v.span <= span:
                w = v.w
                if not (anyone_stopped and w.id in stopped_now) and eligible.reason(w) is not None:
                    have += gpus_on(v, host)
                    asked.append(w.budget)
        if have >= deficit:
            return False
    if costs is not None:
        for budget in asked:
            costs.ask(budget)
    return True


def _search_host(idx: VictimIndex, per_host: int, capacity: Capacity, barred: set[str] | None,
                 eligible: Rule, costs: CostModel, mins: dict[str, int], keep_mins: bool
                 ) -> Plan | None:
    """The cheapest plan on one host, or None (the hosts by name, the first cheapest plan).

    ``mins``: the index's cost floors for ``costs`` (``VictimIndex.cost_floors``);
    ``keep_mins``: ``costs`` is the cycle's, so per-host minimums may be kept.
    """
    stopped_now = idx.stopped_now
    free_of = capacity.free
    best: tuple[tuple[int, int, str], list[tuple[Victim, str]]] | None = None
    on_host = idx.on_host
    # The hosts with victims, by name (the candidates' order), whose free GPUs
    # and victims can reach the request: no other host passes the bound.
    for host in idx.candidates(capacity, per_host):
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
                items.append((v, gpus_on(v, host), costs.of(v.w), why))
        if not items:
            continue
        found = cheapest_cover(items, deficit)
        if found is None:
            continue
        key = (found[0], free, host)
        if best is None or key < best[0]:
            best = (key, [(items[i][0], items[i][3]) for i in found[1]])
    if best is None:  # (not after ``_covered_nowhere`` said some host covers it)
        return None
    (cost, _, host), chosen = best
    return Plan([host], chosen, cost)


def fails_again(idx: VictimIndex, kind: str, seen: frozenset[str], since: int, hosts: int,
                per_host: int, ends_by: int, capacity: Capacity, eligible: Rule, who: str = ""
                ) -> tuple[str, frozenset[str], set[str]] | None:
    """Whether a search that failed exactly at build ``since`` of this world fails on ``idx`` too.

    ``kind`` and ``seen`` are that search's ``Miss`` (``kind``, ``hosts``).
    Returns None when this index might do better (the caller then searches),
    else the miss as ``cheapest_plan`` would have returned it here:
    ``(kind, hosts, budgets)``, ``budgets`` being those of the victims a full
    search here would cost beyond the earlier one's.

    Why that is exact: between two builds of one world (``earlier_builds``) the
    free GPUs, reservations, fair-share order and hence every victim's
    eligibility are the same, and victims are only added, on the hosts
    ``earlier_builds[since]`` names. Every other host looks to the search exactly
    as it did, so it fails there again, costing the same victims. So:

    - one host: the full search fails iff no host of the earlier builds passes
      (free GPUs, the bound, allowed) with free GPUs plus eligible victims
      covering the request (``cheapest_cover`` finds a cover iff the GPUs add up); a
      failing search costs every eligible victim on every host that passes;
    - a gang, failed for too few hosts that eligible victims could ready
      (``seen``, every host was counted): those stay ready, and only hosts
      of the earlier builds can join them; that failure asked no cost;
    - a gang that fits without preemption: free GPUs alone decided it.
    """
    added = idx.earlier_builds.get(since)
    if added is None:
        return None
    if kind == "fits":
        return (kind, seen, set())
    free_of = capacity.free
    bound = idx.victim_gpus
    reserved = capacity.reserved
    stopped_now = idx.stopped_now
    on_host = idx.on_host
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
                    have += gpus_on(v, host)
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
        if f >= per_host or _readies(f, per_host, on_host.get(h, ()), h, eligible, stopped_now):
            joined.add(h)
    if len(joined) >= hosts:
        return None
    return (kind, frozenset(joined), set())


def _readies(free: int, per_host: int, victims: Iterable[Victim], host: str, eligible: Rule,
             stopped_now: Container[str], span: int | None = None) -> bool:
    """Whether ``free`` GPUs and the victims on ``host`` the rule may take make up ``per_host``.

    A victim counts unless it stopped in this cycle, spans more hosts than
    ``span`` allows (when given), or the rule refuses it; the walk stops once
    enough are counted (the rule is asked no further).
    """
    have = free
    for v in victims:
        if ((span is None or v.span <= span) and v.w.id not in stopped_now
                and eligible.reason(v.w) is not None):
            have += gpus_on(v, host)
            if have >= per_host:
                return True
    return have >= per_host


def ready_hosts(idx: VictimIndex, hosts: int, per_host: int, capacity: Capacity,
                barred: set[str] | None, eligible: Rule) -> list[str]:
    """Hosts not barred that could be readied if every eligible victim there went.

    Stops at ``hosts`` of them; the caller needs how many (up to that) and,
    when too few, which. So any order: first the hosts with enough free GPUs,
    then those of ``hosts_by_span`` whose eligible victims make up the rest (no other
    host holds work the rule could take, and the rule is asked only where
    all the victims' GPUs would do: ``VictimIndex.candidates``' test).
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
    bound = idx.victim_gpus
    stopped_now = idx.stopped_now
    anyone_stopped = bool(stopped_now)  # (mostly not: then no set lookup per victim)
    # A rule kept to its own leaf readies a whole host only where every other
    # piece of work is its to take: with nobody stopped in this cycle, only the hosts of
    # ``sole_leaf`` (scheduler/index/sole_leaf.py) can pass; the walk of each is
    # the same. (Whole hosts: ``per_host`` at least any host's GPUs.)
    own = eligible.own_leaf
    scans: tuple[list[HostBySpan], ...] = (idx.hosts_by_span,)
    if (own is not None and idx.sole_leaf is not None and not anyone_stopped
            and per_host >= capacity.max_gpus):
        scans = idx.sole_leaf(idx.on_host, idx.hosts_by_span).entries(own)
    for scan in scans:
        for least, h, victims in scan:
            if least > span:
                break  # nothing here or further on (in this list) is the rule's to take
            have = free[h]
            if (have >= per_host or per_host - have > bound.get(h, 0)
                    or (barred is not None and h in barred)):
                continue  # (counted above; not even all its victims would do; or barred)
            if _readies(have, per_host, victims, h, eligible,
                        stopped_now if anyone_stopped else (), span):
                ready.append(h)
                if len(ready) >= hosts:
                    return ready
    return ready


def _search_gang(
    idx: VictimIndex,
    hosts: int,
    per_host: int,
    ends_by: int,
    capacity: Capacity,
    eligible: Rule,
    who: str,
    costs: CostModel,
) -> Plan | Miss | None:
    """The cheapest set of victims readying ``hosts`` hosts with ``per_host`` GPUs each.

    First the checks that fail most gang searches without a cost (too few
    hosts that eligible victims could ready, or no need to preempt), then
    the plan (``_plan_gang``).
    """
    # (None when no host is barred: mostly so, and then no lookup per host.)
    barred = (capacity.barred(ends_by, who) or None) if capacity.reserved else None
    ready = ready_hosts(idx, hosts, per_host, capacity, barred, eligible)
    if len(ready) < hosts:
        return Miss("ready", frozenset(ready))
    # Candidates (at least the ready hosts, so enough), by name: ``capacity.names``
    # is ``free``'s keys already sorted, the same list as sorting those that pass.
    candidates = idx.candidates(capacity, per_host)
    if barred:
        candidates = [h for h in candidates if h not in barred]
    free = capacity.free
    ready_free = [h for h in candidates if free[h] >= per_host]
    need = hosts - len(ready_free)
    if need <= 0:
        return Miss("fits")  # it fits without preemption; the caller places it directly
    return _plan_gang(idx, hosts, per_host, need, candidates, ready_free, capacity, eligible,
                      costs)


def _plan_gang(idx: VictimIndex, hosts: int, per_host: int, need: int, candidates: list[str],
               ready_free: list[str], capacity: Capacity, eligible: Rule,
               costs: CostModel) -> Plan | None:
    """The cheapest victims readying ``need`` more ``candidates`` (``ready_free`` are ready).

    Hosts linked by an eligible victim gang (one victim on several of them)
    form a component: within it every subset of its victim gangs is tried,
    the rest of each host's deficit covered by its single-host victims, which
    gives the cheapest way to ready 1, 2, ... of its hosts. A host without
    victim gangs is a component of one. A knapsack over components (at most
    one choice each) then finds the cheapest total readying enough hosts.
    """
    stopped_now = idx.stopped_now
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
    singles, gangs = _victims_on(busy, idx.on_host, reason, costs)
    covers: dict[tuple[str, int], tuple[int, tuple[int, ...]] | None] = {}

    def cover(h: str, deficit: int) -> tuple[int, tuple[int, ...]] | None:
        key = (h, deficit)
        if key not in covers:
            covers[key] = cheapest_cover(singles[h], deficit) if singles[h] else None
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
                items.append((v, gpus_on(v, h), costs.of(v.w), r))
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


def gpus_on(v: Victim, host: str) -> int:
    for h, g in v.w.placement:
        if h == host:
            return g
    return 0


def cheapest_cover(items: list[tuple[Victim, int, int, str]], deficit: int
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
