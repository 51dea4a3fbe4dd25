"""Archive throughput against the raw consume rate of the same broker, in the same run.

Starts a Tansu broker, fills a 4-partition journal with N synthetic journal
records (tick-sized event JSON with allot's three headers), then times (1) a
plain aiokafka read of every partition to its end and (2) ``archive_once``
(Kafka to committed Parquet files, fsync included). Target: archive >= 50 % of
raw. Run: ``.venv/bin/python -m benchmarks.bench_archive --records 200000``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time

import msgspec
from aiokafka import AIOKafkaProducer

from archive.writer import archive_once
from streams.broker import TansuBroker
from streams.journal import read_to_end, reader
from streams.records import JOURNAL, journal_headers
from streams.topics import ensure_topics

PARTITIONS = 4


async def fill(bootstrap: str, n: int) -> None:
    await ensure_topics(bootstrap, "", PARTITIONS)
    prod = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=5,
                            max_batch_size=512 * 1024)
    await prod.start()
    futs = []
    for i in range(n):
        c = f"c{i % PARTITIONS}"
        v = msgspec.json.encode({"type": "clock.ticked", "id": f"{c}:{i}", "v": 1,
                                 "at": 1_767_225_600 + i, "cluster": c, "actor": "ticker",
                                 "source": "bench", "cause": None})
        futs.append(await prod.send(JOURNAL, v, key=c.encode(), partition=i % PARTITIONS,
                                    headers=journal_headers("input", "tok", i // PARTITIONS)))
        if len(futs) >= 20_000:
            await asyncio.gather(*futs)
            futs = []
    await asyncio.gather(*futs)
    await prod.stop()


async def raw(bootstrap: str) -> int:
    c = reader(bootstrap, 200, "bench-raw")
    await c.start()
    n = 0
    for p in range(PARTITIONS):
        async for batch in read_to_end(c, JOURNAL, p):
            n += len(batch)
    await c.stop()
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--records", type=int, default=200_000)
    args = ap.parse_args()
    with TansuBroker() as b, tempfile.TemporaryDirectory() as tmp:
        asyncio.run(fill(b.bootstrap, args.records))
        t0 = time.perf_counter()
        n = asyncio.run(raw(b.bootstrap))
        t_raw = time.perf_counter() - t0
        t0 = time.perf_counter()
        stats = asyncio.run(archive_once(b.bootstrap, tmp, flush_records=10**9, flush_s=10**9))
        t_arch = time.perf_counter() - t0
        out = {"records": n, "archived": stats.records, "raw_per_s": round(n / t_raw),
               "archive_per_s": round(stats.records / t_arch),
               "ratio": round((stats.records / t_arch) / (n / t_raw), 3),
               "bytes": stats.bytes, "files": stats.files}
        print(json.dumps(out))


if __name__ == "__main__":
    main()
