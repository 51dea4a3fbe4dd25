"""The issue-9 benchmark's host-count argument: lists, ranges, and clear errors."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from benchmarks.bench_native import host_counts, main


def test_a_list_of_host_counts_is_read_in_order() -> None:
    assert host_counts("24,32, 40,48") == [24, 32, 40, 48]


def test_a_range_holds_every_count_from_one_end_to_the_other() -> None:
    assert host_counts("16-20") == [16, 17, 18, 19, 20]
    assert len(host_counts("16-64")) == 49  # 128 to 512 GPUs, every host count


def test_lists_and_ranges_mix_and_each_count_runs_once() -> None:
    assert host_counts("16,18-20,19,64") == [16, 18, 19, 20, 64]


@pytest.mark.parametrize("text", ["24,x", "20-16", "16-", "-16-20"])
def test_a_malformed_count_is_an_argument_error(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="expected host counts"):
        host_counts(text)


def _saved(tmp_path: Path) -> Path:
    run = {"cpu": 1.0, "wall": 1.1, "core": "native", "events": 1, "cycles": 1, "sha": "a"}
    runs = {f"philly-{g}/{p}": {"native": [dict(run, cpu=t)]}
            for g, p, t in [(128, "allot", 20.0), (136, "allot", 31.0), (128, "baseline", 9.0)]}
    path = tmp_path / "runs.json"
    path.write_text(json.dumps({"machine": "test machine", "clock": "cpu", "runs": runs}))
    return path


def test_saved_runs_are_reported_with_the_slowest_size_named(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(["--from-json", str(_saved(tmp_path)), "--plot", str(tmp_path / "p.png")])
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line.startswith("philly-")}
    assert rows["philly-136/allot"][:5] == ["-", "31.0s", "-", "30s", "NO"]
    assert rows["philly-128/allot"][:5] == ["-", "20.0s", "-", "30s", "yes"]
    assert "slowest Philly case (compiled): philly-136/allot at 31.0 s of 3 cases" in out
    assert (tmp_path / "p.png").read_bytes().startswith(b"\x89PNG")


def test_a_file_that_is_not_saved_runs_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(SystemExit, match="not a bench_native --json file"):
        main(["--from-json", str(bad)])
