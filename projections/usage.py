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

    __slots__ = ("buckets", "lifetime", "order", "rate", "since", "snap", "snap_at", "total")

    def __init__(self, since: int) -> None:
        self.snap_at = -1  # the last period boundary crossed by an accrual ...
        self.snap = 0  # ... and the windowed usage exactly at it
        self.rate = 0  # allocated GPUs running now
        self.since = since  # accrued up to here
        self.buckets: dict[int, int] = {}  # bucket index -> GPU-seconds
        self.order: deque[int] = deque()  # bucket indices, ascending
        self.total = 0  # sum of retained buckets
        self.lifetime = 0  # all GPU-seconds ever accrued (not windowed)


class UsageProjection:
    """The windowed usage fold over every leaf."""

    __slots__ = ("_cache", "_cache_at", "_cache_for", "bucket_s", "leaves", "period_s", "window_s")

    def __init__(self, window_s: int, bucket_s: int, period_s: int = 300) -> None:
        self.window_s = window_s
        self.bucket_s = bucket_s
        self.period_s = period_s
        self.leaves: dict[str, LeafUsage] = {}
        # usage_of() results at one instant; a leaf's entry goes when its rate
        # changes before that instant or after its period. A memo only: it never
        # changes an answer.
        self._cache: dict[str, int] = {}
        self._cache_at = -1
        self._cache_for: list[str] | None = None  # the leaves list the cache was filled for

    def reconfigure(self, window_s: int, bucket_s: int, period_s: int = 300) -> None:
        """Change the window (the bucket width may only change before any usage exists)."""
        if bucket_s != self.bucket_s and any(u.lifetime or u.rate for u in self.leaves.values()):
            raise ValueError("bucket width cannot change once usage is recorded")
        self.window_s = window_s
        self.bucket_s = bucket_s
        self.period_s = period_s
        self._cache_at = -1

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
        u.rate += delta
        # A rate change at or after the cached instant, inside its period, leaves
        # the usage *at* that instant as it was when the instant is a period
        # boundary (what accrues after it is not in it, and the first accrual
        # past it recorded it exactly: ``snap``), so a cached value there stays
        # right: fair share asks at one boundary for a whole period while work
        # starts and stops. Anything else forgets it (under usage_of's contract
        # nothing else can ask again for that instant; this is only defence).
        at = self._cache_at
        if not (at % self.period_s == 0 and at <= now < at + self.period_s):
            self._cache.pop(leaf, None)

    def _value_at(self, u: LeafUsage, t: int) -> int:
        """Windowed usage at ``t``, for ``t`` not before the leaf's last accrual."""
        b = self.bucket_s
        kmin = (t - self.window_s) // b + 1
        total = u.total
        for k in u.order:
            if k >= kmin:
                break
            total -= u.buckets[k]
        if u.rate:
            start = max(u.since, kmin * b)
            if t > start:
                total += u.rate * (t - start)
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
        if now != self._cache_at or leaves is not self._cache_for:
            self._cache = {}
            self._cache_at = now
            self._cache_for = leaves
        cache = self._cache
        if len(cache) == len(leaves):
            return dict(cache)
        get = self.leaves.get
        value_at = self._value_at
        kmin = (now - self.window_s) // self.bucket_s + 1  # the window's first bucket at now
        out: dict[str, int] = {}
        for leaf in leaves:
            if leaf in cache:
                out[leaf] = cache[leaf]
                continue
            u = get(leaf)
            if u is None:
                v = 0
            elif u.since <= now:
                # An idle leaf none of whose buckets left the window is its total
                # (what ``_value_at`` computes, without the call: most leaves idle).
                v = value_at(u, now) if u.rate or (u.order and u.order[0] < kmin) else u.total
            elif u.snap_at == now:
                v = u.snap
            else:
                # Only after the period itself was reconfigured mid-period: the
                # boundary moved, so use the value as of the last accrual.
                v = value_at(u, u.since)
            out[leaf] = cache[leaf] = v
        return out

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
