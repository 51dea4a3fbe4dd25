"""The layering of allot's packages, checked on the import graph (parsed with ast, nothing imported).

The core (``events``, ``projections``, ``scheduler``) is pure and knows nothing
of its drivers; the simulator runs on the core alone, so the live worker can
sit beside it without the audit; the audit reads the log through ``events``
only; the command line (``allot``) may use everything. Every import counts,
including those inside functions (lazy imports are still dependencies).
"""

from __future__ import annotations

import ast
import functools
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# Which of allot's packages each package may import (besides itself).
# ``native`` only chooses which form of the core runs (the compiled one or the
# source); the core's packages ask it once, in their ``__init__``.
ALLOWED: dict[str, set[str]] = {
    "native": set(),
    "events": set(),
    "projections": {"events", "native"},
    "scheduler": {"events", "projections", "native"},
    "simulator": {"events", "projections", "scheduler"},
    # The audit loads an archive through archive/ and refuses, before loading, records
    # no worker signed (identity.journal_seal, issue 23).
    "audit": {"events", "archive", "identity"},
    # The archive reads the journal's records through streams.records (the fence) and
    # writes Parquet; the audit loads an archive through it (issue 25).
    "archive": {"events", "streams"},
    "streams": {"events", "projections", "scheduler", "simulator", "native", "forecast",
                "identity", "dashboard"},
    "allot": {"events", "projections", "scheduler", "simulator", "audit", "streams", "native",
              "whatif", "forecast", "archive", "identity", "monitor", "executor"},
    # Keys and signatures; its audit verb reads the journal through streams, or an
    # archive through archive/ (``allot audit verify --archive``).
    "identity": {"events", "streams", "projections", "scheduler", "archive"},
    # The dashboard's static page and where it lies: imports nothing of allot.
    "dashboard": set(),
    # The real executor: reads the journal and publishes through streams' client,
    # signing with its local key (identity).
    "executor": {"events", "streams", "identity"},
    # The what-if driver runs the core; its history reader and report use the audit.
    "whatif": {"events", "projections", "scheduler", "audit"},
    # Forecasts are pure: a state snapshot and assumptions in, a start estimate out.
    "forecast": {"events", "projections", "scheduler"},
    # The host monitor: health checks in, host events out through the streams client,
    # signed with its local key (identity).
    "monitor": {"events", "streams", "identity"},
}

# Libraries of the edges that the pure core must not import (I/O, terminals, databases).
EDGE_LIBRARIES = {"duckdb", "faust", "aiokafka", "confluent_kafka", "rich", "matplotlib",
                  "structlog"}
CORE = ("events", "projections", "scheduler")

# Violations that work in progress elsewhere removes: (importer, imported) -> why.
# strict xfail, so the mark has to go when the change lands.
# (Empty since scheduler/replay.py took the journal fold out of audit/.)
PENDING: dict[tuple[str, str], str] = {}


def _modules(package: str) -> Iterator[Path]:
    yield from sorted((REPO / package).rglob("*.py"))


