"""GPU-seconds charged per budget leaf over a sliding window, in fixed buckets.

Only allocated running workloads are charged; each leaf keeps a *rate* (its
running allocated GPUs) and accrues ``rate x elapsed`` into time buckets
whenever the rate changes. Usage over the window is the sum of the buckets the
window covers plus the not-yet-accrued tail, computed read-only so a pure
decide() can ask for it at any ``now``. Buckets older than the window are
dropped as accrual passes them, so memory and cost do not grow with history,
and an accrual over a gap longer than the window fills only the buckets the
window still covers: its cost is at most the window's buckets, whatever the gap.

The window is exact to one bucket: at time ``now`` it covers buckets whose
index is at least ``(now - window) // bucket + 1``, i.e. between
``window - bucket`` and ``window`` seconds of history.

Fair share reads usage at period boundaries (``now`` rounded down to the
policy's fair-share period), and must read it *exactly* there even after later
accruals: the first accrual past a boundary first records the leaf's usage at
that boundary (exact, since the rate was constant up to then).
"""

from __future__ import annotations

from collections import deque


class LeafUsage:
    """Accrual state of one leaf."""

    __slots__ = ("aged", "aged_n", "buckets", "lifetime", "order", "rate", "since", "snap", "snap_at",
                 "total")

    def __init__(self, since: int) -> None:
        self.snap_at = -1  # the last period boundary crossed by an accrual ...
        self.snap = 0  # ... and the windowed usage exactly at it
        self.rate = 0  # allocated GPUs running now
        self.since = since  # accrued up to here
        self.buckets: dict[int, int] = {}  # bucket index -> GPU-seconds
        self.order: deque[int] = deque()  # bucket indices, ascending
        self.total = 0  # sum of retained buckets
        self.lifetime = 0  # all GPU-seconds ever accrued (not windowed)
        # A read memo (``UsageProjection._aged``): the first ``aged_n`` buckets of
        # ``order`` hold ``aged`` GPU-seconds, and all lie before the window of
        # the last read. Reset whenever accrual changes the buckets.
        self.aged_n = 0
        self.aged = 0


