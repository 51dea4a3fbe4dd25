"""allot explain: what blocks a waiting workload, as the cycle itself recorded it, in words."""

from __future__ import annotations

import pytest
from core_helpers import Sim

from scheduler.explain import explain


def _deep_queue() -> Sim:
    """h1 has 4 GPUs free; lab/a queues 100 unallocated 8-GPU evals, then a 4-GPU one."""
    s = Sim(hosts=2)
    s.submit("b-full", "lab/b", 8, 3600)
    s.submit("b-half", "lab/b", 4, 3600)
    s.tick()
    s.at(10)
    for i in range(100):
        s.submit(f"eval8-{i:03d}", "lab/a", 8, 0)
    s.submit("eval4", "lab/a", 4, 0)
    return s


def test_work_that_fits_deep_in_line_is_said_to_start():
    """The 101st eval of its queue fits: explain says it starts, not that the cycle did not reach it."""
    exp = explain(_deep_queue().state, "eval4")
    assert (exp.queue_position, exp.queue_length) == (101, 101)
    assert exp.cycle is not None and exp.cycle.status == "started"
    assert exp.blocked_by is None
    assert "It starts at the next cycle." in exp.summary


def test_unallocated_work_that_fits_nowhere_is_told_how_much_is_free():
    """An 8-GPU eval waits because no host has 8 GPUs free; the answer says how many the best host has."""
    exp = explain(_deep_queue().state, "eval8-073")
    assert exp.blocked_by == "no_free_gpus"
    # (As of the end of the explained cycle, in which the 4-GPU eval takes the last 4.)
    assert "no healthy host has 8 free GPUs (the most free on one: 0)" in exp.summary[-1]


def _blocked(setup) -> tuple[Sim, str]:
    s = Sim(((("lab", 1, ("admin",)), ("lab/a", 1, ()), ("lab/b", 1, ()), ("lab/c", 1, ()))),
            hosts=2)
    return setup(s)


def _protected(s: Sim) -> tuple[Sim, str]:
    s.submit("b1", "lab/b", 8, 1000)
    s.submit("b2", "lab/b", 8, 3000)
    s.tick()
    s.at(10).submit("w", "lab/a", 4, 60)    # (not a whole host: no reservation for it)
    return s, "w"


def _fragmented(s: Sim) -> tuple[Sim, str]:
    s.submit("b1", "lab/b", 4, 3600)
    s.submit("tmp", "lab/b", 4, 3600)  # packs onto h0 beside b1 ...
    s.tick()
    s.submit("b2", "lab/b", 4, 3600)   # ... so this one takes half of h1
    s.tick()
    s.finish("tmp")                    # 8 GPUs free, 4 on each host
    s.at(10).submit("w", "lab/a", 6, 60)
    return s, "w"


def _faulty(s: Sim) -> tuple[Sim, str]:
    s.fault("h1")
    s.submit("w", "lab/a", 16, 60, hosts=2)
    return s, "w"


def _better_ranked(s: Sim) -> tuple[Sim, str]:
    s.run_history("lab/a", 8, 3600)    # a used far more than c
    s.submit("c1", "lab/c", 8, 60)
    s.submit("c2", "lab/c", 8, 60)
    s.tick()
    s.at(s.now + 600).submit("w", "lab/a", 8, 60)
    return s, "w"


def _reserved_hosts(s: Sim) -> tuple[Sim, str]:
    s.submit("b1", "lab/b", 8, 1000)
    s.tick()
    s.at(10).submit("G", "lab/a", 16, 60, hosts=2)
    s.submit("s", "lab/b", 1, 60)      # places, so G's reservation (h0, h1 until 1000) is made
    s.tick()
    s.submit("long", "lab/c", 1, 5000)  # fits h1's free GPUs, but would be protected past 1000
    return s, "long"


