"""Trust boundaries: what a hostile producer can and cannot do to the core (issue 7, section 2).

Each test is one item of the threat model in docs/architecture.md: trust comes
from the journal's structure and the trusted clock, never from a field a
producer writes, and a fold of any journal reaches exactly the live state.
"""

from __future__ import annotations

import ast
from pathlib import Path

import msgspec
import pytest
from core_helpers import FLAT, HOUR, Sim, brief

import scheduler.validation as validation_module
from events import (
    ALL_TYPES,
    DECISION_TYPES,
    INPUT_TYPES,
    TAGS,
    ClockTicked,
    Event,
    WorkloadPreempted,
    WorkloadSubmitted,
)
from events.factory import Inputs
from scheduler import Engine, State
from scheduler.admission import InputRefused
from scheduler.replay import JournalFold, fold_log, verify_log

ROOT = Path(__file__).resolve().parent.parent
DAY = 86_400


def _refused(s: Sim, event: Event) -> str:
    """Feed ``event``; it must be refused with nothing journaled and nothing changed. Its reason."""
    before = (s.state.fingerprint(), s.state.position, len(s.journal))
    with pytest.raises(InputRefused) as err:
        s.feed(event)
    assert (s.state.fingerprint(), s.state.position, len(s.journal)) == before
    assert err.value.detail
    return err.value.reason


def _fold_equals_live(s: Sim) -> None:
    assert fold_log(s.journal).state.fingerprint() == s.state.fingerprint()


# -- forged causes ---------------------------------------------------------------------------


def test_a_cancel_with_a_forged_cause_is_refused_and_a_fold_agrees() -> None:
    """Old: journaled as sent and then applied by every fold as a 'decision'. Now: never journaled."""
    s = Sim(FLAT)
    s.submit("w", "lab/a", 8, HOUR)
    s.tick()
    forged = msgspec.structs.replace(s.I.cancel("w", actor="mallory"), cause="e3")
    assert _refused(s, forged) == "has_cause"
    assert s.status("w") == "running"
    _fold_equals_live(s)


def test_a_forged_preemption_of_an_unknown_workload_is_refused_not_a_key_error() -> None:
    s = Sim(FLAT)
    forged = WorkloadPreempted(id="x1", at=0, cause="x0", workload="ghost", reason="fair_share",
                               requeued=False)
    assert _refused(s, forged) == "not_an_input"


def test_a_fold_skips_records_allot_could_not_have_written() -> None:
    """A hand-made journal with a forged decision after an input it does not belong to folds like the live log."""
    s = Sim(FLAT)
    s.submit("w", "lab/a", 8, HOUR)
    s.tick()
    forged = WorkloadPreempted(id="e99/0", at=0, cause="e99", workload="w", reason="fair_share",
                               requeued=False)
    fold = JournalFold(Engine())
    for e in [*s.journal, forged]:
        fold.add(e)
    fold.finish()
    assert fold.orphans == 1
    assert fold.engine.state.fingerprint() == s.state.fingerprint()


# -- squatted derived ids --------------------------------------------------------------------


@pytest.mark.parametrize("bad_id", ["T/0", "a/b", "", " x", "x\n", "x\x00", "x\u202e", "é",
                                    "x" * 129])
def test_input_ids_that_could_squat_a_derived_id_or_mislead_are_refused(bad_id: str) -> None:
    s = Sim(FLAT)
    tick = ClockTicked(id=bad_id, at=0, actor="ticker")
    assert _refused(s, tick) == "bad_id"


def test_a_squatted_derived_id_can_no_longer_double_book_a_host() -> None:
    """The issue's sequence: tick 'T/0', a submission, tick 'T'. Old: T/0 dropped as a duplicate, free = -8."""
    s = Sim(FLAT)
    with pytest.raises(InputRefused):
        s.feed(ClockTicked(id="T/0", at=0, actor="mallory"))
    s.submit("w", "lab/a", 8, HOUR)
    out = s.feed(ClockTicked(id="T", at=0, actor="ticker"))
    assert [d.id for d in out or []] == ["T/0"]
    assert s.running() == ["w"]
    assert all(0 <= h.free <= h.gpus for h in s.state.cluster_state.hosts.values())
    _fold_equals_live(s)


