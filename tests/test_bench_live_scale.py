"""bench_live_scale runs end to end at a tiny size: every phase reports, the archive step too.

One run of the benchmark covers an unsigned worker and a batch-signed one on one broker
(each run starts a worker and fills the 10,000-GPU cluster: two runs, not four).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import bench_live, bench_live_scale

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def test_the_scale_benchmark_runs_at_a_tiny_size(kafka: str, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench_live, "OUT", tmp_path)
    monkeypatch.setattr(bench_live_scale, "OUT", tmp_path)
    r = bench_live_scale.main(["--unsigned", "--batch-sign", "16", "--pending", "300", "--rates", "200",
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
    assert (tmp_path / "scale-results.json").is_file()
    # Batch-signed: every submission verified, accepted and journaled (none dead-lettered),
    # more than one record to a signature, and restarted from its journal like the rest.
    batch = r["batch-signed"]
    assert batch["batch_sign"] == 16
    assert 1 < batch["queue"]["records_per_signature"] <= 16
    assert batch["queue"]["submissions"] == 300
    churn = batch["churn_200"]
    assert churn["journaled"]["n"] == churn["submissions"] == 200
    assert churn["records_per_signature"] > 1
    assert [x["snapshot"] for x in batch["restart"]["runs"]] == [False, True]
    # The archive step reads the last run's journal.
    assert r["archive"]["records"] >= batch["journal_records"]
    assert r["archive"]["archive_per_s"] > 0
