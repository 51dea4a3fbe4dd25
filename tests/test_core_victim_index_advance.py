"""The victim index advanced over starts, stops and protection ends (``VictimIndex.advanced``) is a fresh build.

The cycle's victim index is built when the running set changes or a
protection ends; inside one host set and tree it is instead advanced from the
last one by the running set's journal and a heap of protection ends. These
tests run whole scenarios and, every time an index is advanced, compare it with
``VictimIndex.build`` of the same state: the same victims, counts, bounds, next
protection end, per-host victim lists and hosts by least victim span
(``VictimIndex.hosts_by_span``). They check that advancing happened often (so the
comparison proves something), that a stale heap entry is caught, and that the
logs are the same with every index built afresh.
"""

from __future__ import annotations

import pytest
from sim_helpers import shipped_log

from scheduler.index.victim_index import VictimIndex
from scheduler.state import State


def _view(idx: VictimIndex, next_end: int) -> tuple[object, ...]:
    on_host = None if idx._on_host is None else {
        h: [v.w.id for v in vs] for h, vs in idx._on_host.items()}
    light = None if idx._hosts_by_span is None else [
        (least, h, [v.w.id for v in vs], vs is idx.on_host[h]) for least, h, vs in idx._hosts_by_span]
    return (sorted(idx._victims), sorted(idx._ids), idx.size, idx.victim_gpus, idx.by_node,
            idx.by_priority, idx.unallocated_gpus, next_end, on_host, light,
            {w: idx._placed[w] for w in sorted(idx._placed)})


class Seen:
    def __init__(self) -> None:
        self.advanced = 0
        self.with_hosts = 0  # advanced indexes that carried per-host victim lists over
        self.gaps = 0        # indexes too far behind the journal to advance
        self.wrong: list[int] = []


def _watch(monkeypatch: pytest.MonkeyPatch) -> Seen:
    seen = Seen()
    advanced = VictimIndex.advanced

    def checked(self: VictimIndex, state: State) -> tuple[VictimIndex, int] | None:
        behind = state.workloads.running_version - self.running_version
        made = advanced(self, state)
        if made is None:
            seen.gaps += behind > len(state.workloads.moves)
            return None
        seen.advanced += 1
        idx, next_end = made
        fresh, fresh_end = VictimIndex.build(state)
        if idx._on_host is not None:
            seen.with_hosts += 1
            fresh.on_host  # noqa: B018 - build the fresh one's lists to compare them
        if _view(idx, next_end) != _view(fresh, fresh_end):
            seen.wrong.append(state.now)
        return made

    monkeypatch.setattr(VictimIndex, "advanced", checked)
    return seen


@pytest.mark.parametrize(("name", "days"), [("ai2-month", 2.0), ("ai2-month-heavy", 1.0),
                                            ("demo", None)])
def test_an_advanced_index_equals_a_fresh_build(name: str, days: float | None,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _watch(monkeypatch)
    shipped_log(name, days)
    assert not seen.wrong, seen.wrong[:5]
    assert seen.advanced > 100
    assert seen.with_hosts > seen.advanced // 10


def test_an_index_that_ignores_the_journal_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A mutant that advances over time only (no starts or stops) must disagree with a build."""
    advanced = VictimIndex.advanced

    def time_only(self: VictimIndex, state: State) -> tuple[VictimIndex, int] | None:
        self.running_version = state.workloads.running_version
        return advanced(self, state)

    monkeypatch.setattr(VictimIndex, "advanced", time_only)
    seen = _watch(monkeypatch)
    shipped_log("ai2-month", 1.0)
    assert seen.wrong


def test_the_log_is_the_same_when_every_index_is_built_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    kept = shipped_log("ai2-month-heavy", 1.0)
    monkeypatch.setattr(VictimIndex, "advanced", lambda self, state: None)
    assert shipped_log("ai2-month-heavy", 1.0) == kept


def test_an_index_behind_the_journal_is_built_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("projections.workloads.MOVES_KEPT", 4)
    seen = _watch(monkeypatch)
    shipped_log("demo", None)
    assert seen.gaps > 0
    assert not seen.wrong
