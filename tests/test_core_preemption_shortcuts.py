"""The victim search's shortcuts give the full search's answer and lasting effects.

A single-host search decides most failures without a cost or a plan
(``victims.cheapest_plan``, before any cost) and then repeats the failing full search's
one lasting effect, the keep values fixed by the costs it would have asked
(``CostModel.ask``); past a plan made of unallocated work, it asks for
allocated victims without working out costs that cannot matter, and keeps a
lower bound of a host's cheapest victim. Both kinds of search skip allocated
work spread over more hosts than the rule's ``span`` without asking the rule,
and their feasibility checks visit only the hosts holding other work
(``VictimIndex.hosts_by_span``), in their own order. These tests run whole scenarios
and, at every search, run the full search as well, on a copy of the cycle's
cost model: the single-host walk as first written (every candidate host by
name, every cost asked, no kept minimums), the gang search with every victim
offered to the rule, and the gang's ready hosts as first defined (every
candidate in name order). They demand the same plan or failure, the same keep
values fixed and, for a failure (which the cycle's failure memo keeps), the
same budgets asked, and that kept minimums are lower bounds; they
check that every path was taken often enough for the comparison to prove
something, and that mutants forgetting the asks or hiding eligible work are
caught.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest
from sim_helpers import shipped_log

from projections.workloads import Workload
from scheduler.index.victim_index import Victim, VictimIndex
from scheduler.policy import baseline as baseline_mod
from scheduler.policy import cycle as cycle_mod
from scheduler.policy import victims as victims_mod
from scheduler.policy.placement import Capacity
from scheduler.policy.rules import ANY_SPAN, Rule
from scheduler.policy.victims import CostModel, Miss, Plan, flat_costs

# The search's answer: a plan, a miss whatever the costs, or None.
Found = Plan | Miss | None
# The policies' modules that call the search (each binds ``cheapest_plan`` by name).
CALLERS = (cycle_mod, baseline_mod)


@dataclass
class Seen:
    single_failed: int = 0
    single_failed_asking: int = 0  # failures that fixed keep values (the asks repeated)
    single_planned: int = 0
    gang_failed: int = 0
    gang_planned: int = 0
    mins_checked: int = 0
    ready_checked: int = 0
    wrong: list[str] = field(default_factory=list)


class _Spanned(Rule):
    """``inner`` with another span (``ANY_SPAN``: every victim is offered to it)."""

    __slots__ = ("inner",)

    def __init__(self, inner: Rule, span: int) -> None:
        super().__init__(span)
        self.inner = inner

    def reason(self, v: Workload) -> str | None:
        return self.inner.reason(v)


def _spanned(monkeypatch: pytest.MonkeyPatch, span: int) -> None:
    """Every search from now on asks its rule with ``span`` instead of the rule's own."""
    search = victims_mod.cheapest_plan

    def respanned(idx: VictimIndex, hosts: int, per_host: int, ends_by: int, capacity: Capacity,
                  eligible: Rule, who: str = "", costs: CostModel | None = None) -> Found:
        spanned = _Spanned(eligible, span)
        return search(idx, hosts, per_host, ends_by, capacity, spanned, who, costs)

    for module in CALLERS:
        monkeypatch.setattr(module, "cheapest_plan", respanned)


def _copy(costs: CostModel) -> CostModel:
    twin = CostModel(costs.now, costs.checkpoint, costs.keep_value)
    twin._costs = dict(costs._costs)
    twin._keep = dict(costs._keep)
    twin.budgets_asked = set()
    return twin


def _view(found: Found) -> tuple[object, ...]:
    if found is None:
        return (None, False, "", frozenset())
    if isinstance(found, Miss):
        return (None, True, found.kind, found.hosts)
    return (found.hosts, [(v.w.id, why) for v, why in found.victims], found.cost)


