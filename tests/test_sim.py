"""The simulator: determinism, fair-share convergence, replay of its logs, scenario errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from events import decode, encode_lines
from scheduler.replay import verify_file as replay_file
from scheduler.replay import verify_log as replay
from simulator.driver import Simulation
from simulator.scenario import ScenarioError, load_scenario
from tests.sim_helpers import GOLDEN, log_bytes, simulate

REPO = Path(__file__).resolve().parent.parent
DEMO = REPO / "scenarios" / "demo.toml"


def test_same_scenario_and_seed_give_a_byte_identical_log() -> None:
    """Two runs of the demo scenario write exactly the same bytes."""
    assert log_bytes(DEMO) == log_bytes(DEMO)


def test_a_different_seed_gives_a_different_log() -> None:
    """The seed really drives the workloads (so determinism is not vacuous)."""
    scenario = load_scenario(DEMO)
    import msgspec

    other = msgspec.structs.replace(scenario, seed=scenario.seed + 1)
    a = encode_lines(Simulation(scenario, "allot", DEMO.parent).run().log)
    b = encode_lines(Simulation(other, "allot", DEMO.parent).run().log)
    assert a != b


def test_a_run_collects_garbage_in_larger_batches_and_restores_the_thresholds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The collector's thresholds are raised only while a run lasts (even one that raises)."""
    import gc

    from simulator import driver

    seen: list[tuple[int, ...]] = []

    def fake_run(self: Simulation, progress: object) -> None:
        seen.append(gc.get_threshold())
        raise RuntimeError("stop")

    monkeypatch.setattr(Simulation, "run_loop", fake_run)
    old = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    try:
        with pytest.raises(RuntimeError):
            Simulation(load_scenario(DEMO), "allot", DEMO.parent).run()
        assert seen == [driver.GC_THRESHOLDS]
        assert gc.get_threshold() == (700, 10, 10)
    finally:
        gc.set_threshold(*old)


def test_both_policies_run_the_same_workloads() -> None:
    """allot and the baseline see the same submissions at the same times."""
    def subs(policy: str) -> list[tuple[int, str]]:
        log, _ = simulate(DEMO, policy)
        return [(e.at, e.workload) for e in log
                if type(e).__struct_config__.tag == "workload.submitted"]

    assert subs("allot") == subs("baseline")


def test_two_teams_converge_to_70_30() -> None:
    """With both teams always oversubscribed, charged GPU time converges to the 70/30 shares."""
    path = Path(__file__).parent / "fair_share_70_30.toml"
    log, epoch = simulate(path)
    runs: dict[str, tuple[int, str, int]] = {}
    used = {"lab/a": 0, "lab/b": 0}
    budget = {e.workload: e.budget for e in log if type(e).__struct_config__.tag ==
              "workload.submitted"}
    half = epoch + 2 * 86_400  # measure the second half, after the window filled
    end = log[-1].at
    for e in log:
        tag = type(e).__struct_config__.tag
        if tag == "workload.started":
            runs[e.workload] = (e.at, budget[e.workload], sum(s.gpus for s in e.placement))
        elif tag in ("workload.preempted", "workload.finished") and e.workload in runs:
            start, team, gpus = runs.pop(e.workload)
            used[team.rsplit("/", 1)[0]] += gpus * max(0, e.at - max(start, half))
    for start, team, gpus in runs.values():
        used[team.rsplit("/", 1)[0]] += gpus * max(0, end - max(start, half))
    share_a = used["lab/a"] / (used["lab/a"] + used["lab/b"])
    assert 0.65 <= share_a <= 0.75, share_a


def test_replay_of_a_simulated_log_rederives_every_decision(tmp_path: Path) -> None:
    """Folding the demo log through the core reproduces each recorded decision."""
    path = tmp_path / "events.jsonl"
    path.write_bytes(log_bytes(DEMO))
    result = replay_file(path)
    assert result.ok, result.divergence
    assert result.decisions > 100 and result.inputs > 100


