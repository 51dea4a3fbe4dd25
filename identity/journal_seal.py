"""Journal seals: every record a worker journals is signed with the workers' Ed25519 key.

Anyone who can write to the journal topic (a broker without ACLs, such as the
embedded one) could append a decision under the current owner's claim token
(the token is in the claim record itself) or an input whose inbox-offset
header points far ahead, so a restarted worker would fold a decision no
engine made, or resume the inbox past records nobody handled. A seal closes
that, and anyone holding the workers' *public* key can check it: a restarted
worker's fold, ``allot journal export``, ``allot audit verify`` and the load of
an archive (``allot audit load``) all refuse, and count, a record no worker
signed.

**What is signed.** Each record's leaf is the SHA-256 of its partition, kind,
owner token, inbox offset and exact value (``sealed_bytes``). A worker signs
the records it writes together (one journal produce per partition: an input
and its decisions, a batch of inputs) in chunks of at most ``CHUNK`` records:
one Ed25519 signature over the Merkle root of the chunk's leaves. Every record
carries in its ``allot-seal`` header the signing key's id, the chunk's
signature, its index and its Merkle path, so it verifies alone (a reader that
starts in the middle of a chunk, after a snapshot, or a chunk a crash cut
short, still checks every record it has); a reader checks the signature once
per chunk and a few hashes per record. Per record, that costs a worker about
1/CHUNK of a signature (docs/benchmarks.md, ``bench_identity``), where a
signature per record cost ~35 us (half the live throughput).

**Whose key.** The workers of a group already share one private key: the
ticker's (``tick_key``), which signs every tick, and whose public key every
verifier of ticks already holds (the keyring's ``allot.ticker`` entry). The
journal is signed with that key, under a domain of its own
(``allot-journal-seal/2``: a seal can never be taken for a tick, whose signed
bytes are a JSON event). A reader trusts the keys ``trusted_keys`` names: the
ticker principal's, and retired ones kept as ``<ticker>@<label>`` in a keyring
(key rotation, docs/live.md).

**Format, and journals written before.** The header value is
``2;<key id>;<signature hex>;<index>;<path hex>``. Version 1 seals (an
HMAC-SHA256 under a key derived from ``tick_key``, 64 hex) are still checked
by a holder of the secret (a worker; also the liveness beats, which only
workers read); a reader without the secret counts them as ``legacy``: sealed,
but not publicly verifiable. A journal from before seals folds unchanged
until its first sealed record; after one, an unsealed record is forged.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from identity import keys

HEADER_SEAL = "allot-seal"
_DOMAIN = b"allot-journal-seal/1\x00"
_DOMAIN_V2 = b"allot-journal-seal/2\x00"
V2 = b"2"
# Records per signature: a Merkle path of at most log2(CHUNK) hashes rides on every record.
CHUNK = 32
_EMPTY = hashlib.sha256(b"\x02").digest()   # the padding leaf (no record hashes to it)

# Outcomes of ``SealCheck.verdict``.
OK = "ok"
UNSEALED = "unsealed"
LEGACY = "legacy"        # a version-1 (HMAC) seal, and no secret here to check it
FORGED = "forged"


def sealed_bytes(partition: int, kind: str, owner: str, inbox_offset: int | None,
                 value: bytes) -> bytes:
    """What a seal covers: the record's place and headers, then its exact value."""
    inbox = b"" if inbox_offset is None else str(inbox_offset).encode()
    return b"\x00".join([_DOMAIN, str(partition).encode(), kind.encode(), owner.encode(),
                         inbox, value])


def leaf(partition: int, kind: str, owner: str, inbox_offset: int | None, value: bytes) -> bytes:
    """The Merkle leaf of one record."""
    return hashlib.sha256(b"\x00" + sealed_bytes(partition, kind, owner, inbox_offset,
                                                  value)).digest()


