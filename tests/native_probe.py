"""What the core decides on a fixed set of runs, as hashes: run once per form of the core and compare.

``probe()`` simulates each case, then folds its log into a fresh engine,
snapshots it, restores the snapshot and snapshots again, and re-derives every
decision (``verify_log``). It returns, per case, the sha256 of the log, of the
snapshot, of the restored snapshot, and the replay's verdict, plus which form
of the core ran (``native.status``). ``python tests/native_probe.py`` prints
it as JSON: tests/test_native.py runs that in a process with
``ALLOT_CORE=native`` and compares with ``probe()`` run here on the pure core.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import native
from events import encode_lines
from scheduler import Engine
from scheduler.replay import fold_log, verify_log
from simulator.driver import Simulation
from simulator.scenario import load_scenario, with_overrides

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"

# (scenario, days or None for the whole scenario, policy): small, but between them
# every step of both policies runs (gangs, reservations, faults, drains, squatters,
# preemption costs, resubmissions, lending).
CASES: tuple[tuple[str, float | None, str], ...] = (
    ("demo", None, "allot"),
    ("demo", None, "baseline"),
    ("ai2-month", 2.0, "allot"),
    ("ai2-month", 2.0, "baseline"),
    ("ai2-month-heavy", 1.5, "allot"),
    ("scale-10k", 0.2, "allot"),
)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def probe_case(name: str, days: float | None, policy: str) -> dict[str, object]:
    sc = load_scenario(SCENARIOS / f"{name}.toml")
    if days is not None:
        sc = with_overrides(sc, horizon_days=days)
    log = Simulation(sc, policy, SCENARIOS).run().log
    snapshot = fold_log(log).snapshot()
    again = Engine.restore(snapshot).snapshot()
    replay = verify_log(enumerate(log, 1))
    return {"events": len(log), "log": _sha(encode_lines(log)), "snapshot": _sha(snapshot),
            "restored": _sha(again), "replay_ok": replay.ok, "decisions": replay.decisions}


def probe() -> dict[str, object]:
    import scheduler.policy.cycle

    cases = {f"{name}/{days}/{policy}": probe_case(name, days, policy)
             for name, days, policy in CASES}
    return {"core": native.status().name, "cycle_module": Path(scheduler.policy.cycle.__file__).name,
            "cases": cases}


if __name__ == "__main__":
    print(json.dumps(msgspec.to_builtins(probe())))
