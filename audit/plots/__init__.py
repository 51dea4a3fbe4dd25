"""Pictures of an audited log: who ran where, usage against entitlement, waits, occupancy.

Every picture is drawn from the audit views over a DuckDB connection whose
``events`` table may hold several *runs* (the same scenario under different
policies, e.g. ``allot`` and ``baseline``). One module per figure:

- ``gantt``: the lab simulator's picture. One row per GPU, one bar per task (a
  run slot: the GPUs one run interval of a workload held on one host), one hue
  per team, hatched where the task was interruptible (unallocated, or past its
  protection), a red edge where the scheduler preempted it.
- ``usage``: per team (or per managed budget node), the share of all
  allocated GPU-hours it was charged over the trailing fair-share window,
  against the fraction of the cluster it is entitled to, over time.
- ``waits``: per workload kind, the distribution of first-start queue waits,
  one line per run, log time axis.
- ``occupancy``: per run, every GPU-hour split into allocated, unallocated, idle
  and unavailable.

``data`` holds what they read (the views, and the errors of a database they
cannot draw) and ``style`` how they look. The computations (index assignment,
interruptible segments, CDF points, trailing-window shares) are pure functions
kept apart from the drawing so they can be tested exactly. Drawing uses
matplotlib's object API on the Agg canvas (no pyplot, no global figure state,
no display), so output is the same bytes for the same data and library versions.
"""

from audit.formatting import format_duration
from audit.plots.data import (
    HourUse,
    MissingViewError,
    PlotError,
    UnknownManagerError,
    UnknownRunError,
    budget_managers,
    capacity_hours,
    check_runs,
    host_down_intervals,
    host_gpu_counts,
    list_runs,
    run_bounds,
)
from audit.plots.gantt import (
    BarSegments,
    OvercommittedHostError,
    SlotSpan,
    assign_gpu_indices,
    contiguous_blocks,
    gantt,
    split_interruptible,
)
from audit.plots.occupancy import occupancy, occupancy_figures
from audit.plots.style import kind_order, natural_key, run_colours, team_colours, workload_shade
from audit.plots.usage import (
    UsageSeries,
    densify,
    managed_nodes,
    node_colours,
    trailing_shares,
    usage_series,
    usage_vs_entitlement,
)
from audit.plots.waits import WaitCdf, wait_cdf, wait_cdfs

__all__ = [
    "BarSegments", "HourUse", "MissingViewError", "OvercommittedHostError", "PlotError", "SlotSpan",
    "UnknownManagerError", "UnknownRunError", "UsageSeries", "WaitCdf", "assign_gpu_indices",
    "budget_managers", "capacity_hours", "check_runs", "contiguous_blocks", "densify",
    "format_duration", "gantt", "host_down_intervals", "host_gpu_counts", "kind_order", "list_runs",
    "managed_nodes", "natural_key", "node_colours", "occupancy", "occupancy_figures", "run_bounds",
    "run_colours", "split_interruptible", "team_colours", "trailing_shares", "usage_series",
    "usage_vs_entitlement", "wait_cdf", "wait_cdfs", "workload_shade",
]
