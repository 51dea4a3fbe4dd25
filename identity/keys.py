"""Ed25519 keys: a principal's private key signs, anyone holding its public key verifies.

Public-key signatures replace the shared HMAC secrets of the first keyring: the
worker (and an auditor) holds public keys only, so neither can sign as anyone
else, and anyone can re-check a journaled input's signature later.

A private key is a 32-byte Ed25519 seed. ``private_key(secret)`` takes either
the seed as 64 hex characters (what ``key_file`` writes) or any other secret
string, hashed to a seed with SHA-256 (so the existing ``tick_key`` setting,
one secret shared by the workers of a group, still names the ticker's key).
A key id is the first 16 hex characters of the SHA-256 of the raw public key.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from events.errors import AllotError

_HEX64 = re.compile(r"[0-9a-f]{64}")


class KeyError_(AllotError):
    """A key could not be read, or holds something that is not an Ed25519 key."""


@functools.lru_cache(maxsize=256)
def private_key(secret: bytes) -> Ed25519PrivateKey:
    """The Ed25519 private key named by ``secret`` (a hex seed, or any secret hashed to one)."""
    text = secret.strip().lower()
    seed = bytes.fromhex(text.decode()) if _HEX64.fullmatch(text.decode("ascii", "replace")) \
        else hashlib.sha256(secret).digest()
    return Ed25519PrivateKey.from_private_bytes(seed)


def public_bytes(key: Ed25519PublicKey) -> bytes:
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    return key.public_bytes(Encoding.Raw, PublicFormat.Raw)


def public_of(secret: bytes) -> Ed25519PublicKey:
    """The public key of the private key named by ``secret``."""
    return private_key(secret).public_key()


def public_hex(key: Ed25519PublicKey) -> str:
    return public_bytes(key).hex()


def public_from_hex(text: str) -> Ed25519PublicKey:
    """A public key from its 64 hex characters; KeyError_ when it is not one."""
    t = text.strip().lower()
    if not _HEX64.fullmatch(t):
        raise KeyError_(f"not an Ed25519 public key (64 hex characters): {text[:80]!r}")
    return Ed25519PublicKey.from_public_bytes(bytes.fromhex(t))


def key_id(key: Ed25519PublicKey) -> str:
    """The short, stable id of a public key (first 16 hex of its SHA-256)."""
    return hashlib.sha256(public_bytes(key)).hexdigest()[:16]


@functools.lru_cache(maxsize=256)
def secret_key_id(secret: bytes) -> str:
    """``key_id`` of the public key of ``secret``, computed once per key (a signer signs often)."""
    return key_id(public_of(secret))


def sign(value: bytes, secret: bytes) -> str:
    """The hex Ed25519 signature of ``value`` under the key named by ``secret``."""
    return private_key(secret).sign(value).hex()


def verify(value: bytes, signature_hex: bytes, key: Ed25519PublicKey) -> bool:
    """Whether ``signature_hex`` is ``key``'s signature of ``value`` exactly."""
    try:
        sig = bytes.fromhex(signature_hex.decode("ascii").strip())
        key.verify(sig, value)
    except (ValueError, UnicodeDecodeError, InvalidSignature):
        return False
    return True


@functools.lru_cache(maxsize=4096)
def _public_raw(raw: bytes) -> Ed25519PublicKey:
    return Ed25519PublicKey.from_public_bytes(raw)


def verify_many(jobs: list[tuple[bytes, bytes, bytes]]) -> list[bool]:
    """Per ``(raw public key, raw signature, value)``: whether the signature holds.

    What a verify process runs (``streams.verify_pool``): plain bytes in and out,
    so a batch crosses the process boundary cheaply.
    """
    out: list[bool] = []
    for raw, sig, value in jobs:
        try:
            _public_raw(raw).verify(sig, value)
        except (ValueError, InvalidSignature):
            out.append(False)
        else:
            out.append(True)
    return out


def new_seed_hex() -> str:
    """A fresh random private key, as the hex seed a key file holds."""
    return os.urandom(32).hex()


def write_key_file(path: str | Path, seed_hex: str | None = None) -> str:
    """Write a new (or the given) private key to ``path`` with mode 0600; its seed."""
    seed = seed_hex or new_seed_hex()
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(seed + "\n")
    os.chmod(p, 0o600)
    return seed
