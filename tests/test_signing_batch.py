"""Batch signatures (streams.signing.sign_batch_headers): one Ed25519 signature of a Merkle root.

Each record of a batch carries the root's signature and its own proof
(``allot-batch-proof``), and verifies alone; what must fail fails with a
dead-letter reason, never an exception; the root cache (``RootCache``) gives
the verdicts its plain twin (``PlainRoots``, no memory) gives; revocation stays
per record.
"""

from __future__ import annotations

import hashlib
import random
from typing import Any

import pytest

from events import BudgetNodeDefined, PrincipalKeyRevoked, PrincipalRegistered, encode
from identity import keys
from streams import signing
from streams.processor import Accepted, Dead, InboxRecord, Processor
from streams.records import HEADER_SIGNATURE
from streams.signing import (
    BATCH_PREFIX,
    HEADER_BATCH_PROOF,
    Keyring,
    PlainRoots,
    RootCache,
    sign_batch_headers,
    sign_headers,
    signature_headers,
    verify,
)
from streams.ticker import make_tick

ALICE = b"alice-secret"
MALLORY = b"mallory-secret"


def ring() -> Keyring:
    return Keyring({"alice": keys.public_of(ALICE), "mallory": keys.public_of(MALLORY)})


def values(n: int, tag: str = "v") -> list[bytes]:
    return [b'{"type":"workload.submitted","id":"alice:%s-%d","actor":"alice"}' % (tag.encode(), i)
            for i in range(n)]


def with_header(hs: list[tuple[str, bytes]], name: str, value: bytes) -> list[tuple[str, bytes]]:
    return [(k, value if k == name else v) for k, v in hs]


def proof_of(hs: list[tuple[str, bytes]]) -> bytes:
    return next(v for k, v in hs if k == HEADER_BATCH_PROOF)


def check(value: bytes, hs: Any, roots: Any = None) -> tuple[str | None, str | None]:
    v = verify(value, hs, ring(), roots=roots if roots is not None else RootCache())
    return v.signer, v.problem


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 8, 9, 63, 64, 65, 100])
def test_every_record_of_a_batch_verifies_alone(n: int) -> None:
    vs = values(n)
    hs = sign_batch_headers(vs, "alice", ALICE)
    assert len(hs) == n
    # One signature for the whole batch, one proof each.
    assert len({dict(h)[HEADER_SIGNATURE] for h in hs}) == 1
    assert len({proof_of(h) for h in hs}) == n
    for v, h in zip(vs, hs, strict=True):
        assert check(v, h) == ("alice", None)
        assert check(v, h, PlainRoots()) == ("alice", None)


def test_the_signed_message_is_the_prefixed_root_of_rfc6962_hashes() -> None:
    vs = values(3)
    leaf = [hashlib.sha256(b"\x00" + v).digest() for v in vs]
    node01 = hashlib.sha256(b"\x01" + leaf[0] + leaf[1]).digest()
    root = hashlib.sha256(b"\x01" + node01 + leaf[2]).digest()   # leaf 2 carried up unchanged
    hs = sign_batch_headers(vs, "alice", ALICE)
    sig = bytes.fromhex(dict(hs[2])[HEADER_SIGNATURE].decode())
    keys.public_of(ALICE).verify(sig, BATCH_PREFIX + root)        # raises if not
    # Documented encoding: index/size/sibling hashes hex (leaf 2 has one: node01).
    assert proof_of(hs[2]) == b"2/3/" + node01.hex().encode()
    assert proof_of(hs[0]) == b"0/3/" + (leaf[1] + leaf[2]).hex().encode()


def test_a_batch_of_one() -> None:
    [v] = values(1)
    [h] = sign_batch_headers([v], "alice", ALICE)
    assert proof_of(h) == b"0/1/"
    assert check(v, h) == ("alice", None)
    assert check(v + b" ", h)[1] == signing.BAD_SIGNATURE


