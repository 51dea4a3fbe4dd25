"""The principal registry: who may sign inputs, with which keys, in which roles.

A pure fold of the ``principal.*`` events (``events.principal``). It holds
public keys as hex text only (no cryptography here): the edge
(``streams.processor``) verifies signatures against them, and the
authorisation table (``identity.authorisation``) reads roles, hosts and
delegations from it. Being part of the engine's state, it is folded, snapshot
and restored with the rest, so a restarted worker answers exactly as the one
that journaled the inputs did.

A key is *current* (the principal's newest), *retired* (rotated away or
revoked: inputs it signs from then on are refused, those already journaled
stay valid) or unknown. A key id, once used, is never used again.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

# Principal names: the id grammar without ':' (inputs' ids are '<principal>:...').
PRINCIPAL_PATTERN = r"[A-Za-z0-9._@+=~-]{1,64}"
_PRINCIPAL = re.compile(PRINCIPAL_PATTERN)
_HEX64 = re.compile(r"[0-9a-f]{64}")

ROTATED = "rotated"
REVOKED = "revoked"


def valid_principal(name: str) -> bool:
    return _PRINCIPAL.fullmatch(name) is not None


def valid_public_key(text: str) -> bool:
    return _HEX64.fullmatch(text) is not None


def key_id_of(public_key_hex: str) -> str:
    """The key id of a public key given as hex (first 16 hex of the SHA-256 of its raw bytes)."""
    return hashlib.sha256(bytes.fromhex(public_key_hex)).hexdigest()[:16]


class Principal:
    """One principal's roles, hosts, delegations and current key id."""

    __slots__ = ("acts_for", "hosts", "key_id", "name", "roles")

    def __init__(self, name: str, roles: tuple[str, ...], hosts: tuple[str, ...],
                 acts_for: tuple[str, ...], key_id: str) -> None:
        self.name = name
        self.roles = roles
        self.hosts = hosts
        self.acts_for = acts_for
        self.key_id = key_id


class PrincipalRegistry:
    """Principals by name; keys by id (principal, public key hex); retired key ids and why."""

    __slots__ = ("keys", "principals", "retired")

    def __init__(self) -> None:
        self.principals: dict[str, Principal] = {}
        self.keys: dict[str, tuple[str, str]] = {}
        self.retired: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self.principals)

    def get(self, name: str) -> Principal | None:
        return self.principals.get(name)

    def key(self, key_id: str) -> tuple[str, str] | None:
        """``(principal, public key hex)`` of a key ever registered, retired or not."""
        return self.keys.get(key_id)

    def retired_why(self, key_id: str) -> str | None:
        """``rotated`` or ``revoked`` for a retired key, else None."""
        return self.retired.get(key_id)

    # -- folds (validation has checked them) ------------------------------------------

    def register(self, name: str, public_key: str, key_id: str, roles: tuple[str, ...],
                 hosts: tuple[str, ...], acts_for: tuple[str, ...]) -> None:
        old = self.principals.get(name)
        if old is not None and old.key_id != key_id:
            self.retired[old.key_id] = ROTATED
        self.keys[key_id] = (name, public_key)
        self.principals[name] = Principal(name, tuple(roles), tuple(hosts), tuple(acts_for),
                                          key_id)

    def rotate(self, name: str, public_key: str, key_id: str) -> None:
        p = self.principals[name]
        self.retired[p.key_id] = ROTATED
        self.keys[key_id] = (name, public_key)
        p.key_id = key_id

    def revoke(self, key_id: str) -> None:
        self.retired[key_id] = REVOKED

    # -- snapshots ----------------------------------------------------------------------

    def rows(self) -> list[Any]:
        """Plain rows for a snapshot (insertion order kept)."""
        return [
            [[p.name, list(p.roles), list(p.hosts), list(p.acts_for), p.key_id]
             for p in self.principals.values()],
            [[k, who, pub] for k, (who, pub) in self.keys.items()],
            [[k, why] for k, why in self.retired.items()],
        ]

    @classmethod
    def from_rows(cls, rows: list[Any]) -> PrincipalRegistry:
        reg = cls()
        if not rows:
            return reg
        principals: list[Any] = rows[0]
        keys: list[Any] = rows[1]
        retired: list[Any] = rows[2]
        for row in principals:
            name = str(row[0])
            reg.principals[name] = Principal(name, tuple(row[1]), tuple(row[2]), tuple(row[3]),
                                             str(row[4]))
        for row in keys:
            reg.keys[str(row[0])] = (str(row[1]), str(row[2]))
        for row in retired:
            reg.retired[str(row[0])] = str(row[1])
        return reg
