"""Validation of inputs against the current state: clear reasons, never exceptions.

An input that passed admission (``scheduler.admission``: it may enter the
journal at all) is checked here against the state. The same function gates the
fold (an invalid input is journaled but changes nothing, live or on replay) and
feeds the rejection events, so the reason a producer sees is the exact rule
that refused its input. It reads the state and never changes it.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from events import (
    INPUT_TYPES,
    BudgetEditReason,
    BudgetNodeDefined,
    BudgetSharesSet,
    ClockTicked,
    Event,
    HostAdded,
    HostFaulted,
    HostRemoved,
    HostRepaired,
    InputReason,
    PolicyConfigured,
    PrincipalKeyRevoked,
    PrincipalKeyRotated,
    PrincipalRegistered,
    RejectReason,
    WorkloadCancelled,
    WorkloadFinished,
    WorkloadStopped,
    WorkloadSubmitted,
)
from events.limits import MAX_GPUS_PER_HOST, MAX_HOSTS_PER_CLUSTER, MAX_SHARES, MAX_WINDOW_BUCKETS
from projections.budget_tree import parent_of
from projections.cluster import OK
from projections.principals import key_id_of, valid_principal, valid_public_key
from projections.workloads import ENDED, PENDING, RUNNING
from scheduler.shape import shape_of
from scheduler.verdict import Ignore, Reject, Verdict

if TYPE_CHECKING:
    from scheduler.state import State

# One budget path segment. ``fullmatch`` (a ``$`` would accept a trailing
# newline); "." and ".." are refused separately: they read as relative paths.
_SEGMENT = re.compile(r"[A-Za-z0-9_.\-]{1,128}")
_MAX_PATH_CHARS = 1024


def validate(state: State, e: Event) -> Verdict:
    """The verdict on admitted input ``e`` in ``state`` (None: fold it)."""
    kind = type(e)
    if kind is not ClockTicked and e.at > state.now + state.policy.clock_skew_s:
        # The trusted clock moves time, not producers: an input from the future
        # would otherwise pull now forward when it is folded at a later tick.
        return Reject(_REJECTION_KIND.get(kind, "input"), InputReason.FUTURE_TIME,
                      f"at={e.at} is more than clock_skew_s={state.policy.clock_skew_s} s "
                      f"after the scheduler's clock ({state.now})")
    return CHECKS[kind](state, e)


def _policy(state, e: PolicyConfigured) -> Verdict:
    root = state.budget.root
    if root is not None and not state.budget.can_manage(e.actor, root):
        return Reject("input", InputReason.NOT_AUTHORISED,
                      f"{e.actor!r} does not manage the budget root {root!r}")
    positive = ("window_s", "bucket_s", "host_gpus", "queue_depth", "preemption_searches",
                "fair_share_period_s")
    for name in positive:
        if getattr(e, name) < 1:
            return Reject("input", InputReason.BAD_POLICY, f"{name} must be >= 1")
    if e.min_runtime_cap_s < 0 or e.reservations < 0 or e.team_depth < 0 \
            or e.dedupe_window_s < 0 or e.clock_skew_s < 0 or e.preemption_grace_s < 0 \
            or (e.borrowed_protection_s is not None and e.borrowed_protection_s < 0):
        return Reject("input", InputReason.BAD_POLICY, "negative knob")
    if e.window_s < e.bucket_s:
        return Reject("input", InputReason.BAD_POLICY, "window_s must be >= bucket_s")
    if e.window_s // e.bucket_s > MAX_WINDOW_BUCKETS:
        # Accrual and memory grow with the buckets a window holds.
        return Reject("input", InputReason.BAD_POLICY,
                      f"window_s / bucket_s must be at most {MAX_WINDOW_BUCKETS}")
    if e.bucket_s != state.usage.bucket_s and any(
        u.lifetime or u.rate for u in state.usage.leaves.values()
    ):
        return Reject("input", InputReason.BAD_POLICY,
                      "bucket_s cannot change once usage is recorded")
    return None


def valid_segment(name: str) -> bool:
    """One path segment: letters, digits, ``_ . -``; not ``.`` or ``..``."""
    return _SEGMENT.fullmatch(name) is not None and name not in (".", "..")


def _valid_path(path: str) -> bool:
    return 0 < len(path) <= _MAX_PATH_CHARS and all(valid_segment(s) for s in path.split("/"))


def _node_defined(state, e: BudgetNodeDefined) -> Verdict:
    tree = state.budget
    if not _valid_path(e.path):
        return Reject("budget", BudgetEditReason.BAD_PATH,
                      f"{e.path!r}: segments must match [A-Za-z0-9_.-]{{1,128}} and not be "
                      f"'.' or '..'")
    if e.path in tree:
        return Reject("budget", BudgetEditReason.ALREADY_DEFINED, f"{e.path!r} exists")
    if not 0 <= e.shares <= MAX_SHARES:
        return Reject("budget", BudgetEditReason.BAD_SHARES, f"shares must be 0 to {MAX_SHARES}")
    parent = parent_of(e.path)
    if parent is None:
        if tree.root is not None:
            return Reject("budget", BudgetEditReason.BAD_PATH,
                          f"the tree already has the root {tree.root!r}")
        return None  # bootstrap: the first root defines the admins
    if parent not in tree:
        return Reject("budget", BudgetEditReason.UNKNOWN_NODE, f"parent {parent!r} is not defined")
    if not tree.can_manage(e.actor, parent):
        return Reject("budget", BudgetEditReason.NOT_A_MANAGER,
                      f"{e.actor!r} does not manage {parent!r} or any ancestor")
    if tree.is_leaf(parent) and state.leaf_has_work(parent):
        return Reject("budget", BudgetEditReason.PARENT_HAS_WORKLOADS,
                      f"{parent!r} is a leaf with pending or running workloads")
    return None


def _shares_set(state, e: BudgetSharesSet) -> Verdict:
    tree = state.budget
    if e.parent not in tree:
        return Reject("budget", BudgetEditReason.UNKNOWN_NODE, f"{e.parent!r} is not defined")
    if not tree.can_manage(e.actor, e.parent):
        return Reject("budget", BudgetEditReason.NOT_A_MANAGER,
                      f"{e.actor!r} does not manage {e.parent!r} or any ancestor")
    if not e.shares:
        return Reject("budget", BudgetEditReason.BAD_SHARES, "no shares given")
    for cs in e.shares:
        if not valid_segment(cs.child):
            # A child is one segment: "llm/alice" would edit a grandchild of parent.
            return Reject("budget", BudgetEditReason.BAD_PATH,
                          f"child {cs.child!r} must be one path segment")
        if f"{e.parent}/{cs.child}" not in tree:
            return Reject("budget", BudgetEditReason.UNKNOWN_NODE,
                          f"{e.parent}/{cs.child} is not defined")
        if not 0 <= cs.shares <= MAX_SHARES:
            return Reject("budget", BudgetEditReason.BAD_SHARES,
                          f"{cs.child}: shares must be 0 to {MAX_SHARES}")
    return None


def _host_added(state, e: HostAdded) -> Verdict:
    hosts = state.cluster_state.hosts
    if e.host in hosts:
        return Reject("input", InputReason.HOST_EXISTS, f"host {e.host!r} exists")
    if not e.host or not 1 <= e.gpus <= MAX_GPUS_PER_HOST:
        return Reject("input", InputReason.BAD_HOST,
                      f"a host needs a name and 1 to {MAX_GPUS_PER_HOST} GPUs")
    if len(hosts) >= MAX_HOSTS_PER_CLUSTER:
        return Reject("input", InputReason.TOO_MANY_HOSTS,
                      f"the cluster already has {len(hosts)} hosts (at most "
                      f"{MAX_HOSTS_PER_CLUSTER})")
    return None


def _host_known(state, host: str) -> Verdict:
    if host not in state.cluster_state.hosts:
        return Reject("input", InputReason.UNKNOWN_HOST, f"host {host!r} is not in the cluster")
    return None


def _host_removed(state, e: HostRemoved) -> Verdict:
    bad = _host_known(state, e.host)
    if bad:
        return bad
    if state.cluster_state.hosts[e.host].workloads:
        return Reject("input", InputReason.HOST_BUSY,
                      f"host {e.host!r} runs workloads; fault it to drain first")
    return None


def _host_faulted(state, e: HostFaulted) -> Verdict:
    return _host_known(state, e.host)


def _host_repaired(state, e: HostRepaired) -> Verdict:
    bad = _host_known(state, e.host)
    if bad:
        return bad
    if state.cluster_state.hosts[e.host].health == OK:
        return Reject("input", InputReason.HOST_HEALTHY, f"host {e.host!r} is not faulty")
    return None


def _same_contract(w, e: WorkloadSubmitted) -> bool:
    return (w.budget, w.user, w.gpus, w.hosts, w.min_runtime_s, w.resumable, w.priority,
            w.kind) == (e.budget, e.user, e.gpus, e.hosts, e.min_runtime_s, e.resumable,
                        e.priority, e.kind)


def _submitted(state, e: WorkloadSubmitted) -> Verdict:
    existing = state.workloads.all.get(e.workload)
    if existing is not None:
        if _same_contract(existing, e):
            return Ignore(f"{e.workload!r} was already submitted with the same contract")
        return Reject("workload", RejectReason.DUPLICATE_WORKLOAD,
                      f"{e.workload!r} exists with a different contract")
    tree = state.budget
    if e.budget not in tree:
        return Reject("workload", RejectReason.UNKNOWN_BUDGET, f"no budget node {e.budget!r}")
    if not tree.is_leaf(e.budget):
        return Reject("workload", RejectReason.NOT_A_LEAF,
                      f"{e.budget!r} has children; submit to one of its leaves")
    policy = state.policy
    if e.min_runtime_s < 0:
        return Reject("workload", RejectReason.NEGATIVE_MIN_RUNTIME, "min_runtime_s must be >= 0")
    if e.min_runtime_s > policy.min_runtime_cap_s:
        return Reject("workload", RejectReason.MIN_RUNTIME_OVER_CAP,
                      f"min_runtime_s={e.min_runtime_s} exceeds the cap of "
                      f"{policy.min_runtime_cap_s} s")
    if e.checkpoint_interval_s is not None and e.checkpoint_interval_s < 1:
        return Reject("workload", RejectReason.BAD_PREEMPTION_COST,
                      "checkpoint_interval_s must be >= 1 (or null: checkpoints continuously)")
    if e.restart_overhead_s < 0:
        return Reject("workload", RejectReason.BAD_PREEMPTION_COST,
                      "restart_overhead_s must be >= 0")
    bad_run = _bad_run_spec(e)
    if bad_run is not None:
        return Reject("workload", RejectReason.BAD_RUN_SPEC, bad_run)
    shape = shape_of(e)
    if isinstance(shape, str):
        return Reject("workload", RejectReason.MALFORMED_SHAPE, shape)
    hosts, per = shape
    if per > policy.host_gpus:
        return Reject("workload", RejectReason.MALFORMED_SHAPE,
                      f"{per} GPUs per host exceed the {policy.host_gpus}-GPU host; "
                      f"ask for hosts={-(-e.gpus // policy.host_gpus)}")
    fitting = state.cluster_state.hosts_with_at_least(per)
    if hosts > fitting:
        return Reject("workload", RejectReason.TOO_LARGE,
                      f"needs {hosts} hosts with {per} GPUs; the cluster has {fitting}")
    return None


def _owner_or_manager(state, actor: str, w) -> bool:
    return actor == w.user or state.budget.can_manage(actor, w.budget)


def _cancelled(state, e: WorkloadCancelled) -> Verdict:
    w = state.workloads.all.get(e.workload)
    if w is None:
        return Reject("input", InputReason.UNKNOWN_WORKLOAD, f"no workload {e.workload!r}")
    if w.status in ENDED:
        return Reject("input", InputReason.ALREADY_ENDED, f"{e.workload!r} is {w.status}")
    if not _owner_or_manager(state, e.actor, w):
        return Reject("input", InputReason.NOT_AUTHORISED,
                      f"{e.actor!r} is neither the owner nor a manager of {w.budget!r}")
    return None


def _finished(state, e: WorkloadFinished) -> Verdict:
    w = state.workloads.all.get(e.workload)
    if w is None:
        return Reject("input", InputReason.UNKNOWN_WORKLOAD, f"no workload {e.workload!r}")
    if w.status != RUNNING:
        return Reject("input", InputReason.NOT_RUNNING, f"{e.workload!r} is {w.status}")
    if e.run_number is not None and e.run_number != w.runs:
        return Reject("input", InputReason.NOT_RUNNING,
                      f"run {e.run_number} of {e.workload!r} ended already (it is on run {w.runs})")
    return None


def _bad_run_spec(e: WorkloadSubmitted) -> str | None:
    """What is wrong with the fields a real executor runs (None: nothing, or none given)."""
    if e.command is not None and (not e.command or not e.command[0]):
        return "command must name a program (argv[0])"
    for item in e.env or ():
        name, sep, _ = item.partition("=")
        if not sep or not name:
            return f"env entries are NAME=value, not {item[:40]!r}"
    if e.time_limit_s is not None and e.time_limit_s < 1:
        return "time_limit_s must be >= 1 (or null: no limit)"
    if e.grace_s is not None and e.grace_s < 0:
        return "grace_s must be >= 0"
    return None


def _stopped(state, e: WorkloadStopped) -> Verdict:
    if e.workload not in state.workloads.all:
        return Reject("input", InputReason.UNKNOWN_WORKLOAD, f"no workload {e.workload!r}")
    if (e.workload, e.run_number) not in state.stopping:
        # Late (the grace ran out first), repeated, for a run never preempted, or
        # from an executor that saw a preemption with no grace: nothing is held,
        # nothing to do, and the journal says so (a copy of the same report, same
        # id, is dropped before this as a duplicate).
        return Reject("input", InputReason.NOT_STOPPING,
                      f"run {e.run_number} of {e.workload!r} holds no GPUs "
                      "(not preempted, already stopped, or its grace ended)")
    if e.host is not None and all(h != e.host for h, _ in state.stopping[(e.workload, e.run_number)][0]):
        return Reject("input", InputReason.NOT_STOPPING,
                      f"run {e.run_number} of {e.workload!r} holds no GPUs on {e.host!r}")
    return None


def _tick(state, e: ClockTicked) -> Verdict:
    return None


# Tick and nudge ids begin "tick:" and "nudge:": a principal of that name could squat them.
_RESERVED_PRINCIPALS = frozenset({"tick", "nudge"})


# Principals: the shape of the facts only. Who may publish them is the edge's
# authorisation (identity.authorisation), which only journals authorised ones.
def _new_key(state, public_key: str, key_id: str) -> Verdict:
    if not valid_public_key(public_key):
        return Reject("input", InputReason.BAD_PRINCIPAL,
                      "public_key must be an Ed25519 public key, 64 lowercase hex")
    if key_id != key_id_of(public_key):
        return Reject("input", InputReason.BAD_PRINCIPAL,
                      f"key_id must be {key_id_of(public_key)} (SHA-256 of the key, 16 hex)")
    if state.principals.key(key_id) is not None:
        return Reject("input", InputReason.KEY_IN_USE, f"key {key_id} was registered before")
    return None


def _principal_registered(state, e: PrincipalRegistered) -> Verdict:
    from events.principal import ROLES

    if not valid_principal(e.principal) or e.principal in _RESERVED_PRINCIPALS:
        return Reject("input", InputReason.BAD_PRINCIPAL,
                      f"{e.principal[:80]!r} is not a principal name ([A-Za-z0-9._@+=~-]{{1,64}})")
    bad = [r for r in e.roles if r not in ROLES]
    if bad or not e.roles:
        return Reject("input", InputReason.BAD_PRINCIPAL,
                      f"roles must be some of {', '.join(ROLES)} (got {list(e.roles)[:8]})")
    old = state.principals.get(e.principal)
    if old is not None and old.key_id == e.key_id:
        return None  # the same key, new roles
    return _new_key(state, e.public_key, e.key_id)


def _key_rotated(state, e: PrincipalKeyRotated) -> Verdict:
    if state.principals.get(e.principal) is None:
        return Reject("input", InputReason.UNKNOWN_PRINCIPAL, f"no principal {e.principal!r}")
    return _new_key(state, e.public_key, e.key_id)


def _key_revoked(state, e: PrincipalKeyRevoked) -> Verdict:
    known = state.principals.key(e.key_id)
    if known is None or known[0] != e.principal:
        return Reject("input", InputReason.UNKNOWN_PRINCIPAL,
                      f"{e.principal!r} has no key {e.key_id!r}")
    return None


# Submissions and budget edits have their own rejection events.
_REJECTION_KIND: dict[type, str] = {
    WorkloadSubmitted: "workload",
    BudgetNodeDefined: "budget",
    BudgetSharesSet: "budget",
}

CHECKS: dict[type, Any] = {
    PolicyConfigured: _policy,
    BudgetNodeDefined: _node_defined,
    BudgetSharesSet: _shares_set,
    HostAdded: _host_added,
    HostRemoved: _host_removed,
    HostFaulted: _host_faulted,
    HostRepaired: _host_repaired,
    WorkloadSubmitted: _submitted,
    WorkloadCancelled: _cancelled,
    WorkloadFinished: _finished,
    ClockTicked: _tick,
    WorkloadStopped: _stopped,
    PrincipalRegistered: _principal_registered,
    PrincipalKeyRotated: _key_rotated,
    PrincipalKeyRevoked: _key_revoked,
}

def _check_table() -> None:
    """Every input type has a check: fail at import, never accept a new type unchecked."""
    missing = [t.__name__ for t in INPUT_TYPES if t not in CHECKS]
    if missing:  # pragma: no cover - a programming error, caught by the first import
        raise TypeError(f"validation has no check for {', '.join(missing)}")


_check_table()

__all__ = ["PENDING", "shape_of", "valid_segment", "validate"]