# Read once per file for the whole module: every layering pair walks the same files, and
# parsing them again for each of the pairs was most of this module's time.
@functools.cache
def _imports(path: Path) -> tuple[tuple[str, int], ...]:
    """(top-level package, line) of every import in ``path``; relative ones resolve to its own."""
    tree = ast.parse(path.read_text(), filename=str(path))
    own = path.relative_to(REPO).parts[0]
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((alias.name.split(".")[0], node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                found.append((own, node.lineno))
            elif node.module:
                found.append((node.module.split(".")[0], node.lineno))
    return tuple(found)


def _violations(importer: str, imported: str) -> list[str]:
    return [f"{path.relative_to(REPO)}:{line}"
            for path in _modules(importer)
            for name, line in _imports(path) if name == imported]


def _pair_param(importer: str, imported: str) -> object:
    marks = ()
    if (importer, imported) in PENDING:
        marks = (pytest.mark.xfail(strict=True, reason=PENDING[(importer, imported)]),)
    return pytest.param(importer, imported, id=f"{importer}-must-not-import-{imported}",
                        marks=marks)


FORBIDDEN = [_pair_param(a, b) for a in ALLOWED for b in ALLOWED
             if a != b and b not in ALLOWED[a]]


@pytest.mark.parametrize("importer, imported", FORBIDDEN)
def test_layering(importer: str, imported: str) -> None:
    """No module of ``importer`` imports ``imported``."""
    found = _violations(importer, imported)
    assert not found, f"{importer} may import only {sorted(ALLOWED[importer])}: {found}"


@pytest.mark.parametrize("package", CORE)
def test_the_core_imports_no_edge_library(package: str) -> None:
    found = [f"{path.relative_to(REPO)}:{line} ({name})"
             for path in _modules(package)
             for name, line in _imports(path) if name in EDGE_LIBRARIES]
    assert not found


def test_every_package_has_a_row() -> None:
    """A new top-level package must take its place in the table."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert {p.split(".")[0] for p in pyproject["tool"]["setuptools"]["packages"]} == set(ALLOWED)


def test_every_package_directory_is_installed() -> None:
    """A non-editable install (the container image) holds every package the code imports.

    (``simulator.sources`` was once missing: every command failed to import in the image.)
    """
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    listed = set(pyproject["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(REPO).parts) for top in ALLOWED
             for p in (REPO / top).rglob("__init__.py")}
    assert found == listed


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_no_package_imports_the_tests(package: str) -> None:
    """Test support (fault injection: tests/worker_faults.py, tests/archiver_faults.py) is
    wired in by test entrypoints only; production code offers a narrow hook and nothing more."""
    assert not _violations(package, "tests")


def test_pending_violations_are_forbidden_pairs() -> None:
    """Each pending mark names a pair the table forbids (so it cannot hide an allowed one)."""
    for importer, imported in PENDING:
        assert imported not in ALLOWED[importer]


def test_the_graph_is_read() -> None:
    """The parser finds the imports that must be there (so the checks above cannot pass vacuously)."""
    assert _violations("scheduler", "events")
    assert _violations("simulator", "scheduler")
    assert _violations("allot", "simulator")


def _private_imports() -> list[str]:
    """``from M import _name`` in a test: the test would be bound to an implementation detail."""
    out = []
    for path in sorted((Path(__file__).parent).glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module != "__future__":
                out += [f"{path.name}:{node.lineno} {node.module}.{a.name}" for a in node.names
                        if a.name.startswith("_") and not a.name.startswith("__")]
    return out


def test_no_test_imports_a_private_name() -> None:
    assert _private_imports() == []


def _ours(module: str | None) -> bool:
    """A module of allot or of its tests (the rule binds tests to allot's interfaces; the
    standard library's and other projects' privates are their own business)."""
    top = (module or "").split(".")[0]
    return bool(top) and ((REPO / top).is_dir() or (REPO / "tests" / f"{top}.py").is_file()
                          or top == "tests")


def _imported_names(tree: ast.Module) -> set[str]:
    """The names a test binds by importing from allot (modules, and what it imports from them)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.asname or a.name.split(".")[0] for a in node.names if _ours(a.name))
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__" and _ours(node.module):
            names.update(a.asname or a.name for a in node.names)
    return names


def _root(node: ast.expr) -> str | None:
    """The name an attribute chain starts from (``m.C(x)._y`` -> ``m``)."""
    while isinstance(node, (ast.Attribute, ast.Call)):
        node = node.value if isinstance(node, ast.Attribute) else node.func
    return node.id if isinstance(node, ast.Name) else None


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_uses() -> list[str]:
    """A private name of another module reached through what a test imported.

    ``m._f``, ``m.C._f``, ``C._f``, ``C(...)._f`` and ``monkeypatch.setattr(m, "_f", ...)``
    where ``m`` or ``C`` was imported: the test would be bound to that module's
    implementation. (Private attributes of objects a test holds in a variable are
    not traced: the parser cannot tell whose they are.)
    """
    out = []
    for path in sorted((Path(__file__).parent).glob("*.py")):
        tree = ast.parse(path.read_text())
        imported = _imported_names(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _private(node.attr) and _root(node.value) in imported:
                out.append(f"{path.name}:{node.lineno} {ast.unparse(node)}")
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                  and node.func.attr == "setattr" and len(node.args) >= 2
                  and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
                  and _private(node.args[1].value) and _root(node.args[0]) in imported):
                out.append(f"{path.name}:{node.lineno} setattr({ast.unparse(node.args[0])}, "
                           f"{node.args[1].value!r})")
    return out


def test_no_test_reaches_a_private_name_of_another_module() -> None:
    assert _private_uses() == []


def test_the_private_name_check_sees_a_use() -> None:
    """The parser finds a use written the ways it looks for (so the check cannot pass vacuously)."""
    tree = ast.parse("import scheduler\nfrom events import C\nimport argparse\nscheduler._f\n"
                     "C(1)._g\nmp.setattr(scheduler.C, '_h', 1)\nx._i\nargparse._j\n")
    imported = _imported_names(tree)
    found = {n.attr for n in ast.walk(tree)
             if isinstance(n, ast.Attribute) and _private(n.attr) and _root(n.value) in imported}
    assert found == {"_f", "_g"} and _root(ast.parse("m.C", mode="eval").body) == "m"
    assert _ours("scheduler.policy") and _ours("kafka") and not _ours("argparse")


def test_the_policy_holds_no_hand_keyed_memo() -> None:
    """Issue 21: the accelerators are typed objects (scheduler/memos.py, scheduler/index/),
    never ``memo["key"]`` lookups inside the policy."""
    found = [f"{path.relative_to(REPO)}:{i}"
             for path in sorted((REPO / "scheduler" / "policy").rglob("*.py"))
             for i, line in enumerate(path.read_text().splitlines(), 1) if "memo[" in line]
    assert found == []


def _long_core_functions(limit: int = 80) -> list[str]:
    """Functions of the core (events, projections, scheduler) longer than ``limit`` lines."""
    root = Path(__file__).resolve().parent.parent
    out = []
    for pkg in ("events", "projections", "scheduler"):
        for path in sorted((root / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    lines = (node.end_lineno or node.lineno) - node.lineno + 1
                    if lines > limit:
                        out.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({lines})")
    return out


def test_no_function_of_the_core_is_longer_than_80_lines() -> None:
    assert _long_core_functions() == []


def _core_module_imports() -> dict[str, set[str]]:
    """Each module of the core and the modules of the core it imports (type-only imports too)."""
    modules: dict[str, Path] = {}
    for pkg in CORE:
        for path in sorted((REPO / pkg).rglob("*.py")):
            name = ".".join(path.relative_to(REPO).with_suffix("").parts)
            modules[name.removesuffix(".__init__")] = path
    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        out: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                for a in node.names:
                    full = f"{node.module}.{a.name}"
                    out.add(full if full in modules else node.module)
            elif isinstance(node, ast.Import):
                out.update(a.name for a in node.names)
        edges[name] = {m for m in out if m in modules and m != name}
    return edges


def test_no_module_of_the_core_imports_a_module_that_imports_it() -> None:
    """No circle of two: each pair of the core's modules depends one way at most."""
    edges = _core_module_imports()
    assert edges["scheduler.policy.cycle"], "the parser finds the core's imports"
    mutual = sorted({tuple(sorted((a, b))) for a, bs in edges.items() for b in bs
                     if a in edges.get(b, set())})
    assert mutual == []
