"""Pure folds over the log: budget tree, windowed usage, cluster, workloads.

Nothing here does I/O or reads a clock; every projection changes only through
its fold methods, called by ``scheduler.state.State.apply`` with event data.
"""

import native

# The compiled form of these modules, when this process runs it (``native``).
__path__ = native.extend_path(__path__, __name__)

from projections.budget_tree import BudgetNode, BudgetTree, ancestors, parent_of
from projections.cluster import ClusterProjection, Host
from projections.usage import UsageProjection
from projections.workloads import Workload, WorkloadsProjection

__all__ = [
    "BudgetNode", "BudgetTree", "ClusterProjection", "Host", "UsageProjection", "Workload",
    "WorkloadsProjection", "ancestors", "parent_of",
]