def test_a_tampered_value_or_another_index_fails() -> None:
    vs = values(8)
    hs = sign_batch_headers(vs, "alice", ALICE)
    assert check(vs[3].replace(b"v-3", b"v-9"), hs[3]) == (None, signing.BAD_SIGNATURE)
    # Record 3's value with record 4's proof, or record 3's proof with another index.
    assert check(vs[3], hs[4]) == (None, signing.BAD_SIGNATURE)
    rest = proof_of(hs[3]).split(b"/", 1)[1]
    assert check(vs[3], with_header(hs[3], HEADER_BATCH_PROOF, b"2/" + rest)) \
        == (None, signing.BAD_SIGNATURE)
    # A value of another batch with this batch's proof and signature.
    other = values(8, "w")
    assert check(other[3], hs[3]) == (None, signing.BAD_SIGNATURE)


def test_a_root_signed_by_another_key_fails() -> None:
    vs = values(5)
    forged = sign_batch_headers(vs, "alice", MALLORY)   # mallory's key, alice's name
    assert check(vs[0], forged[0])[1] == signing.BAD_SIGNATURE
    # Mallory's own batch is mallory's, not alice's.
    own = sign_batch_headers(vs, "mallory", MALLORY)
    assert check(vs[0], own[0]) == ("mallory", None)
    relabelled = with_header(own[0], "allot-signer", b"alice")
    assert check(vs[0], relabelled)[1] == signing.BAD_SIGNATURE


def test_single_and_batch_signatures_are_not_interchangeable() -> None:
    vs = values(4)
    batch = sign_batch_headers(vs, "alice", ALICE)
    # A batch record without its proof: the root signature is not a signature of the value.
    stripped = [(k, v) for k, v in batch[1] if k != HEADER_BATCH_PROOF]
    assert check(vs[1], stripped) == (None, signing.BAD_SIGNATURE)
    # A record signed alone, with a proof added: its signature is not of a root.
    single = sign_headers(vs[1], "alice", ALICE)
    assert check(vs[1], [*single, (HEADER_BATCH_PROOF, proof_of(batch[1]))]) \
        == (None, signing.BAD_SIGNATURE)
    # A batch of one's proof on a record signed alone: still not the prefixed root's signature.
    assert check(vs[1], [*single, (HEADER_BATCH_PROOF, b"0/1/")]) \
        == (None, signing.BAD_SIGNATURE)
    # A value that is a batch's root message, signed alone, does not pass as that batch.
    root_msg = BATCH_PREFIX + bytes(32)
    assert check(root_msg, sign_headers(root_msg, "alice", ALICE)) == ("alice", None)
    assert check(vs[0], with_header(batch[0], HEADER_SIGNATURE,
                                    dict(sign_headers(root_msg, "alice", ALICE))[
                                        HEADER_SIGNATURE]))[1] == signing.BAD_SIGNATURE


@pytest.mark.parametrize("proof", [
    b"", b"0", b"0/4", b"0/4/", b"x/4/" + b"00" * 64, b"4/4/" + b"00" * 64, b"0/0/",
    b"-1/4/" + b"00" * 64, b"0/4/" + b"00" * 63, b"0/4/" + b"00" * 65, b"0/4/" + b"00" * 96,
    b"0/4/" + b"zz" * 64, b"0/99999999999/", b"\xff\xfe/4/", b"0/4/" + b"00" * 64 + b"/1",
    b"1/2/" + b"00" * 31,
])
def test_a_truncated_or_garbled_proof_is_a_bad_signature_never_a_crash(proof: bytes) -> None:
    vs = values(4)
    hs = with_header(sign_batch_headers(vs, "alice", ALICE)[0], HEADER_BATCH_PROOF, proof)
    signer, problem = check(vs[0], hs)
    assert (signer, problem) == (None, signing.BAD_SIGNATURE)
    detail = verify(vs[0], hs, ring()).detail
    assert "allot-batch-proof" in detail or "signature" in detail
    # The verify pool's job for it: none (nothing to check ahead), not an exception.
    assert signing.job(vs[0], hs, ring()) is None


