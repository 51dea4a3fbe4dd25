"""Signed inbox records: who wrote a record, proven by an Ed25519 signature of its value.

Anyone with write access to the inbox can put any bytes there, so a field a
producer writes (``actor``, or that a record is a tick) proves nothing (design
rule 4). A signature does: the producer adds three headers,

- ``allot-signer``: its principal name,
- ``allot-key-id``: the id of its public key (``identity.keys.key_id``), and
- ``allot-signature``: the lowercase hex Ed25519 signature of the record value
  under the principal's private key,

and the worker checks them against the registered principals' keys
(``principal.registered`` events, in the cluster's state) and its configured
keyring (principal -> public key: the ticker, the first admin). The
worker holds public keys only: it cannot sign as a producer, and an auditor
needs no secret to re-check a signature. The ticker signs every tick, so an
unsigned or badly signed ``clock.ticked`` is dead-lettered: the trusted clock.
A signed input must name its signer as the event's ``actor``; with
``require_signatures`` every input must be signed.

The value is signed byte for byte, and the journal keeps the exact inbox bytes
and these headers, so ``allot audit verify`` re-checks any journaled input.
"""

from __future__ import annotations

import functools
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from events.errors import AllotError
from identity import keys
from streams.records import HEADER_SIGNATURE, HEADER_SIGNER, Headers, header

HEADER_KEY_ID = "allot-key-id"
SIGNATURE_HEADERS = (HEADER_SIGNER, HEADER_KEY_ID, HEADER_SIGNATURE)


class KeyringError(AllotError):
    """A keyring file could not be read or holds a bad entry."""


def signature(value: bytes, key: bytes) -> str:
    """The hex Ed25519 signature of ``value`` under the private key named by ``key``."""
    return keys.sign(value, key)


def sign_headers(value: bytes, principal: str, key: bytes) -> list[tuple[str, bytes]]:
    """The three headers that sign ``value`` as ``principal`` with private key ``key``."""
    kid = keys.secret_key_id(key)
    return [(HEADER_SIGNER, principal.encode()), (HEADER_KEY_ID, kid.encode()),
            (HEADER_SIGNATURE, signature(value, key).encode())]


def signature_headers(headers: Headers | None) -> list[tuple[str, bytes]]:
    """The signature headers among ``headers`` (kept on the journaled input for later audits)."""
    return [(k, v) for k, v in headers or () if k in SIGNATURE_HEADERS]


class Keyring:
    """Principal -> Ed25519 public key. Immutable once built; ``with_key`` returns a new one."""

    __slots__ = ("_ids", "_keys")

    def __init__(self, keys_: Mapping[str, Ed25519PublicKey] | None = None) -> None:
        self._keys: dict[str, Ed25519PublicKey] = dict(keys_ or {})
        # principal -> key id, computed once (verify needs it for every record a configured
        # signer, such as the ticker, signs).
        self._ids: dict[str, str] = {p: keys.key_id(k) for p, k in self._keys.items()}

    def key_id(self, principal: str) -> str | None:
        return self._ids.get(principal)

    def key(self, principal: str) -> Ed25519PublicKey | None:
        return self._keys.get(principal)

    def with_key(self, principal: str, key: Ed25519PublicKey) -> Keyring:
        return Keyring({**self._keys, principal: key})

    def other_key(self, principal: str, kid: str) -> Ed25519PublicKey | None:
        """A further configured key of ``principal`` with id ``kid``: an entry ``principal@label``.

        How a configured key is rotated (docs/live.md): the old public key stays
        as ``allot.ticker@2026-12`` while records it signed are still checked.
        """
        prefix = principal + "@"
        for name, key in self._keys.items():
            if name.startswith(prefix) and self._ids[name] == kid:
                return key
        return None

    def __contains__(self, principal: object) -> bool:
        return principal in self._keys

    def __len__(self) -> int:
        return len(self._keys)

    def items(self) -> list[tuple[str, Ed25519PublicKey]]:
        return sorted(self._keys.items(), key=lambda kv: kv[0])

    @classmethod
    def from_file(cls, path: str | Path) -> Keyring:
        """Read ``[keys] principal = "<public key, 64 hex>"`` from a TOML file."""
        try:
            with open(path, "rb") as fh:
                data = tomllib.load(fh)
        except OSError as exc:
            raise KeyringError(f"{path}: {exc.strerror or exc}") from None
        except tomllib.TOMLDecodeError as exc:
            raise KeyringError(f"{path}: not TOML: {exc}") from None
        table = data.get("keys")
        if not isinstance(table, dict):
            raise KeyringError(f"{path}: expected a [keys] table of principal = \"public key\"")
        out: dict[str, Ed25519PublicKey] = {}
        for principal, pub in table.items():
            if not isinstance(pub, str) or not pub:
                raise KeyringError(f"{path}: the key of {principal!r} must be a non-empty string")
            try:
                out[principal] = keys.public_from_hex(pub)
            except keys.KeyError_ as exc:
                raise KeyringError(f"{path}: {principal!r}: {exc}") from None
        return cls(out)


