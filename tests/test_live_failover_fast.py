"""Fast takeover (streams/liveness.py): all partitions of a killed or frozen owner move within 5 s.

Two workers, four clusters on four partitions, inputs streaming in, as in
tests/test_live_failover.py (whose helpers these tests reuse). The fault is
kill -9 of one worker, or a SIGSTOP that freezes it in the middle of a batch.
Each test asserts that the other worker has claimed every partition of the
victim within 5 s of the fault (the consumer group alone takes 9-12 s on
Tansu: session timeout plus join), and afterwards the crash checker's
invariants on every partition: no inbox record lost, no input journaled twice,
duplicates exact, the replay check clean, the owner's state equal to a clean
fold. The frozen worker, resumed, finds itself fenced: what it wrote after the
takeover counts for no reader.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kafka import Live, unique_prefix, wait_until
from tests.test_live_failover import (
    PARTITIONS,
    Feed,
    pair,
    settle,
    stopped,
    verify,
    worker_of,
)
from tests.worker_faults import faulty_worker

pytestmark = pytest.mark.kafka

TARGET_S = 5.0


@pytest.fixture
def live(kafka: str) -> Iterator[Live]:
    lv = Live(kafka, unique_prefix(), partitions=PARTITIONS, watch_inbox=True).start()
    try:
        yield lv
    finally:
        lv.close()


def _held_by(live: Live, names: dict[str, str], victim: str) -> set[int]:
    return {p for p, w in worker_of(live, names).items() if w == victim}


def _taken(live: Live, names: dict[str, str], partitions: set[int], survivor: str) -> bool:
    owners = worker_of(live, names)
    return all(owners.get(p) == survivor for p in partitions)


def test_a_killed_owners_partitions_move_within_5_s(live: Live, kafka: str,
                                                    tmp_path: Path) -> None:
    procs, ports = pair(live, kafka, tmp_path)
    names = {n: n for n in procs}
    try:
        feed = Feed(live)
        feed.setup()
        feed.start()
        time.sleep(1.5)
        victim = worker_of(live, names)[0]
        survivor = "wb" if victim == "wa" else "wa"
        held = _held_by(live, names, victim)
        assert held, "the victim holds nothing"
        t_kill = time.monotonic()
        procs[victim].kill()
        wait_until(lambda: _taken(live, names, held, survivor), 30, interval=0.02,
                   what="the survivor to claim the victim's partitions")
        takeover = time.monotonic() - t_kill
        print(f"takeover after kill -9: {takeover:.2f} s of partitions {sorted(held)}")
        assert takeover <= TARGET_S, f"takeover took {takeover:.1f} s"
        assert "liveness.takeover" in procs[survivor].log_text()
        time.sleep(1.0)
        feed.finish()
        owners_now = settle(live, {survivor}, quiet_s=3.0)
        totals = verify(live, ports, owners_now)
        assert totals["inputs"] >= feed.sent
    finally:
        for p in procs.values():
            p.kill()


@pytest.mark.parametrize("hold_s", [0.0, 7.0], ids=["resumed-at-once", "past-session-timeout"])
def test_a_frozen_owners_partitions_move_within_5_s_and_it_is_fenced(
        live: Live, kafka: str, tmp_path: Path, hold_s: float) -> None:
    """Resumed at once, it is still a member of the group and claims its partitions back;
    resumed after its session timeout, the group has moved them too (the slow path on top)."""
    # "wa" freezes itself (SIGSTOP) in the middle of a batch, after its 300th journal record:
    # it holds a half-written batch while "wb" takes its partitions over.
    procs, ports = pair(live, kafka, tmp_path, argv={"wa": faulty_worker(stop_after_sends=300)})
    names = {n: n for n in procs}
    try:
        feed = Feed(live, rate_per_cluster=40.0)
        feed.setup()
        held = _held_by(live, names, "wa")
        feed.start()
        wait_until(lambda: stopped(procs["wa"].pid), 60, interval=0.02,
                   what="wa to freeze itself mid-batch")
        t_freeze = time.monotonic()
        held = _held_by(live, names, "wa") or held
        wait_until(lambda: _taken(live, names, held, "wb"), 30, interval=0.02,
                   what="wb to claim wa's partitions")
        takeover = time.monotonic() - t_freeze
        print(f"takeover of a frozen owner: {takeover:.2f} s of partitions {sorted(held)}")
        assert takeover <= TARGET_S, f"takeover took {takeover:.1f} s"
        time.sleep(max(0.0, hold_s - (time.monotonic() - t_freeze)))
        procs["wa"].signal(signal.SIGCONT)
        # It wakes with the rest of a batch in hand and writes it under its old claim;
        # then the taker's beats show it a newer claim: it stops writing there.
        wait_until(lambda: "partition.fenced" in procs["wa"].log_text(), 20,
                   what="wa to find itself fenced")
        time.sleep(1.0)
        feed.finish()
        owners_now = settle(live, {"wa", "wb"}, quiet_s=3.0)
        totals = verify(live, ports, owners_now)
        assert totals["fenced"] > 0, "wa wrote nothing after the takeover"
        assert totals["inputs"] >= feed.sent
        if hold_s == 0.0:
            # Still the group's member for them: it claimed its partitions back from the cover.
            assert "liveness.reclaim" in procs["wa"].log_text()
            assert "wa" in owners_now.values(), owners_now
    finally:
        for p in procs.values():
            p.signal(signal.SIGCONT)
            p.kill()


def test_a_claim_nobody_announced_is_found_in_the_gaps_and_a_forged_one_is_not(
        kafka: str) -> None:
    # A claimer may die right after its claim, before its first beat: the owner finds the
    # claim among the offsets between its own appends (its ticks) and stops writing there.
    # An unsealed claim (nobody of the group wrote it) fences nothing, as in every fold.
    from identity.journal_seal import seal
    from streams.records import KIND_CLAIM, Claim, encode_claim, journal_headers
    from tests.kafka import TICK_KEY

    lv = Live(kafka, unique_prefix(), partitions=PARTITIONS).start()
    try:
        cluster = "gap-a"
        w = lv.start_worker((cluster,), tick_interval_s=0.2)
        p = lv.partition_of(cluster)
        lv.wait_event(cluster, lambda e: True, what="the first tick")
        mine = lv.claims(p)[-1].token

        def claim(token: str, sealed: bool) -> int:
            value = encode_claim(Claim(token=token, worker="ghost", partition=p, at=time.time()))
            headers = journal_headers(KIND_CLAIM, token)
            if sealed:
                headers.append(seal(TICK_KEY.encode(), p, KIND_CLAIM, token, None, value))

            async def go() -> int:
                assert lv._producer is not None
                md = await lv._producer.send_and_wait(lv.journal_topic, value, key=b"claim",
                                                      partition=p, headers=headers)
                return int(md.offset)
            return lv.bg.run(go())

        claim("f" * 32, sealed=False)
        time.sleep(1.5)   # several ticks appended past the forged claim
        assert p in w.owned and w.owned[p].token == mine, "a forged claim fenced the owner"
        at = claim("e" * 32, sealed=True)
        wait_until(lambda: p not in w.owned, 5, what="the owner to find the claim in the gaps")
        time.sleep(1.0)
        late = [r for r in lv.raw(p) if r.offset > at and r.owner == mine]
        time.sleep(1.0)
        assert [r for r in lv.raw(p) if r.offset > at and r.owner == mine] == late, \
            "the fenced owner kept writing"
    finally:
        lv.close()


def test_a_beat_fences_only_when_sealed_by_the_group(kafka: str) -> None:
    # A beat naming a newer claim fences its reader: only the group's workers may write one.
    from identity.journal_seal import seal
    from streams.liveness import Beat, encode_beat
    from streams.worker import BEAT_SEAL_KIND, LIVENESS
    from tests.kafka import TICK_KEY

    lv = Live(kafka, unique_prefix(), partitions=PARTITIONS).start()
    try:
        cluster = "beat-a"
        w = lv.start_worker((cluster,), tick_interval_s=0.2)
        p = lv.partition_of(cluster)
        lv.wait_event(cluster, lambda e: True, what="the first tick")

        def beat(sealed: bool, seq: int) -> None:
            b = Beat(worker="ghost/1", name="ghost", seq=seq, at=time.time(),
                     held={p: 10**9}, fast=[])
            value = encode_beat(b)
            headers = [seal(TICK_KEY.encode(), 0, BEAT_SEAL_KIND, b.worker, None, value)] \
                if sealed else None

            async def go() -> None:
                assert lv._producer is not None
                await lv._producer.send_and_wait(lv.prefix + LIVENESS, value, partition=0,
                                                 headers=headers)
            lv.bg.run(go())

        beat(sealed=False, seq=1)
        time.sleep(1.5)
        assert p in w.owned, "an unsealed beat fenced the owner"
        beat(sealed=True, seq=2)
        wait_until(lambda: p not in w.owned, 5, what="the sealed beat to fence the owner")
    finally:
        lv.close()
