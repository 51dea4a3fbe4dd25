"""Validation: every refused input is answered by one rejection event with a clear reason and changes nothing."""

from __future__ import annotations

import msgspec
import pytest
from core_helpers import DEEP, HOUR, Sim, brief

from events import (
    BudgetEditRejected,
    ClockTicked,
    HostDrained,
    InputRejected,
    Slot,
    WorkloadPreempted,
    WorkloadRejected,
    WorkloadReserved,
    WorkloadStarted,
)
from scheduler.admission import InputRefused


def _sim() -> Sim:
    """The DEEP tree on two hosts, with one running and one pending workload."""
    s = Sim(DEEP, hosts=2)
    s.submit("run", "lab/p1/x", 16, 60, hosts=2, user="alice")
    s.tick()
    s.submit("wait", "lab/p1/x", 8, 60, user="alice")
    s.tick(1)
    assert s.running() == ["run"] and s.status("wait") == "pending"
    return s


def _workload_state(s: Sim) -> object:
    st = s.state
    return (st.workloads.snapshot(), st.cluster_state.snapshot(), st.budget.snapshot(),
            st.usage.snapshot(), sorted(st.reservations.items()))


SUBMIT_REJECTIONS = [
    # (kwargs for Inputs.submit, reason)
    (dict(budget="lab/p1/x", gpus=1, min_runtime_s=8 * HOUR + 1), "min_runtime_over_cap"),
    (dict(budget="lab/p1/x", gpus=1, min_runtime_s=-1), "negative_min_runtime"),
    (dict(budget="lab/p1/x", gpus=1, min_runtime_s=60, checkpoint_interval_s=0), "bad_preemption_cost"),
    (dict(budget="lab/p1/x", gpus=1, min_runtime_s=60, restart_overhead_s=-1), "bad_preemption_cost"),
    (dict(budget="lab/p1/x", gpus=24, hosts=3, min_runtime_s=60), "too_large"),
    (dict(budget="lab/p1/x", gpus=0, min_runtime_s=60), "malformed_shape"),
    (dict(budget="lab/p1/x", gpus=9, min_runtime_s=60), "malformed_shape"),
    (dict(budget="lab/p1/x", gpus=10, hosts=3, min_runtime_s=60), "malformed_shape"),
    (dict(budget="lab/p1/x", gpus=16, hosts=2, gpus_per_host=4, min_runtime_s=60),
     "malformed_shape"),
    (dict(budget="lab/p1/x", gpus=4, hosts=0, min_runtime_s=60), "malformed_shape"),
    (dict(budget="lab/p1/nope", gpus=1, min_runtime_s=60), "unknown_budget"),
    (dict(budget="elsewhere", gpus=1, min_runtime_s=60), "unknown_budget"),
    (dict(budget="lab/p1", gpus=1, min_runtime_s=60), "not_a_leaf"),
    (dict(budget="lab", gpus=1, min_runtime_s=60), "not_a_leaf"),
    # Same workload id as the running one, different contract.
    (dict(workload="run", budget="lab/p1/x", gpus=8, min_runtime_s=60, user="alice"),
     "duplicate_workload"),
    (dict(workload="wait", budget="lab/p1/y", gpus=8, min_runtime_s=60, user="alice"),
     "duplicate_workload"),
    (dict(workload="wait", budget="lab/p1/x", gpus=8, min_runtime_s=60, user="alice",
          priority=3), "duplicate_workload"),
]


@pytest.mark.parametrize(("kw", "reason"), SUBMIT_REJECTIONS)
def test_invalid_submission_is_rejected_with_its_reason(kw, reason):
    """A refused submission yields exactly one workload.rejected naming the rule, and no state change."""
    s = _sim()
    kw = {"workload": "new", **kw}
    before = _workload_state(s)
    event = s.I.submit(kw.pop("workload"), kw.pop("budget"), kw.pop("gpus"), kw.pop("min_runtime_s"),
                       at=5, **kw)
    out = s.feed(event)
    assert brief(out) == [("rejected", event.workload, reason)]
    (rej,) = out
    assert isinstance(rej, WorkloadRejected)
    # Stamped with the scheduler's clock (1), not the producer's at=5.
    assert (rej.id, rej.cause, rej.at, rej.actor) == (f"{event.id}/0", event.id, 1, "allot.scheduler")
    assert rej.detail
    assert _workload_state(s) == before


