"""Every decision of the shipped scenarios is pinned: the log's sha256, checked in.

``benchmarks/decision_hashes.json`` holds the sha256 of the event log of each
case of ``benchmarks.decision_hashes`` (8 scenarios x both policies). A change
that must not change a decision (a speed-up, a rename, an accelerator) leaves
every hash as it is; a change of policy re-records them on purpose (``python
-m benchmarks.decision_hashes --record benchmarks/decision_hashes.json``) and
says in its commit which decisions changed and why.

This test re-derives the cheap cases in the test process (the pure core);
``tests/test_native.py`` shows the compiled core writes the same bytes, and
``--check`` (the default file) runs all sixteen cases, minutes of CPU, too
long for the suite.
"""

from __future__ import annotations

import json

import pytest

from benchmarks import decision_hashes

RECORDED = json.loads(decision_hashes.RECORDED.read_text())


def test_every_case_of_the_guard_has_a_recorded_hash() -> None:
    assert set(RECORDED) == {f"{n}/{p}" for n in decision_hashes.CASES
                             for p in decision_hashes.POLICIES}


@pytest.mark.parametrize("policy", decision_hashes.POLICIES)
def test_the_demo_decides_what_was_recorded(policy: str) -> None:
    name, _, digest, _, _, events = decision_hashes.run_case("demo", policy)
    assert events > 0
    assert digest == RECORDED[f"{name}/{policy}"], (
        "the demo's decisions changed: if on purpose, re-record benchmarks/decision_hashes.json "
        "and say which decisions changed and why")