def test_a_garbled_proof_is_dead_lettered_with_its_reason() -> None:
    p = Processor(clusters=("c1",), partition_of=lambda c: 0, keyring=ring(),
                  ticker_principal="allot.ticker", require_signatures=False)
    ev = BudgetNodeDefined(id="alice:n1", at=1, cluster="c1", actor="alice", source="t", path="lab")
    value = encode(ev)
    hs = with_header(sign_batch_headers([value, b"x"], "alice", ALICE)[0], HEADER_BATCH_PROOF,
                     b"0/2/" + b"ab" * 10)
    out = p.handle(InboxRecord(topic="allot.inbox", partition=0, offset=1, key=b"c1",
                               value=value, headers=tuple(hs)), {})
    assert isinstance(out, Dead)
    assert out.letter.reason == signing.BAD_SIGNATURE
    assert "allot-batch-proof" in out.letter.detail


def test_the_cache_gives_the_verdicts_of_its_plain_twin() -> None:
    rng = random.Random(33)
    cached, plain = RootCache(size=3), PlainRoots()   # small: evictions happen
    signers = [("alice", ALICE), ("mallory", MALLORY), ("alice", MALLORY), ("bob", b"bob")]
    seen: dict[tuple[str | None, str | None], int] = {}
    for b in range(60):
        n = rng.randint(1, 20)
        vs = values(n, f"b{b}")
        who, key = rng.choice(signers)
        hs = sign_batch_headers(vs, who, key)
        # The same root under another key, claimed by the same signer: never the cached verdict.
        # (Labelled with the claimed key's id, so the check gets as far as the signature.)
        forged = [with_header(h, "allot-key-id", keys.secret_key_id(key).encode())
                  for h in sign_batch_headers(vs, who, MALLORY if key != MALLORY else ALICE)]
        cases: list[tuple[bytes, Any]] = []
        for i in range(n):
            cases.append((vs[i], hs[i]))
            cases.append((vs[i], forged[i]))
            j = rng.randrange(n)
            cases.append((vs[i], hs[j]))                                       # another's proof
            cases.append((vs[i] + b" ", hs[i]))                                # tampered value
            pr = proof_of(hs[i])
            cut = pr[:rng.randrange(len(pr) + 1)]
            cases.append((vs[i], with_header(hs[i], HEADER_BATCH_PROOF, cut)))  # truncated
            flipped = bytearray(pr)
            k = rng.randrange(len(flipped))
            flipped[k] = rng.choice(b"0123456789abcdef/x")
            cases.append((vs[i], with_header(hs[i], HEADER_BATCH_PROOF, bytes(flipped))))
        rng.shuffle(cases)
        for value, h in cases:
            a, c = check(value, h, cached), check(value, h, plain)
            assert a == c, (value, h)
            seen[a] = seen.get(a, 0) + 1
    # Both verdicts occur, and the cache saved verifications.
    assert seen.get(("alice", None)) and seen.get((None, signing.BAD_SIGNATURE))
    assert cached.hits > 0 and len(cached) <= 3


def test_the_cache_holds_only_signatures_that_held() -> None:
    cache = RootCache(size=2)
    vs = values(4)
    bad = sign_batch_headers(vs, "alice", MALLORY)
    for v, h in zip(vs, bad, strict=True):
        assert check(v, h, cache)[1] == signing.BAD_SIGNATURE
    assert len(cache) == 0
    for tag in ("a", "b", "c"):
        ws = values(2, tag)
        for v, h in zip(ws, sign_batch_headers(ws, "alice", ALICE), strict=True):
            assert check(v, h, cache) == ("alice", None)
    assert len(cache) == 2   # the LRU bound