@pytest.mark.parametrize(
    "kw",
    [
        dict(gpus=1, min_runtime_s=8 * HOUR),   # exactly the cap
        dict(gpus=16, hosts=2, min_runtime_s=0),
        dict(gpus=8, hosts=2, gpus_per_host=4, min_runtime_s=1),
        dict(gpus=8, hosts=1, gpus_per_host=8, min_runtime_s=0),
    ],
)
def test_valid_edge_submissions_are_accepted(kw):
    """Submissions on the edge of a rule (the cap itself, unallocated gangs, split shapes) are accepted silently."""
    s = _sim()
    event = s.I.submit("new", "lab/p1/y", at=5, **kw)
    assert s.feed(event) == []
    assert s.status("new") == "pending"


def test_cap_follows_the_policy():
    """The minimum-runtime cap is the policy's knob."""
    s = Sim(DEEP, hosts=1, min_runtime_cap_s=600)
    assert s.submit("ok", "lab/p1/x", 1, 600) == []
    assert s.submit("long", "lab/p1/x", 1, 601) == [("rejected", "long", "min_runtime_over_cap")]


def test_identical_resubmission_is_ignored_silently():
    """Re-sending an identical contract under a new event id yields no event and changes no workload."""
    s = _sim()
    before = _workload_state(s)
    for wid in ("run", "wait"):
        again = s.I.submit(wid, "lab/p1/x", 16 if wid == "run" else 8, 60, at=5, user="alice",
                           hosts=2 if wid == "run" else 1)
        assert s.feed(again) == []
    assert _workload_state(s) == before


def test_duplicate_event_id_is_ignored():
    """An event id seen before makes process() return None and leaves the fingerprint unchanged."""
    s = _sim()
    before = s.state.fingerprint()
    first = s.journal[0]
    assert s.engine.process(first) is None
    # The same id with another body is still a duplicate.
    fake = msgspec.structs.replace(s.I.submit("other", "lab/p1/y", 1, 60, at=5), id=first.id)
    assert s.engine.process(fake) is None
    last_tick = [e for e in s.journal if isinstance(e, ClockTicked)][-1]
    assert s.engine.process(last_tick) is None
    assert s.state.fingerprint() == before
    assert "other" not in s.state.workloads.all


@pytest.mark.parametrize(
    ("actor", "parent", "allowed"),
    [
        ("admin", "lab", True),          # the root's manager
        ("admin", "lab/p1", True),       # a manager of an ancestor
        ("lead-p1", "lab/p1", True),     # the node's own manager
        ("lead-p2", "lab/p1", False),    # a sibling's manager
        ("lead-x", "lab/p1", False),     # a child's manager does not manage its parent
        ("lead-p1", "lab", False),       # nor does a program lead manage the root
        ("alice", "lab/p2", False),
    ],
)
def test_only_managers_of_the_parent_or_an_ancestor_edit_shares(actor, parent, allowed):
    """budget.shares_set is refused (not_a_manager) unless the actor manages the parent or an ancestor."""
    s = _sim()
    child = {"lab": "p2", "lab/p1": "y", "lab/p2": "z"}[parent]
    before = s.state.budget.snapshot()
    out = s.feed(s.I.shares(parent, {child: 5}, actor=actor, at=5))
    if allowed:
        assert out == []
        assert s.state.budget.nodes[f"{parent}/{child}"].shares == 5
    else:
        assert brief(out) == [("edit_rejected", "not_a_manager")]
        assert isinstance(out[0], BudgetEditRejected) and out[0].cause == s.journal[-2].id
        assert s.state.budget.snapshot() == before


@pytest.mark.parametrize(
    ("path", "actor", "reason"),
    [
        ("lab/p2/w", "lead-p1", "not_a_manager"),
        ("lab/p2/w", "lead-p2", None),
        ("lab/p2/w", "admin", None),
        ("lab/p3/w", "admin", "unknown_node"),
        ("lab/p1", "admin", "already_defined"),
        ("other", "admin", "bad_path"),           # a second root
        ("lab/bad name", "admin", "bad_path"),
        ("lab/p1/x/sub", "lead-x", "parent_has_workloads"),
    ],
)
def test_budget_node_definitions_are_validated(path, actor, reason):
    """Defining a node needs a manager of the parent (or an ancestor), a fresh valid path and an idle parent leaf."""
    s = _sim()
    out = s.feed(s.I.node(path, actor=actor, at=5))
    assert brief(out) == ([] if reason is None else [("edit_rejected", reason)])
    assert (path in s.state.budget) == (reason is None or reason == "already_defined")