# -- time --------------------------------------------------------------------------------------


def test_an_input_from_the_future_is_rejected_and_moves_nothing() -> None:
    """One submission 40 days ahead: old, every protection ended and the dedupe window emptied."""
    s = Sim(FLAT, hosts=2)
    s.submit("w", "lab/a", 8, HOUR)
    s.tick()
    first_id = s.journal[-2].id
    late = s.I.submit("x", "lab/b", 8, HOUR, at=40 * DAY)
    assert brief(s.feed(late)) == [("rejected", "x", "future_time")]
    assert s.state.now == 0
    assert s.state.workloads.all["w"].protected_at(s.state.now)
    assert s.state.has_seen(first_id)
    _fold_equals_live(s)


@pytest.mark.parametrize(("ahead", "accepted"), [(0, True), (30, True), (31, False)])
def test_the_clock_skew_bound_is_exact(ahead: int, accepted: bool) -> None:
    s = Sim(FLAT)
    s.at(100)
    out = s.feed(s.I.submit("w", "lab/a", 1, 60, at=100 + ahead))
    assert (out == []) is accepted
    assert ("w" in s.state.workloads.all) is accepted


def test_an_input_behind_the_clock_takes_effect_at_now() -> None:
    s = Sim(FLAT)
    s.at(5_000)
    assert s.feed(s.I.submit("w", "lab/a", 1, 60, at=10)) == []
    assert s.state.workloads.all["w"].submitted_at == 5_000


def test_only_ticks_move_the_clock() -> None:
    s = Sim(FLAT)
    for e in (s.I.submit("w", "lab/a", 1, 60, at=20), s.I.fault("h0", at=25)):
        s.feed(e)
        assert s.state.now == 0
    s.feed(s.I.tick(500, cycle=False))
    assert s.state.now == 500
    s.feed(s.I.tick(100))  # a late tick runs a cycle at now; time never goes back
    assert s.state.now == 500


def test_a_clock_only_tick_runs_no_cycle() -> None:
    s = Sim(FLAT)
    s.submit("w", "lab/a", 8, HOUR)
    assert s.feed(s.I.tick(10, cycle=False)) == []
    assert s.status("w") == "pending"
    assert brief(s.feed(s.I.tick(10))) [0][:2] == ("started", "w")


# -- budget paths ------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["lab/x\n", "lab/..", "lab/.", "lab//x", "lab/x y", "lab/" + "x" * 129])
def test_bad_budget_paths_are_rejected(path: str) -> None:
    s = Sim(FLAT)
    assert brief(s.feed(s.I.node(path, actor="admin"))) == [("edit_rejected", "bad_path")]
    assert path not in s.state.budget


@pytest.mark.parametrize("child", ["a/x", "..", ".", "a\n"])
def test_a_shares_child_is_one_segment(child: str) -> None:
    """child='llm/alice' edited a grandchild; now only direct children, by one segment."""
    s = Sim((*FLAT, ("lab/a/x", 1, ())))
    before = s.state.budget.snapshot()
    out = s.feed(s.I.shares("lab", {child: 5}, actor="admin"))
    assert brief(out) == [("edit_rejected", "bad_path")]
    assert s.state.budget.snapshot() == before


# -- bounds ------------------------------------------------------------------------------------


@pytest.mark.parametrize("gpus", [0])
def test_host_gpus_are_bounded(gpus: int) -> None:
    s = Sim(FLAT, hosts=0)
    assert brief(s.feed(s.I.host("big", gpus=gpus))) == [("input_rejected", "bad_host")]


@pytest.mark.parametrize("gpus", [65, 10**9])
def test_host_gpus_beyond_the_type_bound_are_refused(gpus: int) -> None:
    """Over MAX_GPUS_PER_HOST no record can hold it (events.limits.HostGpus): refused, not journaled."""
    s = Sim(FLAT, hosts=0)
    assert _refused(s, s.I.host("big", gpus=gpus)) == "bad_value"


