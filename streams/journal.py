"""Reading topics in bulk: one partition from an offset up to a known offset, or to its end.

Two facts about Tansu shape these helpers (docs/live.md has the measurements):
``end_offsets`` answers the last *batch's* base offset + 1, not the log end, so
nothing here reads "until end_offsets"; and a fetch is time-limited, so bulk
reads use a long fetch wait (``fold_fetch_wait_ms``). ``read_until`` stops at
an offset the caller knows exists (its own claim, a manifest's chunk);
``read_to_end`` stops once it has seen the record at ``end_offsets - 1`` (the
last batch's first record: the fetch that returns it returns the whole batch).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import ConsumerRecord

from events.errors import AllotError
from streams.config import kafka_client_options
from streams.records import JournalRecord, parse_journal


class ReadTimeout(AllotError):
    """A bulk read did not reach the offset it waited for in time."""


def reader(bootstrap: str, fetch_wait_ms: int = 200, client_id: str = "allot-reader",
           security: Mapping[str, Any] | None = None) -> AIOKafkaConsumer:
    """A consumer outside any group, for assign/seek reads of whole partitions.

    ``security``: the client's SASL options (``config.kafka_client_options``); by
    default read from the environment.
    """
    return AIOKafkaConsumer(
        **(kafka_client_options() if security is None else security),
        bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
        auto_offset_reset="earliest", fetch_max_wait_ms=fetch_wait_ms,
        max_partition_fetch_bytes=16 * 1024 * 1024, fetch_max_bytes=64 * 1024 * 1024,
        client_id=client_id)


async def read_until(consumer: AIOKafkaConsumer, topic: str, partition: int, start: int,
                     last: int, timeout_s: float = 60.0,
                     max_records: int = 50_000) -> AsyncIterator[list[ConsumerRecord]]:
    """Batches of records of ``topic``/``partition`` from ``start`` through offset ``last``.

    The record at ``last`` must exist (or a later one): the read ends when an
    offset >= ``last`` arrives. Records past ``last`` are not yielded.
    ``ReadTimeout`` when ``timeout_s`` passes without progress.
    """
    if last < start:
        return
    tp = TopicPartition(topic, partition)
    consumer.assign([tp])
    consumer.seek(tp, start)
    deadline = time.monotonic() + timeout_s
    while True:
        got = await consumer.getmany(tp, timeout_ms=1000, max_records=max_records)
        msgs = got.get(tp, [])
        if not msgs:
            if time.monotonic() > deadline:
                raise ReadTimeout(f"{topic}[{partition}]: no record up to offset {last} after "
                                  f"{timeout_s:.0f} s (read from {start})")
            continue
        deadline = time.monotonic() + timeout_s
        if msgs[-1].offset >= last:
            yield [m for m in msgs if start <= m.offset <= last]
            return
        yield [m for m in msgs if m.offset >= start]


async def end_offset(consumer: AIOKafkaConsumer, topic: str, partition: int) -> int:
    """``end_offsets`` of one partition (on Tansu: the last batch's base offset + 1)."""
    tp = TopicPartition(topic, partition)
    return int((await consumer.end_offsets([tp]))[tp])


async def begin_offset(consumer: AIOKafkaConsumer, topic: str, partition: int) -> int:
    tp = TopicPartition(topic, partition)
    return int((await consumer.beginning_offsets([tp]))[tp])


async def read_to_end(consumer: AIOKafkaConsumer, topic: str, partition: int, start: int = 0,
                      timeout_s: float = 60.0) -> AsyncIterator[list[ConsumerRecord]]:
    """Batches of ``topic``/``partition`` from ``start`` to the end as of the call."""
    end = await end_offset(consumer, topic, partition)
    first = max(start, await begin_offset(consumer, topic, partition))
    if end <= first:
        return
    tp = TopicPartition(topic, partition)
    consumer.assign([tp])
    consumer.seek(tp, first)
    deadline = time.monotonic() + timeout_s
    while True:
        got = await consumer.getmany(tp, timeout_ms=1000, max_records=50_000)
        msgs = got.get(tp, [])
        if not msgs:
            if time.monotonic() > deadline:
                raise ReadTimeout(f"{topic}[{partition}]: stalled before offset {end - 1}")
            continue
        deadline = time.monotonic() + timeout_s
        yield msgs
        if msgs[-1].offset >= end - 1:
            # The batch holding end-1 came whole; drain anything already fetched with it.
            more = await consumer.getmany(tp, timeout_ms=0, max_records=50_000)
            if more.get(tp):
                yield more[tp]
            return


def journal_record(msg: ConsumerRecord) -> JournalRecord:
    """A consumed journal record, parsed (``BadJournalRecord`` when its headers are wrong)."""
    return parse_journal(msg.partition, msg.offset, msg.value, msg.headers)