@pytest.mark.parametrize(
    ("actor", "reason"),
    [
        ("alice", None),          # the owner
        ("lead-x", None),         # the leaf's manager
        ("admin", None),          # a manager of an ancestor
        ("lead-p2", "not_authorised"),
        ("bob", "not_authorised"),
    ],
)
@pytest.mark.parametrize("workload", ["run", "wait"])
def test_only_owner_or_manager_may_cancel(actor, reason, workload):
    """A cancel by anyone but the owner or a manager of the budget is refused with not_authorised."""
    s = _sim()
    out = s.feed(s.I.cancel(workload, actor, at=5))
    if reason is None:
        assert out == []
        assert s.status(workload) == "cancelled"
    else:
        assert brief(out) == [("input_rejected", reason)]
        assert s.status(workload) in ("running", "pending")


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda s: s.I.finish("wait", at=5), "not_running"),
        (lambda s: s.I.finish("ghost", at=5), "unknown_workload"),
        (lambda s: s.I.cancel("ghost", "alice", at=5), "unknown_workload"),
        (lambda s: s.I.policy(actor="lead-p1", at=5), "not_authorised"),
        (lambda s: s.I.policy(window_s=0, at=5), "bad_policy"),
        (lambda s: s.I.policy(window_s=60, bucket_s=3600, at=5), "bad_policy"),
    ],
)
def test_invalid_inputs_are_rejected(make, reason):
    """Finishing a non-running workload, unknown ids, bad policies and other clusters' events are refused."""
    s = _sim()
    before = _workload_state(s)
    policy = s.state.policy
    out = s.feed(make(s))
    assert brief(out) == [("input_rejected", reason)]
    assert isinstance(out[0], InputRejected)
    assert _workload_state(s) == before
    assert s.state.policy == policy


def test_ended_workload_cannot_be_finished_or_cancelled_again():
    """finish and cancel of an ended workload are refused."""
    s = _sim()
    assert s.feed(s.I.finish("run", at=5)) == []
    assert brief(s.feed(s.I.finish("run", at=6))) == [("input_rejected", "not_running")]
    assert brief(s.feed(s.I.cancel("run", "alice", at=6))) == [("input_rejected", "already_ended")]


def _decisions():
    env = dict(at=5, actor="mallory", source="cli")
    return [
        WorkloadStarted(id="d1", **env, workload="wait", placement=(Slot(host="h0", gpus=8),),
                        allocated=True, protected_until=65),
        WorkloadPreempted(id="d2", **env, workload="run", reason="fair_share", by="wait",
                          requeued=False),
        WorkloadReserved(id="d3", **env, workload="wait", hosts=("h0",), until=99),
        WorkloadRejected(id="d4", **env, workload="run", reason="too_large"),
        HostDrained(id="d5", **env, host="h0"),
        BudgetEditRejected(id="d6", **env, reason="not_a_manager"),
        InputRejected(id="d7", **env, reason="not_authorised"),
    ]


@pytest.mark.parametrize("event", _decisions(), ids=lambda e: type(e).__name__)
def test_decision_events_published_as_input_are_refused(event):
    """A decision-type event fed to process() is refused (not journaled) and changes nothing."""
    s = _sim()
    before = (_workload_state(s), s.state.position, len(s.journal))
    with pytest.raises(InputRefused) as err:
        s.feed(event)
    assert err.value.reason == "not_an_input"
    assert (_workload_state(s), s.state.position, len(s.journal)) == before


@pytest.mark.parametrize("event", _decisions()[:3], ids=lambda e: type(e).__name__)
def test_decision_events_with_a_forged_cause_are_still_refused(event):
    """A decision-type event published as input is refused even when it carries a cause."""
    s = _sim()
    before = (_workload_state(s), s.state.position)
    forged = msgspec.structs.replace(event, cause="e1")
    with pytest.raises(InputRefused) as err:
        s.feed(forged)
    assert err.value.reason == "not_an_input"
    assert (_workload_state(s), s.state.position) == before
