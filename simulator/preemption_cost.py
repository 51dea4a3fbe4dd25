"""Where preemption's cost falls: GPU-hours lost per workload class and preemption reason.

The driver's executor charges a preempted run with the work it loses
(``simulator.driver``): a resumable victim (``requeued``) loses the seconds
since its last checkpoint plus its restart overhead, a victim that cannot
resume loses its whole run. ``lost_by_class`` recomputes that charge from the
event log alone (the checkpoint interval and restart overhead are fields of
``workload.submitted``) and splits it by the victim's ``kind``, the
preemption's ``reason`` and whether the victim resumed, so a total like
"74,000 GPU-hours lost" can be traced to its cause. Preemptions inside the
warm-up (by default the policy's lookback window, as in the audit) are left
out, so the figure differs from the executor's whole-run count.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from events import Event


def lost_by_class(log: Iterable[Event], warmup_s: int | None = None) -> dict[str, Any]:
    """GPU-hours lost, keyed ``<kind>.<reason>.<resumed|lost_run>``, plus ``total``.

    Each key also has ``<key>_n``: the number of such preemptions.
    """
    spec: dict[str, tuple[int, str, int | None, int]] = {}  # gpus, kind, ckpt, restart
    started: dict[str, int] = {}
    window = 604_800
    start: int | None = None
    lost: dict[str, float] = {}
    count: dict[str, int] = {}
    for e in log:
        if start is None:
            start = e.at
        tag = type(e).__struct_config__.tag
        if tag == "policy.configured":
            window = e.window_s  # type: ignore[attr-defined]
        elif tag == "workload.submitted":
            if e.workload not in spec:  # type: ignore[attr-defined]
                spec[e.workload] = (e.gpus, e.kind, e.checkpoint_interval_s,  # type: ignore[attr-defined]
                                    e.restart_overhead_s)  # type: ignore[attr-defined]
        elif tag == "workload.started":
            started[e.workload] = e.at  # type: ignore[attr-defined]
        elif tag == "workload.preempted":
            wid = e.workload  # type: ignore[attr-defined]
            if wid not in spec or wid not in started:
                continue
            skip = window if warmup_s is None else warmup_s
            ran = e.at - started.pop(wid)
            if e.at - start < skip:
                continue
            gpus, kind, every, restart = spec[wid]
            if e.requeued:  # type: ignore[attr-defined]
                seconds = (ran % every if every else 0) + restart
                how = "resumed"
            else:
                seconds = ran
                how = "lost_run"
            key = f"{kind}.{e.reason}.{how}"  # type: ignore[attr-defined]
            lost[key] = lost.get(key, 0.0) + gpus * seconds / 3600
            count[key] = count.get(key, 0) + 1
    out: dict[str, Any] = {"total": sum(lost.values())}
    for key in sorted(lost):
        out[key] = lost[key]
        out[f"{key}_n"] = count[key]
    return out
