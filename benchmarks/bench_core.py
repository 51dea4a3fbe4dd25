"""Benchmark: one decide() pass at production scale, and fold throughput.

Scale (issue 2): 1,024 GPUs (128 hosts x 8), a 3-level budget tree with 150
leaves, 2,000 pending and about 300 running workloads. Targets: decide()
median <= 5 ms; fold >= 200,000 events/s.

The state is built by folding real events through the engine (not by poking
projections). Two cycles are timed:

- *steady*: the cluster has been scheduled every cycle; since the last cycle
  one workload finished and one arrived (30 s apart), as in production;
- *burst*: two hours passed with no cycle at all, so many protections ended
  at once and one cycle has dozens of preemptions to make.

decide() is pure, so it is timed repeatedly on the same state (the steady case
is timed over 200 successive states). The baseline in the same run is the cost
of merely computing the fair-share order on that state, so the ratio is
machine-independent.

Usage: python -m benchmarks.bench_core [--repeat N]
"""

from __future__ import annotations

import argparse
import random
import time

from benchmarks.common import machine, median_seconds
from events.factory import Inputs
from scheduler import Engine, decide
from scheduler.index.fair_share_order import Ranking, commitments
from scheduler.replay import fold_log

HOUR = 3600


def build(seed: int = 7) -> tuple[Engine, list]:
    """A cluster in steady state: full of running work, 2,000 pending. Returns engine and log."""
    rng = random.Random(seed)
    mk = Inputs(prefix="b")
    eng = Engine()
    log = []

    def feed(e):
        log.append(e)
        out = eng.process(e)
        if out:
            log.extend(out)

    feed(mk.policy())
    feed(mk.node("lab", managers=("admin",)))
    leaves = []
    for p in range(5):
        feed(mk.node(f"lab/p{p}", shares=rng.randint(1, 5)))
        for q in range(6):
            feed(mk.node(f"lab/p{p}/q{q}", shares=rng.randint(1, 5)))
            for r in range(5):
                leaf = f"lab/p{p}/q{q}/r{r}"
                feed(mk.node(leaf, shares=rng.randint(1, 3)))
                leaves.append(leaf)
    for h in range(128):
        feed(mk.host(f"h{h:03d}", rack=f"r{h // 16}", block=f"b{h // 64}"))
    t = 0
    # Fill: ~300 running workloads of mixed shapes, started over the last 10 hours,
    # so some are protected and some are past their minimum runtime.
    n = 0
    shapes = [(1, 1), (1, 2), (1, 4), (1, 8), (2, 8), (4, 8)]
    fill = [(1, 1), (1, 1), (1, 2), (1, 2), (1, 4), (1, 8), (2, 8)]
    while len(eng.state.workloads.running) < 300 and t < 10 * HOUR:
        t += 120
        # The clock first: a submission stamped beyond the trusted now + clock_skew_s
        # is rejected (``future_time``), and then nothing ever runs.
        feed(mk.tick(t, cycle=False))
        for _ in range(4):
            hosts, per = rng.choice(fill)
            mr = rng.choice([0, 0, 900, HOUR, 4 * HOUR, 8 * HOUR])
            feed(mk.submit(f"w{n}", rng.choice(leaves), hosts * per, mr, at=t, hosts=hosts,
                           resumable=rng.random() < 0.7, priority=rng.choice([0, 0, 1])))
            n += 1
        feed(mk.tick(t))
    # Then pending on top, up to 2,000 (inputs take effect at the trusted clock's now,
    # and one stamped beyond now + clock_skew_s would be rejected: move the clock first).
    t += 60
    feed(mk.tick(t, cycle=False))
    while eng.state.workloads.pending_count() < 2000:
        hosts, per = rng.choice(shapes)
        mr = rng.choice([0, 900, HOUR, 4 * HOUR, 8 * HOUR])
        feed(mk.submit(f"w{n}", rng.choice(leaves), hosts * per, mr, at=t, hosts=hosts,
                       resumable=rng.random() < 0.7, priority=rng.choice([0, 0, 1])))
        n += 1
    # Advance the clock (no cycle) so the benchmark cycle has real choices to make.
    t += 2 * HOUR
    feed(mk.tick(t, cycle=False))
    return eng, log


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=50, help="timed decide() runs (default 50)")
    args = ap.parse_args(argv)
    eng, log = build()
    st = eng.state
    pending = st.workloads.pending_count()
    running = len(st.workloads.running)
    free = sum(h.free for h in st.cluster_state.hosts.values())
    print(f"machine: {machine()}")
    print(f"state: {len(st.cluster_state.hosts)} hosts, {len(st.budget.leaves())} leaves, "
          f"{pending} pending, {running} running, {free} GPUs free")
    out = decide(st, "bench")
    kinds: dict[str, int] = {}
    for e in out:
        tag = type(e).__struct_config__.tag
        kinds[tag] = kinds.get(tag, 0) + 1
    burst, _ = median_seconds(lambda: decide(st, "bench"), args.repeat)
    base, _ = median_seconds(lambda: Ranking(st, commitments(st)).leaf_order(), args.repeat)
    steady, n_events = steady_cycles(log)
    print(f"decide(), steady cycle: median {steady * 1e3:.2f} ms over 200 cycles "
          f"({n_events / 200:.1f} decisions per cycle; target <= 5 ms)")
    print(f"decide(), burst cycle:  median {burst * 1e3:.2f} ms over {args.repeat} runs "
          f"(one cycle decides {kinds})")
    print(f"baseline (fair-share order only): median {base * 1e3:.3f} ms; "
          f"steady/baseline = {steady / base:.1f}x, burst/baseline = {burst / base:.1f}x")

    # Fold throughput: re-fold the whole recorded log (inputs and decisions) from empty.
    def fold_all() -> None:
        fold_log(log)

    fold_med, _ = median_seconds(fold_all, 5, warmup=1)
    print(f"fold: {len(log)} events, median {fold_med * 1e3:.1f} ms -> "
          f"{len(log) / fold_med:,.0f} events/s (target >= 200,000)")
    t0 = time.perf_counter()
    check = fold_log(log)
    assert check.state.fingerprint() == fold_fingerprint(log), "fold is not deterministic"
    print(f"fold determinism: two folds of the log give equal fingerprints ({time.perf_counter() - t0:.2f} s)")


