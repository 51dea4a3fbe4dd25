"""``allot audit verify``: re-run the worker's identity check on every journaled input.

The worker journals each accepted input as its exact inbox bytes together with
the producer's signature headers (``allot-signer``, ``allot-key-id``,
``allot-signature``), so the check it made can be made again later by anyone
holding public keys, with no secret. The journal is folded as it is read, so
each input meets the principal registry (keys, rotations, revocations, roles)
as it was when the worker took it: an input signed by a key revoked *later*
still verifies; the same ``streams.processor.Processor.check`` the worker ran
says whether it was authentic and authorised. A keyring file of the
configured public keys (``[keys] principal = "<hex>"``: the ticker, the first
admin) is all an auditor needs; registered principals' keys come from the
journal itself. Only the records the reader's fence admits count.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections import Counter

import msgspec

from events import ClockTicked, MalformedEvent, decode
from events.errors import AllotError
from streams import signing
from streams.journal import end_offset, journal_record, read_to_end, reader
from streams.processor import Dead, InboxRecord, PartitionFold, Processor
from streams.records import JOURNAL, KIND_INPUT, BadJournalRecord, topic


class VerifyReport(msgspec.Struct, kw_only=True):
    """What the check found: inputs by outcome, and the first few failures."""

    records: int = 0
    inputs: int = 0
    verified: int = 0
    unsigned: int = 0
    failed: int = 0
    by_signer: dict[str, int] = msgspec.field(default_factory=dict)
    failures: list[str] = msgspec.field(default_factory=list)


async def verify_journal(bootstrap: str, keyring: signing.Keyring, prefix: str = "",
                         fetch_wait_ms: int = 200, *, admins: tuple[str, ...] = (),
                         ticker: str = "allot.ticker", authorise: bool = False) -> VerifyReport:
    """Re-check every admitted journaled input on ``bootstrap`` against ``keyring`` and the log.

    ``authorise``: also re-run the role check (``identity.authorisation``), as a
    worker with ``require_signatures`` did, with ``admins`` as its first admins.
    """
    journal = topic(JOURNAL, prefix)
    report = VerifyReport()
    signers: Counter[str] = Counter()
    consumer = reader(bootstrap, fetch_wait_ms, "allot-audit-verify")
    await consumer.start()
    try:
        await consumer.topics()
        for p in sorted(consumer.partitions_for_topic(journal) or ()):
            if await end_offset(consumer, journal, p) <= 0:
                continue
            fold = PartitionFold(p)
            proc = Processor(clusters=(), partition_of=lambda _c, _p=p: _p, keyring=keyring,
                             ticker_principal=ticker, require_signatures=authorise,
                             admins=admins, authorise=authorise)
            async for batch in read_to_end(consumer, journal, p):
                for msg in batch:
                    report.records += 1
                    try:
                        rec = journal_record(msg)
                    except BadJournalRecord:
                        continue
                    # An input counts when written under the latest claim (the fence).
                    if rec.kind == KIND_INPUT and fold.fence.token is not None \
                            and rec.owner == fold.fence.token:
                        _check(rec, msg.headers, p, fold, proc, report, signers)
                    fold.add(rec)
    finally:
        await consumer.stop()
    report.by_signer = dict(sorted(signers.items()))
    return report


def _check(rec, headers, p: int, fold: PartitionFold, proc: Processor, report: VerifyReport,
           signers: Counter[str]) -> None:
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
        if len(report.failures) < 20:
            report.failures.append(f"journal {p}:{rec.offset}: {out.letter.reason}: "
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
        "verify", help="re-check the signature (and roles) of every journaled input",
        description="Read the live journal and re-run the worker's identity check on each "
                    "journaled input: its Ed25519 signature (kept in its headers) against the "
                    "keys registered on the log so far and a keyring of configured public "
                    "keys, and with --require-signatures its signer's roles. Exit status 0: "
                    "every input passes; 1: some do not; 2: error.")
    p.add_argument("--bootstrap", default="127.0.0.1:9092", help="Kafka bootstrap address")
    p.add_argument("--topic-prefix", default="", help="the deployment's topic prefix")
    p.add_argument("--keyring", required=True, metavar="FILE",
                   help='TOML [keys] principal = "<public key hex>" (the ticker, the first admin)')
    p.add_argument("--admin", action="append", default=[], metavar="PRINCIPAL",
                   help="a configured first admin (the worker's admin_principal; repeatable)")
    p.add_argument("--ticker", default="allot.ticker", help="the ticker's principal")
    p.add_argument("--require-signatures", action="store_true",
                   help="as the worker does by default: an unsigned input fails, and every "
                        "signed one must be authorised by its signer's roles")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    try:
        ring = signing.Keyring.from_file(args.keyring)
        report = asyncio.run(verify_journal(args.bootstrap, ring, args.topic_prefix,
                                            admins=tuple(args.admin), ticker=args.ticker,
                                            authorise=args.require_signatures))
    except (AllotError, OSError) as exc:
        print(f"allot audit verify: {exc}", file=sys.stderr)
        return 2
    bad = report.failed
    if args.json:
        print(json.dumps(msgspec.to_builtins(report), indent=2))
    else:
        print(f"{report.inputs:,} journaled inputs: {report.verified:,} verified, "
              f"{report.unsigned:,} unsigned, {report.failed:,} failed")
        for who, n in report.by_signer.items():
            print(f"  {who}: {n:,}")
        for line in report.failures:
            print(f"  {line}")
    return 1 if bad else 0
