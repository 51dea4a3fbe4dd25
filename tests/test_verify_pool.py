"""Signatures checked ahead in the verify pool: the verdicts are the ones verify gives alone."""

from __future__ import annotations

import asyncio

from identity import keys
from streams import signing, verify_pool
from streams.records import HEADER_SIGNATURE, header
from streams.signing import HEADER_KEY_ID, Keyring, sign_headers, verify

ALICE, BOB, MALLORY = b"alice-secret", b"bob-secret", b"mallory-secret"


def ring() -> Keyring:
    return Keyring({"alice": keys.public_of(ALICE), "bob": keys.public_of(BOB)})


def records() -> list[tuple[bytes, list[tuple[str, bytes]]]]:
    """Signed values, good and bad, of every kind verify tells apart."""
    out = []
    for i in range(40):
        v = f'{{"type":"workload.submitted","id":"alice:{i}","actor":"alice"}}'.encode()
        out.append((v, sign_headers(v, "alice", ALICE)))
    v = b'{"id":"x"}'
    hs = sign_headers(v, "alice", ALICE)
    out.append((v.replace(b"x", b"y"), hs))                                 # another value
    out.append((v, sign_headers(v, "alice", MALLORY)))                       # another key
    out.append((v, [(k, b"0" * 16 if k == HEADER_KEY_ID else x) for k, x in hs]))  # relabelled
    out.append((v, [(k, b"zz" if k == HEADER_SIGNATURE else x) for k, x in hs]))   # not hex
    out.append((v, sign_headers(v, "carol", b"carol")))                      # unknown signer
    out.append((v, []))                                                      # unsigned
    return out


def checked_ahead(recs: list[tuple[bytes, list[tuple[str, bytes]]]]) -> signing.Checked:
    async def run() -> signing.Checked:
        pool = verify_pool.VerifyPool(2)
        try:
            await pool.start()
            jobs = []
            for value, hs in recs:
                job = signing.job(value, hs, ring())
                sig = header(hs, HEADER_SIGNATURE)
                if job is not None and sig is not None:
                    jobs.append((sig, job))
            return await pool.check(jobs)
        finally:
            pool.close()
    return asyncio.run(run())


def test_verdicts_with_signatures_checked_ahead_are_the_verdicts_without() -> None:
    recs = records()
    checked = checked_ahead(recs)
    assert len(checked) == 40   # the good ones only
    for value, hs in recs:
        alone = verify(value, hs, ring())
        ahead = verify(value, hs, ring(), checked=checked)
        assert (alone.signer, alone.problem, alone.key_id) == \
               (ahead.signer, ahead.problem, ahead.key_id)


def test_a_signature_checked_under_another_key_is_checked_again() -> None:
    v = b'{"id":"alice:1"}'
    hs = sign_headers(v, "alice", ALICE)
    sig = header(hs, HEADER_SIGNATURE)
    assert sig is not None
    # Claimed ahead to hold under bob's key: alice's key is the one verify resolves,
    # so it verifies itself (and the signature does hold under alice's key).
    wrong = {(sig, v): keys.public_of(BOB).public_bytes_raw()}
    assert verify(v, hs, ring(), checked=wrong).signer == "alice"
    # A forged signature said to hold under bob's key is still refused as alice's.
    forged = sign_headers(v, "alice", MALLORY)
    fsig = header(forged, HEADER_SIGNATURE)
    assert fsig is not None
    lie = {(fsig, v): keys.public_of(BOB).public_bytes_raw()}
    assert verify(v, forged, ring(), checked=lie).problem == signing.BAD_SIGNATURE


def test_small_batches_are_left_to_the_loop() -> None:
    recs = records()[: verify_pool.MIN_JOBS - 1]
    assert checked_ahead(recs) == {}


def test_a_batch_signature_is_one_job_per_root_and_its_verdicts_are_unchanged() -> None:
    recs: list[tuple[bytes, list[tuple[str, bytes]]]] = []
    for b in range(40):
        vs = [f'{{"type":"workload.submitted","id":"alice:b{b}-{i}"}}'.encode() for i in range(3)]
        recs += zip(vs, signing.sign_batch_headers(vs, "alice", ALICE), strict=True)
    vs = [b'{"id":"f0"}', b'{"id":"f1"}']
    recs += zip(vs, signing.sign_batch_headers(vs, "alice", MALLORY), strict=True)   # forged
    recs.append((b'{"id":"f9"}', signing.sign_batch_headers(vs, "alice", ALICE)[0]))  # tampered
    jobs = {(header(hs, HEADER_SIGNATURE), signing.job(v, hs, ring())) for v, hs in recs}
    # A batch's records share one job, its root's; the forged batch (mallory's key id) has
    # none (no key to check it with), the tampered record a root of its own.
    assert len(jobs) == 40 + 1 + 1
    checked = checked_ahead(recs)
    assert len(checked) == 40        # the good roots only
    for value, hs in recs:
        alone = verify(value, hs, ring(), roots=signing.PlainRoots())
        ahead = verify(value, hs, ring(), checked=checked, roots=signing.PlainRoots())
        assert (alone.signer, alone.problem, alone.key_id) == \
               (ahead.signer, ahead.problem, ahead.key_id)
