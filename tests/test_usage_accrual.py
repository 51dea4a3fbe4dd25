"""Usage accrual costs at most the buckets of one window, whatever the gap, and keeps its results.

An ``at`` far in the future (2**62) used to make the next rate change fill one
bucket per ``bucket_s`` of the gap: a loop of ~10**15 iterations. The accrual
now starts at the window, which gives the same buckets as filling and dropping
the older ones; a property test checks that against the old algorithm, kept
here as the reference.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from hypothesis import given, seed, settings
from hypothesis import strategies as st

from projections.usage import LeafUsage, UsageProjection

HOUR = 3_600
DAY = 86_400


class ReferenceUsage(UsageProjection):
    """The accrual as it was before the change: one iteration per bucket of the gap."""

    __slots__ = ()

    def _accrue(self, u: LeafUsage, now: int) -> None:
        t = u.since
        if now <= t:
            return
        boundary = now - now % self.period_s
        if t <= boundary:
            u.snap_at = boundary
            u.snap = self._value_at(u, boundary)
        rate = u.rate
        if rate:
            b = self.bucket_s
            buckets, order = u.buckets, u.order
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
                u.lifetime += amount
                t = end
        u.since = now
        kmin = (now - self.window_s) // self.bucket_s + 1
        order = u.order
        while order and order[0] < kmin:
            u.total -= u.buckets.pop(order.popleft())


class Hung(Exception):
    """An accrual ran far longer than any bounded one can."""


@contextmanager
def hang_guard(seconds: int = 10) -> Iterator[None]:
    """Fail (instead of hanging the suite) when the body runs for ``seconds``.

    Not a speed target: a bounded accrual takes microseconds, the unbounded
    one runs for years; the guard only turns a hang into a failure.
    """

    def fire(signum: int, frame: object) -> None:
        raise Hung(f"still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# (start, jump to, rate, window, bucket): a workload starts at ``start``, then
# something happens at ``jump to`` (its finish, or another start).
HUGE_GAPS = [
    pytest.param(0, 2**62, 8, 7 * DAY, HOUR, id="at-2**62"),
    pytest.param(0, 2**63 - 1, 8, 7 * DAY, HOUR, id="at-int64-max"),
    pytest.param(-(2**63), 2**63 - 1, 1, 7 * DAY, HOUR, id="int64-min-to-max"),
    pytest.param(1_767_571_200, 1_767_571_200 + 2**61, 1_024, 30 * DAY, 60, id="minute-buckets"),
    pytest.param(5, 2**62 + 7, 3, 7 * DAY, 7 * DAY, id="one-bucket-window"),
]


@pytest.mark.parametrize("start, jump, rate, window, bucket", HUGE_GAPS)
def test_a_huge_gap_accrues_in_window_buckets(start: int, jump: int, rate: int, window: int,
                                              bucket: int) -> None:
    """The rate change after a gap of any length returns, keeps one window, and counts it all."""
    usage = UsageProjection(window, bucket)
    usage.change_rate("lab/a", rate, start)
    with hang_guard():
        usage.change_rate("lab/a", -rate, jump)
    u = usage.leaves["lab/a"]
    assert len(u.order) <= window // bucket + 1
    assert usage.lifetime("lab/a", jump) == rate * (jump - start)
    # The window holds between (window - bucket) and window seconds at the old rate.
    assert rate * (window - bucket) <= usage.usage("lab/a", jump) <= rate * window


@pytest.mark.parametrize("start, jump, rate, window, bucket", HUGE_GAPS)
def test_reads_after_a_huge_gap_return(start: int, jump: int, rate: int, window: int,
                                       bucket: int) -> None:
    """usage() and usage_of() far after the last accrual are bounded too (read-only paths)."""
    usage = UsageProjection(window, bucket)
    usage.change_rate("lab/a", rate, start)
    with hang_guard():
        at = jump - jump % usage.period_s
        value = usage.usage_of(["lab/a"], at)["lab/a"]
    assert rate * (window - bucket) <= value <= rate * window


# One step: (leaf, rate delta, seconds since the previous step). Small gaps, so
# the reference algorithm is cheap, but gaps longer than the window occur.
STEPS = st.lists(
    st.tuples(st.sampled_from(["lab/a", "lab/b", "lab/c"]), st.integers(-8, 16),
              st.integers(0, 40 * HOUR)),
    min_size=1, max_size=40,
)


@seed(7)
@settings(max_examples=300, deadline=None)
@given(steps=STEPS, window_hours=st.integers(1, 48), bucket_s=st.sampled_from([60, 600, HOUR]),
       period_s=st.sampled_from([1, 300, HOUR]), t0=st.integers(-(10**6), 10**9))
def test_same_results_as_the_bucket_by_bucket_accrual(steps: list[tuple[str, int, int]],
                                                      window_hours: int, bucket_s: int,
                                                      period_s: int, t0: int) -> None:
    """On ordinary gaps the new accrual gives exactly the old buckets, usage, snapshots and lifetime."""
    window = max(bucket_s, window_hours * HOUR)
    new, ref = UsageProjection(window, bucket_s, period_s), ReferenceUsage(window, bucket_s, period_s)
    now = t0
    for leaf, delta, gap in steps:
        now += gap
        new.change_rate(leaf, delta, now)
        ref.change_rate(leaf, delta, now)
        assert new.snapshot() == ref.snapshot()
        for name in ("lab/a", "lab/b", "lab/c"):
            assert new.usage(name, now) == ref.usage(name, now)
            assert new.lifetime(name, now + gap) == ref.lifetime(name, now + gap)
            un, ur = new.leaves.get(name), ref.leaves.get(name)
            if un is not None and ur is not None:
                assert (un.snap_at, un.snap, un.total) == (ur.snap_at, ur.snap, ur.total)
        boundary = now - now % period_s
        leaves = ["lab/a", "lab/b", "lab/c"]
        assert new.usage_of(leaves, boundary) == ref.usage_of(leaves, boundary)


@seed(11)
@settings(max_examples=300, deadline=None)
@given(steps=st.lists(st.tuples(st.sampled_from(["lab/a", "lab/b"]), st.integers(-4, 8),
                                st.integers(0, 400), st.booleans()), min_size=1, max_size=60),
       period_s=st.sampled_from([1, 60, 300]), t0=st.integers(0, 10**6))
def test_usage_of_memo_never_changes_an_answer(steps: list[tuple[str, int, int, bool]],
                                               period_s: int, t0: int) -> None:
    """usage_of() with its memo (kept across rate changes inside a period) equals a fresh projection's.

    Rate changes land at, after and between fair-share boundaries, and queries
    come at the current boundary and (sometimes) at ``now`` itself, so the memo
    is filled at boundaries and at other instants before changes arrive.
    """
    window, bucket = 2 * HOUR, 600
    memo = UsageProjection(window, bucket, period_s)
    changes: list[tuple[str, int, int]] = []
    now = t0
    leaves = ["lab/a", "lab/b"]
    for leaf, delta, gap, at_now in steps:
        now += gap
        memo.change_rate(leaf, delta, now)
        changes.append((leaf, delta, now))
        fresh = UsageProjection(window, bucket, period_s)
        for name, d, t in changes:
            fresh.change_rate(name, d, t)
        at = now if at_now else now - now % period_s
        assert memo.usage_of(leaves, at) == fresh.usage_of(leaves, at)


@seed(13)
@settings(max_examples=300, deadline=None)
@given(steps=st.lists(st.tuples(st.sampled_from(["lab/a", "lab/b", "lab/c"]), st.integers(-4, 8),
                                st.integers(0, 3 * HOUR), st.lists(st.integers(0, HOUR), max_size=6)),
                      min_size=1, max_size=40),
       period_s=st.sampled_from([1, 60, 300]), bucket_s=st.sampled_from([60, 600]),
       t0=st.integers(0, 10**6))
def test_usage_of_memo_carried_to_later_instants_never_changes_an_answer(
        steps: list[tuple[str, int, int, list[int]]], period_s: int, bucket_s: int, t0: int) -> None:
    """Entries usage_of keeps for idle leaves across later instants are what a fresh projection reads.

    After each rate change the same leaves are read at the boundary and then
    at a row of later instants, so idle leaves' entries are carried across
    instants, across the window's moves (a bucket leaving it) and across
    leaves that start or stop in between; ``lab/d`` never runs at all. An
    instant read ahead of the change is read again first when still legal.
    """
    window = 3 * bucket_s
    memo = UsageProjection(window, bucket_s, period_s)
    leaves = ["lab/a", "lab/b", "lab/c", "lab/d"]
    changes: list[tuple[str, int, int]] = []
    now = t0
    last = now
    for leaf, delta, gap, later in steps:
        now += gap
        memo.change_rate(leaf, delta, now)
        changes.append((leaf, delta, now))
        fresh = UsageProjection(window, bucket_s, period_s)
        for name, d, t in changes:
            fresh.change_rate(name, d, t)
        instants = [last] if last >= now else []
        instants.append(now - now % period_s)
        t = now
        for step in sorted(later):
            t += step
            instants.append(t)
        for at in instants:
            assert memo.usage_of(leaves, at) == fresh.usage_of(leaves, at)
        last = instants[-1]


def test_a_read_ahead_of_a_rate_change_is_read_again() -> None:
    """usage_of asked at an instant after the next rate change answers for that change there."""
    usage = UsageProjection(2 * HOUR, 600, 300)
    leaves = ["lab/a"]
    usage.change_rate("lab/a", 2, 0)
    assert usage.usage_of(leaves, 1200) == {"lab/a": 2400}
    usage.change_rate("lab/a", 2, 600)
    assert usage.usage_of(leaves, 1200) == {"lab/a": 2 * 600 + 4 * 600}


class CountingUsage(UsageProjection):
    """Counts the leaves it reads (``_value_at``)."""

    __slots__ = ("reads",)

    def __init__(self, window_s: int, bucket_s: int, period_s: int) -> None:
        super().__init__(window_s, bucket_s, period_s)
        self.reads = 0

    def _value_at(self, u: LeafUsage, t: int) -> int:
        self.reads += 1
        return super()._value_at(u, t)


def test_an_idle_leaf_is_read_again_only_when_the_window_moves_or_it_runs() -> None:
    usage = CountingUsage(2 * HOUR, HOUR, 300)
    leaves = ["lab/a", "lab/b"]

    def read(at: int) -> tuple[dict[str, int], int]:
        usage.reads = 0
        return usage.usage_of(leaves, at), usage.reads

    usage.change_rate("lab/a", 8, 0)
    usage.change_rate("lab/a", -8, 600)  # idle from here, 4800 GPU-seconds in bucket 0
    usage.change_rate("lab/b", 2, 600)   # runs on
    assert read(900) == ({"lab/a": 4800, "lab/b": 600}, 2)
    assert read(1200) == ({"lab/a": 4800, "lab/b": 1200}, 1)  # only the running leaf
    assert read(7200) == ({"lab/a": 0, "lab/b": 2 * 3600}, 2)  # bucket 0 left the window: both
    usage.change_rate("lab/a", 1, 7500)
    assert read(7800) == ({"lab/a": 300, "lab/b": 2 * 4200}, 2)  # a runs again: both


@seed(17)
@settings(max_examples=300, deadline=None)
@given(history=st.lists(st.tuples(st.integers(1, 8), st.integers(60, 2 * HOUR)), min_size=1, max_size=12),
       reads=st.lists(st.integers(0, 12 * HOUR), min_size=1, max_size=20))
def test_reads_of_an_idle_leaf_sum_exactly_the_buckets_in_the_window(
        history: list[tuple[int, int]], reads: list[int]) -> None:
    """The memo of buckets that left the window (``_aged``) gives the plain sum, reads in any order."""
    usage = UsageProjection(4 * HOUR, 600, 300)
    now = 0
    for gpus, seconds in history:
        usage.change_rate("lab/a", gpus, now)
        now += seconds
        usage.change_rate("lab/a", -gpus, now)
    u = usage.leaves["lab/a"]
    for dt in reads:
        t = now + dt
        kmin = (t - usage.window_s) // usage.bucket_s + 1
        assert usage.usage("lab/a", t) == sum(u.buckets[k] for k in u.order if k >= kmin)
