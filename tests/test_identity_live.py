"""Ed25519-signed inputs over the real broker: accepted, journaled with their signature, re-verified.

The worker holds public keys only (a keyring file of hex public keys); the
journal keeps each input's exact bytes and signature headers, so
``identity.audit_verify`` re-checks them later with the same public keys.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from events import BudgetNodeDefined, ClockTicked
from events.factory import Inputs
from identity import keys
from identity.audit_verify import verify_journal
from streams import signing
from streams.client import Client
from tests.kafka import TICK_KEY, Live, unique_prefix, wait_until

pytestmark = pytest.mark.kafka

CLUSTER = "id-sig"
ADMIN = "admin-secret"


@pytest.fixture(scope="module")
def live(kafka: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    ring = tmp_path_factory.mktemp("keys") / "keyring.toml"
    # The auditor's keyring: the admin's and the ticker's public keys (ticks are signed inputs too).
    ring.write_text(f'[keys]\nadmin = "{keys.public_hex(keys.public_of(ADMIN.encode()))}"\n'
                    f'"allot.ticker" = "{keys.public_hex(keys.public_of(TICK_KEY.encode()))}"\n')
    lv = Live(kafka, unique_prefix()).start()
    lv.keyring_path = ring  # type: ignore[attr-defined]
    lv.start_worker((CLUSTER,), time_scale=20.0, tick_interval_s=0.25,
                    keyring_file=str(ring), require_signatures=True, admin_principal="admin")
    try:
        yield lv
    finally:
        lv.close()


def test_signed_inputs_are_journaled_with_their_signature_and_verify_later(live: Live) -> None:
    live.wait_event(CLUSTER, lambda e: isinstance(e, ClockTicked), what="the first tick")
    mk = Inputs(cluster=CLUSTER, prefix="admin:sig-")  # ids are per signer: '<signer>:...'
    now = int(time.time())
    good = mk.node("lab", managers=("admin",), at=now)
    live.send(good, sign_as=("admin", ADMIN))
    forged = mk.node("lab/forged", at=now)
    live.send(forged, sign_as=("admin", "not-the-admin-key"))
    unsigned = mk.node("lab/unsigned", at=now)
    live.send(unsigned)
    live.wait_event(CLUSTER, lambda e: isinstance(e, BudgetNodeDefined) and e.id == good.id,
                    what="the signed node")

    def refused() -> list[str] | None:
        found = sorted(d.detail.split(":")[0] for d in live.dead_letters()
                       if d.reason == "unauthenticated")
        return found if len(found) >= 2 else None  # both, not the first to arrive

    dead = wait_until(refused, what="two dead letters")
    assert dead == [signing.BAD_SIGNATURE, signing.UNSIGNED]
    kept = {e.id for e in live.events(CLUSTER)}
    assert forged.id not in kept and unsigned.id not in kept

    ring = signing.Keyring.from_file(Path(live.keyring_path))  # type: ignore[attr-defined]
    report = live.bg.run(verify_journal(live.bootstrap, ring, live.prefix))
    assert report.failed == 0 and report.verified >= 1
    assert report.by_signer.get("admin") == 1
    # Another auditor's keyring with a different admin key: the same journal fails to verify.
    assert report.ok and report.forged == 0 and report.sealed == report.records
    other = ring.with_key("admin", keys.public_of(b"someone-else"))
    bad = live.bg.run(verify_journal(live.bootstrap, other, live.prefix))
    assert bad.failed >= 1 and not bad.ok
    # A keyring naming another worker key: no record of this journal is a worker's.
    stranger = ring.with_key("allot.ticker", keys.public_of(b"x"))
    none = live.bg.run(verify_journal(live.bootstrap, stranger, live.prefix))
    assert none.forged == none.records > 0 and none.sealed == 0 and not none.ok


def test_batch_signed_inputs_are_journaled_with_their_proofs_and_verify_later(live: Live) -> None:
    """``Client.publish_many`` signs one principal's inputs with one signature (a Merkle root)."""
    live.wait_event(CLUSTER, lambda e: isinstance(e, ClockTicked), what="the first tick")
    ring = signing.Keyring.from_file(Path(live.keyring_path))  # type: ignore[attr-defined]
    before = live.bg.run(verify_journal(live.bootstrap, ring, live.prefix))
    mk = Inputs(cluster=CLUSTER, prefix="batch-")
    now = int(time.time())
    nodes = [mk.node("blab", managers=("admin",), at=now),
             *(mk.node(f"blab/t{i}", at=now) for i in range(4))]

    async def publish() -> list[str]:
        async with Client(live.bootstrap, live.prefix, signer=("admin", ADMIN.encode()),
                          client_id="batch-test") as c:
            return [p.id for p in await c.publish_many(nodes)]

    ids = live.bg.run(publish())
    assert all(i.startswith("admin:") for i in ids)
    for i in ids:
        live.wait_event(CLUSTER, lambda e, i=i: isinstance(e, BudgetNodeDefined) and e.id == i,
                        what=f"the batch-signed node {i}")
    # Re-verified from the journal: the proofs were journaled with the signature headers
    # (without them a root's signature is no signature of the value, and the check fails).
    after = live.bg.run(verify_journal(live.bootstrap, ring, live.prefix))
    assert after.failed == 0 and after.ok
    assert after.verified - before.verified >= len(nodes)
    assert after.by_signer.get("admin", 0) - before.by_signer.get("admin", 0) == len(nodes)
    other = ring.with_key("admin", keys.public_of(b"someone-else"))
    bad = live.bg.run(verify_journal(live.bootstrap, other, live.prefix))
    assert bad.failed >= len(nodes) and not bad.ok
