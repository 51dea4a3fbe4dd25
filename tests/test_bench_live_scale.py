"""bench_live_scale runs end to end at a tiny size: every phase reports, the archive step too."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import bench_live, bench_live_scale

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def test_the_scale_benchmark_runs_at_a_tiny_size(kafka: str, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench_live, "OUT", tmp_path)
    monkeypatch.setattr(bench_live_scale, "OUT", tmp_path)
    r = bench_live_scale.main(["--unsigned", "--pending", "300", "--rates", "200",
                               "--seconds", "1", "--broker-records", "1000", "--archive",
                               "--restarts", "2",
                               "--bootstrap", kafka])
    run = r["unsigned"]
    assert run["fill"]["capacity_gpus"] == 10_000          # the scale-10k cluster
    assert run["fill"]["gpus"] >= 10_000                   # demand up to capacity
    assert run["queue"]["submissions"] == 300
    assert run["queue"]["pending_after"] > 0               # work waits
    churn = run["churn_200"]
    assert churn["journaled"]["n"] == churn["submissions"] == 200
    assert churn["decided"]["n"] == 200
    assert churn["finishes"] > 0
    assert run["rss_peak_mb"] > 10
    cold, warm = run["restart"]["runs"]
    assert not cold["snapshot"] and cold["folded"] >= run["journal_records"] - 10
    assert warm["snapshot"] and warm["folded"] < cold["folded"]   # restored, then the rest
    assert 0 < warm["claim_s"] <= warm["first_input_s"]
    assert warm["rss_mb"] > 10
    assert r["archive"]["records"] >= run["journal_records"]
    assert r["archive"]["archive_per_s"] > 0
    assert (tmp_path / "scale-results.json").is_file()


def test_batch_signed_inputs_all_go_through_at_a_tiny_size(kafka: str, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench_live, "OUT", tmp_path)
    monkeypatch.setattr(bench_live_scale, "OUT", tmp_path)
    r = bench_live_scale.main(["--signed", "--batch-sign", "16", "--pending", "300",
                               "--rates", "200", "--seconds", "1", "--broker-records", "0",
                               "--bootstrap", kafka])
    assert r["signed"]["queue"]["records_per_signature"] == 1
    run = r["batch-signed"]
    assert run["batch_sign"] == 16
    assert 1 < run["queue"]["records_per_signature"] <= 16
    # Every batch-signed submission verified, accepted and journaled (none dead-lettered).
    assert run["queue"]["submissions"] == 300
    churn = run["churn_200"]
    assert churn["journaled"]["n"] == churn["submissions"] == 200
    assert churn["records_per_signature"] > 1
