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

**Batch signatures** (``sign_batch_headers``): a producer publishing many
inputs at once signs them with one Ed25519 signature, and each record stays
verifiable alone. The signed bytes are ``b"allot-batch-v1\x00" + root``, the
root of a Merkle tree over the batch's record values (RFC 6962 hashing: leaf
= SHA-256(0x00 + value), node = SHA-256(0x01 + left + right); at a level of
odd length the last node is carried up unchanged). Each record carries the
usual three headers (``allot-signature``: the hex signature of that root
message) and ``allot-batch-proof``: ``<index>/<size>/<siblings>``, the leaf's
index and the batch size in decimal, and the sibling hashes from the leaf up,
hex, concatenated (64 hex digits each; their number and sides follow from
index and size). The prefix keeps a batch root's signature from ever passing
as a record's (a value is an encoded event, never that prefix) and the other
way round. A record without the proof header is checked as before. A
verified root signature is remembered (``RootCache``: key (raw public key,
root, signature), LRU bound), so a batch costs one Ed25519 verify plus a few
hashes per record; the signer, key, revocation and role checks stay per record.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import tomllib
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from events.errors import AllotError
from identity import keys
from streams.records import HEADER_SIGNATURE, HEADER_SIGNER, Headers, header

HEADER_KEY_ID = "allot-key-id"
HEADER_BATCH_PROOF = "allot-batch-proof"
SIGNATURE_HEADERS = (HEADER_SIGNER, HEADER_KEY_ID, HEADER_SIGNATURE, HEADER_BATCH_PROOF)

# What a batch signature signs: this prefix, then the 32-byte Merkle root.
BATCH_PREFIX = b"allot-batch-v1\x00"
# The largest batch a proof may name (a proof is then at most 20 sibling hashes).
MAX_BATCH = 1 << 20


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


def leaf_hash(value: bytes) -> bytes:
    """RFC 6962 leaf hash: SHA-256(0x00 + value)."""
    return hashlib.sha256(b"\x00" + value).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """RFC 6962 interior node hash: SHA-256(0x01 + left + right)."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def merkle_tree(values: Sequence[bytes]) -> tuple[bytes, list[list[bytes]]]:
    """``(root, proofs)``: the root over ``values`` and each value's sibling hashes, leaf up.

    At a level of odd length the last node is carried up unchanged (it has no
    sibling at that level, so its proof has no entry there).
    """
    if not values:
        raise ValueError("a batch needs at least one value")
    level = [leaf_hash(v) for v in values]
    proofs: list[list[bytes]] = [[] for _ in values]
    pos = list(range(len(values)))   # each leaf's node index at the current level
    while len(level) > 1:
        n = len(level)
        for leaf, i in enumerate(pos):
            sib = i ^ 1
            if sib < n:
                proofs[leaf].append(level[sib])
            pos[leaf] = i >> 1
        nxt = [node_hash(level[i], level[i + 1]) for i in range(0, n - 1, 2)]
        if n % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0], proofs


class BadProof(ValueError):
    """An ``allot-batch-proof`` header that cannot be read, or does not fit its index and size."""


def encode_proof(index: int, size: int, siblings: Sequence[bytes]) -> bytes:
    """The ``allot-batch-proof`` header: ``<index>/<size>/<sibling hashes, hex, concatenated>``."""
    return f"{index}/{size}/{b''.join(siblings).hex()}".encode("ascii")


def root_of(value: bytes, proof: bytes) -> bytes:
    """The Merkle root that ``proof`` (an ``allot-batch-proof`` header) leads ``value`` to.

    BadProof when the header is not ``<index>/<size>/<hex>`` with 0 <= index <
    size <= MAX_BATCH and exactly the sibling hashes that index and size call for.
    """
    try:
        text = proof.decode("ascii")
        idx_s, size_s, sib_s = text.split("/")
        if not (idx_s.isdigit() and size_s.isdigit()) or len(idx_s) > 8 or len(size_s) > 8:
            raise ValueError("index and size must be decimal numbers")
        index, size = int(idx_s), int(size_s)
        raw = bytes.fromhex(sib_s)
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadProof(f"unreadable allot-batch-proof ({exc})") from None
    if not 0 <= index < size <= MAX_BATCH:
        raise BadProof(f"allot-batch-proof index {index} not within a batch of {size}")
    if len(raw) % 32:
        raise BadProof("allot-batch-proof sibling hashes are not 32 bytes each")
    node, i, n, k = leaf_hash(value), index, size, 0
    while n > 1:
        sib = i ^ 1
        if sib < n:
            if k + 32 > len(raw):
                raise BadProof(f"allot-batch-proof too short for index {index} of {size}")
            h = raw[k:k + 32]
            k += 32
            node = node_hash(h, node) if i & 1 else node_hash(node, h)
        i, n = i >> 1, (n + 1) >> 1
    if k != len(raw):
        raise BadProof(f"allot-batch-proof too long for index {index} of {size}")
    return node


def batch_message(root: bytes) -> bytes:
    """What a batch signature signs: ``BATCH_PREFIX + root``."""
    return BATCH_PREFIX + root


def sign_batch_headers(values: Sequence[bytes], principal: str,
                       key: bytes) -> list[list[tuple[str, bytes]]]:
    """Per value, the headers that sign the whole batch ``values`` once as ``principal``.

    One Ed25519 signature of the batch's Merkle root; each record's headers
    carry it and that record's ``allot-batch-proof``, so each verifies alone.
    """
    root, proofs = merkle_tree(values)
    kid = keys.secret_key_id(key).encode()
    sig = signature(batch_message(root), key).encode()
    who = principal.encode()
    n = len(values)
    return [[(HEADER_SIGNER, who), (HEADER_KEY_ID, kid), (HEADER_SIGNATURE, sig),
             (HEADER_BATCH_PROOF, encode_proof(i, n, proofs[i]))] for i in range(n)]


def signed_message(value: bytes, headers: Headers | None) -> bytes:
    """The bytes a record's signature signs: its value, or a batch root's message.

    BadProof when the record carries an ``allot-batch-proof`` that cannot be read.
    """
    proof = header(headers, HEADER_BATCH_PROOF)
    if proof is None:
        return value
    return batch_message(root_of(value, proof))


class RootCheck(Protocol):
    """Checks a batch root's signature (``verify`` asks it for every batch-signed record)."""

    def holds(self, message: bytes, sig_b: bytes, key: Ed25519PublicKey) -> bool: ...