def _node(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _tree(leaves: Sequence[bytes]) -> list[list[bytes]]:
    """The Merkle tree's levels, leaves first, padded to a power of two."""
    level = list(leaves)
    while len(level) & (len(level) - 1):
        level.append(_EMPTY)
    levels = [level]
    while len(level) > 1:
        level = [_node(level[i], level[i + 1]) for i in range(0, len(level), 2)]
        levels.append(level)
    return levels


def _root_of(leaf_: bytes, index: int, path: Sequence[bytes]) -> bytes:
    h = leaf_
    for sibling in path:
        h = _node(h, sibling) if index % 2 == 0 else _node(sibling, h)
        index //= 2
    return h


def _signed_message(root: bytes) -> bytes:
    return _DOMAIN_V2 + root


def worker_public_key(secret: bytes) -> Ed25519PublicKey:
    """The public key that checks the seals of workers holding ``secret`` (``tick_key``)."""
    return keys.public_of(secret)


def seal_records(secret: bytes, partition: int,
                 records: Sequence[tuple[str, str, int | None, bytes]]) -> list[tuple[str, bytes]]:
    """The ``allot-seal`` headers of ``records`` (kind, owner, inbox offset, value), in order.

    One Ed25519 signature per ``CHUNK`` records, under the workers' key.
    """
    priv = keys.private_key(secret)
    kid = keys.key_id(priv.public_key()).encode()
    out: list[tuple[str, bytes]] = []
    for start in range(0, len(records), CHUNK):
        chunk = records[start:start + CHUNK]
        levels = _tree([leaf(partition, k, o, i, v) for k, o, i, v in chunk])
        head = b";".join([V2, kid, priv.sign(_signed_message(levels[-1][0])).hex().encode()])
        hexed = [[n.hex().encode() for n in level] for level in levels[:-1]]
        for i in range(len(chunk)):
            path = b"".join([level[(i >> d) ^ 1] for d, level in enumerate(hexed)])
            out.append((HEADER_SEAL, b"%s;%d;%s" % (head, i, path)))
    return out


def seal(secret: bytes, partition: int, kind: str, owner: str, inbox_offset: int | None,
         value: bytes) -> tuple[str, bytes]:
    """A version-1 seal (HMAC under ``secret``): what only a holder of the secret checks.

    Workers still write it on their liveness beats (read by workers only); journal
    records get ``seal_records``.
    """
    mac = hmac.new(_seal_key(secret), sealed_bytes(partition, kind, owner, inbox_offset, value),
                   hashlib.sha256).hexdigest()
    return HEADER_SEAL, mac.encode()


def _seal_key(secret: bytes) -> bytes:
    # A key of its own, derived from the workers' secret: a seal is never a tick signature.
    return hashlib.sha256(_DOMAIN + secret).digest()


def trusted_keys(keyring: Any, ticker: str = "allot.ticker") -> dict[str, Ed25519PublicKey]:
    """Key id -> public key of every worker key ``keyring`` (a ``streams.signing.Keyring``) trusts.

    The ticker principal's key, and retired worker keys named ``<ticker>@<label>``.
    """
    return {keys.key_id(k): k for name, k in keyring.items()
            if name == ticker or name.startswith(ticker + "@")}


class SealCheck:
    """Checks journal records' seals: v2 against trusted public keys, v1 with the secret.

    ``trusted``: key id -> public key (``trusted_keys``), or public keys.
    ``secret``: the workers' ``tick_key``, to check version-1 seals (workers only).
    Callable as the fold's check: ``(partition, kind, owner, inbox offset, value,
    seal header) -> bool``, where a ``legacy`` seal is refused without the secret.
    """

    __slots__ = ("_checked", "_hmac_key", "trusted")

    def __init__(self, trusted: Mapping[str, Ed25519PublicKey] | Iterable[Ed25519PublicKey] = (),
                 secret: bytes | None = None) -> None:
        if isinstance(trusted, Mapping):
            self.trusted: dict[str, Ed25519PublicKey] = dict(trusted)
        else:
            self.trusted = {keys.key_id(k): k for k in trusted}
        if secret is not None:
            pub = worker_public_key(secret)
            self.trusted.setdefault(keys.key_id(pub), pub)
        self._hmac_key = _seal_key(secret) if secret is not None else None
        # (key id, signature, root) -> verified: a chunk's signature is checked once.
        self._checked: dict[tuple[bytes, bytes, bytes], bool] = {}

    def __call__(self, partition: int, kind: str, owner: str, inbox_offset: int | None,
                 value: bytes, seal_value: bytes) -> bool:
        return self.verdict(partition, kind, owner, inbox_offset, value, seal_value) == OK

    def verdict(self, partition: int, kind: str, owner: str, inbox_offset: int | None,
                value: bytes, seal_value: bytes | None) -> str:
        """``OK``, ``UNSEALED``, ``LEGACY`` (v1, no secret here) or ``FORGED``."""
        if seal_value is None:
            return UNSEALED
        parts = seal_value.split(b";")
        if parts[0] != V2:
            if len(parts) != 1:
                return FORGED
            if self._hmac_key is None:
                return LEGACY
            want = hmac.new(self._hmac_key, sealed_bytes(partition, kind, owner, inbox_offset,
                                                         value), hashlib.sha256).hexdigest()
            return OK if hmac.compare_digest(want.encode(), seal_value.strip().lower()) \
                else FORGED
        if len(parts) != 5:
            return FORGED
        _, kid, sig, index_b, path_hex = parts
        try:
            index = int(index_b)
            path_raw = bytes.fromhex(path_hex.decode("ascii"))
        except (ValueError, UnicodeDecodeError):
            return FORGED
        if index < 0 or len(path_raw) % 32 or index >= 1 << (len(path_raw) // 32):
            return FORGED
        path = [path_raw[i:i + 32] for i in range(0, len(path_raw), 32)]
        root = _root_of(leaf(partition, kind, owner, inbox_offset, value), index, path)
        return OK if self._signature_holds(kid, sig, root) else FORGED

    def _signature_holds(self, kid: bytes, sig: bytes, root: bytes) -> bool:
        memo = (kid, sig, root)
        got = self._checked.get(memo)
        if got is not None:
            return got
        key = self.trusted.get(kid.decode("ascii", "replace"))
        ok = False
        if key is not None:
            try:
                key.verify(bytes.fromhex(sig.decode("ascii")), _signed_message(root))
                ok = True
            except (ValueError, UnicodeDecodeError, InvalidSignature):
                ok = False
        if len(self._checked) >= 4096:
            self._checked.clear()
        self._checked[memo] = ok
        return ok


class SealGate:
    """A reader's rule over one partition's records, in offset order: which ones a worker wrote.

    ``admit`` says whether a record counts (its seal verifies; or no record so
    far was sealed: a journal from before seals; or it bears a v1 seal, no
    secret is here to check it and no v2 seal came before it: a journal from
    before public-key seals, counted as ``legacy``). Counts every outcome,
    so a reader can say loudly how many records it refused.
    """

    __slots__ = ("check", "forged", "legacy", "public", "sealed", "unsealed_before", "verified")

    def __init__(self, check: SealCheck) -> None:
        self.check = check
        self.sealed = False
        self.public = False        # a v2 (public-key) seal was seen: no v1 one counts after it
        self.verified = 0
        self.legacy = 0
        self.unsealed_before = 0   # unsealed records before the first sealed one (old journal)
        self.forged = 0

    def admit(self, partition: int, kind: str, owner: str, inbox_offset: int | None,
              value: bytes, seal_value: bytes | None) -> bool:
        v = self.check.verdict(partition, kind, owner, inbox_offset, value, seal_value)
        if v == OK:
            self.sealed = True
            self.public = self.public or (seal_value or b"").startswith(V2 + b";")
            self.verified += 1
            return True
        if v == UNSEALED and not self.sealed:
            self.unsealed_before += 1
            return True
        if v == LEGACY and not self.public:
            self.sealed = True
            self.legacy += 1
            return True
        self.forged += 1
        return False


def reader_check(keyring_file: str = "", secret: bytes | None = None,
                 ticker: str = "allot.ticker", key_dir: str | None = None) -> SealCheck | None:
    """The seal check of a reader outside the worker (export, audit load); None: no key known.

    Trusts the worker keys of ``keyring_file`` (``trusted_keys``), the public key
    of ``secret`` (a configured ``tick_key``: it also checks v1 seals), and else
    the ticker key ``allot up`` keeps in the local key directory (its public part).
    """
    from identity.local import Keychain
    from streams.signing import Keyring

    ring = Keyring.from_file(keyring_file) if keyring_file else Keyring()
    trusted = trusted_keys(ring, ticker)
    if secret is None:
        local = Keychain(key_dir).public_hex(ticker)
        if local is not None:
            pub = keys.public_from_hex(local)
            trusted.setdefault(keys.key_id(pub), pub)
    if not trusted and secret is None:
        return None
    return SealCheck(trusted, secret=secret)


def say_export_seals(report: Any) -> None:
    """Tell, on stderr and loudly, what ``allot journal export`` found of the worker seals."""
    import sys

    if not report.seals_checked:
        print("allot journal export: WARNING: worker seals NOT checked: no worker public key "
              "known (set keyring_file with an `allot.ticker` entry, or tick_key_file)",
              file=sys.stderr)
        return
    if report.forged:
        print(f"allot journal export: REFUSED {report.forged:,} journal record(s) no worker "
              f"signed (left out; first at partition:offset "
              f"{', '.join(report.forged_at[:5])}); `allot audit verify` lists them",
              file=sys.stderr)
    if report.legacy or report.unsealed:
        print(f"allot journal export: {report.legacy:,} record(s) with v1 seals and "
              f"{report.unsealed:,} unsealed record(s) from before seals: kept, not verifiable "
              f"without the workers' secret", file=sys.stderr)


def reader_seals(settings: Any, log: Any = None) -> SealCheck | None:
    """The seal check of a journal reader that acts on decisions (an executor), from its settings.

    Trusts the workers' public keys only (``reader_check`` without the secret: a
    reader never holds the tick key): the keyring file's, else the ticker key
    ``allot up`` keeps in the local key directory. With none known the reader
    cannot tell a forged decision from a real one: it says so, loudly, once.
    """
    check = reader_check(settings.keyring_file, None, settings.ticker_principal)
    if check is None and log is not None:
        log.warning("journal.seals_unchecked",
                    why="no worker public key known (keyring_file with an `allot.ticker` entry, "
                        "or the local key directory of `allot up`): decisions are acted on "
                        "without checking that a worker signed them")
    return check
