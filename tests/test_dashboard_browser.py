"""The dashboard in a real browser (Debian's headless Chromium through Playwright).

Loads the page from a worker over the test broker, sees the ranked queue with
its legend, opens an explanation, and saves a screenshot in the test's tmp dir.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from events import BudgetNodeDefined, HostAdded, WorkloadSubmitted
from tests.kafka import Live, unique_prefix, wait_until

pytestmark = pytest.mark.kafka
CHROMIUM = Path("/usr/bin/chromium")
C = "dash"


@pytest.mark.skipif(not CHROMIUM.exists(), reason="apt-get install -y chromium")
def test_dashboard_shows_the_queue_and_an_explanation(kafka: str, tmp_path: Path) -> None:
    sync_api = pytest.importorskip("playwright.sync_api")
    live = Live(kafka, unique_prefix()).start()
    try:
        env = dict(at=int(time.time()), cluster=C, actor="root", source="test")
        live.send_many([
            BudgetNodeDefined(id="b0", path="lab", shares=1, managers=("root",), **env),
            BudgetNodeDefined(id="b1", path="lab/a", shares=1, managers=(), **env),
            BudgetNodeDefined(id="b2", path="lab/b", shares=1, managers=(), **env),
            HostAdded(id="h1", host="h1", gpus=8, **env),
            *[WorkloadSubmitted(id=f"s{i}", workload=f"job-{i}", budget="lab/a" if i % 2
                                else "lab/b", user="u", gpus=8, hosts=1, gpus_per_host=8,
                                min_runtime_s=3600, resumable=True, priority=0,
                                kind="training", **env) for i in range(3)],
        ])
        worker = live.start_worker((C,), metrics_port=0)
        host, port = worker.metrics_address
        wait_until(lambda: sum(len(q) for q in worker.engines()[C].state.workloads.pending
                               .values()) == 2, 30, what="one running, two pending")
        with sync_api.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM),
                                         args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.goto(f"http://{host}:{port}/dashboard/")
            page.wait_for_selector("body[data-ready='1']", timeout=10_000)
            rows = page.locator("#queue tbody tr")
            assert rows.count() == 2
            assert "lower is better" in page.inner_text("body")
            first = rows.first.get_attribute("data-id")
            rows.first.click()
            page.wait_for_selector(f"#explain[data-workload='{first}']", timeout=10_000)
            text = page.inner_text("#explain")
            assert "pending" in text and "Fair share" in text
            # Its forecast, in words with a date: the running job ends after the assumed
            # 4 h (no expected duration given), then the first in line starts.
            forecast = next(ln for ln in text.splitlines() if ln.startswith("forecast: "))
            assert "estimated start 20" in forecast and " UTC (in " in forecast, forecast
            assert "{" not in forecast and str(env["at"])[:5] not in forecast
            assert int(page.get_attribute("#gantt", "data-runs") or 0) >= 1
            page.screenshot(path=str(tmp_path / "dashboard.png"), full_page=True)
            browser.close()
        assert (tmp_path / "dashboard.png").stat().st_size > 10_000
    finally:
        live.close()
