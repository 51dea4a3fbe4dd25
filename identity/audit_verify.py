"""``allot audit verify``: re-check every journal record's worker seal and every input's signature.

Two signatures stand behind each journaled input, and both are public-key
(Ed25519), so an auditor re-checks them with public keys only, no secret:

- the **worker's seal** on every journal record (``identity.journal_seal``:
  inputs, decisions, claims), against the workers' public key: the keyring's
  ticker entry (``allot.ticker``), and retired worker keys kept as
  ``allot.ticker@<label>``. A record no worker signed is counted ``forged``
  and left out of the fold, as the restarted worker leaves it out;
- the **producer's signature** of each input: the worker journals the exact
  inbox bytes with the producer's headers (``allot-signer``, ``allot-key-id``,
  ``allot-signature``, and ``allot-batch-proof`` for a batch-signed input: the
  record is checked alone, against the root its proof leads to). The journal is folded as it is read, so each input
  meets the principal registry (keys, rotations, revocations, roles) as it was
  when the worker took it: an input signed by a key revoked *later* still
  verifies; the same ``streams.processor.Processor.check`` the worker ran says
  whether it was authentic (and, with ``--require-signatures``, authorised).

A keyring file of the configured public keys (``[keys] principal = "<hex>"``:
the ticker, the first admin) is all an auditor needs; registered principals'
keys come from the journal itself. The journal is read live from Kafka, or
from an archive directory (``--archive DIR``, what ``allot archive`` wrote:
exact values and headers). Only the records the reader's fence admits count.
Exit status 0: everything verified; 1: some record or input did not (forged,
failed, unsigned, or sealed in a way only the workers' secret checks); 2: error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import msgspec

from events import ClockTicked, MalformedEvent, decode
from events.errors import AllotError
from identity.journal_seal import SealCheck, SealGate, trusted_keys
from streams import signing
from streams.journal import end_offset, journal_record, read_to_end, reader
from streams.processor import Dead, InboxRecord, PartitionFold, Processor
from streams.records import (
    JOURNAL,
    KIND_INPUT,
    BadJournalRecord,
    Headers,
    JournalRecord,
    parse_journal,
    topic,
)

MAX_FAILURES = 20


class VerifyError(AllotError):
    """The check could not run (no worker key to check seals with, no archive)."""


class VerifyReport(msgspec.Struct, kw_only=True):
    """What the check found: records by seal, inputs by outcome, and the first failures."""

    source: str = ""
    records: int = 0
    # Worker seals of every journal record.
    sealed: int = 0          # the seal verifies under a trusted worker key
    forged: int = 0          # no worker signed it (left out of the fold)
    legacy: int = 0          # a v1 (HMAC) seal: only the workers' secret checks it
    unsealed: int = 0        # written before seals (or with journal_seals off)
    worker_keys: list[str] = msgspec.field(default_factory=list)
    # Producer signatures of the journaled inputs (the fence's admitted ones).
    inputs: int = 0
    verified: int = 0
    unsigned: int = 0
    failed: int = 0
    by_signer: dict[str, int] = msgspec.field(default_factory=dict)
    failures: list[str] = msgspec.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.forged or self.failed or self.legacy or self.unsealed)


class _Partition:
    """One partition's check: records in offset order through the seal gate, fence and fold."""

    def __init__(self, p: int, keyring: signing.Keyring, seals: SealCheck, report: VerifyReport,
                 signers: Counter[str], *, admins: tuple[str, ...], ticker: str,
                 authorise: bool) -> None:
        self.p = p
        self.gate = SealGate(seals)
        self.fold = PartitionFold(p)
        self.proc = Processor(clusters=(), partition_of=lambda _c: p, keyring=keyring,
                              ticker_principal=ticker, require_signatures=authorise,
                              admins=admins, authorise=authorise)
        self.report = report
        self.signers = signers

    def add(self, rec: JournalRecord, headers: Headers | None) -> None:
        report = self.report
        report.records += 1
        if not self.gate.admit(self.p, rec.kind, rec.owner, rec.inbox_offset, rec.value,
                               rec.seal):
            _fail(report, f"journal {self.p}:{rec.offset}: forged: the {rec.kind} record's "
                          f"seal is no trusted worker's" if rec.seal is not None else
                          f"journal {self.p}:{rec.offset}: forged: an unsealed {rec.kind} record "
                          f"after sealed ones")
            return
        fold = self.fold
        # An input counts when written under the latest claim (the fence).
        if rec.kind == KIND_INPUT and fold.fence.token is not None \
                and rec.owner == fold.fence.token:
            _check_input(rec, headers, self.p, fold, self.proc, report, self.signers)
        fold.add(rec)

    def close(self) -> None:
        g, r = self.gate, self.report
        r.sealed += g.verified
        r.forged += g.forged
        r.legacy += g.legacy
        r.unsealed += g.unsealed_before


