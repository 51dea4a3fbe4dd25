"""Principal events: who may sign inputs, with which public key, in which roles.

A *principal* is a signer of inputs (a researcher, a manager, a host monitor,
an executor, an operator, an admin). Its Ed25519 public key and its roles are
facts on the log, so the worker, a restarted worker and an auditor all derive
the same answer to "who signed this, and may they?" from the journal alone.
The first admin's key comes from the worker's configuration (no bootstrap
race): until an admin registers principals, only configured keys sign.

- ``principal.registered``: a principal with its key and roles (again: its
  roles, hosts and ``acts_for`` are replaced; its key becomes the current one).
- ``principal.key_rotated``: a new current key; the previous one is retired
  (inputs it signed later are refused ``revoked``; earlier ones stay valid).
- ``principal.key_revoked``: a key is retired at once (lost or compromised).

Who may publish them is decided at the edge (``identity.authorisation``: admins
register; a principal may rotate or revoke its own keys).
"""

from __future__ import annotations

from events.base import Event
from events.limits import Array, Text


class Role:
    """The roles a principal may hold (stable strings)."""

    RESEARCHER = "researcher"   # submits and cancels its own workloads
    MANAGER = "manager"         # edits the budgets it manages (the tree names managers)
    MONITOR = "monitor"         # reports host faults and repairs
    EXECUTOR = "executor"       # reports how its hosts' runs ended
    OPERATOR = "operator"       # adds and removes hosts; faults and repairs them
    ADMIN = "admin"             # configures the policy, registers principals


ROLES: tuple[str, ...] = (Role.RESEARCHER, Role.MANAGER, Role.MONITOR, Role.EXECUTOR,
                          Role.OPERATOR, Role.ADMIN)
# In ``hosts`` and ``acts_for``: every host, every principal.
ANY = "*"


class PrincipalRegistered(Event, frozen=True, kw_only=True, tag="principal.registered"):
    """A principal exists (or changes): its current public key, roles, hosts and delegations."""

    principal: Text
    public_key: Text              # Ed25519, 64 lowercase hex
    key_id: Text                  # first 16 hex of SHA-256 of the raw public key
    roles: Array[Text]
    # Executors: the hosts whose runs it may report on ("*": every host).
    hosts: Array[Text] = ()
    # Principals it may submit workloads for ("*": anyone), declared by an admin.
    acts_for: Array[Text] = ()


class PrincipalKeyRotated(Event, frozen=True, kw_only=True, tag="principal.key_rotated"):
    """``principal``'s current key becomes ``public_key``; the previous one is retired."""

    principal: Text
    public_key: Text
    key_id: Text


class PrincipalKeyRevoked(Event, frozen=True, kw_only=True, tag="principal.key_revoked"):
    """Key ``key_id`` of ``principal`` is retired: inputs it signs from now on are refused."""

    principal: Text
    key_id: Text
    reason: Text = ""
