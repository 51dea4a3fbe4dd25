"""A seeded workload generator shaped like the lab's demand.

Classes mirror what the brief describes: debug (few GPUs, short, minimum
runtime <= 15 min), training gangs (8-256 GPUs, long, resumable, minimum
runtime 1-8 h), unallocated eval/batch (minimum runtime 0), and interactive
sessions (few GPUs, long, not resumable). Each class offers a load expressed
as a fraction of the cluster's GPU-time; the number of workloads follows from
the mean size and duration.

Demand is bursty per team: every team alternates between busy and quiet
phases of random length, and debug/interactive work follows the working day.
Each team also has a demand level relative to its entitlement, so some teams
want more than they are owed and some less (which is what makes "owed" smaller
than the entitlement, and lets busy teams borrow). Everything comes from
``random.Random`` seeded with the scenario seed and the class: the same
scenario always yields the same workloads.
"""

from __future__ import annotations

import bisect
import math
import random
from pathlib import Path
from typing import Annotated

import msgspec

from events.errors import AllotError
from events.limits import MAX_GPUS_PER_HOST, MAX_SHARES
from simulator.sources import SourceOutput, SquatConfig
from simulator.spec import BudgetNodeSpec, SquatterSpec, WorkloadSpec

DAY = 86_400

# Bounds on the knobs, so a typo is refused with its key instead of a
# traceback deep in the draws or a run that never ends. Each is far beyond any
# sensible scenario.
MAX_WORKLOADS = 10_000_000       # generated per class
MAX_RESEARCHERS = 100_000        # per team
Fraction = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
Weight = Annotated[float, msgspec.Meta(ge=0.0, le=1e9)]       # finite, not negative
Factor = Annotated[float, msgspec.Meta(ge=0.0, le=1e6)]
Positive = Annotated[int, msgspec.Meta(ge=1, le=2**62)]
Seconds = Annotated[int, msgspec.Meta(ge=0, le=2**62)]


class TeamConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A team (a budget node) and its researchers (generated leaves under it)."""

    path: str
    shares: Annotated[int, msgspec.Meta(ge=0, le=MAX_SHARES)] = 1  # among its siblings in the tree
    researchers: Annotated[int, msgspec.Meta(ge=0, le=MAX_RESEARCHERS)] = 10
    managers: tuple[str, ...] = ()
    # Demand relative to entitlement: 1.0 asks for exactly its share of the
    # offered load, 0.5 for half of it.
    demand: Factor = 1.0


class ClassConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One workload class."""

    kind: str
    load: Annotated[float, msgspec.Meta(ge=0.0, le=1e3)]  # offered GPU-time / cluster capacity
    gpus: Annotated[list[Annotated[int, msgspec.Meta(ge=1, le=2**31)]], msgspec.Meta(min_length=1)]
    gpus_weights: list[Weight] | None = None
    duration_median_s: Positive
    duration_sigma: Annotated[float, msgspec.Meta(ge=0.0, le=10.0)] = 1.0  # lognormal spread
    duration_min_s: Seconds = 60
    duration_max_s: Positive = 7 * DAY
    min_runtime_s: tuple[Seconds, Seconds] = (0, 0)  # uniform range; (0, 0) = unallocated
    resumable: Fraction = 0.0        # probability
    priority_weights: tuple[Weight, Weight, Weight] = (0.1, 0.2, 0.7)  # LOW, NORMAL, HIGH
    patience_s: Seconds | None = None
    diurnal: Fraction = 0.0          # 0: flat; 0.5: day rate 1.5x, night 0.5x
    # The working week, counted from t = 0 as a Monday 00:00: weekends run at
    # (1 - weekly) and weekdays at (1 + 2/5 weekly), so the weekly mean stays 1.
    weekly: Fraction = 0.0
    bursty: bool = True              # follows the team's busy/quiet phases
    # --- the cost of a preemption (issue 9), drawn apart from the rest ---------
    checkpoint_interval_s: Positive | None = None  # resumable workloads checkpoint this often
    restart_overhead_s: Seconds = 0  # a resumed run spends this long before progressing
    resubmit: Fraction = 0.0         # probability the owner resubmits a victim that cannot resume
    resubmit_limit: Annotated[int, msgspec.Meta(ge=0, le=1000)] = 2  # ... at most this many times
    # A non-resumable workload makes progress only if it runs to the end, so its
    # owner asks for its whole run as minimum runtime (within the class's range).
    protect_whole_run: bool = False
    # --- sessions that can be restored (issue 26; docs/executor.md, the hooks) ---
    # The share of the class's workloads that declare a checkpoint hook and a
    # restore hook (0: none, the default). Such a workload runs resumable (a
    # preemption requeues it; its next run first spends ``restart_overhead_s``
    # restoring) and keeps its in-memory state when its checkpoint hook, which
    # takes ``checkpoint_hook_s``, completes within the preemption's grace;
    # otherwise it keeps only what its last periodic checkpoint saved
    # (``checkpoint_interval_s``; none when unset). Drawn from a stream of its
    # own, so the class's other draws stay as they are.
    restorable: Fraction = 0.0
    checkpoint_hook_s: Seconds = 60