class UsageProjection:
    """The windowed usage fold over every leaf."""

    __slots__ = ("_cache", "_cache_at", "_cache_for", "_cache_kmin", "_changing", "bucket_s", "epoch",
                 "leaves", "period_s", "window_s")

    def __init__(self, window_s: int, bucket_s: int, period_s: int = 300) -> None:
        self.window_s = window_s
        self.bucket_s = bucket_s
        self.period_s = period_s
        self.leaves: dict[str, LeafUsage] = {}
        # usage_of() results at one instant, the true usage there: a rate change
        # after a read leaves the usage at the instant read as it was (it
        # accrues after it). Carried to a later instant except for the leaves
        # that may differ there (``_carry``). A memo only: it never changes an
        # answer.
        self._cache: dict[str, int] = {}
        self._cache_at = -1
        self._cache_for: list[str] | None = None  # the leaves list the cache was filled for
        self._cache_kmin = 0  # the window's first bucket at ``_cache_at``
        # Leaves whose entry may not hold at a later instant: read while running
        # (or through ``snap``), or whose rate changed since they were read.
        self._changing: set[str] = set()
        # Bumped whenever the memo moves to another instant or starts afresh: a
        # reader that saw it at one epoch may ask ``usage_changes`` at the next.
        self.epoch = 0

    def reconfigure(self, window_s: int, bucket_s: int, period_s: int = 300) -> None:
        """Change the window (the bucket width may only change before any usage exists)."""
        if bucket_s != self.bucket_s and any(u.lifetime or u.rate for u in self.leaves.values()):
            raise ValueError("bucket width cannot change once usage is recorded")
        self.window_s = window_s
        self.bucket_s = bucket_s
        self.period_s = period_s
        self._cache_for = None  # (nothing carries over to another window)
        self.epoch += 1

    def _leaf(self, leaf: str, now: int) -> LeafUsage:
        u = self.leaves.get(leaf)
        if u is None:
            u = self.leaves[leaf] = LeafUsage(now)
            u.snap_at = now - now % self.period_s  # nothing was used before it existed
        return u

    def change_rate(self, leaf: str, delta: int, now: int) -> None:
        """Accrue up to ``now`` at the old rate, then add ``delta`` GPUs to the rate."""
        u = self._leaf(leaf, now)
        self._accrue(u, now)
        u.aged_n = u.aged = 0  # (accrual may have changed any bucket)
        u.rate += delta
        # The usage at the memo's instant is what it was when that is not after
        # ``now`` (what accrues from here on comes after it), so the entry stays
        # (any legal read there gets that value); at a later instant it may
        # differ. A memo read ahead of ``now`` forgets it.
        self._changing.add(leaf)
        if self._cache_at > now:
            self._cache.pop(leaf, None)

    def _value_at(self, u: LeafUsage, t: int) -> int:
        """Windowed usage at ``t``, for ``t`` not before the leaf's last accrual."""
        b = self.bucket_s
        kmin = (t - self.window_s) // b + 1
        total = u.total
        order = u.order
        if order and order[0] < kmin:
            total -= self._aged(u, kmin)
        if u.rate:
            start = max(u.since, kmin * b)
            if t > start:
                total += u.rate * (t - start)
        return total

    def _aged(self, u: LeafUsage, kmin: int) -> int:
        """GPU-seconds in the leaf's buckets before bucket ``kmin`` (those the window left).

        An idle leaf keeps its buckets until its next accrual, so without a memo
        every read would add up again every bucket that left the window since.
        The memo (``aged_n`` leading buckets, ``aged`` their sum) holds as long
        as the buckets do not change (``change_rate`` resets it after accruing),
        and since ``order`` ascends it extends to a later window by counting on
        from ``aged_n``; a read at an earlier window (its last counted bucket is
        inside it) counts from the start again.
        """
        order = u.order
        n = u.aged_n
        total = u.aged
        if n and order[n - 1] >= kmin:
            n = total = 0
        buckets = u.buckets
        size = len(order)
        while n < size:
            k = order[n]
            if k >= kmin:
                break
            total += buckets[k]
            n += 1
        u.aged_n = n
        u.aged = total
        return total

    def _accrue(self, u: LeafUsage, now: int) -> None:
        t = u.since
        if now <= t:
            return
        boundary = now - now % self.period_s
        if t <= boundary:  # first accrual past this boundary: keep the exact value there
            u.snap_at = boundary
            u.snap = self._value_at(u, boundary)
        rate = u.rate
        kmin = (now - self.window_s) // self.bucket_s + 1
        if rate:
            b = self.bucket_s
            buckets, order = u.buckets, u.order
            u.lifetime += rate * (now - t)
            # Buckets before kmin would be dropped below as soon as they were
            # filled, so start at the window: a gap of any length (an ``at`` of
            # 2**62, say) costs at most the buckets of one window, and the
            # result is the same as filling and dropping them.
            if t < kmin * b:
                t = kmin * b
            while t < now:
                k = t // b
                end = min(now, (k + 1) * b)
                amount = rate * (end - t)
                if order and order[-1] == k:
                    buckets[k] += amount
                else:
                    buckets[k] = amount
                    order.append(k)
                u.total += amount
                t = end
        u.since = now
        order = u.order
        while order and order[0] < kmin:
            u.total -= u.buckets.pop(order.popleft())

    def usage(self, leaf: str, now: int) -> int:
        """GPU-seconds charged to ``leaf`` inside the window ending at ``now`` (read-only).

        ``now`` must not be before the leaf's last accrual (it never is for the
        state's own clock).
        """
        u = self.leaves.get(leaf)
        return 0 if u is None else self._value_at(u, now)

    def usage_of(self, leaves: list[str], now: int) -> dict[str, int]:
        """Windowed usage of many leaves exactly at ``now``: a fair-share boundary or later.

        ``now`` must be at or after each leaf's last accrual, or the period
        boundary that accrual crossed (whose value it recorded).
        """
        if leaves is not self._cache_for or (now != self._cache_at and self._carry(now) is None):
            self._cache = {}
            self._cache_for = leaves
            self._cache_at = now
            self._cache_kmin = self._kmin(now)
            self._changing = set()
            self.epoch += 1
        cache = self._cache
        if len(cache) < len(leaves):
            self._fill(cache, leaves, now)
        return dict(cache)

    def usage_changes(self, leaves: list[str], now: int) -> dict[str, int] | None:
        """The usage at ``now`` of each leaf whose usage may differ from the memo's, or None if unknown.

        For a reader that last saw ``usage_of(leaves, then)`` while ``epoch``
        is still what it was then, and ``now`` is later: every leaf missing
        from the answer has the usage at ``now`` that it had at ``then``. None
        when the memo cannot tell (another list, not all of ``leaves`` read, or
        the window's first bucket moved): then read ``usage_of``.
        """
        if leaves is not self._cache_for or len(self._cache) < len(leaves):
            return None
        return self._carry(now)

    def _carry(self, now: int) -> dict[str, int] | None:
        """Move the memo to the later instant ``now``, reading again only the leaves that may differ.

        Possible when the window starts at the same bucket at ``now``. An entry
        outside ``_changing`` is of a leaf that was idle when read (no rate,
        not accrued after the instant read) and whose rate no change touched
        since: its buckets, total and rate are those it was read with, and the
        window covers the same buckets, so ``_value_at`` gives the same integer
        at ``now``. Returns the entries read again (None, changing nothing, when
        not possible).
        """
        if now <= self._cache_at or self._kmin(now) != self._cache_kmin:
            return None
        self._cache_at = now
        self.epoch += 1
        changing = self._changing
        self._changing = set()
        cache = self._cache
        read: dict[str, int] = {}
        for leaf in changing:
            if leaf in cache:
                read[leaf] = cache[leaf] = self._read(leaf, now)
        return read

    def _fill(self, cache: dict[str, int], leaves: list[str], now: int) -> None:
        """Read into ``cache`` every leaf of ``leaves`` it lacks, at ``now``."""
        for leaf in leaves:
            if leaf not in cache:
                cache[leaf] = self._read(leaf, now)

    def _read(self, leaf: str, now: int) -> int:
        """One leaf's usage at ``now`` for the memo, noting in ``_changing`` if it may differ later."""
        u = self.leaves.get(leaf)
        if u is None:
            return 0
        if u.since <= now:
            if u.rate:
                self._changing.add(leaf)
            return self._value_at(u, now)
        self._changing.add(leaf)
        if u.snap_at == now:
            return u.snap
        # Only after the period itself was reconfigured mid-period: the boundary
        # moved, so use the value as of the last accrual.
        return self._value_at(u, u.since)

    def _kmin(self, t: int) -> int:
        """The first bucket of the window at ``t``."""
        return (t - self.window_s) // self.bucket_s + 1

    def lifetime(self, leaf: str, now: int) -> int:
        """All GPU-seconds ever charged to ``leaf`` up to ``now`` (read-only)."""
        u = self.leaves.get(leaf)
        if u is None:
            return 0
        return u.lifetime + (u.rate * (now - u.since) if now > u.since else 0)

    def snapshot(self) -> list[tuple[str, int, int, list[tuple[int, int]], int]]:
        """A canonical, comparable view (for state fingerprints)."""
        return [
            (leaf, u.rate, u.since, [(k, u.buckets[k]) for k in u.order], u.lifetime)
            for leaf, u in sorted(self.leaves.items())
        ]
