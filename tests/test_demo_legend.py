"""``make demo``'s legend names every condition its PASS checks (and the verdict checks no other)."""

from __future__ import annotations

from streams.demo import DemoReport, legend, verdict


def _report(**kw: object) -> DemoReport:
    base = dict(scenario="demo", cluster="c", horizon_s=3600, time_scale=60.0, replay_ok=True,
                audit_ok=True, started=1, finished=1)
    base.update(kw)
    return DemoReport(**base)  # type: ignore[arg-type]


def test_the_legend_names_what_pass_checks() -> None:
    # Each condition, failed alone, fails the verdict, and the legend names it.
    for kw, words in (({"replay_ok": False}, "replay re-derives every decision"),
                      ({"audit_ok": False}, "the audit loaded it"),
                      ({"missing_inputs": ["x"]}, "every input the demo published is in the journal"),
                      ({"started": 0}, "work started"),
                      ({"finished": 0}, "and finished"),
                      ({"projections_checked": True, "projections_ok": False},
                       "projections' windows equal the audit's")):
        r = _report(**kw)
        verdict(r)
        assert not r.passed, kw
        assert words in " ".join(legend(r).split()), kw
    ok = _report()
    verdict(ok)
    assert ok.passed
    text = " ".join(legend(ok).split())
    assert "projections" not in text  # not checked, not claimed
    assert "received / owed" in text and "docs/audit.md" in text and "does not grade" in text
