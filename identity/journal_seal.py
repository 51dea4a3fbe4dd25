"""Journal seals: every record a worker journals carries its Ed25519 signature, so forgeries show.

Anyone who can write to the journal topic (a broker without ACLs, such as the
embedded one) could append a decision under the current owner's claim token
(the token is in the claim record itself) or an input whose inbox-offset
header points far ahead, so a restarted worker would fold a decision no
engine made, or resume the inbox past records nobody handled. A seal closes
that: the worker seals each journal record it writes with the group's key
(``tick_key``, which only the workers hold), an HMAC-SHA256 over the
partition, the kind, the owner token, the inbox offset and the exact value,
in header ``allot-seal``. (A MAC, not a public-key signature: only the
workers check seals, as the snapshot manifests' are checked, and it costs
about a microsecond a record where an Ed25519 signature cost ~35 us and
halved the live throughput.) The restarted worker's fold (``streams.processor.PartitionFold``)
refuses, and logs loudly (``fold.forged``), any record whose seal does not
verify, and once a partition holds a sealed record, any unsealed one after
it (journals written before seals existed still fold). A refused record
moves neither the fence nor the inbox position.
"""

from __future__ import annotations

import hashlib
import hmac

HEADER_SEAL = "allot-seal"
_DOMAIN = b"allot-journal-seal/1\x00"


def sealed_bytes(partition: int, kind: str, owner: str, inbox_offset: int | None,
                 value: bytes) -> bytes:
    """What a seal covers: the record's place and headers, then its exact value."""
    inbox = b"" if inbox_offset is None else str(inbox_offset).encode()
    return b"\x00".join([_DOMAIN, str(partition).encode(), kind.encode(), owner.encode(),
                         inbox, value])


def _seal_key(secret: bytes) -> bytes:
    # A key of its own, derived from the workers' secret: a seal is never a tick signature.
    return hashlib.sha256(_DOMAIN + secret).digest()


def seal(secret: bytes, partition: int, kind: str, owner: str, inbox_offset: int | None,
         value: bytes) -> tuple[str, bytes]:
    """The ``allot-seal`` header of a journal record, under the workers' key."""
    mac = hmac.new(_seal_key(secret), sealed_bytes(partition, kind, owner, inbox_offset, value),
                   hashlib.sha256).hexdigest()
    return HEADER_SEAL, mac.encode()


class SealCheck:
    """Checks records' seals with the workers' key (the group's ``tick_key``)."""

    __slots__ = ("key",)

    def __init__(self, secret: bytes) -> None:
        self.key = _seal_key(secret)

    def __call__(self, partition: int, kind: str, owner: str, inbox_offset: int | None,
                 value: bytes, seal_hex: bytes) -> bool:
        want = hmac.new(self.key, sealed_bytes(partition, kind, owner, inbox_offset, value),
                        hashlib.sha256).hexdigest().encode()
        return hmac.compare_digest(want, seal_hex.strip().lower())
