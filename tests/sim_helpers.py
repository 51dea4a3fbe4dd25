"""Helpers for simulator tests: run a scenario file and read its log back as plain rows."""

from __future__ import annotations

from pathlib import Path

from events import Event, encode_lines
from simulator.driver import Simulation
from simulator.scenario import load_scenario, with_overrides

GOLDEN = Path(__file__).parent / "golden"
SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


def simulate(path: Path, policy: str = "allot") -> tuple[list[Event], int]:
    """The log of ``path`` under ``policy``, and the scenario's epoch (t=0 in Unix seconds)."""
    scenario = load_scenario(path)
    return Simulation(scenario, policy, path.parent).run().log, scenario.epoch


def log_bytes(path: Path, policy: str = "allot") -> bytes:
    return encode_lines(simulate(path, policy)[0])


def shipped_log(name: str, days: float | None = None, policy: str = "allot",
                **knobs: object) -> bytes:
    """The encoded log of the shipped scenario ``name``, cut to ``days`` when given, ``knobs`` set."""
    sc = load_scenario(SCENARIOS / f"{name}.toml")
    if days is not None:
        sc = with_overrides(sc, horizon_days=days)
    if knobs:
        sc = with_overrides(sc, policy={**sc.policy, **knobs})
    return encode_lines(Simulation(sc, policy, SCENARIOS).run().log)


def decisions(log: list[Event], epoch: int) -> list[tuple[int, str, str, str]]:
    """(t, type, workload-or-host, detail) for every non-setup, non-tick event."""
    out = []
    for e in log:
        tag = type(e).__struct_config__.tag
        if tag in ("budget.node_defined", "host.added", "policy.configured", "clock.ticked"):
            continue
        subject = getattr(e, "workload", None) or getattr(e, "host", "")
        if tag == "workload.started":
            detail = ",".join(f"{s.host}:{s.gpus}" for s in e.placement)
        elif tag == "workload.preempted":
            detail = f"{e.reason} by {e.by} {'requeued' if e.requeued else 'ended'}"
        elif tag == "workload.reserved":
            detail = f"{','.join(e.hosts)} until {e.until - epoch}"
        else:
            detail = ""
        out.append((e.at - epoch, tag, subject, detail))
    return out
