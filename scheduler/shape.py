"""A workload's shape: how many hosts, how many GPUs on each.

Both validation (is the shape well formed?) and the fold (queue the workload
by shape) need it, so it lives apart from both.
"""

from __future__ import annotations

from events import WorkloadSubmitted


def shape_of(e: WorkloadSubmitted) -> tuple[int, int] | str:
    """``(hosts, gpus_per_host)`` of a submission, or why the shape is malformed."""
    if e.gpus < 1:
        return f"gpus must be >= 1, got {e.gpus}"
    if e.hosts < 1:
        return f"hosts must be >= 1, got {e.hosts}"
    per = e.gpus_per_host
    if per is None:
        if e.gpus % e.hosts:
            return f"{e.gpus} GPUs do not split evenly over {e.hosts} hosts"
        per = e.gpus // e.hosts
    if per < 1:
        return f"gpus_per_host must be >= 1, got {per}"
    if per * e.hosts != e.gpus:
        return f"{e.hosts} hosts x {per} GPUs is {e.hosts * per}, not gpus={e.gpus}"
    return e.hosts, per
