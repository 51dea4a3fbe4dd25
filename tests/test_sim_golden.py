"""Golden logs: small hand-checked scenarios must produce exactly the recorded event log.

Each scenario in tests/golden/*.toml has a .jsonl next to it, checked by hand
(the decisions are also asserted below in plain words, so a regenerated golden
file cannot silently encode a wrong decision). Regenerate after an intended
change with ``ALLOT_UPDATE_GOLDEN=1 pytest tests/test_sim_golden.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.sim_helpers import GOLDEN, decisions, log_bytes, simulate

SCENARIOS = sorted(GOLDEN.glob("*.toml"))


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda p: p.stem)
def test_log_matches_golden_file(scenario: Path) -> None:
    """The simulated log is byte-identical to the hand-checked golden log."""
    golden = scenario.with_suffix(".jsonl")
    actual = log_bytes(scenario)
    if os.environ.get("ALLOT_UPDATE_GOLDEN"):
        golden.write_bytes(actual)
    assert golden.exists(), f"no golden log {golden.name}; run with ALLOT_UPDATE_GOLDEN=1"
    assert actual == golden.read_bytes()


def _decided(name: str) -> list[tuple[int, str, str, str]]:
    log, epoch = simulate(GOLDEN / f"{name}.toml")
    return [d for d in decisions(log, epoch) if d[1] != "workload.submitted"]


def test_debug_job_preempts_unallocated_work() -> None:
    """A debug job reclaims GPUs from unallocated work at once; the resumable victim resumes after."""
    assert _decided("debug_preempts_unallocated") == [
        (0, "workload.started", "eval", "h0000:8"),
        (60, "workload.preempted", "eval", "reclaim_unallocated by debug requeued"),
        (60, "workload.started", "debug", "h0000:2"),
        (360, "workload.finished", "debug", ""),
        (360, "workload.started", "eval", "h0000:8"),
        # 3,600 s of work, 60 s done before the preemption: 3,540 s left.
        (3900, "workload.finished", "eval", ""),
    ]


def test_protected_job_survives_a_better_ranked_arrival() -> None:
    """A better-ranked arrival waits for the running job's minimum runtime, then preempts it."""
    assert _decided("protected_survives") == [
        (0, "workload.started", "long", "h0000:8"),
        (3600, "workload.preempted", "long", "fair_share by newcomer requeued"),
        (3600, "workload.started", "newcomer", "h0000:8"),
        (5400, "workload.finished", "newcomer", ""),
        (5400, "workload.started", "long", "h0000:8"),
        (16200, "workload.finished", "long", ""),
    ]


def test_gang_waits_for_its_reservation() -> None:
    """A blocked gang holds the hosts that free soonest; only short work may backfill them."""
    got = _decided("gang_reservation")
    assert (2000, "workload.reserved", "gang", "h0000,h0001,h0002 until 10800") in got
    # c-long needs a whole host too: its size class has its own slot, so it holds h0003
    # (where b4's protection ends at 14400) instead of waiting for the gang's slot.
    assert (2100, "workload.reserved", "c-long", "h0003 until 14400") in got
    started = {d[2]: d for d in got if d[1] == "workload.started"}
    # The 8-hour job may not take the free reserved host h0000 at t=2000 ...
    assert started["c-long"][0] == 14400 and started["c-long"][3] == "h0003:8"
    # ... but a 10-minute debug job of the over-used team may: it ends before the
    # reservation does, and it is work the gang may preempt.
    assert started["b-debug"][:1] == (2100,) and started["b-debug"][3] == "h0000:2"
    # At the reservation time the gang preempts the now unprotected work and starts.
    assert started["gang"] == (10800, "workload.started", "gang", "h0000:8,h0001:8,h0002:8")
    assert (10800, "workload.preempted", "b2", "fair_share by gang requeued") in got
    assert (10800, "workload.preempted", "b3", "fair_share by gang requeued") in got


def test_faulty_host_drains_at_minimum_runtime() -> None:
    """A degraded host takes no new work and drains its job when protection ends, then repairs."""
    assert _decided("host_drain") == [
        (0, "workload.started", "a-train", "h0000:8"),
        (0, "workload.started", "b-short", "h0001:8"),
        (600, "host.faulted", "h0000", ""),
        # 'late' does not land on the degraded host: it waits for the healthy one.
        (1800, "workload.finished", "b-short", ""),
        (1800, "workload.started", "late", "h0001:4"),
        (2400, "workload.finished", "late", ""),
        (3600, "workload.preempted", "a-train", "host_drain by h0000 requeued"),
        (3600, "host.drained", "h0000", ""),
        (3601, "workload.started", "a-train", "h0001:8"),
        (7201, "workload.finished", "a-train", ""),
        (10800, "host.repaired", "h0000", ""),
    ]
