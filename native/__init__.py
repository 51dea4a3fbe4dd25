"""The compiled core: the same source as ``projections/`` and ``scheduler/``, compiled by mypyc.

There is one core and one source of it. ``python -m native.build`` compiles the
modules named in ``MODULES`` with mypyc (the compiler the mypy project ships
and builds mypy itself with) into C extensions, out of the source tree, under
``build/native/``. Nothing about a decision changes: every line that runs is
the line in the ``.py`` file, with its types checked and its attribute and
call sites resolved at compile time. ``tests/test_native.py`` runs the same
scenarios through both forms and demands byte-identical logs, snapshots and
replays.

Choosing the form is the only thing this package does, once per process, when
``projections`` or ``scheduler`` is first imported (their ``__init__`` calls
``extend_path``; it reads no input and cannot change an answer):

- ``ALLOT_CORE=pure``: the ``.py`` files run, whatever is built.
- ``ALLOT_CORE=native``: the compiled modules run, or ``NativeCoreUnavailable``
  says why not (not built, built for another Python, or stale).
- ``ALLOT_CORE=auto`` (the default): compiled when a current build exists, else
  pure. A build is current when its manifest holds the sha256 of every ``.py``
  file of ``events/``, ``projections/`` and ``scheduler/`` as they are now, so
  an edited source never runs as its old compiled self: the process runs pure
  and warns (``NativeCoreStale``) until ``make native`` rebuilds.

It is all or nothing: compiled ``scheduler`` code expects the compiled classes
of ``projections`` (mypyc checks native types at its boundaries), so both
packages take the same form. ``ALLOT_CORE_DIR`` points at another build
directory (the container image builds into its own).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
import sysconfig
import warnings
from pathlib import Path

ENV_MODE = "ALLOT_CORE"
ENV_DIR = "ALLOT_CORE_DIR"
MODES = ("auto", "native", "pure")

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DIR = ROOT / "build" / "native"
MANIFEST = "manifest.json"
# mypyc puts the compiled code of every module into one shared library, which
# the small per-module extensions import by this name.
GROUP = "allot_core"
FORMAT = 1  # of the manifest

# The modules compiled: the whole fold and decision path. ``scheduler.explain``,
# ``replay`` and ``snapshot`` stay Python (they run once per question or
# restart, not per cycle); they call into the compiled modules like any caller.
MODULES: tuple[str, ...] = (
    "projections/budget_tree.py",
    "projections/cluster.py",
    "projections/usage.py",
    "projections/workloads.py",
    "scheduler/admission.py",
    "scheduler/emit.py",
    "scheduler/engine.py",
    "scheduler/memos.py",
    "scheduler/react.py",
    "scheduler/state.py",
    "scheduler/validation.py",
    "scheduler/policy/baseline.py",
    "scheduler/policy/cycle.py",
    "scheduler/policy/fair_share.py",
    "scheduler/policy/guarantee.py",
    "scheduler/policy/placement.py",
    "scheduler/policy/reservations.py",
    "scheduler/policy/rules.py",
    "scheduler/policy/victims.py",
    "scheduler/index/failure_memo.py",
    "scheduler/index/fair_share_order.py",
    "scheduler/index/host_free_times.py",
    "scheduler/index/sibling_sums.py",
    "scheduler/index/sole_leaf.py",
    "scheduler/index/victim_index.py",
)
# Sources the compiled code was checked against: a change to any of them makes a build stale.
HASHED_PACKAGES = ("events", "projections", "scheduler")


class NativeCoreUnavailable(RuntimeError):
    """``ALLOT_CORE=native`` was asked for and the compiled core cannot run; the message says why."""


class NativeCoreStale(UserWarning):
    """A build exists but its sources changed since: the pure core runs until it is rebuilt."""


class Status:
    """Which form of the core this process runs, and why."""

    __slots__ = ("active", "directory", "mode", "reason")

    def __init__(self, active: bool, mode: str, reason: str, directory: Path) -> None:
        self.active = active
        self.mode = mode
        self.reason = reason
        self.directory = directory

    @property
    def name(self) -> str:
        return "native" if self.active else "pure"

    def as_dict(self) -> dict[str, object]:
        return {"core": self.name, "mode": self.mode, "reason": self.reason,
                "directory": str(self.directory)}

    def __repr__(self) -> str:
        return f"Status({self.name}: {self.reason})"


_status: Status | None = None


def build_dir() -> Path:
    return Path(os.environ.get(ENV_DIR) or DEFAULT_DIR)


def source_hashes(root: Path = ROOT) -> dict[str, str]:
    """sha256 of every ``.py`` file of the hashed packages, by path relative to ``root``."""
    out: dict[str, str] = {}
    for package in HASHED_PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            out[path.relative_to(root).as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def platform_tag() -> dict[str, str]:
    """What a compiled extension is tied to: the interpreter and its extension ABI."""
    return {"cache_tag": sys.implementation.cache_tag or "",
            "ext_suffix": sysconfig.get_config_var("EXT_SUFFIX") or ""}


def read_manifest(directory: Path) -> dict[str, object] | None:
    try:
        data = json.loads((directory / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def check(directory: Path, root: Path = ROOT) -> str | None:
    """Why the build in ``directory`` cannot run for these sources and this Python (None: it can)."""
    manifest = read_manifest(directory)
    if manifest is None:
        return f"no build in {directory} (make native)"
    if manifest.get("format") != FORMAT:
        return f"the build in {directory} has manifest format {manifest.get('format')!r}, not {FORMAT}"
    if manifest.get("platform") != platform_tag():
        return (f"the build in {directory} is for {manifest.get('platform')}, "
                f"this Python is {platform_tag()}")
    built = manifest.get("sources")
    now = source_hashes(root)
    if built != now:
        built = built if isinstance(built, dict) else {}
        changed = sorted(p for p in set(built) | set(now) if built.get(p) != now.get(p))
        more = f" and {len(changed) - 1} more" if len(changed) > 1 else ""
        return f"stale: {changed[0]}{more} changed since the build (make native)"
    return None


def _load(directory: Path, manifest: dict[str, object]) -> None:
    """Load the shared library the per-module extensions import (it lives outside ``sys.path``)."""
    name = f"{GROUP}__mypyc"
    if name in sys.modules:
        return
    lib = directory / str(manifest["library"])
    spec = importlib.util.spec_from_file_location(name, lib)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {lib}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise


def _choose() -> Status:
    mode = os.environ.get(ENV_MODE, "auto").strip().lower() or "auto"
    directory = build_dir()
    if mode not in MODES:
        raise NativeCoreUnavailable(f"{ENV_MODE}={mode!r}: expected one of {', '.join(MODES)}")
    if mode == "pure":
        return Status(False, mode, f"{ENV_MODE}=pure", directory)
    problem = check(directory)
    if problem is None:
        manifest = read_manifest(directory) or {}
        try:
            _load(directory, manifest)
        except (ImportError, OSError, KeyError) as e:
            problem = f"the build in {directory} does not load: {e}"
        else:
            return Status(True, mode, f"compiled by mypyc {manifest.get('mypy', '?')}", directory)
    if mode == "native":
        raise NativeCoreUnavailable(f"{ENV_MODE}=native, but {problem}")
    if problem.startswith("stale"):
        warnings.warn(f"allot: the compiled core is {problem}; running the pure-Python core",
                      NativeCoreStale, stacklevel=3)
    return Status(False, mode, problem, directory)


def status() -> Status:
    """The form of the core this process runs (chosen on first use, then fixed)."""
    global _status
    if _status is None:
        _status = _choose()
    return _status


def extend_path(path: list[str], package: str) -> list[str]:
    """``package.__path__``, with the compiled modules' directory first when the native core runs."""
    if status().active:
        return [str(status().directory.joinpath(*package.split("."))), *path]
    return path


__all__ = [
    "MODULES", "NativeCoreStale", "NativeCoreUnavailable", "Status", "check", "extend_path",
    "source_hashes", "status",
]