def test_hosts_per_cluster_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(validation_module, "MAX_HOSTS_PER_CLUSTER", 3)
    s = Sim(FLAT, hosts=3)
    assert brief(s.feed(s.I.host("h9"))) == [("input_rejected", "too_many_hosts")]


@pytest.mark.parametrize("shares", [-1])
def test_budget_shares_are_bounded(shares: int) -> None:
    s = Sim(FLAT)
    out = s.feed(s.I.node("lab/c", shares=shares, actor="admin"))
    assert brief(out) == [("edit_rejected", "bad_shares")]


@pytest.mark.parametrize("shares", [10**9 + 1, 2**63])
def test_budget_shares_beyond_the_type_bound_are_refused(shares: int) -> None:
    """Over MAX_SHARES no record can hold it (events.limits.Shares): refused, not journaled."""
    s = Sim(FLAT)
    assert _refused(s, s.I.node("lab/c", shares=shares, actor="admin")) == "bad_value"


# -- replay shares the live rule ----------------------------------------------------------------


def test_another_clusters_event_is_refused_live_so_replay_sees_one_engine() -> None:
    s = Sim(FLAT)
    other = Inputs(cluster="other", prefix="o").submit("w", "lab/a", 1, 60)
    assert _refused(s, other) == "wrong_cluster"
    result = verify_log(enumerate(s.journal, 1))
    assert result.ok and result.divergence is None


def test_an_id_reused_after_the_dedupe_window_is_new_live_and_on_replay() -> None:
    """Old: accepted live, deduped forever by the replay's own set, a false divergence."""
    s = Sim(FLAT, dedupe_window_s=600)
    mk = s.I
    first = mk.submit("w1", "lab/a", 1, 60)
    s.feed(first)
    s.tick(2_000)
    reused = WorkloadSubmitted(id=first.id, at=2_000, workload="w2", budget="lab/a", user="a",
                               gpus=1, min_runtime_s=60)
    assert s.feed(reused) == []
    assert "w2" in s.state.workloads.all
    s.tick(2_001)
    result = verify_log(enumerate(s.journal, 1))
    assert result.ok, result.divergence
    _fold_equals_live(s)


# -- structure ---------------------------------------------------------------------------------


def test_every_type_is_an_input_or_a_decision_and_has_a_fold_and_a_check() -> None:
    assert set(INPUT_TYPES) | set(DECISION_TYPES) == set(ALL_TYPES)
    assert not set(INPUT_TYPES) & set(DECISION_TYPES)
    assert set(TAGS.values()) == set(ALL_TYPES)
    assert set(State("x").folds) == set(ALL_TYPES)
    assert set(validation_module.CHECKS) == set(INPUT_TYPES)


def _runtime_imports(path: Path) -> set[str]:
    """Modules imported when ``path`` runs (``if TYPE_CHECKING:`` blocks do not run)."""
    out: set[str] = set()

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and isinstance(node.test, ast.Name) \
                    and node.test.id == "TYPE_CHECKING":
                continue
            if isinstance(node, ast.ImportFrom) and node.module:
                out.add(node.module)
            elif isinstance(node, ast.Import):
                out.update(a.name for a in node.names)
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.stmt):
                    visit([child])

    visit(ast.parse(path.read_text()).body)
    return out


def test_state_folds_and_does_not_validate() -> None:
    """The old state.py <-> validation.py circle is gone: validation is a step the engine calls."""
    assert "scheduler.validation" not in _runtime_imports(ROOT / "scheduler" / "state.py")
    assert "scheduler.state" not in _runtime_imports(ROOT / "scheduler" / "validation.py")


def test_ids_are_remembered_by_the_trusted_time_not_the_producers() -> None:
    """An input stamped far in the past must not fall out of the dedupe window at once."""
    s = Sim(FLAT, dedupe_window_s=600)
    s.at(5_000)
    late = s.I.submit("w", "lab/a", 1, 60, at=10)
    assert s.feed(late) == []
    s.tick(5_001)  # another id recorded: the window is pruned by trusted time
    assert s.feed(late) is None  # still a duplicate
