"""Signed inbox records: who wrote a record, proven by an Ed25519 signature of its value.

Anyone with write access to the inbox can put any bytes there, so a field a
producer writes (``actor``, or that a record is a tick) proves nothing (design
rule 4). A signature does: the producer adds three headers,

- ``allot-signer``: its principal name,
- ``allot-key-id``: the id of its public key (``identity.keys.key_id``), and
- ``allot-signature``: the lowercase hex Ed25519 signature of the record value
  under the principal's private key,

and the worker checks them against its keyring (principal -> public key). The
worker holds public keys only: it cannot sign as a producer, and an auditor
needs no secret to re-check a signature. The ticker signs every tick, so an
unsigned or badly signed ``clock.ticked`` is dead-lettered: the trusted clock.
A signed input must name its signer as the event's ``actor``; with
``require_signatures`` every input must be signed.

The value is signed byte for byte, and the journal keeps the exact inbox bytes
and these headers, so ``allot audit verify`` re-checks any journaled input.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path

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
    kid = keys.key_id(keys.public_of(key))
    return [(HEADER_SIGNER, principal.encode()), (HEADER_KEY_ID, kid.encode()),
            (HEADER_SIGNATURE, signature(value, key).encode())]


def signature_headers(headers: Headers | None) -> list[tuple[str, bytes]]:
    """The signature headers among ``headers`` (kept on the journaled input for later audits)."""
    return [(k, v) for k, v in headers or () if k in SIGNATURE_HEADERS]


class Keyring:
    """Principal -> Ed25519 public key. Immutable once built; ``with_key`` returns a new one."""

    __slots__ = ("_keys",)

    def __init__(self, keys_: Mapping[str, Ed25519PublicKey] | None = None) -> None:
        self._keys: dict[str, Ed25519PublicKey] = dict(keys_ or {})

    def key(self, principal: str) -> Ed25519PublicKey | None:
        return self._keys.get(principal)

    def with_key(self, principal: str, key: Ed25519PublicKey) -> Keyring:
        return Keyring({**self._keys, principal: key})

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


class Verdict:
    """The outcome of checking one record's signature headers."""

    __slots__ = ("problem", "signer")

    def __init__(self, signer: str | None, problem: str | None) -> None:
        self.signer = signer      # the verified principal, or None
        self.problem = problem    # None, UNSIGNED, UNKNOWN_SIGNER or BAD_SIGNATURE

    def __repr__(self) -> str:
        return f"Verdict(signer={self.signer!r}, problem={self.problem!r})"


def verify(value: bytes, headers: Headers | None, keyring: Keyring) -> Verdict:
    """Check ``value``'s signature headers against ``keyring``."""
    signer_b = header(headers, HEADER_SIGNER)
    sig_b = header(headers, HEADER_SIGNATURE)
    if signer_b is None and sig_b is None:
        return Verdict(None, UNSIGNED)
    signer = (signer_b or b"").decode("utf-8", "replace")
    key = keyring.key(signer) if signer_b is not None else None
    if key is None:
        return Verdict(None, UNKNOWN_SIGNER)
    kid_b = header(headers, HEADER_KEY_ID)
    # A key id naming another key than the signer's current one: not this key's signature.
    if kid_b is not None and kid_b.decode("utf-8", "replace") != keys.key_id(key):
        return Verdict(None, BAD_SIGNATURE)
    if sig_b is None or not keys.verify(value, sig_b, key):
        return Verdict(None, BAD_SIGNATURE)
    return Verdict(signer, None)