def _fail(report: VerifyReport, line: str) -> None:
    if len(report.failures) < MAX_FAILURES:
        report.failures.append(line)


def worker_seals(keyring: signing.Keyring, ticker: str) -> SealCheck:
    """The seal check an auditor runs: the keyring's worker keys (VerifyError when none)."""
    trusted = trusted_keys(keyring, ticker)
    if not trusted:
        raise VerifyError(f"the keyring has no key of {ticker!r} (the workers' public key, "
                          f"which every journal seal is checked against)")
    return SealCheck(trusted)


async def verify_journal(bootstrap: str, keyring: signing.Keyring, prefix: str = "",
                         fetch_wait_ms: int = 200, *, admins: tuple[str, ...] = (),
                         ticker: str = "allot.ticker", authorise: bool = False) -> VerifyReport:
    """Re-check the journal on ``bootstrap``: every record's seal, every admitted input's signer.

    ``authorise``: also re-run the role check (``identity.authorisation``), as a
    worker with ``require_signatures`` did, with ``admins`` as its first admins.
    """
    seals = worker_seals(keyring, ticker)
    journal = topic(JOURNAL, prefix)
    report = VerifyReport(source=f"{bootstrap} {journal}",
                          worker_keys=sorted(seals.trusted))
    signers: Counter[str] = Counter()
    consumer = reader(bootstrap, fetch_wait_ms, "allot-audit-verify")
    await consumer.start()
    try:
        await consumer.topics()
        for p in sorted(consumer.partitions_for_topic(journal) or ()):
            if await end_offset(consumer, journal, p) <= 0:
                continue
            part = _Partition(p, keyring, seals, report, signers, admins=admins, ticker=ticker,
                              authorise=authorise)
            async for batch in read_to_end(consumer, journal, p):
                for msg in batch:
                    try:
                        rec = journal_record(msg)
                    except BadJournalRecord:
                        report.records += 1
                        continue
                    part.add(rec, msg.headers)
            part.close()
    finally:
        await consumer.stop()
    report.by_signer = dict(sorted(signers.items()))
    return report


def archived_records(root: str | Path) -> Iterable[tuple[int, Iterable[tuple[int, bytes,
                                                                              Headers]]]]:
    """Per archived partition, its records (offset, value, headers) in offset order."""
    from archive.events import is_archive, partition_batches
    from archive.manifest import Manifest

    root = Path(root)
    if not is_archive(root):
        raise VerifyError(f"{root}: not an archive (no manifest)")
    manifest = Manifest(root)

    def records(p: int) -> Iterator[tuple[int, bytes, Headers]]:
        # One committed batch at a time: a whole partition of a large journal is
        # more than a ``binary`` column can address (2 GiB), and more than memory.
        for table in partition_batches(root, manifest, p, ["offset", "value", "headers"]):
            offsets = table.column("offset").to_pylist()
            values = table.column("value").to_pylist()
            headers = table.column("headers").to_pylist()
            for i in range(len(offsets)):
                yield offsets[i], values[i] or b"", [(h["key"], h["value"]) for h in headers[i]]

    for p in manifest.partitions():
        yield p, records(p)


def verify_archive(root: str | Path, keyring: signing.Keyring, *, admins: tuple[str, ...] = (),
                   ticker: str = "allot.ticker", authorise: bool = False) -> VerifyReport:
    """``verify_journal`` over an archive directory (exact values and headers)."""
    seals = worker_seals(keyring, ticker)
    report = VerifyReport(source=str(root), worker_keys=sorted(seals.trusted))
    signers: Counter[str] = Counter()
    for p, records in archived_records(root):
        part = _Partition(p, keyring, seals, report, signers, admins=admins, ticker=ticker,
                          authorise=authorise)
        for offset, value, headers in records:
            try:
                rec = parse_journal(p, offset, value, headers)
            except BadJournalRecord:
                report.records += 1
                continue
            part.add(rec, headers)
        part.close()
    report.by_signer = dict(sorted(signers.items()))
    return report


def archive_seals(root: str | Path, seals: SealCheck) -> VerifyReport:
    """The worker seals of an archive's records only (what ``allot audit load`` checks)."""
    report = VerifyReport(source=str(root), worker_keys=sorted(seals.trusted))
    for p, records in archived_records(root):
        gate = SealGate(seals)
        for offset, value, headers in records:
            report.records += 1
            try:
                rec = parse_journal(p, offset, value, headers)
            except BadJournalRecord:
                continue
            if not gate.admit(p, rec.kind, rec.owner, rec.inbox_offset, rec.value, rec.seal):
                _fail(report, f"{p}:{offset}")
        report.sealed += gate.verified
        report.forged += gate.forged
        report.legacy += gate.legacy
        report.unsealed += gate.unsealed_before
    return report


