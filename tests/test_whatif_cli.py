"""``allot whatif`` end to end: a journal in, both sides audited, per-team differences out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from allot.cli import main
from events import write_log
from tests.test_whatif_reproduce import recorded_log


def test_whatif_cli_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log, _ = recorded_log()
    path = tmp_path / "journal.jsonl"
    write_log(path, log)
    out = tmp_path / "wi"
    assert main(["whatif", str(path), "--from", "day 1", "--to", "end",
                 "--set", "min_runtime_cap_s=30m", "--out", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["replay"]["clamped"] > 0 and doc["replay"]["refused_over_cap"] == 0
    assert doc["change"]["knobs"] == {"min_runtime_cap_s": 1800}
    assert {"recorded", "whatif"} <= set(doc) and doc["teams"]
    row = doc["teams"][0]
    assert "ratio" in row["recorded"] and "ratio" in row["whatif"]
    assert (out / "whatif.duckdb").is_file() and (out / "whatif.json").is_file()
    # The audit database is itself a history whatif reads (one run named).
    assert main(["whatif", str(out / "whatif.duckdb"), "--run", "recorded", "--from", "day 1",
                 "--to", "day 2", "--out", str(tmp_path / "wi2"), "--json"]) == 0


def test_whatif_cli_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["whatif", str(tmp_path / "missing.jsonl")]) == 2
    assert "no such journal" in capsys.readouterr().err
