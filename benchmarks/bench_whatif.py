"""What-if speed on a recorded month: the re-simulation of a whole journal under a changed policy.

    .venv/bin/allot simulate scenarios/ai2-month.toml --policy allot --no-plots --out out/month
    .venv/bin/python benchmarks/bench_whatif.py out/month/allot/events.jsonl [--set KNOB=N ...]

Times reading the journal, re-simulating all of it with no change (and checks
it is the recorded journal, event for event), and with the change (default
``min_runtime_cap_s=7200``); the audit of both sides is not included.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from events import encode
from whatif.history import read_history
from whatif.rerun import Change, rerun


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("log")
    p.add_argument("--set", action="append", default=None, metavar="KNOB=N")
    args = p.parse_args(argv)
    knobs = {k: int(v) for k, v in (s.split("=", 1) for s in (args.set or ["min_runtime_cap_s=7200"]))}
    t0 = time.perf_counter()
    events = read_history(args.log)
    read_s = time.perf_counter() - t0
    ticks = [e.at for e in events if type(e).__struct_config__.tag == "clock.ticked"]
    t1, t2 = min(ticks), max(ticks)
    out: dict[str, object] = {"events": len(events), "days": round((t2 - t1) / 86_400, 1),
                              "read_s": round(read_s, 2)}
    for name, change in (("unchanged", Change()), ("changed", Change(knobs=knobs))):
        t0 = time.perf_counter()
        r = rerun(events, t1, t2, change)
        dt = time.perf_counter() - t0
        row: dict[str, object] = {"seconds": round(dt, 2), "inputs": r.inputs,
                                  "days_per_second": round((t2 - t1) / 86_400 / dt, 2),
                                  "clamped": r.clamped, "injected_finishes": r.injected_finishes}
        if name == "unchanged":
            row["identical"] = [encode(e) for e in r.log] == [encode(e) for e in r.recorded]
        out[name] = row
    json.dump(out, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
