"""``allot audit verify``: re-check the producer's signature of every journaled input.

The worker journals each accepted input as its exact inbox bytes together with
the producer's signature headers (``allot-signer``, ``allot-key-id``,
``allot-signature``), so the signature can be checked again later by anyone
holding the public keys, with no secret: a keyring file of public keys
(``[keys] principal = "<hex>"``) is all an auditor needs. Only the records the
reader's fence admits count (a fenced-off owner's writes are not the journal).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections import Counter

import msgspec

from events.errors import AllotError
from streams import signing
from streams.journal import end_offset, journal_record, read_to_end, reader
from streams.records import JOURNAL, KIND_INPUT, BadJournalRecord, Fence, topic


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
                         fetch_wait_ms: int = 200) -> VerifyReport:
    """Verify every admitted journaled input's signature on ``bootstrap`` against ``keyring``."""
    journal = topic(JOURNAL, prefix)
    report = VerifyReport()
    signers: Counter[str] = Counter()
    consumer = reader(bootstrap, fetch_wait_ms, "allot-audit-verify")
    await consumer.start()
    try:
        await consumer.topics()
        for p in sorted(consumer.partitions_for_topic(journal) or ()):
            fence = Fence()
            if await end_offset(consumer, journal, p) <= 0:
                continue
            async for batch in read_to_end(consumer, journal, p):
                for msg in batch:
                    report.records += 1
                    try:
                        rec = journal_record(msg)
                    except BadJournalRecord:
                        continue
                    if not fence.admit(rec) or rec.kind != KIND_INPUT:
                        continue
                    report.inputs += 1
                    verdict = signing.verify(rec.value, msg.headers, keyring)
                    if verdict.problem == signing.UNSIGNED:
                        report.unsigned += 1
                    elif verdict.problem is not None:
                        report.failed += 1
                        if len(report.failures) < 20:
                            report.failures.append(f"journal {p}:{rec.offset}: {verdict.problem}")
                    else:
                        report.verified += 1
                        signers[verdict.signer or ""] += 1
    finally:
        await consumer.stop()
    report.by_signer = dict(sorted(signers.items()))
    return report


def add_parser(audit_sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register ``allot audit verify`` beside the audit's other subcommands."""
    p = audit_sub.add_parser(
        "verify", help="re-check the producer's signature of every journaled input",
        description="Read the live journal and verify each journaled input's Ed25519 "
                    "signature (kept in its headers) against a keyring of public keys. "
                    "Exit status 0: every signed input verifies (and, with "
                    "--require-signatures, none is unsigned); 1: some do not; 2: error.")
    p.add_argument("--bootstrap", default="127.0.0.1:9092", help="Kafka bootstrap address")
    p.add_argument("--topic-prefix", default="", help="the deployment's topic prefix")
    p.add_argument("--keyring", required=True, metavar="FILE",
                   help='TOML [keys] principal = "<public key hex>"')
    p.add_argument("--require-signatures", action="store_true",
                   help="count an unsigned journaled input as a failure")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    try:
        ring = signing.Keyring.from_file(args.keyring)
        report = asyncio.run(verify_journal(args.bootstrap, ring, args.topic_prefix))
    except (AllotError, OSError) as exc:
        print(f"allot audit verify: {exc}", file=sys.stderr)
        return 2
    bad = report.failed + (report.unsigned if args.require_signatures else 0)
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
