"""Signed inbox records: who wrote a record, proven by an HMAC-SHA256 of its value.

Anyone with write access to the inbox can put any bytes there, so a field a
producer writes (``actor``, or that a record is a tick) proves nothing (design
rule 4). A signature does: the producer adds two headers,

- ``allot-signer``: its principal name, and
- ``allot-signature``: the lowercase hex HMAC-SHA256 of the record value under
  the principal's secret,

and the worker checks them against its keyring (principal -> secret). The
ticker signs every tick with the key only it and the workers hold, so an
unsigned or badly signed ``clock.ticked`` is dead-lettered: the trusted clock.
A signed input must name its signer as the event's ``actor``; with
``require_signatures`` every input must be signed, which makes the budget
tree's "only a manager may edit" rule authenticated rather than declared.

The value is signed byte for byte, so the journal (which keeps the exact inbox
bytes) lets anyone holding the key re-check a signature later.
"""

from __future__ import annotations

import hashlib
import hmac
import tomllib
from collections.abc import Mapping
from pathlib import Path

from events.errors import AllotError
from streams.records import HEADER_SIGNATURE, HEADER_SIGNER, Headers, header


class KeyringError(AllotError):
    """A keyring file could not be read or holds a bad entry."""


def signature(value: bytes, key: bytes) -> str:
    """The hex HMAC-SHA256 of ``value`` under ``key``."""
    return hmac.new(key, value, hashlib.sha256).hexdigest()


def sign_headers(value: bytes, principal: str, key: bytes) -> list[tuple[str, bytes]]:
    """The two headers that sign ``value`` as ``principal``."""
    return [(HEADER_SIGNER, principal.encode()),
            (HEADER_SIGNATURE, signature(value, key).encode())]


class Keyring:
    """Principal -> secret. Immutable once built; ``with_key`` returns a new keyring."""

    __slots__ = ("_keys",)

    def __init__(self, keys: Mapping[str, bytes] | None = None) -> None:
        self._keys: dict[str, bytes] = dict(keys or {})

    def key(self, principal: str) -> bytes | None:
        return self._keys.get(principal)

    def with_key(self, principal: str, key: bytes) -> Keyring:
        return Keyring({**self._keys, principal: key})

    def __contains__(self, principal: object) -> bool:
        return principal in self._keys

    def __len__(self) -> int:
        return len(self._keys)

    @classmethod
    def from_file(cls, path: str | Path) -> Keyring:
        """Read ``[keys] principal = "secret"`` from a TOML file."""
        try:
            with open(path, "rb") as fh:
                data = tomllib.load(fh)
        except OSError as exc:
            raise KeyringError(f"{path}: {exc.strerror or exc}") from None
        except tomllib.TOMLDecodeError as exc:
            raise KeyringError(f"{path}: not TOML: {exc}") from None
        keys = data.get("keys")
        if not isinstance(keys, dict):
            raise KeyringError(f"{path}: expected a [keys] table of principal = \"secret\"")
        out: dict[str, bytes] = {}
        for principal, secret in keys.items():
            if not isinstance(secret, str) or not secret:
                raise KeyringError(f"{path}: the key of {principal!r} must be a non-empty string")
            out[principal] = secret.encode()
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
    want = signature(value, key).encode()
    if sig_b is None or not hmac.compare_digest(want, sig_b.strip().lower()):
        return Verdict(None, BAD_SIGNATURE)
    return Verdict(signer, None)