class Config(msgspec.Struct, frozen=True, kw_only=True, tag="generator", forbid_unknown_fields=True):
    """``[[sources]]`` with ``type = "generator"``."""

    teams: list[TeamConfig]
    classes: list[ClassConfig]
    capacity_gpus: Positive | None = None  # default: the scenario cluster's GPUs (filled in by the loader)
    horizon_s: Positive | None = None      # default: the scenario horizon
    # default: the scenario cluster's GPUs per host
    host_gpus: Annotated[int, msgspec.Meta(ge=1, le=MAX_GPUS_PER_HOST)] | None = None
    burst: Fraction = 0.6             # busy phases run at (1 + burst), quiet at (1 - burst)
    # Researchers size jobs to their budget: a team submits no workload larger
    # than this multiple of its entitlement in GPUs (its smallest size always
    # stays allowed). 0 turns the cap off.
    max_size_vs_entitlement: Factor = 2.0
    # Draw workloads until each class's offered GPU-time reaches its load exactly,
    # instead of a count from the class's mean size (which the size cap, the
    # clipping and the tails make too small or too large).
    exact_load: bool = False
    # Split each class's GPU-time (not its job count) by entitlement x demand:
    # a team whose size cap leaves it only small jobs submits more of them.
    split_gpu_time: bool = False
    phase_mean_s: Positive = 2 * DAY  # mean length of a busy or quiet phase
    user_prefix: str = "u"
    # --- people under the old scheduler (issue 9) -------------------------------
    squatting: SquatConfig | None = None  # researchers holding idle jobs to debug on


class GeneratorError(AllotError, ValueError):
    """The generator's configuration cannot produce workloads."""


