"""Hard limits on what a record may hold, so no single input can exhaust the core.

Anyone who can write to the inbox can send any bytes. These bounds make the
cost of decoding and folding one record small and predictable, whatever it
contains; a record beyond any of them is refused with a reason, never a crash.
Each bound is far above what a real cluster needs (stated beside it), so it
only ever refuses hostile or broken input.

The bounds that belong to one value are also *types* (``Int64``, ``Text``,
``Array[...]``, ``HostGpus``, ``Shares``, below): the event structs declare their
fields with them, so the decoder enforces them and the published JSON Schema
states them (``minimum``, ``maximum``, ``maxLength``, ``maxItems``). The bounds
on a whole record (size, nesting) are checked by ``events.codec`` before any
parsing. docs/events.md "Limits" lists them all.
"""

from __future__ import annotations

from typing import Annotated, TypeVar

from msgspec import Meta

# One encoded event. A start of a 1,250-host gang is about 40 KB; inputs are
# ~300 bytes. Also the live inbox's and the dead letter's per-record bound.
MAX_RECORD_BYTES = 256 * 1024
# JSON nesting. Events nest three levels (envelope, tuple, slot). Checked on
# the raw bytes before the parser runs: a parser recurses once per level, so an
# unbounded depth is a stack overflow (RecursionError), even in an unknown field.
MAX_DEPTH = 16
# Any one string (names, paths, reasons, details).
MAX_STRING_CHARS = 4096
# Every integer on the wire is a signed 64-bit value (the audit stores BIGINT,
# and so do producers in Go or Java): a larger one would decode here and then
# be refused by every other reader of the log.
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
# Items in any one array (slots of a placement, hosts of a reservation, shares).
MAX_ARRAY_ITEMS = 65_536

# Input ids: what producers may name their events. No "/" (derived ids are
# ``<cause>/<n>``, so a producer can never squat one), no spaces, controls,
# bidi or non-ASCII characters (ids are printed in logs and terminals).
MAX_ID_CHARS = 128
INPUT_ID_PATTERN = r"[A-Za-z0-9._:@+=~-]{1,128}"
# Cluster ids name Kafka keys and live tick ids.
CLUSTER_ID_PATTERN = r"[A-Za-z0-9._-]{1,64}"

# The fleet. The largest GPU hosts sold have 16 GPUs; the largest clusters
# tens of thousands of GPUs. The cluster projection indexes hosts by free GPUs
# (one list per possible count), so GPUs per host must be small.
MAX_GPUS_PER_HOST = 64
MAX_HOSTS_PER_CLUSTER = 65_536
# Budget shares are integer weights; a billion to one is resolution enough.
MAX_SHARES = 10**9


# ------------------------------------------------------------------ the types

T = TypeVar("T")

# Any integer field. Lower bounds that carry meaning (``gpus >= 1``...) are the
# validator's, answered with a rejection event and a reason code; the type only
# keeps every value representable by every reader.
Int64 = Annotated[int, Meta(ge=INT64_MIN, le=INT64_MAX)]
# Any string field.
Text = Annotated[str, Meta(max_length=MAX_STRING_CHARS)]
# A file system path (a workload's ``workdir`` and ``log_path``): shorter than
# any text, so a record holding two still fits the codec's flat fast path
# (events.values) within MAX_RECORD_BYTES.
MAX_PATH_CHARS = 1024
PathText = Annotated[str, Meta(max_length=MAX_PATH_CHARS)]
# Any array field: ``Array[Slot]`` is a tuple of at most MAX_ARRAY_ITEMS slots.
Array = Annotated[tuple[T, ...], Meta(max_length=MAX_ARRAY_ITEMS)]
# GPUs of one host (``host.added``); ``< 1`` is the validator's ``bad_host``.
HostGpus = Annotated[int, Meta(ge=INT64_MIN, le=MAX_GPUS_PER_HOST)]
# A budget share; negative shares are the validator's ``bad_shares``.
Shares = Annotated[int, Meta(ge=INT64_MIN, le=MAX_SHARES)]

# Time and durations. Event times are Unix seconds up to 2**40 (the year
# 36,812) and policy durations at most 2**32 s (136 years), so that anything
# the scheduler derives by adding them (a protection's end, a reservation's
# ``until``) is still an int64 every reader can decode. Lower bounds stay the
# validator's (a negative knob is ``bad_policy``, a past ``at`` takes effect now).
MAX_TIME = 2**40
MAX_DURATION_S = 2**32
Time = Annotated[int, Meta(ge=INT64_MIN, le=MAX_TIME)]
Duration = Annotated[int, Meta(ge=INT64_MIN, le=MAX_DURATION_S)]
# Buckets a usage window may hold: accrual and memory grow with it (a week of
# one-minute buckets is 10,080).
MAX_WINDOW_BUCKETS = 20_000