# Why a signature check failed (dead-letter reason codes).
UNSIGNED = "unsigned"
UNKNOWN_SIGNER = "unknown_signer"
BAD_SIGNATURE = "bad_signature"
REVOKED_KEY = "revoked"


class Verdict:
    """The outcome of checking one record's signature headers."""

    __slots__ = ("detail", "key_id", "problem", "signer")

    def __init__(self, signer: str | None, problem: str | None, detail: str = "",
                 key_id: str | None = None) -> None:
        self.signer = signer      # the verified principal, or None
        self.problem = problem    # None, UNSIGNED, UNKNOWN_SIGNER, BAD_SIGNATURE or REVOKED_KEY
        self.detail = detail
        self.key_id = key_id      # the verified key's id

    def __repr__(self) -> str:
        return f"Verdict(signer={self.signer!r}, problem={self.problem!r})"


class Registry(Protocol):
    """What ``verify`` reads of the principal registry (``projections.principals``)."""

    def key(self, key_id: str) -> tuple[str, str] | None: ...
    def retired_why(self, key_id: str) -> str | None: ...
    def get(self, name: str) -> Any: ...


@functools.lru_cache(maxsize=4096)
def _public(hex_text: str) -> Ed25519PublicKey | None:
    # Cached: a registered key is parsed once, not once per input it signs.
    try:
        return keys.public_from_hex(hex_text)
    except (keys.KeyError_, ValueError):
        return None


# (signature header bytes, value) -> the raw public key whose signature it was found to be,
# checked ahead (``streams.verify_pool``). Only signatures that hold are in it.
Checked = Mapping[tuple[bytes, bytes], bytes]


def _holds(value: bytes, sig_b: bytes | None, key: Ed25519PublicKey,
           checked: Checked | None) -> bool:
    if sig_b is None:
        return False
    if checked is not None and checked.get((sig_b, value)) == key.public_bytes_raw():
        return True   # the same key, signature and bytes were verified ahead
    return keys.verify(value, sig_b, key)


def job(value: bytes, headers: Headers | None, keyring: Keyring,
        registry: Registry | None = None) -> tuple[bytes, bytes, bytes] | None:
    """``(raw public key, raw signature, value)``: the check ``verify`` will make of this record.

    The key is resolved as ``verify`` resolves it, against the state given; None
    when there is no signature to check or no key to check it with. A job
    checked ahead against a state that then changed (a key registered or
    retired in between) names another key than ``verify`` later resolves, and
    ``verify`` then checks the signature itself.
    """
    signer_b = header(headers, HEADER_SIGNER)
    sig_b = header(headers, HEADER_SIGNATURE)
    if signer_b is None or sig_b is None:
        return None
    try:
        sig = bytes.fromhex(sig_b.decode("ascii").strip())
    except (ValueError, UnicodeDecodeError):
        return None
    signer = signer_b.decode("utf-8", "replace")
    kid_b = header(headers, HEADER_KEY_ID)
    kid = kid_b.decode("utf-8", "replace") if kid_b is not None else None
    known = registry.key(kid) if registry is not None and kid is not None else None
    if known is not None:
        key = _public(known[1])
    elif registry is not None and registry.get(signer) is not None:
        return None
    else:
        key = keyring.key(signer)
        if key is not None and kid is not None and kid != (keyring.key_id(signer)
                                                            or keys.key_id(key)):
            key = keyring.other_key(signer, kid)
    return None if key is None else (key.public_bytes_raw(), sig, value)


