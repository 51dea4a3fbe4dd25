"""A hostile producer against the engine: generated inputs with forged ids, causes, times and values.

Hypothesis (seeded, derandomised) builds sequences of inputs of every type,
mostly well formed so the cluster stays busy, with hostile variants mixed in:
ids that squat derived ids or hold control characters, forged causes,
decision types sent as inputs, times far ahead and behind, other clusters,
absurd shapes, budget paths and host sizes, and re-sent ids. After every step:

- nothing but ``InputRefused`` escapes, and a refused input changes nothing;
- every rejection carries a reason code and a detail;
- no GPU is double-booked: each host's free count and its workloads agree;
- every few steps (and at the end) a fold of the journal equals the live state,
  and at the end the replay check re-derives every decision.

``test_hostile_counts`` runs at least 10,000 records in CI and checks the tally.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from events import (
    DECISION_TYPES,
    BudgetEditRejected,
    Event,
    InputRejected,
    Slot,
    WorkloadRejected,
    WorkloadStarted,
)
from events.factory import Inputs
from scheduler import Engine
from scheduler.admission import InputRefused
from scheduler.replay import fold_log, verify_log

TREE = (("lab", ("admin",)), ("lab/a", ("lead-a",)), ("lab/b", ()), ("lab/a/x", ()))
LEAVES = ("lab/a/x", "lab/b")
BAD_IDS = ("T/0", "x/1", "", " ", "a b", "x\n", "nul\x00", "bidi\u202e", "é", "x" * 129)
DELTAS = (0,) * 12 + (-1, -10**6, 1, 29, 30, 31, 40 * 86_400, 2**40)
ACTORS = ("admin", "lead-a", "alice", "mallory")

SETTINGS = settings(max_examples=160, deadline=None, derandomize=True, database=None)

step = st.tuples(
    st.sampled_from(["submit"] * 10 + ["tick"] * 6 + ["finish"] * 2 + [
        "cancel", "fault", "repair", "host", "remove", "node", "shares", "policy", "decision",
        "resend"]),
    st.integers(0, 2**16),       # a seed for this step's choices
    st.sampled_from(["ok"] * 12 + ["bad_id", "cause", "cluster", "squat"]),
    st.sampled_from(DELTAS),
)
steps = st.lists(step, min_size=40, max_size=90)


class Hostile:
    """One engine under attack, with the journal it wrote and a tally of what happened."""

    def __init__(self) -> None:
        self.I = Inputs(prefix="h")
        self.engine = Engine()
        self.journal: list[Event] = []
        self.sent: list[Event] = []
        self.tally: Counter[str] = Counter()
        self.n = 0
        self.feed(self.I.tick(1_000))
        for path, managers in TREE:
            self.feed(self.I.node(path, managers=managers, at=1_000))
        for h in range(3):
            self.feed(self.I.host(f"h{h}", at=1_000))

    @property
    def now(self) -> int:
        return self.engine.state.now

    def feed(self, e: Event) -> None:
        self.sent.append(e)
        self.tally["records"] += 1
        state = self.engine.state
        before = (state.fingerprint(), state.position)
        try:
            out = self.engine.process(e)
        except InputRefused as exc:
            assert exc.reason and exc.detail
            assert (state.fingerprint(), state.position) == before
            self.tally["refused"] += 1
            return
        if out is None:
            self.tally["duplicate"] += 1
            return
        self.journal.append(e)
        self.journal.extend(out)
        rejections = [d for d in out if isinstance(d, WorkloadRejected | BudgetEditRejected
                                                   | InputRejected)]
        for r in rejections:
            assert r.reason and r.detail, r
            assert r.cause == e.id and r.id.startswith(f"{e.id}/")
        self.tally["rejected" if rejections else "accepted"] += 1
        self.check_hosts()

    def check_hosts(self) -> None:
        state = self.engine.state
        for h in state.cluster_state.hosts.values():
            assert 0 <= h.free <= h.gpus, h
            assert sum(h.workloads.values()) == h.gpus - h.free, h
        for w in state.workloads.running.values():
            for host, gpus in w.placement:
                assert state.cluster_state.hosts[host].workloads.get(w.id) == gpus, w

    # -- hostile variants ------------------------------------------------------------------

    def make(self, kind: str, rnd: int, how: str, delta: int) -> Event:
        import random

        r = random.Random(rnd)
        at = max(0, self.now + delta)
        state = self.engine.state
        wl = sorted(state.workloads.all)
        actor = r.choice(ACTORS)
        self.n += 1
        if kind == "submit":
            good = r.random() < 0.8
            gpus, hosts = r.choice([(1, 1), (2, 1), (4, 1), (8, 1), (16, 2)] if good else [
                (0, 1), (9, 1), (-1, 1), (10**9, 1), (24, 3), (8, 0)])
            budget = r.choice(LEAVES) if good else r.choice(["lab", "lab/nope", "lab/x\n",
                                                             "lab/.."])
            e: Event = self.I.submit(f"w{self.n}", budget, gpus, r.choice([0, 0, 60, 900, 3600,
                                                                           -1, 8 * 3600 + 1]),
                                     at=at, hosts=hosts, user=actor,
                                     resumable=r.random() < 0.5, priority=r.randint(0, 2))
        elif kind == "tick":
            e = self.I.tick(self.now + r.choice([1, 30, 60, 600, 3600]), cycle=r.random() < 0.9)
        elif kind == "finish":
            e = self.I.finish(r.choice(wl) if wl else "ghost", at=at)
        elif kind == "cancel":
            e = self.I.cancel(r.choice(wl) if wl else "ghost", actor=actor, at=at)
        elif kind == "fault":
            e = self.I.fault(f"h{r.randint(0, 4)}", r.choice(["degraded", "failed"]), at=at)
            if r.random() < 0.5:  # keep the fleet mostly healthy so work keeps running
                e = self.I.repair(f"h{r.randint(0, 4)}", at=at)
        elif kind == "repair":
            e = self.I.repair(f"h{r.randint(0, 4)}", at=at)
        elif kind == "host":
            e = self.I.host(f"h{r.randint(0, 6)}", gpus=r.choice([8, 8, 0, 65, 10**9]), at=at)
        elif kind == "remove":
            e = self.I.remove_host(f"h{r.randint(0, 4)}", at=at)
        elif kind == "node":
            e = self.I.node(r.choice(["lab/c", "lab/a/y", "lab/x\n", "lab/..", "other", "lab/b/z"]),
                            shares=r.choice([1, 0, -1, 2**62]), actor=actor, at=at)
        elif kind == "shares":
            e = self.I.shares(r.choice(["lab", "lab/a"]), {r.choice(["a", "b", "x", "a/x", ".."]):
                                                           r.choice([1, 5, -1, 10**10])},
                              actor=actor, at=at)
        elif kind == "policy":
            e = self.I.policy(actor=actor, at=at, dedupe_window_s=r.choice([60, 86_400, -1]),
                              clock_skew_s=r.choice([30, 0, -5]))
        elif kind == "decision":
            e = r.choice([
                WorkloadStarted(id=f"d{self.n}", at=at, workload=r.choice(wl) if wl else "ghost",
                                placement=(Slot(host="h0", gpus=8),), allocated=True,
                                protected_until=at + 60),
                InputRejected(id=f"d{self.n}", at=at, reason="x"),
            ])
        else:  # resend an earlier input, sometimes with another body under the same id
            old = r.choice(self.sent)
            e = old if r.random() < 0.5 else msgspec.structs.replace(old, at=at)
        if how == "bad_id":
            e = msgspec.structs.replace(e, id=r.choice(BAD_IDS))
        elif how == "cause":
            e = msgspec.structs.replace(e, cause=r.choice(["h1", "forged", self.sent[-1].id]))
        elif how == "cluster":
            e = msgspec.structs.replace(e, cluster="other")
        elif how == "squat":
            # The id the next tick's first decision will get: a producer trying to take it.
            e = msgspec.structs.replace(e, id=f"h{self.I.n + 1}/0")
        return e


def run(ops: list[tuple[str, int, str, int]]) -> Hostile:
    h = Hostile()
    for i, (kind, rnd, how, delta) in enumerate(ops):
        h.feed(h.make(kind, rnd, how, delta))
        if i % 15 == 14:
            assert fold_log(h.journal).state.fingerprint() == h.engine.state.fingerprint()
    assert fold_log(h.journal).state.fingerprint() == h.engine.state.fingerprint()
    result = verify_log(enumerate(h.journal, 1))
    assert result.ok, result.divergence
    assert not any(type(e) in DECISION_TYPES for e in h.journal if e.cause is None)
    assert not any("/" in e.id for e in h.journal if type(e) not in DECISION_TYPES)
    assert all(e.cause is None for e in h.journal if type(e) not in DECISION_TYPES)
    return h


TOTALS: Counter[str] = Counter()


@SETTINGS
@given(ops=steps)
def test_hostile_inputs_never_break_the_engine(ops: list[Any]) -> None:
    TOTALS.update(run(ops).tally)


def test_hostile_counts() -> None:
    """The generated run above tried at least 10,000 records; every one was refused, rejected, deduped or taken."""
    if TOTALS["records"] == 0:  # run alone: generate the same examples here
        test_hostile_inputs_never_break_the_engine()
    assert TOTALS["records"] >= 10_000, TOTALS
    assert TOTALS["records"] == (TOTALS["refused"] + TOTALS["duplicate"] + TOTALS["rejected"]
                                 + TOTALS["accepted"])
    assert TOTALS["refused"] > 1_000 and TOTALS["rejected"] > 1_000 and TOTALS["accepted"] > 1_000
