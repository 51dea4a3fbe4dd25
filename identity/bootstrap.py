"""The principals a local ``allot up`` registers for itself, signed by its first admin.

``allot up`` is a whole allot on one machine, so it is also its own identity
provider: it creates (or reuses) keys in the local key directory
(``identity.local``) for

- ``admin``: the first admin, whose public key goes into the worker's
  settings (``admin_principal``, ``admin_public_key``): no bootstrap race;
- the local command-line user (``$ALLOT_ACTOR`` or the login name): admin,
  operator and manager, so the README's commands work as typed;
- ``allot.executor``: the simulated executor and ``allot executor local``
  on this machine, for every host;
- ``allot.monitor``: ``allot monitor`` on this machine, for every host;

and publishes their ``principal.registered`` events, signed by ``admin``,
before the worker starts. Their ids are fixed (the key id in the id), so a
restarted stack's copies are dropped as duplicates within the dedupe window,
and taken as the same registration again (changing nothing) after it.
"""

from __future__ import annotations

from collections.abc import Iterable

from events import PrincipalRegistered, Role
from events.principal import ANY
from identity.local import Keychain

ADMIN = "admin"
EXECUTOR = "allot.executor"
MONITOR = "allot.monitor"
ADMIN_ROLES = (Role.ADMIN, Role.OPERATOR, Role.MANAGER)


def registration(keychain: Keychain, cluster: str, principal: str, roles: Iterable[str],
                 hosts: Iterable[str] = (), acts_for: Iterable[str] = (),
                 by: str = ADMIN, at: int | None = None,
                 source: str = "allot-up") -> PrincipalRegistered:
    """``principal.registered`` for ``principal``'s local key (created if missing), by ``by``."""
    keychain.ensure(principal)
    pub = keychain.public_hex(principal)
    kid = keychain.key_id(principal)
    assert pub is not None and kid is not None
    if at is None:
        import time

        at = int(time.time())  # never older than the dedupe window (the worker refuses stale)
    return PrincipalRegistered(id=f"{by}:register-{principal}-{kid}", at=at, cluster=cluster,
                               actor=by, source=source, principal=principal, public_key=pub,
                               key_id=kid, roles=tuple(roles), hosts=tuple(hosts),
                               acts_for=tuple(acts_for))


def local_registrations(keychain: Keychain, clusters: Iterable[str],
                        user: str) -> list[PrincipalRegistered]:
    """What ``allot up`` registers in each cluster: the admin, the local user, executor, monitor."""
    out: list[PrincipalRegistered] = []
    for c in clusters:
        # The admin registers itself first: its key is the configured one.
        out.append(registration(keychain, c, ADMIN, ADMIN_ROLES))
        if user != ADMIN:
            out.append(registration(keychain, c, user, ADMIN_ROLES))
        out.append(registration(keychain, c, EXECUTOR, (Role.EXECUTOR,), hosts=(ANY,)))
        out.append(registration(keychain, c, MONITOR, (Role.MONITOR,), hosts=(ANY,)))
    return out