def verify(value: bytes, headers: Headers | None, keyring: Keyring,
           registry: Registry | None = None, checked: Checked | None = None) -> Verdict:
    """Check ``value``'s signature headers against ``registry`` (registered keys) and ``keyring``.

    A key id the registry knows is checked against the registered public key,
    and must belong to the named signer; a retired (rotated or revoked) key
    gives ``revoked`` once its signature holds. A signer the registry knows
    signs with registered keys only; anyone else is looked up in ``keyring``
    (the configured keys: the ticker, the first admin). ``checked``: signatures
    verified ahead, under the key named there (the verdict is the same; only
    the Ed25519 check itself is skipped when that key is the one resolved here).
    """
    signer_b = header(headers, HEADER_SIGNER)
    sig_b = header(headers, HEADER_SIGNATURE)
    if signer_b is None and sig_b is None:
        return Verdict(None, UNSIGNED, "no allot-signer / allot-signature headers")
    signer = (signer_b or b"").decode("utf-8", "replace")
    kid_b = header(headers, HEADER_KEY_ID)
    kid = kid_b.decode("utf-8", "replace") if kid_b is not None else None
    if signer_b is None:
        return Verdict(None, UNKNOWN_SIGNER, "no allot-signer header")
    known = registry.key(kid) if registry is not None and kid is not None else None
    if known is not None:
        who, pub_hex = known
        key = _public(pub_hex)
        if who != signer or key is None:
            return Verdict(None, BAD_SIGNATURE, f"key {kid} is not {signer[:80]!r}'s")
        if not _holds(value, sig_b, key, checked):
            return Verdict(None, BAD_SIGNATURE, f"not {signer[:80]!r}'s signature under key {kid}")
        why = registry.retired_why(kid) if registry is not None else None
        if why is not None:
            return Verdict(None, REVOKED_KEY, f"key {kid} of {signer[:80]!r} was {why}", kid)
        return Verdict(signer, None, "", kid)
    if kid is not None and registry is not None and registry.retired_why(kid) is not None:
        return Verdict(None, REVOKED_KEY, f"key {kid} was {registry.retired_why(kid)}", kid)
    if registry is not None and registry.get(signer) is not None:
        # A registered principal signs with its registered keys only.
        return Verdict(None, UNKNOWN_SIGNER,
                       f"key {kid!r} is not a registered key of {signer[:80]!r}")
    key = keyring.key(signer)
    if key is None:
        return Verdict(None, UNKNOWN_SIGNER, f"no key for signer {signer[:80]!r}")
    own = keyring.key_id(signer) or keys.key_id(key)
    if kid is not None and kid != own:
        # Another configured key of the signer (``signer@label``: a rotated one), or none:
        # a key id naming another key than the signer's is not this key's signature.
        other = keyring.other_key(signer, kid)
        if other is None:
            return Verdict(None, BAD_SIGNATURE,
                           f"key id {kid[:40]!r} is not {signer[:80]!r}'s key")
        key, own = other, kid
    if not _holds(value, sig_b, key, checked):
        return Verdict(None, BAD_SIGNATURE, f"not {signer[:80]!r}'s signature")
    if registry is not None and registry.retired_why(own) is not None:
        return Verdict(None, REVOKED_KEY, f"key {own} of {signer[:80]!r} was "
                                          f"{registry.retired_why(own)}", own)
    return Verdict(signer, None, "", own)
