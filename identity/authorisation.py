"""Who may send what: one table, event type -> the roles (and scope) that may send it.

Authentication proves who signed an input (``streams.signing`` and the edge in
``streams.processor``: the signer is the event's ``actor``). Authorisation,
here, decides whether that signer may send it, from the signer's roles and
the cluster's state only (``projections.principals`` and the rest of the
engine's state, as of the input's place in the journal). It is pure and
deterministic: the same journal prefix and input give the same answer on the
live worker, a restarted one and ``allot audit verify``.

An input that fails is never journaled: the edge dead-letters it with reason
``not_authorised`` (or ``unauthenticated`` / ``revoked`` when the signature
does not hold), so the journal holds only authorised inputs and the engine's
state is unchanged. docs/events.md carries the same table; a test compares it
with ``TABLE``.

Roles come from ``principal.registered``; the configured first admins
(``admin_principal`` in the worker's settings) hold ``admin`` from the start,
so there is no race to register first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from events import (
    INPUT_TYPES,
    BudgetNodeDefined,
    BudgetSharesSet,
    ClockTicked,
    Event,
    HostAdded,
    HostFaulted,
    HostRemoved,
    HostRepaired,
    PolicyConfigured,
    PrincipalKeyRevoked,
    PrincipalKeyRotated,
    PrincipalRegistered,
    Role,
    WorkloadCancelled,
    WorkloadFinished,
    WorkloadStopped,
    WorkloadSubmitted,
    tag_of,
)
from events.principal import ANY
from projections.budget_tree import parent_of

if TYPE_CHECKING:
    from scheduler.state import State

# Reasons (dead letters) of the identity checks; docs/live.md lists them.
UNAUTHENTICATED = "unauthenticated"
NOT_AUTHORISED = "not_authorised"
REVOKED = "revoked"
# The pseudo-role of the trusted clock (the ticker's principal, from configuration).
TICKER = "ticker"

# (state, event, signer, configured admins) -> why not, or None.
Scope = Callable[["State", Any, str, frozenset[str]], "str | None"]


@dataclass(frozen=True)
class Rule:
    """Who may send one event type: any of ``roles``, then ``scope`` (None: allowed)."""

    roles: tuple[str, ...]
    scope_text: str
    scope: Scope | None = None
    # The principal named by the event may send it about itself, whatever its roles.
    self_service: bool = False


def _submit_scope(state: State, e: WorkloadSubmitted, signer: str, admins: frozenset[str]) -> str | None:
    if e.user == signer:
        return None
    p = state.principals.get(signer)
    if p is not None and (e.user in p.acts_for or ANY in p.acts_for):
        return None
    return f"{signer!r} submits as {e.user[:80]!r} but may act only for itself" + (
        f" and {', '.join(p.acts_for)}" if p is not None and p.acts_for else "")


def _cancel_scope(state: State, e: WorkloadCancelled, signer: str, admins: frozenset[str]) -> str | None:
    w = state.workloads.all.get(e.workload)
    if w is None:
        return None  # the core answers unknown_workload
    if w.user == signer or state.budget.can_manage(signer, w.budget):
        return None
    p = state.principals.get(signer)
    if p is not None and (w.user in p.acts_for or ANY in p.acts_for):
        return None
    return (f"{signer!r} is neither the owner of {e.workload[:80]!r}, one it acts for, nor a "
            f"manager of {w.budget!r}")


def _executor_scope(state: State, e: WorkloadFinished, signer: str, admins: frozenset[str]) -> str | None:
    w = state.workloads.all.get(e.workload)
    if w is None or not w.placement:
        return None  # the core answers unknown_workload / not_running
    p = state.principals.get(signer)
    hosts = p.hosts if p is not None else ()
    if ANY in hosts:
        return None
    foreign = sorted({h for h, _ in w.placement} - set(hosts))
    if foreign:
        return (f"{signer!r} is not the executor of host(s) {', '.join(foreign[:8])} where "
                f"{e.workload[:80]!r} runs")
    return None


def _stop_scope(state: State, e: WorkloadStopped, signer: str, admins: frozenset[str]) -> str | None:
    """A stop report: from an executor of the host it names, else of every host the stopping run held."""
    held = state.stopping.get((e.workload, e.run_number))
    if e.host is not None:
        hosts_of_run = {e.host}
    elif held is not None:
        hosts_of_run = {h for h, _ in held[0]}
    else:
        return None  # nothing stopping: the core answers not_stopping
    p = state.principals.get(signer)
    hosts = p.hosts if p is not None else ()
    if ANY in hosts:
        return None
    foreign = sorted(hosts_of_run - set(hosts))
    if foreign:
        return (f"{signer!r} is not the executor of host(s) {', '.join(foreign[:8])} where "
                f"{e.workload[:80]!r} was stopping")
    return None


def _budget_node_scope(state: State, e: BudgetNodeDefined, signer: str, admins: frozenset[str]) -> str | None:
    parent = parent_of(e.path)
    if parent is None:
        if Role.ADMIN in roles_of(state, signer, admins):
            return None
        return "only an admin defines the root of the budget tree"
    if parent not in state.budget or state.budget.can_manage(signer, parent):
        return None  # an unknown parent: the core answers unknown_node
    return f"{signer!r} does not manage {parent!r} or any ancestor"


def _shares_scope(state: State, e: BudgetSharesSet, signer: str, admins: frozenset[str]) -> str | None:
    if e.parent not in state.budget or state.budget.can_manage(signer, e.parent):
        return None
    return f"{signer!r} does not manage {e.parent!r} or any ancestor"


def _tick_scope(state: State, e: ClockTicked, signer: str, admins: frozenset[str]) -> str | None:
    return None


# THE table. Every input type has a row (checked at import and by a test).
TABLE: dict[type, Rule] = {
    PolicyConfigured: Rule((Role.ADMIN,), "any admin"),
    BudgetNodeDefined: Rule((Role.MANAGER, Role.ADMIN),
                            "a manager of the parent or an ancestor (the root: an admin)",
                            _budget_node_scope),
    BudgetSharesSet: Rule((Role.MANAGER, Role.ADMIN),
                          "a manager of the parent or an ancestor", _shares_scope),
    HostAdded: Rule((Role.OPERATOR,), "any operator"),
    HostRemoved: Rule((Role.OPERATOR,), "any operator"),
    HostFaulted: Rule((Role.MONITOR, Role.OPERATOR), "any monitor or operator"),
    HostRepaired: Rule((Role.MONITOR, Role.OPERATOR), "any monitor or operator"),
    WorkloadSubmitted: Rule((Role.RESEARCHER, Role.MANAGER),
                            "`user` is the signer, or a principal in its `acts_for`",
                            _submit_scope),
    WorkloadCancelled: Rule((Role.RESEARCHER, Role.MANAGER, Role.OPERATOR),
                            "the owner, one it acts for, or a manager of the workload's budget",
                            _cancel_scope),
    WorkloadFinished: Rule((Role.EXECUTOR,),
                           "an executor registered for every host the workload runs on",
                           _executor_scope),
    WorkloadStopped: Rule((Role.EXECUTOR,),
                          "an executor registered for the host it names (every host of the run "
                          "when it names none)", _stop_scope),
    ClockTicked: Rule((TICKER,), "the configured ticker only (`ticker_principal`)", _tick_scope),
    PrincipalRegistered: Rule((Role.ADMIN,), "any admin (the first: a configured admin)"),
    PrincipalKeyRotated: Rule((Role.ADMIN,), "any admin, or the principal itself",
                              self_service=True),
    PrincipalKeyRevoked: Rule((Role.ADMIN,), "any admin, or the principal itself",
                              self_service=True),
}


def roles_of(state: State, signer: str, admins: Iterable[str] = ()) -> frozenset[str]:
    """The roles ``signer`` holds: registered ones, plus ``admin`` for a configured admin."""
    p = state.principals.get(signer)
    roles = set(p.roles) if p is not None else set()
    if signer in admins:
        roles.add(Role.ADMIN)
    return frozenset(roles)


class Refusal:
    """Why an input is not authorised: a reason code and a one-line detail."""

    __slots__ = ("detail", "reason")

    def __init__(self, reason: str, detail: str) -> None:
        self.reason = reason
        self.detail = detail

    def __repr__(self) -> str:
        return f"Refusal({self.reason!r}, {self.detail!r})"


def authorise(state: State, event: Event, signer: str, *, admins: frozenset[str] = frozenset(),
              ticker: str = "allot.ticker") -> Refusal | None:
    """None when ``signer`` may send ``event`` in ``state``, else the refusal."""
    rule = TABLE.get(type(event))
    if rule is None:
        return Refusal(NOT_AUTHORISED, f"no one may send {tag_of(type(event))}: it has no "
                                       f"authorisation rule")
    roles = roles_of(state, signer, admins)
    if signer == ticker:
        roles = roles | {TICKER}
    allowed = bool(roles.intersection(rule.roles))
    if not allowed and rule.self_service and getattr(event, "principal", None) == signer:
        allowed = True
    if not allowed:
        held = ", ".join(sorted(roles)) or "no role"
        return Refusal(NOT_AUTHORISED, f"{tag_of(type(event))} needs {' or '.join(rule.roles)}; "
                                       f"{signer[:80]!r} holds {held}")
    if rule.scope is not None:
        why = rule.scope(state, event, signer, admins)
        if why is not None:
            return Refusal(NOT_AUTHORISED, why)
    return None


def table_rows() -> list[tuple[str, str, str]]:
    """``(event type, roles, scope)`` per input type, in the union's order (for docs)."""
    return [(tag_of(t), ", ".join(TABLE[t].roles), TABLE[t].scope_text)
            for t in INPUT_TYPES if t in TABLE]


def _check_table() -> None:
    missing = [tag_of(t) for t in INPUT_TYPES if t not in TABLE]
    if missing:  # pragma: no cover - a programming error, caught at the first import
        raise TypeError(f"authorisation has no rule for {', '.join(missing)}")


_check_table()
