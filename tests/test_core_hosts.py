"""Host faults: degraded hosts take no new work and drain at protection end, failed hosts empty at once, repairs restore service."""

from __future__ import annotations

import pytest
from core_helpers import Sim, brief, preempted, started


def test_degraded_host_takes_no_new_work():
    """A degraded host is skipped by placement; with no healthy host the work waits."""
    s = Sim(hosts=1)
    s.fault("h0")
    s.submit("w", "lab/a", 1, 60)
    assert s.tick() == [("drained", "h0")]
    assert s.tick(10) == []
    assert s.status("w") == "pending"
    assert s.state.cluster_state.hosts["h0"].health == "repairing"


@pytest.mark.parametrize(
    ("min_runtime", "resumable", "drain_at"),
    [
        (0, False, 100),      # unallocated: drained at the first cycle after the fault
        (0, True, 100),
        (600, True, 600),     # allocated: drained exactly when its protection ends
        (600, False, 600),
        (50, False, 100),     # protection already over at the fault: drained at once
    ],
)
def test_degraded_host_drains_each_workload_when_its_protection_ends(min_runtime, resumable, drain_at):
    """Running work on a degraded host is preempted (host_drain) when unprotected, then the host is drained."""
    s = Sim(hosts=2)
    s.submit("w", "lab/a", 8, min_runtime, resumable=resumable)
    assert s.tick() == [started("w", [("h0", 8)], min_runtime > 0, min_runtime)]
    s.at(100)
    assert s.fault("h0") == []
    if drain_at > 100:
        assert s.tick() == []
        assert s.tick(drain_at - 1) == []
        assert s.running() == ["w"]
    assert s.tick(drain_at) == [preempted("w", "host_drain", "h0", resumable), ("drained", "h0")]
    assert s.status("w") == ("pending" if resumable else "preempted")
    # Drained once, not again; a resumable workload restarts on the healthy host.
    restart = [started("w", [("h1", 8)], min_runtime > 0, drain_at + 1 + min_runtime)]
    assert s.tick(drain_at + 1) == (restart if resumable else [])


def test_degraded_host_keeps_protected_work_while_draining_the_rest():
    """Only workloads past protection leave; the host is drained when the last one has gone."""
    s = Sim(hosts=1)
    s.submit("long", "lab/a", 4, 1000)
    s.submit("short", "lab/a", 2, 300)
    s.submit("free", "lab/b", 2, 0)
    s.tick()
    s.at(10).fault("h0")
    assert s.tick() == [preempted("free", "host_drain", "h0", False)]
    assert s.tick(300) == [preempted("short", "host_drain", "h0", False)]
    assert s.tick(1000) == [preempted("long", "host_drain", "h0", False), ("drained", "h0")]


@pytest.mark.parametrize("resumable", [True, False])
@pytest.mark.parametrize("min_runtime", [0, 3600])
def test_failed_host_ends_work_at_once_even_if_protected(resumable, min_runtime):
    """A failure preempts everything on the host in reaction to the fault itself (host_failure), then drains it."""
    s = Sim(hosts=2)
    s.submit("w", "lab/a", 8, min_runtime, resumable=resumable)
    s.tick()
    s.submit("other", "lab/b", 8, 3600)
    s.tick()
    assert s.state.cluster_state.hosts["h0"].workloads == {"w": 8}
    s.at(60)
    assert s.fault("h0", "failed") == [
        preempted("w", "host_failure", "h0", resumable), ("drained", "h0")]
    assert s.status("w") == ("pending" if resumable else "preempted")
    assert s.state.cluster_state.hosts["h0"].free == 8
    assert s.running() == ["other"]


def test_failed_host_stops_a_whole_gang_and_frees_its_other_hosts():
    """A gang with one host failed is preempted entirely; its healthy host is free again."""
    s = Sim(hosts=3)
    s.submit("g", "lab/a", 16, 600, hosts=2, resumable=True)
    assert s.tick() == [started("g", [("h0", 8), ("h1", 8)], True, 600)]
    s.at(50)
    assert s.fault("h1", "failed") == [preempted("g", "host_failure", "h1", True), ("drained", "h1")]
    assert {h: x.free for h, x in s.state.cluster_state.hosts.items()} == {"h0": 8, "h1": 8, "h2": 8}
    assert s.tick() == [started("g", [("h0", 8), ("h2", 8)], True, 650)]


def test_failure_overrides_a_degradation():
    """A failed fault on a degraded host with protected work ends that work at once."""
    s = Sim(hosts=1)
    s.submit("w", "lab/a", 8, 3600)
    s.tick()
    s.at(10).fault("h0")
    assert s.tick() == []
    assert s.fault("h0", "failed") == [preempted("w", "host_failure", "h0", False), ("drained", "h0")]


def test_repaired_host_is_back_in_service():
    """After host.repaired, pending work starts on the host again."""
    s = Sim(hosts=1)
    s.fault("h0", "failed")
    s.submit("w", "lab/a", 8, 60)
    assert s.tick() == []
    s.at(100)
    assert s.repair("h0") == []
    assert s.state.cluster_state.hosts["h0"].health == "ok"
    assert s.tick() == [started("w", [("h0", 8)], True, 160)]


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda s: s.I.repair("h0"), "host_healthy"),
        (lambda s: s.I.repair("ghost"), "unknown_host"),
        (lambda s: s.I.fault("ghost"), "unknown_host"),
        (lambda s: s.I.host("h0"), "host_exists"),
        (lambda s: s.I.host("h9", gpus=0), "bad_host"),
        (lambda s: s.I.remove_host("ghost"), "unknown_host"),
    ],
)
def test_invalid_host_inputs_are_rejected(make, reason):
    """Host inputs that make no sense are answered with input.rejected and change nothing."""
    s = Sim(hosts=1)
    before = s.state.cluster_state.snapshot()
    assert brief(s.feed(make(s))) == [("input_rejected", reason)]
    assert s.state.cluster_state.snapshot() == before


def test_busy_host_cannot_be_removed():
    """host.removed is refused while workloads run on the host."""
    s = Sim(hosts=1)
    s.submit("w", "lab/a", 1, 60)
    s.tick()
    assert brief(s.feed(s.I.remove_host("h0"))) == [("input_rejected", "host_busy")]
    assert "h0" in s.state.cluster_state.hosts


def test_removing_a_faulty_host_before_it_drained_keeps_cycles_working():
    """An empty degraded host removed before its drain leaves later cycles running normally."""
    s = Sim(hosts=2)
    s.fault("h0")
    assert s.feed(s.I.remove_host("h0")) == []
    s.submit("w", "lab/a", 8, 60)
    assert s.tick(1) == [started("w", [("h1", 8)], True, 61)]
    assert sorted(s.state.cluster_state.hosts) == ["h1"]