def test_the_proof_is_journaled_with_the_signature_headers() -> None:
    hs = [("allot-kind", b"input"), *sign_batch_headers(values(2), "alice", ALICE)[1]]
    assert [k for k, _ in signature_headers(hs)] == list(signing.SIGNATURE_HEADERS)


# -- revocation between two records of one batch, through the processor -------------------------

C = "c1"
TICKER = "allot.ticker"
TICK_KEY = b"tick-secret"
ROOT = b"root-secret"


def _processor() -> tuple[Processor, dict[str, Any], list[int]]:
    ring_ = Keyring().with_key(TICKER, keys.public_of(TICK_KEY)).with_key(
        "root", keys.public_of(ROOT))
    p = Processor(clusters=(C,), partition_of=lambda c: 0, keyring=ring_,
                  ticker_principal=TICKER, require_signatures=True, worker="w",
                  admins=("root",))
    return p, {}, [0]


def _send(p: Processor, engines: dict[str, Any], off: list[int], value: bytes,
          headers: Any) -> Any:
    off[0] += 1
    return p.handle(InboxRecord(topic="allot.inbox", partition=0, offset=off[0], key=C.encode(),
                                value=value, headers=tuple(headers)), engines)


def _registered(name: str, secret: bytes, roles: tuple[str, ...], n: int) -> PrincipalRegistered:
    pub = keys.public_of(secret)
    return PrincipalRegistered(id=f"root:reg-{n}", at=100, cluster=C, actor="root", source="t",
                               principal=name, public_key=keys.public_hex(pub),
                               key_id=keys.key_id(pub), roles=roles)


@pytest.mark.parametrize("batched", [False, True])
def test_a_key_revoked_mid_batch_refuses_the_later_records_as_today(batched: bool) -> None:
    p, engines, off = _processor()
    t = make_tick(C, 100, TICKER, TICK_KEY)
    assert isinstance(_send(p, engines, off, t.value, t.headers), Accepted)
    for i, ev in enumerate([_registered("root", ROOT, ("admin", "manager"), 0),
                            _registered("alice", ALICE, ("admin", "manager"), 1)]):
        v = encode(ev)
        out = _send(p, engines, off, v, sign_headers(v, "root", ROOT))
        assert isinstance(out, Accepted), (i, out)
    nodes = [encode(BudgetNodeDefined(id=f"alice:n{i}", at=100, cluster=C, actor="alice",
                                      source="t", path=path,
                                      managers=("alice",) if i == 0 else ()))
             for i, path in enumerate(["lab", "lab/a", "lab/b", "lab/c"])]
    hs = sign_batch_headers(nodes, "alice", ALICE) if batched else \
        [sign_headers(v, "alice", ALICE) for v in nodes]
    outs = [_send(p, engines, off, nodes[0], hs[0]), _send(p, engines, off, nodes[1], hs[1])]
    kid = keys.key_id(keys.public_of(ALICE))
    rv = encode(PrincipalKeyRevoked(id="root:rv", at=100, cluster=C, actor="root", source="t",
                                    principal="alice", key_id=kid))
    assert isinstance(_send(p, engines, off, rv, sign_headers(rv, "root", ROOT)), Accepted)
    outs += [_send(p, engines, off, nodes[2], hs[2]), _send(p, engines, off, nodes[3], hs[3])]
    assert [type(o).__name__ for o in outs] == ["Accepted", "Accepted", "Dead", "Dead"], [getattr(o, "letter", None) for o in outs]
    for o in outs[2:]:
        assert o.letter.reason == "revoked" and "revoked" in o.letter.detail
    assert not any(type(d).__name__.endswith("Rejected") for o in outs[:2] for d in o.derived)
    assert set(engines[C].state.budget.nodes) >= {"lab", "lab/a"}
    assert not {"lab/b", "lab/c"} & set(engines[C].state.budget.nodes)
