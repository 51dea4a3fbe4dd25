"""Ed25519 signatures of inbox records (identity.keys, streams.signing): what verifies, what not."""

from __future__ import annotations

import stat
from pathlib import Path

from identity import keys
from streams import signing
from streams.records import HEADER_SIGNATURE
from streams.signing import HEADER_KEY_ID, Keyring, sign_headers, signature_headers, verify

VALUE = b'{"type":"workload.submitted","id":"p-1","actor":"alice"}'
ALICE = b"alice-secret"


def ring() -> Keyring:
    return Keyring({"alice": keys.public_of(ALICE)})


def test_a_signed_value_verifies_with_the_public_key_only() -> None:
    v = verify(VALUE, sign_headers(VALUE, "alice", ALICE), ring())
    assert (v.signer, v.problem) == ("alice", None)


def test_one_changed_byte_or_another_key_is_a_bad_signature() -> None:
    hs = sign_headers(VALUE, "alice", ALICE)
    assert verify(VALUE.replace(b"p-1", b"p-2"), hs, ring()).problem == signing.BAD_SIGNATURE
    forged = sign_headers(VALUE, "alice", b"mallory-secret")
    assert verify(VALUE, forged, ring()).problem == signing.BAD_SIGNATURE
    # A valid signature with a key id that is not alice's key: refused too.
    relabelled = [(k, b"0" * 16 if k == HEADER_KEY_ID else v) for k, v in hs]
    assert verify(VALUE, relabelled, ring()).problem == signing.BAD_SIGNATURE
    garbage = [(k, b"zz" if k == HEADER_SIGNATURE else v) for k, v in hs]
    assert verify(VALUE, garbage, ring()).problem == signing.BAD_SIGNATURE


def test_unknown_signer_and_unsigned() -> None:
    assert verify(VALUE, sign_headers(VALUE, "bob", b"bob"), ring()).problem == signing.UNKNOWN_SIGNER
    assert verify(VALUE, None, ring()).problem == signing.UNSIGNED


def test_a_hex_seed_is_used_as_is_and_the_key_id_is_stable() -> None:
    seed = keys.new_seed_hex()
    pub = keys.public_of(seed.encode())
    assert keys.public_from_hex(keys.public_hex(pub)).public_bytes_raw() == pub.public_bytes_raw()
    assert keys.key_id(pub) == keys.key_id(keys.public_of(seed.upper().encode()))
    assert len(keys.key_id(pub)) == 16


def test_keyring_file_holds_public_keys(tmp_path: Path) -> None:
    f = tmp_path / "keyring.toml"
    f.write_text(f'[keys]\nalice = "{keys.public_hex(keys.public_of(ALICE))}"\n')
    loaded = Keyring.from_file(f)
    assert verify(VALUE, sign_headers(VALUE, "alice", ALICE), loaded).signer == "alice"
    f.write_text('[keys]\nalice = "a-shared-secret"\n')
    try:
        Keyring.from_file(f)
    except signing.KeyringError as exc:
        assert "public key" in str(exc)
    else:
        raise AssertionError("an HMAC secret was taken as a public key")


def test_key_file_is_private(tmp_path: Path) -> None:
    p = tmp_path / "keys" / "alice.key"
    seed = keys.write_key_file(p)
    assert stat.S_IMODE(p.stat().st_mode) == 0o600
    assert p.read_text().strip() == seed


def test_signature_headers_are_the_three_signature_headers_only() -> None:
    hs = [("allot-kind", b"input"), *sign_headers(VALUE, "alice", ALICE)]
    assert [k for k, _ in signature_headers(hs)] == list(signing.SIGNATURE_HEADERS[:3])
    # (A batch-signed record's fourth, allot-batch-proof: tests/test_signing_batch.py.)
