"""docs/live.md stays true: every setting, dead-letter reason and metric is documented."""

from __future__ import annotations

import re
from pathlib import Path

from streams import config, processor
from streams.metrics import WorkerMetrics

LIVE_MD = Path(__file__).resolve().parent.parent / "docs" / "live.md"


def _section(title: str) -> str:
    text = LIVE_MD.read_text()
    start = text.index(f"## {title}")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else None]


def test_every_setting_is_in_the_settings_table() -> None:
    rows = set(re.findall(r"^\| `([a-z_]+)` \|", _section("Settings"), re.M))
    assert rows == set(config.SETTINGS)


def test_every_dead_letter_reason_is_documented() -> None:
    table = _section("The worker")
    for reason in processor.REASONS:
        assert f"`{reason}`" in table, reason


def test_every_metric_is_documented() -> None:
    text = _section("Health, metrics, logs")
    names = {m.name for m in WorkerMetrics().registry.collect()}
    for name in names:
        assert f"`{name}" in text or f"`{name}_total" in text, name
