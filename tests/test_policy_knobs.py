"""``allot policy set KNOB=VALUE``: words into policy knobs, checked whole, and back into words."""

from __future__ import annotations

import pytest

from allot.cli import main
from events import PolicyConfigured
from streams import policy_knobs
from streams.policy_knobs import KnobError
from streams.state_cli import reached

ENV = {"id": "admin:policy:1", "at": 1_800_000_000, "cluster": "c", "actor": "admin"}


def test_every_knob_of_the_event_is_a_knob_and_no_envelope_field_is() -> None:
    assert "preemption_grace_s" in policy_knobs.KNOBS and "window_s" in policy_knobs.KNOBS
    assert not {"id", "at", "cluster", "actor", "source", "cause", "v"} & set(policy_knobs.KNOBS)


def test_durations_are_read_as_people_type_them() -> None:
    assert policy_knobs.parse("preemption_grace_s=30s") == ("preemption_grace_s", 30)
    assert policy_knobs.parse("window_s=3d") == ("window_s", 259_200)
    assert policy_knobs.parse("min_runtime_cap_s=1:30:00") == ("min_runtime_cap_s", 5_400)
    assert policy_knobs.parse("borrowed_protection_s=none") == ("borrowed_protection_s", None)
    assert policy_knobs.parse("queue_depth=128") == ("queue_depth", 128)


def test_a_change_keeps_every_other_knob_of_the_current_policy() -> None:
    current = {**policy_knobs.defaults(), "window_s": 86_400, "preemption_rule": "fair_share"}
    e = policy_knobs.apply(current, ["preemption_grace_s=2m"], **ENV)
    assert type(e) is PolicyConfigured
    assert (e.preemption_grace_s, e.window_s, e.preemption_rule) == (120, 86_400, "fair_share")
    assert (e.id, e.actor, e.at) == ("admin:policy:1", "admin", 1_800_000_000)


@pytest.mark.parametrize(("word", "says"), [
    ("grace=30s", "no policy knob 'grace'; the knobs are: scheduler, window_s"),
    ("preemption_grace_s=soon", "preemption_grace_s: not a duration: 'soon'"),
    ("preemption_rule=lottery", "the policy would not be valid"),
    ("host_gpus=eight", "the policy would not be valid: Expected `int`"),
    ("window_s", "expected KNOB=VALUE"),
])
def test_a_bad_word_is_refused_with_what_is_wrong(word: str, says: str) -> None:
    """Refused before publishing; what only the scheduler can judge (a knob below its
    least, bucket_s once usage exists) it rejects, and the verb prints that rejection."""
    with pytest.raises(KnobError) as err:
        policy_knobs.apply(policy_knobs.defaults(), [word], **ENV)
    assert says in str(err.value)


def test_values_print_as_people_read_them() -> None:
    assert [policy_knobs.text("window_s", v) for v in (604_800, 5_400, 45, 0)] == [
        "7d", "1h30m", "45s", "0s"]
    assert policy_knobs.text("borrowed_protection_s", None) == "none"
    assert policy_knobs.text("preemption_rule", "reclaim") == "reclaim"


def test_the_verb_refuses_an_unknown_knob_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["policy", "set", "grace=30s", "--from-defaults", "--bootstrap", "127.0.0.1:1"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("allot policy: error: no policy knob 'grace'"), err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(("state", "answer", "met"), [
    ("running", {"status": "running"}, True),
    ("running", {"status": "pending"}, False),
    ("ended", {"status": "failed"}, True),
    ("ended", {"status": "running"}, False),
    ("preempted", {"status": "pending", "last_preemption": ["host_failure", "g0", 1]}, True),
    ("preempted", {"status": "running", "last_preemption": None}, False),
    ("succeeded", {"status": "failed"}, False),
])
def test_wait_means_what_it_says(state: str, answer: dict, met: bool) -> None:
    assert reached(state, answer) is met
