"""Budget events: the tree of proportional GPU-time shares and who may edit it.

Nodes are named by slash paths (``lab/robotics/alice``); the root is the single
first segment. A node's share is a plain integer weight among its siblings; its
entitlement (fraction of the cluster) is the product of normalised shares along
its path. Workloads are submitted to leaves. Only a manager of a node (or of an
ancestor of it) may define children under it or change their shares.
"""

from __future__ import annotations

from events.base import ChildShare, Event
from events.limits import Array, Shares, Text


class BudgetNodeDefined(Event, frozen=True, kw_only=True, tag="budget.node_defined"):
    """A budget node exists, with its managers and its share under its parent."""

    path: Text
    managers: Array[Text] = ()
    shares: Shares = 1


class BudgetSharesSet(Event, frozen=True, kw_only=True, tag="budget.shares_set"):
    """The shares of some children of ``parent`` change (children not listed keep theirs)."""

    parent: Text
    shares: Array[ChildShare]


class BudgetEditRejected(Event, frozen=True, kw_only=True, tag="budget.edit_rejected"):
    """A budget edit (``cause``) was refused, and why."""

    reason: Text
    detail: Text = ""


class BudgetEditReason:
    """Stable reason codes for ``budget.edit_rejected``."""

    NOT_A_MANAGER = "not_a_manager"
    UNKNOWN_NODE = "unknown_node"
    ALREADY_DEFINED = "already_defined"
    BAD_PATH = "bad_path"
    BAD_SHARES = "bad_shares"
    PARENT_HAS_WORKLOADS = "parent_has_workloads"
    FUTURE_TIME = "future_time"