def load(config: Config, *, seed: int, base_dir: Path,
         tree: list[BudgetNodeSpec] | None = None) -> SourceOutput:
    """Team nodes, a leaf per researcher, and the workloads of every class.

    ``tree`` is the rest of the budget tree (the scenario's own nodes): a team's
    demand is its entitlement (its fraction of the cluster) times its ``demand``.
    """
    if config.capacity_gpus is None or config.horizon_s is None:
        raise GeneratorError("capacity_gpus and horizon_s must be set (the scenario loader fills them)")
    capacity, horizon = config.capacity_gpus, config.horizon_s
    if not config.teams:
        raise GeneratorError("no teams")
    nodes: list[BudgetNodeSpec] = []
    researchers: dict[str, list[tuple[str, str]]] = {}
    for team in config.teams:
        nodes.append(BudgetNodeSpec(path=team.path, shares=team.shares, managers=team.managers))
    for team in config.teams:
        members = []
        for i in range(team.researchers):
            user = f"{team.path.rsplit('/', 1)[-1]}-{config.user_prefix}{i + 1:02d}"
            leaf = f"{team.path}/{user}"
            nodes.append(BudgetNodeSpec(path=leaf, shares=1, managers=(user,)))
            members.append((leaf, user))
        researchers[team.path] = members
    entitlement = _entitlements([*(tree or []), *nodes])
    weights = [entitlement.get(t.path, 0.0) * t.demand for t in config.teams]
    if not any(weights):
        raise GeneratorError("no team has a positive entitlement and demand")
    phases = {
        t.path: _phases(random.Random(f"{seed}:phases:{t.path}"), horizon, config.phase_mean_s,
                        config.burst)
        for t in config.teams
    }
    team_gpus = {t.path: entitlement.get(t.path, 0.0) * capacity for t in config.teams}
    workloads: list[WorkloadSpec] = []
    for cls in config.classes:
        workloads.extend(_generate(cls, config, seed, capacity, horizon, weights, phases,
                                   researchers, team_gpus))
    workloads.sort(key=lambda w: (w.submit_at, w.workload))
    squatters = _squatters(config.squatting, seed, researchers) if config.squatting else []
    return SourceOutput(nodes=nodes, workloads=workloads, squatters=squatters,
                        squat=config.squatting)


def _squatters(cfg: SquatConfig, seed: int,
               researchers: dict[str, list[tuple[str, str]]]) -> list[SquatterSpec]:
    """Who squats: ``round(share x researchers)`` of each team, each with a hold size and a start.

    A squatter takes their hold at a random moment of the first working day
    (08:00-12:00), so the holds do not all arrive in the same second.
    """
    if not 0 <= cfg.share <= 1:
        raise GeneratorError(f"squatting.share must be within [0, 1], got {cfg.share}")
    gw = cfg.gpus_weights or [1.0] * len(cfg.gpus)
    if len(gw) != len(cfg.gpus) or not cfg.gpus:
        raise GeneratorError("squatting.gpus_weights must match squatting.gpus")
    if cfg.hold_s < 1:
        raise GeneratorError("squatting.hold_s must be positive")
    rng = random.Random(f"{seed}:squatters")
    out = []
    for team in sorted(researchers):
        members = researchers[team]
        for leaf, user in sorted(rng.sample(members, round(cfg.share * len(members)))):
            gpus = rng.choices(cfg.gpus, weights=gw)[0]
            out.append(SquatterSpec(user=user, budget=leaf, gpus=gpus,
                                    first_at=8 * 3600 + rng.randrange(4 * 3600)))
    return out


def _entitlements(nodes: list[BudgetNodeSpec]) -> dict[str, float]:
    """Each node's fraction of the cluster; nodes a path implies but nobody lists get 1 share."""
    shares: dict[str, int] = {}
    for n in nodes:
        parts = n.path.split("/")
        for i in range(1, len(parts)):
            shares.setdefault("/".join(parts[:i]), 1)
        shares.setdefault(n.path, n.shares)
    children: dict[str, list[str]] = {}
    for path in shares:
        if "/" in path:
            children.setdefault(path.rsplit("/", 1)[0], []).append(path)
    out: dict[str, float] = {}
    for path in sorted(shares, key=lambda p: p.count("/")):
        if "/" not in path:
            out[path] = 1.0
            continue
        parent = path.rsplit("/", 1)[0]
        total = sum(shares[c] for c in children[parent])
        out[path] = out[parent] * (shares[path] / total if total else 0.0)
    return out


def _phases(rng: random.Random, horizon: int, mean: int, burst: float) -> list[tuple[int, float]]:
    """Alternating busy/quiet phases: (start, rate multiplier), starting busy or quiet at random."""
    out = []
    t = 0
    busy = rng.random() < 0.5
    while t < horizon:
        out.append((t, 1 + burst if busy else 1 - burst))
        t += max(3600, int(rng.expovariate(1 / mean)))
        busy = not busy
    return out