def _walk(idx: VictimIndex, per_host: int, capacity: Capacity, barred: set[str] | None,
          eligible: Rule, costs: CostModel) -> Plan | None:
    """The single-host search as first written: every candidate host by name, no kept minimums."""
    best: tuple[tuple[int, int, str], list[tuple[Victim, str]]] | None = None
    for host in idx.candidates(capacity, per_host):
        victims = idx.on_host.get(host)
        if victims is None or (barred and host in barred):
            continue
        free = capacity.free[host]
        deficit = per_host - free
        if deficit <= 0:
            key = (0, free, host)
            if best is None or key < best[0]:
                best = (key, [])
            continue
        live = [v for v in victims if v.w.id not in idx.stopped_now]
        if best is not None and all(costs.of(v.w) > best[0][0] for v in live):
            continue
        items = [(v, victims_mod.gpus_on(v, host), costs.of(v.w), why)
                 for v in live if (why := eligible(v.w)) is not None]
        found = victims_mod.cheapest_cover(items, deficit) if items else None
        if found is not None and (best is None or (found[0], free, host) < best[0]):
            best = ((found[0], free, host), [(items[i][0], items[i][3]) for i in found[1]])
    return None if best is None else Plan([best[0][2]], best[1], best[0][0])


def _full(idx: VictimIndex, hosts: int, per_host: int, ends_by: int, capacity: Capacity,
          eligible: Rule, who: str, costs: CostModel) -> tuple[object, ...]:
    """The full search's answer, on ``costs`` (a copy), leaving the index as it found it."""
    if hosts > 1:  # (a gang's search, every victim offered to the rule)
        return _view(victims_mod.cheapest_plan(idx, hosts, per_host, ends_by, capacity,
                                               _Spanned(eligible, ANY_SPAN), who, costs))
    barred = capacity.barred(ends_by, who) if capacity.reserved else None
    plan = _walk(idx, per_host, capacity, barred, eligible, costs)
    # (a failed full walk is a miss whatever the costs)
    return _view(Miss("host") if plan is None else plan)


def _ready_as_defined(idx: VictimIndex, per_host: int, ends_by: int, capacity: Capacity,
                      eligible: Rule, who: str) -> frozenset[str]:
    """Every candidate host, not barred, that free GPUs plus all its eligible victims ready."""
    barred = capacity.barred(ends_by, who)
    ready = set()
    for h in idx.candidates(capacity, per_host):
        have = capacity.free[h]
        for v in idx.on_host.get(h, ()):
            if v.w.id not in idx.stopped_now and eligible(v.w) is not None:
                have += victims_mod.gpus_on(v, h)
        if h not in barred and have >= per_host:
            ready.add(h)
    return frozenset(ready)


def _watch(monkeypatch: pytest.MonkeyPatch) -> Seen:
    seen = Seen()
    search = cycle_mod.cheapest_plan  # (as the callers have it now: ``_spanned``'s too)

    def checked(self: VictimIndex, hosts: int, per_host: int, ends_by: int, capacity: Capacity,
                eligible: Rule, who: str = "",
                costs: CostModel | None = None) -> Found:
        model = costs if costs is not None else flat_costs(0)
        twin = _copy(model)
        fixed = len(model._keep)
        want = _full(self, hosts, per_host, ends_by, capacity, eligible, who, twin)
        outer = model.budgets_asked
        model.budgets_asked = budgets_asked = set()
        try:
            found = search(self, hosts, per_host, ends_by, capacity, eligible, who, costs)
        finally:
            model.budgets_asked = outer
            if outer is not None:
                outer.update(budgets_asked)
        got = _view(found)
        plan = found if isinstance(found, Plan) else None
        miss = found if isinstance(found, Miss) else None
        where = f"t={model.now} {who} {hosts}x{per_host}"
        if got != want:
            seen.wrong.append(f"{where}: {got} != {want}")
        # (A failure's budgets_asked goes into the failure memo; a plan's is not kept. A
        # walk that ignores kept minimums may ask again what is fixed already.)
        if model._keep != twin._keep or (plan is None and budgets_asked != twin.budgets_asked):
            seen.wrong.append(f"{where}: keep or budgets_asked differ")
        if hosts > 1:
            seen.gang_failed += plan is None
            seen.gang_planned += plan is not None
            ready = _ready_as_defined(self, per_host, ends_by, capacity, eligible, who)
            if miss is not None and miss.kind == "ready" and miss.hosts != ready:
                seen.wrong.append(f"{where}: ready {sorted(miss.hosts)} != {sorted(ready)}")
            if (miss is None or miss.kind != "ready") and len(ready) < hosts:
                seen.wrong.append(f"{where}: searched past too few ready hosts")
            seen.ready_checked += 1
        elif plan is None:
            seen.single_failed += 1
            seen.single_failed_asking += len(model._keep) > fixed
        else:
            seen.single_planned += 1
        # Kept minimums are the least cost of a host's victims (a lower bound would do too).
        # (After a single-host search the index's floors are those of its cost model.)
        if costs is not None and hosts == 1:
            probe = _copy(costs)
            for host, low in self.cost_floors(costs).items():
                seen.mins_checked += 1
                costs_here = [probe.of(v.w) for v in self.on_host.get(host, ())
                              if v.w.id not in self.stopped_now]
                if low > min(costs_here, default=victims_mod.NEVER_COST):
                    seen.wrong.append(f"{where}: kept minimum of {host} too high")
        return found

    for module in CALLERS:
        monkeypatch.setattr(module, "cheapest_plan", checked)
    return seen