def steady_cycles(log: list, n: int = 200, seed: int = 1) -> tuple[float, int]:
    """Median decide() time over ``n`` consecutive production-like cycles from ``build``'s state.

    The cycles run on an engine folded afresh from ``build``'s ``log`` (the same
    state: ``main`` checks two folds agree), so the built engine is left as it
    was; a deep copy of it would not do under the compiled core, whose objects
    cannot be copied that way.
    """
    e2 = fold_log(log)
    st = e2.state
    mk = Inputs(prefix="st")
    rng = random.Random(seed)
    t = st.now
    e2.process(mk.tick(t))  # settle the burst first
    leaves = st.budget.leaves()
    times, decided = [], 0
    for step in range(n):
        t += 30
        e2.process(mk.tick(t, cycle=False))  # only ticks move the clock
        running = sorted(st.workloads.running)
        e2.process(mk.finish(rng.choice(running), at=t))
        e2.process(mk.submit(f"st{step}", rng.choice(leaves), rng.choice([1, 2, 4, 8]),
                             rng.choice([0, 900, HOUR]), at=t))
        t0 = time.perf_counter()
        out = decide(st, "bench")
        times.append(time.perf_counter() - t0)
        decided += len(out)
        e2.process(mk.tick(t))
    times.sort()
    return times[len(times) // 2], decided


def fold_fingerprint(log: list) -> str:
    """The state fingerprint of folding ``log`` from empty."""
    return fold_log(log).state.fingerprint()


if __name__ == "__main__":
    main()
