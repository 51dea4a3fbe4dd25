"""Placement: single-host work on the least-free host that fits, gangs of whole hosts all or nothing, one rack, else one block, when labelled."""

from __future__ import annotations

import pytest
from core_helpers import Sim, started


def _fleet(labels):
    """Hosts h0.. with (rack, block) labels."""
    return [(f"h{i}", rack, block) for i, (rack, block) in enumerate(labels)]


@pytest.mark.parametrize(
    ("gpus", "host"),
    [
        (1, "h0"), (2, "h0"),   # h0 has 2 free: the least free host that fits
        (3, "h1"), (5, "h1"),   # h1 has 5 free
        (6, "h2"), (8, "h2"),   # only the empty host fits
    ],
)
def test_single_host_work_goes_to_the_least_free_host_that_fits(gpus, host):
    """A workload of up to 8 GPUs lands on the fitting host with the fewest free GPUs."""
    s = Sim(hosts=3)
    s.submit("six", "lab/a", 6, 3600)
    s.submit("three", "lab/a", 3, 3600)
    assert s.tick() == [
        started("six", [("h0", 6)], True, 3600),
        started("three", [("h1", 3)], True, 3600),
    ]
    s.submit("w", "lab/b", gpus, 60)
    assert s.tick() == [started("w", [(host, gpus)], True, 60)]


def test_equally_free_hosts_are_chosen_by_name():
    """Among hosts with the same free GPUs the first by name wins."""
    s = Sim(hosts=[("n2", None, None), ("n0", None, None), ("n1", None, None)])
    s.submit("w", "lab/a", 2, 60)
    assert s.tick() == [started("w", [("n0", 2)], True, 60)]


@pytest.mark.parametrize(
    ("gpus", "hosts", "busy", "expected"),
    [
        # 2 x 8 on a free fleet: whole hosts, first by name.
        (16, 2, 0, [("h0", 8), ("h1", 8)]),
        # h0 has one GPU taken: the gang skips it.
        (16, 2, 1, [("h1", 8), ("h2", 8)]),
        (24, 3, 0, [("h0", 8), ("h1", 8), ("h2", 8)]),
        # 2 x 4 packs onto the least-free hosts with 4 GPUs (h0 has 7 free).
        (8, 2, 1, [("h0", 4), ("h1", 4)]),
    ],
)
def test_gang_takes_whole_hosts(gpus, hosts, busy, expected):
    """A multi-host workload gets hosts x gpus_per_host on distinct hosts."""
    s = Sim(hosts=3)
    if busy:
        s.submit("busy", "lab/b", busy, 3600)
        s.tick()
    s.submit("g", "lab/a", gpus, 60, hosts=hosts)
    assert s.tick() == [started("g", expected, True, 60)]


def test_gang_is_all_or_nothing():
    """A gang that does not fit entirely starts on no host at all and leaves capacity untouched."""
    s = Sim(hosts=2)
    s.submit("busy", "lab/b", 1, 3600)
    s.tick()
    before = {h: host.free for h, host in s.state.cluster_state.hosts.items()}
    s.submit("g", "lab/a", 16, 60, hosts=2)
    assert s.tick() == []
    assert s.status("g") == "pending"
    assert {h: host.free for h, host in s.state.cluster_state.hosts.items()} == before
    s.finish("busy")
    assert s.tick() == [started("g", [("h0", 8), ("h1", 8)], True, 60)]


def _occupy(s: Sim, host: str, gpus: int) -> None:
    """Put ``gpus`` protected GPUs on ``host`` of a free fleet (filling earlier hosts meanwhile)."""
    fillers = [h for h in sorted(s.state.cluster_state.hosts) if h < host]
    for h in fillers:
        s.submit(f"fill-{h}", "lab/b", 8, 3600)
    s.submit(f"busy-{host}", "lab/b", gpus, 3600)
    s.tick()
    for h in fillers:
        s.finish(f"fill-{h}")
    assert s.state.cluster_state.hosts[host].free == 8 - gpus
    assert sum(h.free for h in s.state.cluster_state.hosts.values()) == \
        8 * len(s.state.cluster_state.hosts) - gpus


@pytest.mark.parametrize(
    ("labels", "busy", "gang", "expected"),
    [
        # No labels: least-free first, then names.
        ([(None, None)] * 4, ("h0", 4), (16, 2), [("h1", 8), ("h2", 8)]),
        # Racks: h1 would be first, but only rack r1 holds two free hosts.
        ([("r0", None), ("r0", None), ("r1", None), ("r1", None)], ("h0", 4), (16, 2),
         [("h2", 8), ("h3", 8)]),
        # A rack is named within its block: "r0" of B1 and "r0" of B2 are two racks,
        # so no rack holds the gang, and block B1 (h0, h2) does.
        ([("r0", "B1"), ("r0", "B2"), ("r1", "B1"), ("r1", "B2")], None, (16, 2),
         [("h0", 8), ("h2", 8)]),
        # Racks inside one block: the gang takes one rack, not the block's two least-free
        # hosts across racks (h1 of r0 and h2 of r1 would come first by name).
        ([("r0", "B1"), ("r0", "B1"), ("r1", "B1"), ("r1", "B1")], ("h0", 1), (16, 2),
         [("h2", 8), ("h3", 8)]),
        # Two racks fit a 2 x 4 gang: the tighter one (fewer free GPUs left) wins.
        ([("r0", None), ("r0", None), ("r1", None), ("r1", None)], ("h2", 4), (8, 2),
         [("h2", 4), ("h3", 4)]),
        # Without labels the same 2 x 4 gang takes the two least-free hosts.
        ([(None, None)] * 4, ("h2", 4), (8, 2), [("h0", 4), ("h2", 4)]),
    ],
)
def test_gang_prefers_one_rack_then_one_block(labels, busy, gang, expected):
    """A gang goes to hosts sharing a rack, else a block, preferring the tightest group."""
    s = Sim(hosts=_fleet(labels))
    if busy is not None:
        _occupy(s, *busy)
    gpus, hosts = gang
    s.at(10).submit("g", "lab/a", gpus, 60, hosts=hosts)
    assert s.tick() == [started("g", expected, True, 70)]


def test_placement_never_uses_unhealthy_hosts():
    """A degraded host gets no new work even when it is the least-free fit."""
    s = Sim(hosts=2)
    s.submit("p", "lab/b", 4, 3600)
    s.tick()
    s.fault("h0")
    s.submit("w", "lab/a", 2, 60)
    assert s.tick() == [started("w", [("h1", 2)], True, 60)]