@pytest.mark.parametrize(("name", "days", "policy"), [
    ("ai2-month", 4.0, "allot"), ("ai2-month-heavy", 2.0, "allot"), ("demo", None, "allot"),
    ("ai2-month", 1.0, "baseline"),
])
def test_every_search_agrees_with_the_full_walk(name: str, days: float | None, policy: str,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _watch(monkeypatch)
    shipped_log(name, days, policy)
    assert not seen.wrong, seen.wrong[:5]
    assert seen.single_failed > 0 and seen.single_planned > 0, seen
    if name == "ai2-month" and policy == "allot":
        assert seen.single_failed_asking > 20, seen
        assert seen.gang_failed > 100 and seen.gang_planned > 20, seen
        assert seen.mins_checked > 100 and seen.ready_checked > 100, seen


def test_a_failure_that_forgets_its_asks_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(CostModel, "ask", lambda self, budget: None)
    seen = _watch(monkeypatch)
    shipped_log("ai2-month", 2.0)
    assert any("keep or budgets_asked differ" in w for w in seen.wrong), seen


def test_a_span_that_hides_eligible_work_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    _spanned(monkeypatch, 0)  # as if only unallocated work could be taken
    seen = _watch(monkeypatch)
    shipped_log("ai2-month", 2.0)
    assert len(seen.wrong) > 10, seen


def test_the_log_is_the_same_when_every_victim_is_offered_to_the_rule(
        monkeypatch: pytest.MonkeyPatch) -> None:
    kept = shipped_log("ai2-month-heavy", 1.0)
    _spanned(monkeypatch, ANY_SPAN)
    assert shipped_log("ai2-month-heavy", 1.0) == kept


def _fields(victims: list[tuple[int, int, bool, int]]) -> tuple[int, ...]:
    """A plan's cost as the module docstring orders it, most significant first."""
    out = [0, 0, 0, 0, len(victims), 0]
    for lost, gpus, allocated, keep in victims:
        at = 0 if allocated else 2
        out[at] += lost
        out[at + 1] += gpus
        out[5] += keep
    return tuple(out)


def test_packed_costs_add_and_compare_as_their_fields() -> None:
    """Summed over a plan's victims, packed costs order plans as the field tuples do
    (no field carries into the next, none is out of place), equal only when those are:
    every pair of one-victim plans at the fields' extremes, then random plans."""
    rng = random.Random(20261207)
    plans = [[(lost, gpus, allocated, keep)] for lost in (0, 5, 6, (1 << 63) + 5, (1 << 63) + 6)
             for gpus in (1, 3, (1 << 31) + 3) for allocated in (True, False)
             for keep in (0, 1, (1 << 20) - 1)]
    pairs = [(a, b) for a in plans for b in plans]

    def victim() -> tuple[int, int, bool, int]:
        lost = rng.choice((0, 1, 7, rng.randrange(1 << 40)))
        gpus = rng.choice((1, 2, 8, rng.randrange(1, 1 << 16)))
        return lost, gpus, rng.random() < 0.5, rng.choice((0, 1, rng.randrange(1 << 20)))

    pairs += [([victim() for _ in range(rng.randint(0, 6))],
               [victim() for _ in range(rng.randint(0, 6))]) for _ in range(3000)]
    for a, b in pairs:
        pa = sum(victims_mod.pack_cost(*v) for v in a)
        pb = sum(victims_mod.pack_cost(*v) for v in b)
        fa, fb = _fields(a), _fields(b)
        assert (pa > pb) - (pa < pb) == (fa > fb) - (fa < fb), (a, b)