class PlainRoots:
    """No memory: every batch-signed record's root signature is verified again (the plain twin)."""

    def holds(self, message: bytes, sig_b: bytes, key: Ed25519PublicKey) -> bool:
        return keys.verify(message, sig_b, key)


class RootCache:
    """Batch root signatures that held, so a batch costs one Ed25519 verify, not one per record.

    Key: (raw public key, root message, signature header bytes); it holds only
    "this signature over this root holds under this key" (never a verdict: who
    signed, revocation and roles are checked per record). Lapse rule: LRU,
    at most ``size`` entries (a root is dropped when ``size`` newer ones were used).
    A signature that did not hold is not remembered (verified again when seen).
    """

    __slots__ = ("_seen", "hits", "misses", "size")

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._seen: OrderedDict[tuple[bytes, bytes, bytes], None] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._seen)

    def known(self, raw_key: bytes, message: bytes, sig_b: bytes) -> bool:
        """Whether this signature over this root was found to hold under this key (no verify)."""
        return (raw_key, message, sig_b) in self._seen

    def holds(self, message: bytes, sig_b: bytes, key: Ed25519PublicKey) -> bool:
        k = (key.public_bytes_raw(), message, sig_b)
        if k in self._seen:
            with contextlib.suppress(KeyError):   # (dropped by another thread meanwhile)
                self._seen.move_to_end(k)
            self.hits += 1
            return True
        self.misses += 1
        if not keys.verify(message, sig_b, key):
            return False
        self._seen[k] = None
        while len(self._seen) > self.size:
            with contextlib.suppress(KeyError):
                self._seen.popitem(last=False)
        return True


# The process's root cache: what ``verify`` uses when not given one.
ROOTS = RootCache()


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
           checked: Checked | None, roots: RootCheck | None) -> bool:
    # ``value``: the signed message (the record value, or a batch root's message: ``roots``).
    if sig_b is None:
        return False
    if checked is not None and checked.get((sig_b, value)) == key.public_bytes_raw():
        return True   # the same key, signature and bytes were verified ahead
    if roots is not None:
        return roots.holds(value, sig_b, key)
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
    try:
        message = signed_message(value, headers)
    except BadProof:
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
    return None if key is None else (key.public_bytes_raw(), sig, message)


def verify(value: bytes, headers: Headers | None, keyring: Keyring,
           registry: Registry | None = None, checked: Checked | None = None,
           roots: RootCheck | None = None) -> Verdict:
    """Check ``value``'s signature headers against ``registry`` (registered keys) and ``keyring``.

    A key id the registry knows is checked against the registered public key,
    and must belong to the named signer; a retired (rotated or revoked) key
    gives ``revoked`` once its signature holds. A signer the registry knows
    signs with registered keys only; anyone else is looked up in ``keyring``
    (the configured keys: the ticker, the first admin). ``checked``: signatures
    verified ahead, under the key named there (the verdict is the same; only
    the Ed25519 check itself is skipped when that key is the one resolved here).

    A record with an ``allot-batch-proof`` is checked against the root its
    proof leads to (an unreadable proof: ``bad_signature``), and that root's
    signature through ``roots`` (default: the process's ``ROOTS`` cache;
    ``PlainRoots()`` verifies every time). Everything else is as for a record
    signed alone.
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
    batch = header(headers, HEADER_BATCH_PROOF) is not None
    if batch:
        try:
            value = signed_message(value, headers)
        except BadProof as exc:
            return Verdict(None, BAD_SIGNATURE, str(exc))
        if roots is None:
            roots = ROOTS
    else:
        roots = None   # a record signed alone is verified as ever
    known = registry.key(kid) if registry is not None and kid is not None else None
    if known is not None:
        who, pub_hex = known
        key = _public(pub_hex)
        if who != signer or key is None:
            return Verdict(None, BAD_SIGNATURE, f"key {kid} is not {signer[:80]!r}'s")
        if not _holds(value, sig_b, key, checked, roots):
            return Verdict(None, BAD_SIGNATURE, f"not {signer[:80]!r}'s "
                                                f"{'batch ' if batch else ''}signature under key {kid}")
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
    if not _holds(value, sig_b, key, checked, roots):
        return Verdict(None, BAD_SIGNATURE,
                       f"not {signer[:80]!r}'s {'batch ' if batch else ''}signature")
    if registry is not None and registry.retired_why(own) is not None:
        return Verdict(None, REVOKED_KEY, f"key {own} of {signer[:80]!r} was "
                                          f"{registry.retired_why(own)}", own)
    return Verdict(signer, None, "", own)