def test_replay_names_a_tampered_decision(tmp_path: Path) -> None:
    """Changing one recorded placement is caught, at its line, with the field that differs."""
    lines = log_bytes(GOLDEN / "gang_reservation.toml").splitlines()
    idx = next(i for i, raw in enumerate(lines) if b'"workload":"gang"' in raw
               and b"workload.started" in raw)
    event = json.loads(lines[idx])
    event["placement"][0]["host"] = "h0003"
    lines[idx] = json.dumps(event, separators=(",", ":")).encode()
    path = tmp_path / "tampered.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    result = replay_file(path)
    assert not result.ok
    assert result.divergence is not None
    assert result.divergence.line == idx + 1
    assert result.divergence.kind == "changed"
    assert "placement" in result.divergence.detail


def test_replay_catches_a_deleted_decision() -> None:
    """A decision missing from the log is reported as missing."""
    log, _ = simulate(GOLDEN / "debug_preempts_unallocated.toml")
    idx = next(i for i, e in enumerate(log) if type(e).__struct_config__.tag ==
               "workload.preempted")
    cut = log[:idx] + log[idx + 1:]
    result = replay(enumerate(cut, 1))
    assert not result.ok and result.divergence is not None
    assert result.divergence.kind in ("missing", "changed")


def test_replay_catches_an_inserted_decision() -> None:
    """A decision the scheduler never made is reported as unexpected."""
    log, _ = simulate(GOLDEN / "debug_preempts_unallocated.toml")
    forged = next(e for e in log if type(e).__struct_config__.tag == "workload.started")
    raw = json.loads(encode_lines([forged]))
    raw["id"] = "forged/0"
    doctored = [*log, decode(json.dumps(raw))]
    result = replay(enumerate(doctored, 1))
    assert not result.ok and result.divergence is not None
    assert result.divergence.kind == "unexpected"
    assert result.divergence.event_id == "forged/0"


def test_replay_skips_duplicate_records() -> None:
    """A record delivered twice (at-least-once transport) is skipped, not a divergence."""
    log, _ = simulate(GOLDEN / "protected_survives.toml")
    doubled = [x for e in log for x in (e, e)]
    result = replay(enumerate(doubled, 1))
    assert result.ok, result.divergence
    assert result.duplicates == len(log)


def test_a_malformed_line_is_reported_not_raised(tmp_path: Path) -> None:
    """A line that is not an event is named by line number."""
    path = tmp_path / "bad.jsonl"
    path.write_bytes(log_bytes(GOLDEN / "protected_survives.toml") + b'{"type":"nope"}\n')
    result = replay_file(path)
    assert result.divergence is not None and result.divergence.kind == "malformed"
    assert result.divergence.line == path.read_bytes().count(b"\n")


@pytest.mark.parametrize("text, fragment", [
    ("name = 'x'\nhorizon_days = 1\n[cluster]\nhosts = 'many'\n", "$.cluster.hosts"),
    ("name = 'x'\nhorizon_days = 1\n[cluster]\nhosts = 2\n[policy]\nwindow = 5\n", "window"),
    ("name = 'x'\n[cluster]\nhosts = 2\n", "horizon_days"),
    ("name = \n", "not valid TOML"),
])
def test_scenario_errors_name_the_bad_key(tmp_path: Path, text: str, fragment: str) -> None:
    """A broken scenario file raises ScenarioError naming what is wrong."""
    path = tmp_path / "s.toml"
    path.write_text(text)
    with pytest.raises(ScenarioError, match=None) as info:
        load_scenario(path)
    assert fragment in str(info.value)


def test_scheduled_fault_of_an_unknown_severity_is_refused(tmp_path: Path) -> None:
    """Fault severities are checked when the scenario loads."""
    path = tmp_path / "s.toml"
    path.write_text("name='x'\nhorizon_days=1\n[cluster]\nhosts=1\n"
                    "[[faults.scheduled]]\nhost='h0000'\nat=5\nseverity='meh'\n")
    with pytest.raises(ScenarioError, match="severity"):
        load_scenario(path)
