"""The compiled core (native/) decides exactly what the pure core decides, and runs only when current.

The test process runs the pure core (conftest sets ``ALLOT_CORE=pure``: some
tests replace methods, which compiled classes do not allow). The compiled core
runs in child processes, with ``ALLOT_CORE=native`` so that a missing or broken
build fails here instead of quietly running pure: ``make test`` builds it
beside the tests (these wait for it), and CI runs ``make test``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import pytest

import native
from native import build as native_build
from tests import native_probe

REPO = Path(__file__).resolve().parent.parent
# ``make test`` builds the compiled core beside the tests: wait for it before asking for it.
pytestmark = pytest.mark.usefixtures("native_build_done")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALLOT_CORE")}
    env.update(extra)
    return env


def _python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, env=_env(**env),
                          capture_output=True, text=True, timeout=600)


def test_this_process_runs_the_pure_core() -> None:
    import scheduler.policy.cycle

    assert native.status().name == "pure"
    assert scheduler.policy.cycle.__file__.endswith("cycle.py")


def test_the_build_is_current() -> None:
    """``make test`` built the compiled core from these very sources, for this Python."""
    assert native.check(native.build_dir()) is None
    assert native_build.main(["--check", "--quiet"]) == 0


@pytest.fixture(scope="module")
def native_probe_result() -> dict[str, object]:
    out = subprocess.run([sys.executable, str(REPO / "tests" / "native_probe.py")], cwd=REPO,
                         env=_env(ALLOT_CORE="native"), capture_output=True, text=True,
                         timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def test_the_child_ran_compiled_modules(native_probe_result: dict[str, object]) -> None:
    assert native_probe_result["core"] == "native"
    assert str(native_probe_result["cycle_module"]).endswith(".so")


def test_compiled_and_pure_cores_write_the_same_logs_snapshots_and_replays(
        native_probe_result: dict[str, object]) -> None:
    """Every case: the same log bytes, the same snapshot bytes (also after a restore), replay clean."""
    pure = native_probe.probe()
    assert pure["core"] == "pure"
    assert native_probe_result["cases"] == pure["cases"]
    for case in pure["cases"].values():  # type: ignore[union-attr]
        assert case["replay_ok"] and case["decisions"] > 0
        assert case["snapshot"] == case["restored"]


def _fake_build(directory: Path, **overrides: object) -> Path:
    manifest = {"format": native.FORMAT, "platform": native.platform_tag(), "mypy": "test",
                "library": "none.so", "modules": list(native.MODULES),
                "sources": native.source_hashes()}
    manifest.update(overrides)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / native.MANIFEST).write_text(json.dumps(manifest))
    return directory


def test_a_build_of_these_sources_for_this_python_is_current(tmp_path: Path) -> None:
    assert native.check(_fake_build(tmp_path / "b")) is None


def test_no_build_is_named(tmp_path: Path) -> None:
    assert "no build" in (native.check(tmp_path) or "")


def test_a_build_of_changed_sources_is_stale_and_names_the_file(tmp_path: Path) -> None:
    sources = native.source_hashes()
    sources["scheduler/policy/cycle.py"] = "0" * 64
    problem = native.check(_fake_build(tmp_path / "b", sources=sources)) or ""
    assert problem.startswith("stale: scheduler/policy/cycle.py changed")


def test_a_new_source_file_makes_a_build_stale(tmp_path: Path) -> None:
    sources = native.source_hashes()
    del sources["scheduler/policy/rules.py"]
    assert (native.check(_fake_build(tmp_path / "b", sources=sources)) or "").startswith(
        "stale: scheduler/policy/rules.py")


def test_a_build_for_another_python_is_refused(tmp_path: Path) -> None:
    other = {"cache_tag": "cpython-99", "ext_suffix": ".cpython-99-x.so"}
    assert "this Python is" in (native.check(_fake_build(tmp_path / "b", platform=other)) or "")


def test_native_mode_without_a_build_says_why_and_imports_nothing(tmp_path: Path) -> None:
    out = _python("import scheduler", ALLOT_CORE="native", ALLOT_CORE_DIR=str(tmp_path))
    assert out.returncode != 0
    assert "NativeCoreUnavailable" in out.stderr and "no build" in out.stderr


def test_auto_mode_runs_pure_and_warns_on_a_stale_build(tmp_path: Path) -> None:
    sources = native.source_hashes()
    sources["scheduler/policy/cycle.py"] = "0" * 64
    _fake_build(tmp_path / "b", sources=sources)
    out = _python("import warnings; warnings.simplefilter('always')\n"
                  "import scheduler.policy.cycle, native; print(native.status().name, "
                  "scheduler.policy.cycle.__file__.endswith('.py'))",
                  ALLOT_CORE="auto", ALLOT_CORE_DIR=str(tmp_path / "b"))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["pure", "True"]
    assert "NativeCoreStale" in out.stderr and "scheduler/policy/cycle.py" in out.stderr


def test_auto_mode_without_a_build_runs_pure_silently(tmp_path: Path) -> None:
    out = _python("import warnings; warnings.simplefilter('error')\n"
                  "import scheduler, native; print(native.status().name)",
                  ALLOT_CORE_DIR=str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "pure"


def test_an_unknown_mode_is_refused() -> None:
    out = _python("import scheduler", ALLOT_CORE="fast")
    assert out.returncode != 0 and "expected one of auto, native, pure" in out.stderr


def test_the_compiled_modules_are_the_whole_fold_and_decision_path() -> None:
    """Every module a cycle runs is compiled (or the native core would mix forms on the hot path)."""
    listed = {m.removesuffix(".py").replace("/", ".") for m in native.MODULES}
    for module in ("scheduler.policy.cycle", "scheduler.engine", "scheduler.state", "scheduler.policy.baseline",
                   "scheduler.policy.victims", "scheduler.index.fair_share_order", "projections.usage"):
        assert module in listed
    for path in native.MODULES:
        assert (REPO / path).is_file(), path


def test_every_module_of_the_policy_and_its_accelerators_is_compiled() -> None:
    """A new file of scheduler/policy/ or scheduler/index/ is compiled too (else the compiled
    cycle would call pure code on its hot path)."""
    listed = set(native.MODULES)
    for package in ("scheduler/policy", "scheduler/index"):
        for path in sorted((REPO / package).glob("*.py")):
            if path.name != "__init__.py":
                assert f"{package}/{path.name}" in listed, path


def test_no_stale_warning_in_this_process() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert native.status().name == "pure"


# -- the wait for a build that runs beside the tests ----------------------------------------


def test_no_build_under_way_means_no_wait(tmp_path: Path) -> None:
    assert native_build.wait_for_build(tmp_path / "native", timeout_s=5) < 1.0


def test_the_wait_ends_when_the_build_removes_its_marker(tmp_path: Path) -> None:
    out = tmp_path / "native"
    marker = native_build.building_marker(out)
    marker.touch()
    waiting = threading.Event()
    waiter = threading.Thread(target=lambda: (waiting.set(),
                                              native_build.wait_for_build(out, timeout_s=60)))
    waiter.start()
    waiting.wait(10)
    assert waiter.is_alive()  # the marker is there: it waits
    marker.unlink()
    waiter.join(10)
    assert not waiter.is_alive()


def test_a_marker_a_killed_make_left_behind_is_ignored(tmp_path: Path) -> None:
    out = tmp_path / "native"
    marker = native_build.building_marker(out)
    marker.touch()
    hour_ago = time.time() - 3600
    os.utime(marker, (hour_ago, hour_ago))
    assert native_build.wait_for_build(out, timeout_s=600, stale_s=900) < 1.0


def test_a_build_that_outlives_the_wait_is_named(tmp_path: Path) -> None:
    out = tmp_path / "native"
    native_build.building_marker(out).touch()
    with pytest.raises(native_build.BuildStillRunning, match=r"native\.building still there"):
        native_build.wait_for_build(out, timeout_s=0.3, poll_s=0.05)