def _diurnal(t: int, amplitude: float) -> float:
    # Peak at 14:00, trough at 02:00 (cluster-local time = scenario time).
    return 1 + amplitude * math.cos(2 * math.pi * ((t % DAY) / DAY - 14 / 24))


def _weekly(t: int, amplitude: float) -> float:
    # Days 5 and 6 of each week from t = 0 are the weekend.
    return 1 - amplitude if (t // DAY) % 7 >= 5 else 1 + amplitude * 2 / 5


def _generate(
    cls: ClassConfig,
    config: Config,
    seed: int,
    capacity: int,
    horizon: int,
    team_weights: list[float],
    phases: dict[str, list[tuple[int, float]]],
    researchers: dict[str, list[tuple[str, str]]],
    team_gpus: dict[str, float],
) -> list[WorkloadSpec]:
    rng = random.Random(f"{seed}:class:{cls.kind}")
    host_gpus = config.host_gpus or 8
    bad = [g for g in cls.gpus if g > host_gpus and g % host_gpus]
    if bad:
        raise GeneratorError(f"class {cls.kind}: sizes {bad} exceed a {host_gpus}-GPU host but are "
                             f"not whole hosts")
    gw = cls.gpus_weights or [1.0] * len(cls.gpus)
    if len(gw) != len(cls.gpus):
        raise GeneratorError(f"class {cls.kind}: gpus_weights must match gpus")
    if not sum(gw) > 0 or not sum(cls.priority_weights) > 0:
        raise GeneratorError(f"class {cls.kind}: gpus_weights and priority_weights need a "
                             f"positive sum")
    if cls.duration_min_s > cls.duration_max_s or cls.min_runtime_s[0] > cls.min_runtime_s[1]:
        raise GeneratorError(f"class {cls.kind}: duration_min_s must be at most duration_max_s, "
                             f"and min_runtime_s must be [low, high] with low <= high")
    # Mean GPU-seconds per workload (lognormal mean = median * exp(sigma^2 / 2), clipped later).
    mean_gpus = sum(g * w for g, w in zip(cls.gpus, gw, strict=True)) / sum(gw)
    mean_dur = min(cls.duration_max_s, cls.duration_median_s * math.exp(cls.duration_sigma ** 2 / 2))
    count = round(cls.load * capacity * horizon / (mean_gpus * mean_dur))
    if count > MAX_WORKLOADS:
        raise GeneratorError(f"class {cls.kind}: load {cls.load} would generate {count:,} "
                             f"workloads, over the limit of {MAX_WORKLOADS:,}")
    lo, hi = cls.min_runtime_s
    teams = [t.path for t in config.teams]
    # Arrival times per team from its rate profile, by inverse transform on a 10-minute grid.
    step = 600
    grid = list(range(0, horizon, step))
    cum_by_team: dict[str, list[float]] = {}
    for team in teams:
        cum, total = [], 0.0
        ph = phases[team]
        starts = [p[0] for p in ph]
        for t in grid:
            m = ph[bisect.bisect_right(starts, t) - 1][1] if cls.bursty else 1.0
            if cls.diurnal:
                m *= _diurnal(t, cls.diurnal)
            if cls.weekly:
                m *= _weekly(t, cls.weekly)
            total += m
            cum.append(total)
        cum_by_team[team] = cum
    # Per team, the sizes it may submit (and their weights), under the size cap.
    sizes: dict[str, tuple[list[int], list[float]]] = {}
    cap_k = config.max_size_vs_entitlement
    smallest = min(cls.gpus)
    for team in teams:
        allowed = [(g, w) for g, w in zip(cls.gpus, gw, strict=True)
                   if not cap_k or g <= cap_k * team_gpus[team] or g == smallest]
        sizes[team] = ([g for g, _ in allowed], [w for _, w in allowed])
    # The preemption cost is drawn from its own stream, so adding it leaves every
    # other draw (and so the workloads of a scenario without it) unchanged.
    cost_rng = random.Random(f"{seed}:class:{cls.kind}:cost")
    restore_rng = random.Random(f"{seed}:class:{cls.kind}:restorable")
    if cls.checkpoint_interval_s is not None and cls.checkpoint_interval_s < 1:
        raise GeneratorError(f"class {cls.kind}: checkpoint_interval_s must be positive")
    if cls.restart_overhead_s < 0 or not 0 <= cls.resubmit <= 1:
        raise GeneratorError(f"class {cls.kind}: restart_overhead_s must be >= 0 and resubmit "
                             f"within [0, 1]")
    if not 0 <= cls.weekly <= 1:
        raise GeneratorError(f"class {cls.kind}: weekly must be within [0, 1]")
    if config.split_gpu_time:
        # Team draws weighted by entitlement x demand / the team's mean size, so
        # each team's expected GPU-time is in proportion to entitlement x demand.
        team_weights = [
            w / (sum(g * x for g, x in zip(*sizes[t], strict=True)) / sum(sizes[t][1]))
            for t, w in zip(teams, team_weights, strict=True)]
    if cls.resubmit_limit < 0:
        raise GeneratorError(f"class {cls.kind}: resubmit_limit must be >= 0")
    target = cls.load * capacity * horizon if config.exact_load else None
    offered = 0
    out = []
    i = -1
    while (offered < target) if target is not None else (i + 1 < count):
        i += 1
        if i >= MAX_WORKLOADS:
            raise GeneratorError(f"class {cls.kind}: load {cls.load} needs more than "
                                 f"{MAX_WORKLOADS:,} workloads")
        team = rng.choices(teams, weights=team_weights)[0]
        cum = cum_by_team[team]
        u = rng.random() * cum[-1]
        k = bisect.bisect_left(cum, u)
        submit_at = grid[k] + rng.randrange(step)
        leaf, user = rng.choice(researchers[team])
        gpus = rng.choices(sizes[team][0], weights=sizes[team][1])[0]
        # Larger than a host: a gang of whole hosts (sizes must be multiples of the host).
        hosts = -(-gpus // host_gpus) if gpus > host_gpus else 1
        dur = int(cls.duration_median_s * math.exp(rng.gauss(0, cls.duration_sigma)))
        dur = max(cls.duration_min_s, min(cls.duration_max_s, dur))
        mr = rng.randint(lo, hi) if hi > 0 else 0
        mr = (mr // 60) * 60 if mr >= 60 else mr
        prio = rng.choices((-1, 0, 1), weights=cls.priority_weights)[0]
        resumable = rng.random() < cls.resumable
        restorable = bool(cls.restorable) and restore_rng.random() < cls.restorable
        if cls.protect_whole_run and not resumable and hi > 0:
            mr = max(lo, min(hi, dur // 60 * 60 if dur >= 60 else dur))
        offered += gpus * dur
        spec = WorkloadSpec(
            workload=f"{cls.kind}-{i:06d}",
            submit_at=submit_at,
            budget=leaf,
            user=user,
            gpus=gpus,
            hosts=hosts,
            min_runtime_s=mr,
            resumable=resumable,
            priority=prio,
            kind=cls.kind,
            duration_s=dur,
            patience_s=cls.patience_s,
            checkpoint_interval_s=cls.checkpoint_interval_s if resumable else None,
            restart_overhead_s=cls.restart_overhead_s if resumable else 0,
            resubmits=(cls.resubmit_limit if not resumable and cls.resubmit > 0
                       and cost_rng.random() < cls.resubmit else 0),
        )
        if restorable:
            # Its contract is drawn as before (so the other draws stay paired with
            # a run without restorable sessions); the hooks make it resumable.
            spec = msgspec.structs.replace(
                spec, resumable=True, checkpoint_interval_s=cls.checkpoint_interval_s,
                restart_overhead_s=cls.restart_overhead_s, resubmits=0,
                checkpoint_hook_s=cls.checkpoint_hook_s)
        out.append(spec)
    return out
