"""Journal seals: every record a worker journals carries its Ed25519 signature, so forgeries show.

Anyone who can write to the journal topic (a broker without ACLs, such as the
embedded one) could append a decision under the current owner's claim token
(the token is in the claim record itself) or an input whose inbox-offset
header points far ahead, so a restarted worker would fold a decision no
engine made, or resume the inbox past records nobody handled. A seal closes
that: the worker signs each journal record it writes with the group's key
(the ticker's, which only the workers hold), over the partition, the kind,
the owner token, the inbox offset and the exact value, in header
``allot-seal``. The restarted worker's fold (``streams.processor.PartitionFold``)
refuses, and logs loudly (``fold.forged``), any record whose seal does not
verify, and once a partition holds a sealed record, any unsealed one after
it (journals written before seals existed still fold). A refused record
moves neither the fence nor the inbox position.
"""

from __future__ import annotations

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from identity import keys

HEADER_SEAL = "allot-seal"
_DOMAIN = b"allot-journal-seal/1\x00"


def sealed_bytes(partition: int, kind: str, owner: str, inbox_offset: int | None,
                 value: bytes) -> bytes:
    """What a seal signs: the record's place and headers, then its exact value."""
    inbox = b"" if inbox_offset is None else str(inbox_offset).encode()
    return b"\x00".join([_DOMAIN, str(partition).encode(), kind.encode(), owner.encode(),
                         inbox, value])


def seal(secret: bytes, partition: int, kind: str, owner: str, inbox_offset: int | None,
         value: bytes) -> tuple[str, bytes]:
    """The ``allot-seal`` header of a journal record, signed with the workers' key."""
    msg = sealed_bytes(partition, kind, owner, inbox_offset, value)
    return HEADER_SEAL, keys.sign(msg, secret).encode()


class SealCheck:
    """Verifies records' seals against the workers' public key."""

    __slots__ = ("key",)

    def __init__(self, key: Ed25519PublicKey) -> None:
        self.key = key

    def __call__(self, partition: int, kind: str, owner: str, inbox_offset: int | None,
                 value: bytes, seal_hex: bytes) -> bool:
        return keys.verify(sealed_bytes(partition, kind, owner, inbox_offset, value), seal_hex,
                           self.key)
