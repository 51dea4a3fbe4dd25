"""What proving identity costs per input: the processor's check, signed and authorised against unsigned.

The same 5,000 ``workload.submitted`` records (one producer per team, 50
registered principals) go through ``streams.processor.Processor.check`` in
one process, alternating passes so machine noise hits both alike:

- **unsigned**: a worker with ``--insecure-dev`` (decode, cluster, key and
  partition checks only);
- **signed**: the default worker: the Ed25519 verification of each record's
  signature against the key registered on the log, the revocation check,
  the id's namespace and the role table (``identity.authorisation``).

Also the producer's side: one Ed25519 signature (``allot sign``, the client).
The engine's own work per input (validation, fold) is the same in both and
not part of this figure.

And the journal's seals (``identity.journal_seal``), per journal record: the
worker signing what it journals together (one Ed25519 signature per chunk of
up to 32 records; a lone record, an input and its decision, and a full chunk),
and a reader (the restarted worker's fold, the export, ``allot audit verify``)
checking them with the public key; beside the version-1 HMAC seal they
replace (which only the workers could check).

Times are CPU time of the process (``time.process_time``), so a loaded
machine's waiting is not counted; the median over passes.

    python -m benchmarks.bench_identity            # ~10 s
    python -m benchmarks.bench_identity --records 20000 --passes 7
"""

from __future__ import annotations

import argparse
import statistics
import time

from benchmarks.common import machine
from events import BudgetNodeDefined, PrincipalRegistered, WorkloadSubmitted, encode
from identity import keys
from scheduler import Engine
from streams.processor import InboxRecord, Processor
from streams.signing import Keyring, sign_headers

CLUSTER = "bench"
TARGET_US = 200.0  # per input, signed: well under the worker's ~700 us per input at 1.3k/s


def _setup(n_principals: int) -> tuple[Engine, dict[str, bytes]]:
    engine = Engine(CLUSTER)
    secrets = {f"user{i}": f"bench-key-{i}".encode() for i in range(n_principals)}
    def fold(e: object) -> None:
        out = engine.process(e)  # type: ignore[arg-type]
        assert out is not None and not out, out

    fold(BudgetNodeDefined(id="admin:root", at=0, cluster=CLUSTER, actor="admin", path="lab",
                           managers=("admin",)))
    for seq, (name, secret) in enumerate(secrets.items(), 1):
        pub = keys.public_of(secret)
        fold(PrincipalRegistered(id=f"admin:reg-{seq}", at=0, cluster=CLUSTER, actor="admin",
                                 principal=name, public_key=keys.public_hex(pub),
                                 key_id=keys.key_id(pub), roles=("researcher",)))
        fold(BudgetNodeDefined(id=f"admin:node-{seq}", at=0, cluster=CLUSTER, actor="admin",
                               path=f"lab/{name}"))
    return engine, secrets


def _records(secrets: dict[str, bytes], n: int, signed: bool) -> list[InboxRecord]:
    names = sorted(secrets)
    out = []
    for i in range(n):
        who = names[i % len(names)]
        e = WorkloadSubmitted(id=f"{who}:w{i}", at=0, cluster=CLUSTER, actor=who, source="bench",
                              workload=f"w{i}", budget=f"lab/{who}", user=who, gpus=1,
                              min_runtime_s=0)
        value = encode(e)
        headers = tuple(sign_headers(value, who, secrets[who])) if signed else ()
        out.append(InboxRecord(topic="allot.inbox", partition=0, offset=i, key=CLUSTER.encode(),
                               value=value, headers=headers))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=5000)
    ap.add_argument("--principals", type=int, default=50)
    ap.add_argument("--passes", type=int, default=5)
    args = ap.parse_args()
    engine, secrets = _setup(args.principals)
    engines = {CLUSTER: engine}
    ring = Keyring({"admin": keys.public_of(b"admin")})
    common = dict(clusters=(CLUSTER,), partition_of=lambda _c: 0, keyring=ring,
                  ticker_principal="allot.ticker", admins=("admin",))
    insecure = Processor(require_signatures=False, **common)  # type: ignore[arg-type]
    secure = Processor(require_signatures=True, **common)  # type: ignore[arg-type]
    plain = _records(secrets, args.records, signed=False)
    signed = _records(secrets, args.records, signed=True)
    # Every signed record passes (a benchmark of refusals would measure something else).
    assert all(not hasattr(secure.check(r, engines), "letter") for r in signed[:200])
    times: dict[str, list[float]] = {"unsigned": [], "signed": []}
    for _ in range(args.passes):
        for name, proc, recs in (("unsigned", insecure, plain), ("signed", secure, signed)):
            t0 = time.process_time()
            for r in recs:
                proc.check(r, engines)
            times[name].append((time.process_time() - t0) / len(recs) * 1e6)
    value = plain[0].value or b""
    t0 = time.process_time()
    for _ in range(2000):
        keys.sign(value, secrets["user0"])
    sign_us = (time.process_time() - t0) / 2000 * 1e6
    seals = _seal_costs(plain, args.passes)
    u, s = statistics.median(times["unsigned"]), statistics.median(times["signed"])
    print(f"machine: {machine()}")
    print(f"{args.records:,} submits, {args.principals} principals, {args.passes} passes (median)")
    print(f"  unsigned (--insecure-dev) check: {u:7.1f} us/input")
    print(f"  signed + authorised check:       {s:7.1f} us/input  (+{s - u:.1f} us, "
          f"{s / u:.1f}x; target < {TARGET_US:.0f} us)")
    print(f"  producer: one Ed25519 signature  {sign_us:7.1f} us")
    print("journal seals, per record (median):")
    for name, us in seals.items():
        print(f"  {name:<38} {us:7.1f} us")
    print(f"verification per input, signed: {s - u + seals['check, chunks of 32']:.1f} us "
          f"(its signature and role check, and its journal record's seal)")


def _seal_costs(recs: list[InboxRecord], passes: int) -> dict[str, float]:
    """us per journal record: sealing batches of 1, 2 and 32 records, checking chunks of 1 and 32."""
    from identity.journal_seal import CHUNK, SealCheck, seal, seal_records, worker_public_key

    secret = b"bench tick key"
    values = [r.value or b"" for r in recs]
    rows = [("input", "owner-token", i, v) for i, v in enumerate(values)]
    out: dict[str, list[float]] = {}

    def timed(name: str, fn: object, n: int) -> None:
        t0 = time.process_time()
        fn()  # type: ignore[operator]
        out.setdefault(name, []).append((time.process_time() - t0) / n * 1e6)

    for _ in range(passes):
        for size in (1, 2, CHUNK):
            timed(f"seal, batches of {size}",
                  lambda size=size: [seal_records(secret, 0, rows[i:i + size])
                                     for i in range(0, len(rows), size)], len(rows))
        timed("v1 HMAC seal (before)",
              lambda: [seal(secret, 0, k, o, i, v) for k, o, i, v in rows], len(rows))
        for size in (1, CHUNK):
            sealed = [h for i in range(0, len(rows), size)
                      for h in seal_records(secret, 0, rows[i:i + size])]
            check = SealCheck([worker_public_key(secret)])   # a fresh reader: nothing cached
            timed(f"check, chunks of {size}",
                  lambda sealed=sealed, check=check: [check(0, k, o, i, v, h[1]) for (k, o, i, v), h
                                                      in zip(rows, sealed, strict=True)],
                  len(rows))
    return {k: statistics.median(v) for k, v in out.items()}


if __name__ == "__main__":
    main()
