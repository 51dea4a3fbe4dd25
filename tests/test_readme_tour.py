"""The README's tour names workloads that exist at the times it asks about.

The tour's ``allot explain LOG ID --at TIME`` (and ``allot forecast ID --at``)
run on ``allot simulate scenarios/ai2-month.toml``'s log. Running the month
here is too slow, so the workloads are read from the scenario's sources (the
same generator, same seed: what the simulator submits) and each must be
submitted no later than the time asked.
"""

from __future__ import annotations

import re
import shlex
from datetime import datetime
from pathlib import Path

import pytest

from simulator.driver import load_sources
from simulator.scenario import load_scenario
from streams.state_cli import date_value

REPO = Path(__file__).resolve().parent.parent


def _tour_lines(verb: str) -> list[list[str]]:
    text = (REPO / "README.md").read_text()
    tour = text[text.index("## A short tour"):]
    tour = tour[:tour.index("\n## ", 5)]
    return [shlex.split(line.split("#", 1)[0]) for line in tour.splitlines()
            if line.startswith(f"allot {verb} ")]


def test_the_tour_asks_about_workloads_that_exist_then() -> None:
    scenario = load_scenario(REPO / "scenarios" / "ai2-month.toml")
    start = scenario.start
    t0 = int(start.timestamp()) if isinstance(start, datetime) else int(datetime.fromisoformat(
        str(start)).timestamp())
    submitted = {w.workload: t0 + w.submit_at
                 for w in load_sources(scenario, REPO / "scenarios").workloads}
    asked = []
    for argv in _tour_lines("explain"):
        assert "--at" in argv
        wid = argv[argv.index("--at") - 1]
        asked.append((wid, date_value(argv[argv.index("--at") + 1])))
    for argv in _tour_lines("forecast"):
        asked.append((argv[2], date_value(argv[argv.index("--at") + 1])))
    assert len(asked) >= 2
    for wid, at in asked:
        assert wid in submitted, f"{wid} is not a workload of ai2-month"
        assert submitted[wid] <= at, (f"{wid} is submitted at {submitted[wid]}, after the "
                                      f"tour's --at {at}")
        assert re.fullmatch(r"[a-z]+-\d{6}", wid)


def test_explain_at_takes_a_date_and_prints_dates(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from allot.cli import main
    from events import write_log
    from events.factory import Inputs

    t0 = date_value("2026-01-16T09:00")
    mk = Inputs(cluster="c", prefix="l")
    path = tmp_path / "events.jsonl"
    write_log(path, [mk.policy(), mk.node("lab", managers=("admin",)), mk.node("lab/a"),
                     mk.host("h1"), mk.tick(t0), mk.submit("w", "lab/a", 4, 3600, at=t0),
                     mk.tick(t0 + 60)])
    assert main(["explain", str(path), "w", "--at", "2026-01-16T10:00"]) == 0
    out = capsys.readouterr().out
    assert "at 2026-01-16 09:01:00 UTC" in out and str(t0) not in out and str(t0 + 60) not in out
    assert main(["explain", str(path), "w", "--at", "2026-01-16T08:00"]) == 2
    err = capsys.readouterr().err
    assert "no workload 'w'" in err and "before 2026-01-16 08:00:00 UTC" in err