def _check_input(rec: JournalRecord, headers: Headers | None, p: int, fold: PartitionFold,
                 proc: Processor, report: VerifyReport, signers: Counter[str]) -> None:
    report.inputs += 1
    try:
        event = decode(rec.value)
    except MalformedEvent:
        return  # the fold counts it as unreadable
    engine = fold.engine_now(event.cluster)
    registry = engine.state.principals if engine is not None else None
    verdict = signing.verify(rec.value, headers, proc.keyring, registry)
    if verdict.problem == signing.UNSIGNED and not proc.require_signatures:
        report.unsigned += 1
        return
    if type(event) is ClockTicked and verdict.problem == signing.UNSIGNED:
        # The worker journals its first tick itself (not through the inbox): unsigned.
        report.unsigned += 1
        return
    proc.clusters = proc.clusters | {event.cluster}
    out = proc.check(InboxRecord(topic="journal", partition=p, offset=rec.offset,
                                 key=event.cluster.encode(), value=rec.value,
                                 headers=tuple(headers or ())),
                     {event.cluster: engine} if engine is not None else {})
    if isinstance(out, Dead):
        report.failed += 1
        _fail(report, f"journal {p}:{rec.offset}: {out.letter.reason}: "
                      f"{out.letter.detail[:160]}")
        return
    if verdict.signer is None:
        report.unsigned += 1
        return
    report.verified += 1
    signers[verdict.signer] += 1


def add_parser(audit_sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register ``allot audit verify`` beside the audit's other subcommands."""
    p = audit_sub.add_parser(
        "verify", help="re-check every journal record's worker seal and every input's signature",
        description="Read the journal (live from Kafka, or an archive directory with --archive) "
                    "and re-check, with public keys only: every record's worker seal (Ed25519, "
                    "against the keyring's allot.ticker key and retired ones named "
                    "allot.ticker@LABEL), and every journaled input's producer signature "
                    "(kept in its headers) against the keys registered on the log so far and "
                    "the keyring; with --require-signatures also its signer's roles. Exit "
                    "status 0: everything verifies; 1: some record or input does not (forged, "
                    "failed, unsigned, or sealed with a v1 seal only the workers' secret "
                    "checks); 2: error.")
    p.add_argument("source", nargs="?", metavar="DIR",
                   help="an archive directory (the same as --archive DIR)")
    p.add_argument("--archive", metavar="DIR",
                   help="verify an archive directory (allot archive) instead of the live journal")
    p.add_argument("--bootstrap", default="127.0.0.1:9092", help="Kafka bootstrap address")
    p.add_argument("--topic-prefix", default="", help="the deployment's topic prefix")
    p.add_argument("--keyring", required=True, metavar="FILE",
                   help='TOML [keys] principal = "<public key hex>" (the ticker, the first admin)')
    p.add_argument("--admin", action="append", default=[], metavar="PRINCIPAL",
                   help="a configured first admin (the worker's admin_principal; repeatable)")
    p.add_argument("--ticker", default="allot.ticker",
                   help="the ticker's principal (its key seals the journal)")
    p.add_argument("--require-signatures", action="store_true",
                   help="as the worker does by default: an unsigned input fails, and every "
                        "signed one must be authorised by its signer's roles")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    try:
        ring = signing.Keyring.from_file(args.keyring)
        common: dict[str, Any] = {"admins": tuple(args.admin), "ticker": args.ticker,
                                  "authorise": args.require_signatures}
        archive = args.archive or args.source
        if archive and not Path(archive).is_dir():
            raise VerifyError(f"{archive}: not a directory; a JSON-lines log (allot journal "
                              f"export) keeps no headers, so no signature in it can be checked: "
                              f"verify the live journal (--bootstrap) or its archive")
        if archive:
            report = verify_archive(archive, ring, **common)
        else:
            report = asyncio.run(verify_journal(args.bootstrap, ring, args.topic_prefix,
                                                **common))
    except (AllotError, OSError) as exc:
        print(f"allot audit verify: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({**msgspec.to_builtins(report), "ok": report.ok}, indent=2))
    else:
        print(f"{report.source}: {report.records:,} journal records: {report.sealed:,} sealed "
              f"by a worker, {report.forged:,} FORGED (no worker signed them), "
              f"{report.legacy:,} with v1 seals (not publicly verifiable), "
              f"{report.unsealed:,} unsealed (before seals)")
        print(f"{report.inputs:,} journaled inputs: {report.verified:,} verified, "
              f"{report.unsigned:,} unsigned, {report.failed:,} failed")
        for who, n in report.by_signer.items():
            print(f"  {who}: {n:,}")
        for line in report.failures:
            print(f"  {line}")
        print("verified" if report.ok else "NOT verified")
    return 0 if report.ok else 1
