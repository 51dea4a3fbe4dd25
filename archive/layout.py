"""The archive's layout on disk: the contract any Parquet engine reads (docs/archive.md).

An archive is a directory::

    <root>/
      manifest.jsonl                        the commit log: one line per committed batch
      journal/cluster=<id>/day=<YYYY-MM-DD>/p<PPP>-<FIRST>-<LAST>.parquet
      claims/day=<YYYY-MM-DD>/p<PPP>-<FIRST>-<LAST>.parquet

``journal/`` holds the data records (inputs and decisions) of the journal
topic, Hive-partitioned by the event's cluster and its UTC day (of the event
time ``at``). ``claims/`` holds the claim records (they belong to a journal
partition, not to a cluster) and any record whose cluster cannot be read, by
the UTC day of the broker timestamp. ``PPP`` is the journal partition,
``FIRST``-``LAST`` the offsets of the batch the file was written in (the file
holds the records of that batch which fall in its directory).

Every row is one journal record, bytes exactly as Kafka held them (``key``,
``value``, ``headers``, ``timestamp``) plus columns read from them for queries
(``kind``, ``owner``, ``inbox_offset`` from the headers; ``type``, ``id``,
``cause``, ``at`` from the value's envelope). ``(partition, offset)`` is unique
across the files the manifest lists; nothing else is an archive file.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa

JOURNAL_DIR = "journal"
CLAIMS_DIR = "claims"
MANIFEST = "manifest.jsonl"
LOCK = ".archiver.lock"
TMP_SUFFIX = ".tmp"
LAYOUT_VERSION = 1

HEADER = pa.struct([("key", pa.string()), ("value", pa.binary())])

# The columns of every archive file, in this order. Hive partition columns (cluster, day)
# are in the path only, so engines read them from there (hive_partitioning).
SCHEMA = pa.schema([
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("timestamp", pa.int64()),          # broker timestamp, ms since the epoch
    ("key", pa.binary()),
    ("value", pa.binary()),             # the exact record value (event JSON, or a claim)
    ("headers", pa.list_(HEADER)),      # the exact record headers, in order
    ("kind", pa.string()),              # allot-kind: input, decision, claim (null if absent)
    ("owner", pa.string()),             # allot-owner: the claim token it was written under
    ("inbox_offset", pa.int64()),       # allot-inbox-offset (inputs only)
    ("type", pa.string()),              # the event's type tag (null for claims)
    ("id", pa.string()),                # the event's id
    ("cause", pa.string()),             # the event's cause (decisions)
    ("at", pa.int64()),                 # the event's time, Unix seconds
], metadata={b"allot.archive.layout": str(LAYOUT_VERSION).encode()})


def day_of(seconds: int) -> str:
    """The UTC day of a Unix time, ``YYYY-MM-DD`` (times outside years 1-9999 clamp to them)."""
    try:
        return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%d")
    except (OverflowError, OSError, ValueError):
        return "0001-01-01" if seconds < 0 else "9999-12-31"


def file_name(partition: int, first: int, last: int) -> str:
    return f"p{partition:03d}-{first:012d}-{last:012d}.parquet"


def journal_path(cluster: str, day: str, partition: int, first: int, last: int) -> str:
    """A data file's path relative to the root (cluster ids are ``[A-Za-z0-9._-]``)."""
    return f"{JOURNAL_DIR}/cluster={cluster}/day={day}/{file_name(partition, first, last)}"


def claims_path(day: str, partition: int, first: int, last: int) -> str:
    return f"{CLAIMS_DIR}/day={day}/{file_name(partition, first, last)}"


def temp_of(path: Path) -> Path:
    """Where a file is written before its batch commits (no ``.parquet`` ending: globs skip it)."""
    return path.with_name(path.name + TMP_SUFFIX)


def glob(root: str | Path) -> str:
    """A glob over every data file (for engines that read a directory, not the manifest)."""
    return str(Path(root) / JOURNAL_DIR / "*" / "*" / "*.parquet")


__all__ = ["CLAIMS_DIR", "JOURNAL_DIR", "LAYOUT_VERSION", "LOCK", "MANIFEST", "SCHEMA",
           "claims_path", "day_of", "file_name", "glob", "journal_path", "temp_of"]