@pytest.mark.parametrize(
    ("setup", "blocked_by", "until"),
    [
        (_protected, "protected_victims", 1000),
        (_fragmented, "fragmentation", None),
        (_faulty, "faulty_hosts", None),
        (_better_ranked, "better_ranked", None),
        (_reserved_hosts, "reserved_hosts", 1000),
    ],
    ids=lambda v: v.__name__.strip("_") if callable(v) else str(v),
)
def test_explain_names_what_blocks_a_workload(setup, blocked_by, until):
    """The reason explain gives is the one the traced cycle recorded for that workload."""
    s, wid = _blocked(setup)
    exp = explain(s.state, wid)
    assert (exp.blocked_by, exp.until) == (blocked_by, until), exp.summary
    assert exp.cycle is not None and exp.cycle.reason == blocked_by


def test_a_reservation_holder_is_told_when_it_starts():
    """A workload holding a reservation is told its hosts and the time it starts by."""
    s, _ = _blocked(_reserved_hosts)
    exp = explain(s.state, "G")
    assert (exp.blocked_by, exp.hosts, exp.until) == ("reserved", ("h0", "h1"), 1000)
    assert ("It holds a reservation on h0, h1: it starts by 1970-01-01 00:16:40 UTC"
            in exp.summary[-1])


def test_the_last_preemption_names_the_preemptor_its_side_and_why() -> None:
    """A preempted workload is told when, by whom, and why they outranked it, in dates."""
    s = Sim(hosts=2, preemption_rule="reclaim", borrowed_protection_s=0)
    s.submit("a1", "lab/a", 8, 3600)
    s.submit("a2", "lab/a", 8, 3600)
    s.tick()
    s.at(60)
    s.submit("b1", "lab/b", 8, 3600)
    s.tick()
    text = " ".join(explain(s.state, "a2").summary)
    assert ("It was last preempted on 1970-01-01 00:01:00 UTC (reclaim, by b1 of lab/b): "
            "lab/a held more than its guaranteed fraction of the cluster, and lab/b stayed "
            "within its own.") in text


def test_durations_and_dates_read_as_words() -> None:
    from scheduler.time_text import date_text, duration_text

    assert [duration_text(s) for s in (0, 45, 720, 9000, 268_000)] == [
        "0 s", "45 s", "12 min", "2.5 h", "3.1 d"]
    assert date_text(1767571200) == "2026-01-05 00:00:00 UTC"


def _failed_host(grace_s: int = 0) -> Sim:
    """w (resumable, 8 GPUs) runs on h0; o (same leaf) holds half of h1; h0 then fails."""
    s = Sim(hosts=2, preemption_grace_s=grace_s)
    s.submit("w", "lab/a", 8, 3600, resumable=True)
    s.submit("o", "lab/a", 4, 3600)
    s.tick()
    assert s.status("w") == "running"
    s.at(30).fault("h0" if s.state.workloads.all["w"].placement[0][0] == "h0" else "h1",
                   "failed")
    s.tick()
    return s


def test_a_host_failure_is_told_as_such_and_the_requeue_with_it() -> None:
    s = _failed_host()
    text = " ".join(explain(s.state, "w").summary)
    host = s.state.last_preemption["w"][1]
    assert ("It was last preempted on 1970-01-01 00:00:30 UTC (host_failure): its host "
            f"{host} failed, which ends its work at once, protected or not.") in text
    assert "It was requeued: it resumes from its last checkpoint when it starts again." in text
    # Blocked by its own allocation's work on the other host; the faulty one is named.
    assert f"Faulty hosts big enough for it are out until repaired: {host}." in text
    assert "work of its own allocation with the same or a higher priority" in text


def test_a_run_stopping_under_its_grace_is_told_what_it_holds_and_until_when() -> None:
    s = _failed_host(grace_s=120)
    text = " ".join(explain(s.state, "w").summary)
    host = s.state.last_preemption["w"][1]
    assert (f"Its preempted run 1 is stopping (SIGTERM sent): its GPUs ({host}:8) take no other "
            "work until its executor reports it stopped, or the grace ends at "
            "1970-01-01 00:02:30 UTC, when it is killed.") in text
