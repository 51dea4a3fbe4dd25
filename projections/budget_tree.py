"""The budget tree: proportional shares from the root down, and who manages what.

Each node holds an integer share among its siblings. Its *entitlement* is the
fraction of the cluster it is owed: the product, along its path from the root,
of its share divided by the sum of its siblings' shares. Leaves are where
workloads are submitted. Managers of a node may edit the node's children and,
transitively, everything below it.
"""

from __future__ import annotations

from collections.abc import Iterable


class BudgetNode:
    """One node of the tree (mutable only through BudgetTree)."""

    __slots__ = ("children", "depth", "managers", "name", "parent", "path", "shares")

    def __init__(self, path: str, managers: tuple[str, ...], shares: int) -> None:
        self.path = path
        self.name = path.rsplit("/", 1)[-1]
        self.parent: str | None = path.rsplit("/", 1)[0] if "/" in path else None
        self.depth = path.count("/")
        self.managers = managers
        self.shares = shares
        self.children: list[str] = []  # paths, kept sorted for deterministic walks

    def __repr__(self) -> str:
        return f"BudgetNode({self.path!r}, shares={self.shares}, children={len(self.children)})"


def parent_of(path: str) -> str | None:
    """The parent path of ``path`` (None for a root)."""
    return path.rsplit("/", 1)[0] if "/" in path else None


def ancestors(path: str) -> list[str]:
    """``path`` and every ancestor, from the root down."""
    parts = path.split("/")
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


class Structure:
    """Flat tables of one version of the tree, for fast repeated walks."""

    __slots__ = ("_teams", "children", "deepest_first", "internal", "leaves", "parent", "paths",
                 "shares")

    def __init__(self, tree: BudgetTree) -> None:
        nodes = tree.nodes
        self.deepest_first = sorted(nodes, key=lambda p: (-p.count("/"), p))
        self.leaves = [p for p in self.deepest_first if not nodes[p].children]
        # Internal nodes, deepest first, so summing children into parents is one pass.
        self.internal = [(p, nodes[p].children) for p in self.deepest_first if nodes[p].children]
        self.children = {p: nodes[p].children for p in nodes if nodes[p].children}
        self.parent = {p: nodes[p].parent for p in nodes}
        self.shares = {p: nodes[p].shares for p in nodes}
        self.paths = {p: ancestors(p) for p in nodes}  # root first, the node last
        self._teams: dict[int, dict[str, str]] = {}

    def teams(self, depth: int) -> dict[str, str]:
        """Each node's ancestor at ``depth`` (itself when shallower): its team."""
        t = self._teams.get(depth)
        if t is None:
            t = self._teams[depth] = {p: a[min(depth, len(a) - 1)] for p, a in self.paths.items()}
        return t


class BudgetTree:
    """The fold of budget events into the tree."""

    __slots__ = ("_entitlement", "_structure", "nodes", "root", "version")

    def __init__(self) -> None:
        self.nodes: dict[str, BudgetNode] = {}
        self.root: str | None = None
        # Bumped on every change so derived values (entitlements) can be cached.
        self.version = 0
        self._entitlement: dict[str, float] | None = None
        self._structure: Structure | None = None

    # -- queries ---------------------------------------------------------------

    def __contains__(self, path: str) -> bool:
        return path in self.nodes

    def is_leaf(self, path: str) -> bool:
        node = self.nodes.get(path)
        return node is not None and not node.children

    def leaves(self) -> list[str]:
        return sorted(p for p, n in self.nodes.items() if not n.children)

    def sibling_fraction(self, path: str) -> float:
        """The node's share divided by the sum of its siblings' shares (1.0 for the root)."""
        node = self.nodes[path]
        if node.parent is None:
            return 1.0
        sibs = self.nodes[node.parent].children
        total = sum(self.nodes[s].shares for s in sibs)
        return node.shares / total if total > 0 else 0.0

    def entitlement(self, path: str) -> float:
        """Fraction of the cluster owed to ``path``: the product of sibling fractions."""
        if self._entitlement is None:
            ent: dict[str, float] = {}
            # Nodes sorted by depth so a parent is always computed before its children.
            for p in sorted(self.nodes, key=lambda q: (q.count("/"), q)):
                node = self.nodes[p]
                base = 1.0 if node.parent is None else ent[node.parent]
                ent[p] = base * self.sibling_fraction(p)
            self._entitlement = ent
        return self._entitlement.get(path, 0.0)

    def can_manage(self, actor: str, path: str) -> bool:
        """True when ``actor`` manages ``path`` or one of its ancestors."""
        return any(actor in self.nodes[a].managers for a in ancestors(path) if a in self.nodes)

    # -- fold ------------------------------------------------------------------

    def define(self, path: str, managers: Iterable[str], shares: int) -> None:
        node = BudgetNode(path, tuple(managers), shares)
        self.nodes[path] = node
        if node.parent is None:
            self.root = path
        else:
            kids = self.nodes[node.parent].children
            kids.append(path)
            kids.sort()
        self._changed()

    def set_shares(self, parent: str, shares: dict[str, int]) -> None:
        for child, value in shares.items():
            self.nodes[f"{parent}/{child}"].shares = value
        self._changed()

    def _changed(self) -> None:
        self.version += 1
        self._entitlement = None
        self._structure = None

    def structure(self) -> Structure:
        """The tree's shape as flat tables, rebuilt only after an edit (cycles read it often)."""
        if self._structure is None:
            self._structure = Structure(self)
        return self._structure

    def snapshot(self) -> list[tuple[str, tuple[str, ...], int]]:
        """A canonical, comparable view (for state fingerprints)."""
        return [(p, n.managers, n.shares) for p, n in sorted(self.nodes.items())]
