"""The verify pool: a batch's Ed25519 input signatures checked in other processes, ahead of the loop.

Verifying a signed input costs about 0.1 ms of CPU (OpenSSL through
``cryptography``, which holds the GIL while it verifies), nearly half of what
a signed input costs the worker. Neither ``cryptography`` nor PyNaCl
(libsodium) offers batch verification, so the way past one core is more
processes: with ``verify_processes`` > 0 the worker hands each batch's
signatures to that many processes (plain bytes: key, signature, value) and
passes what held to the processor as ``signing.Checked``. The processor's
decision per record is unchanged: it still resolves the key, checks the signer,
revocation and roles in order, and verifies itself any signature whose key it
resolves differently from the job (the state changed within the batch), or that
did not hold ahead. Small batches are checked in the loop: a round trip to
another process costs more than a few verifications. A batch-signed record
(``allot-batch-proof``) is one job per batch root, not per record, and none
when the worker's root cache (``signing.ROOTS``) already holds that root.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor

from identity.keys import verify_many

# Below this many signed records in a batch, verify in the loop (no round trip).
MIN_JOBS = 32

Job = tuple[bytes, bytes, bytes]   # (raw public key, raw signature, value)


class VerifyPool:
    """``processes`` verify processes (spawned, not forked: the worker runs threads)."""

    def __init__(self, processes: int) -> None:
        self.processes = processes
        self._pool = ProcessPoolExecutor(max_workers=processes,
                                         mp_context=multiprocessing.get_context("spawn"))

    async def start(self) -> None:
        """Spawn the processes now (each imports ``cryptography`` once), not on the first batch."""
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(loop.run_in_executor(self._pool, verify_many, [])
                               for _ in range(self.processes)))

    async def check(self, jobs: Iterable[tuple[bytes, Job]]) -> dict[tuple[bytes, bytes], bytes]:
        """``signing.Checked`` for ``(signature header bytes, job)`` pairs: the ones that hold."""
        items = list(jobs)
        if len(items) < MIN_JOBS:
            return {}
        n = min(self.processes, len(items) // (MIN_JOBS // 2) or 1)
        chunks = [items[i::n] for i in range(n)]
        loop = asyncio.get_running_loop()
        results = await asyncio.gather(*(loop.run_in_executor(
            self._pool, verify_many, [j for _, j in chunk]) for chunk in chunks))
        out: dict[tuple[bytes, bytes], bytes] = {}
        for chunk, oks in zip(chunks, results, strict=True):
            for (sig_b, (raw, _, value)), ok in zip(chunk, oks, strict=True):
                if ok:
                    out[(sig_b, value)] = raw
        return out

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
