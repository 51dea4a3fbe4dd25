"""The reference docs stay true: examples decode and load, every type, reason and knob is documented.

docs/events.md is the public event contract and docs/scenarios.md the
simulator's input format. These tests read the code blocks and names out of
them and check them against the code, so a change to either side that is not
reflected in the other fails here.
"""

from __future__ import annotations

import re
import tomllib
import typing
from pathlib import Path

import pytest

from events import (
    ALL_TYPES,
    DECISION_TAGS,
    INPUT_TAGS,
    TAGS,
    BudgetEditReason,
    InputReason,
    PolicyConfigured,
    PreemptionReason,
    RejectReason,
    decode,
    tag_of,
)
from events.schema import SCHEMA_PATH, render
from scheduler import Engine
from scheduler.admission import InputRefused
from simulator import scenario as scenario_mod
from simulator.driver import Simulation
from simulator.scenario import load_scenario
from simulator.sources import explicit, generator
from simulator.spec import WorkloadSpec

DOCS = Path(__file__).resolve().parent.parent / "docs"
EVENTS_MD = DOCS / "events.md"
SCENARIOS_MD = DOCS / "scenarios.md"

# Docs linked from these pages that other work is still writing.
PENDING_DOCS = {"architecture.md"}

ENVELOPE = ("id", "at", "cluster", "actor", "source", "cause", "v")
KNOBS = tuple(f for f in PolicyConfigured.__struct_fields__ if f not in ENVELOPE)


def _blocks(path: Path, lang: str) -> list[str]:
    """The bodies of the fenced code blocks of exactly language ``lang`` in ``path``."""
    return re.findall(rf"^```{re.escape(lang)}\n(.*?)^```", path.read_text(), re.M | re.S)


def _mentioned(text: str, name: str) -> bool:
    """True when ``name`` appears in ``text`` as inline code: `name`, `name = ...`, `[name]`, `[[a.name]]`."""
    key = re.escape(name)
    return re.search(rf"`({key}(`| =)|\[\[?([\w.]+\.)?{key}\]\]?`)", text) is not None


def _slug(heading: str) -> str:
    """The anchor GitHub gives a markdown heading."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.M | re.S)
    return {_slug(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}


def _event_id(text: str) -> str:
    """A test id for an example: its event id, as far as it can be read."""
    m = re.search(r'"id":\s*"([^"]*)"', text)
    return m.group(1) if m else "no-id"


JSON_BLOCKS = _blocks(EVENTS_MD, "json")
JSONL_LINES = [line for b in _blocks(EVENTS_MD, "jsonl") for line in b.splitlines() if line.strip()]
TOML_BLOCKS = _blocks(SCENARIOS_MD, "toml")
SCENARIO_BLOCKS = [b for b in TOML_BLOCKS if "[cluster]" in b and re.search(r"^name = ", b, re.M)]


# ---------------------------------------------------------------- docs/events.md


@pytest.mark.parametrize("block", JSON_BLOCKS, ids=lambda b: _event_id(b))
def test_json_examples_decode(block: str) -> None:
    """Every json block in events.md decodes with events.decode into an event of a known tag."""
    event = decode(block)
    assert tag_of(type(event)) in TAGS


@pytest.mark.parametrize("line", JSONL_LINES, ids=lambda line: _event_id(line))
def test_jsonl_examples_decode(line: str) -> None:
    """Every line of every jsonl block in events.md decodes as an event."""
    decode(line)


def test_events_md_has_examples() -> None:
    """The block extraction found the examples (so the tests above cannot pass vacuously)."""
    assert len(JSON_BLOCKS) >= len(ALL_TYPES)
    assert JSONL_LINES


@pytest.mark.parametrize("cls", ALL_TYPES, ids=tag_of)
def test_every_event_type_has_a_section_and_an_example(cls: type) -> None:
    """Every event type has its own section heading and a json example of that type."""
    tag = tag_of(cls)
    assert re.search(rf"^### `{re.escape(tag)}`$", EVENTS_MD.read_text(), re.M), f"no section for {tag}"
    assert any(decode(b).__struct_config__.tag == tag for b in JSON_BLOCKS), f"no example of {tag}"


@pytest.mark.parametrize("cls", ALL_TYPES, ids=tag_of)
def test_every_field_is_documented(cls: type) -> None:
    """Every field of every event type is named in events.md."""
    text = EVENTS_MD.read_text()
    missing = [f for f in cls.__struct_fields__ if not _mentioned(text, f)]
    assert not missing, f"{tag_of(cls)}: undocumented fields {missing}"


def test_examples_follow_the_envelope_rules() -> None:
    """Input examples carry no cause; derived examples carry one and an id of the form <cause>/<n>."""
    for block in JSON_BLOCKS:
        e = decode(block)
        tag = tag_of(type(e))
        if tag in INPUT_TAGS:
            assert e.cause is None, e.id
        else:
            assert tag in DECISION_TAGS
            assert e.cause is not None and re.fullmatch(rf"{re.escape(e.cause)}/\d+", e.id), e.id
            assert e.actor == e.source == "allot.scheduler", e.id


def test_derived_examples_published_as_input_are_refused() -> None:
    """As documented, a derived-type event sent as input is refused (not_an_input), never journaled."""
    derived = [decode(b) for b in JSON_BLOCKS if decode(b).cause is not None]
    assert derived
    for e in derived:
        engine = Engine(e.cluster)
        with pytest.raises(InputRefused) as err:
            engine.process(e)
        assert err.value.reason == "not_an_input", e.id
        assert engine.state.position == 0


def _codes(holder: type) -> list[str]:
    return [v for k, v in vars(holder).items() if k.isupper() and isinstance(v, str)]


@pytest.mark.parametrize(
    "code",
    [*_codes(RejectReason), *_codes(BudgetEditReason), *_codes(InputReason),
     *typing.get_args(PreemptionReason)],
)
def test_every_reason_code_is_documented(code: str) -> None:
    """Every rejection and preemption reason code appears in events.md."""
    assert f"`{code}`" in EVENTS_MD.read_text()


def test_published_schema_is_current() -> None:
    """docs/events.schema.json is exactly what events.schema.render() generates (run `make schema`)."""
    assert SCHEMA_PATH == DOCS / "events.schema.json"
    assert SCHEMA_PATH.read_text() == render()


# ---------------------------------------------------------------- docs/scenarios.md


def test_scenarios_md_has_complete_examples() -> None:
    """scenarios.md holds at least a list-source and a generator example scenario."""
    assert any('type = "list"' in b for b in SCENARIO_BLOCKS)
    assert any('type = "generator"' in b for b in SCENARIO_BLOCKS)


@pytest.mark.parametrize("block", TOML_BLOCKS)
def test_toml_blocks_parse(block: str) -> None:
    """Every toml block in scenarios.md, complete or a fragment, is valid TOML."""
    tomllib.loads(block)


@pytest.mark.parametrize("block", SCENARIO_BLOCKS, ids=lambda b: tomllib.loads(b)["name"])
def test_example_scenarios_load(block: str, tmp_path: Path) -> None:
    """Every complete scenario in scenarios.md loads with load_scenario."""
    path = tmp_path / "scenario.toml"
    path.write_text(block)
    load_scenario(path)


@pytest.mark.parametrize("block", SCENARIO_BLOCKS, ids=lambda b: tomllib.loads(b)["name"])
def test_example_scenarios_run_without_rejections(block: str, tmp_path: Path) -> None:
    """Every complete example with list or generator sources simulates with no input refused."""
    path = tmp_path / "scenario.toml"
    path.write_text(block)
    sc = load_scenario(path)
    if not all(isinstance(s, explicit.Config | generator.Config) for s in sc.sources):
        pytest.skip("reads files relative to the scenario")
    result = Simulation(sc, "allot", tmp_path).run()
    refused = [(tag_of(type(e)), e.reason, e.detail) for e in result.log
               if tag_of(type(e)).endswith("rejected")]
    assert not refused
    assert any(tag_of(type(e)) == "workload.started" for e in result.log)


@pytest.mark.parametrize("knob", KNOBS)
def test_every_policy_knob_is_documented(knob: str) -> None:
    """Every PolicyConfigured knob is described in scenarios.md (and in events.md)."""
    assert _mentioned(SCENARIOS_MD.read_text(), knob)
    assert _mentioned(EVENTS_MD.read_text(), knob)


@pytest.mark.parametrize(
    "struct",
    [scenario_mod.Scenario, scenario_mod.ClusterConfig, scenario_mod.BudgetConfig,
     scenario_mod.NodeConfig, scenario_mod.FaultConfig, scenario_mod.ScheduledFault,
     WorkloadSpec, generator.Config, generator.TeamConfig, generator.ClassConfig],
    ids=lambda s: s.__qualname__,
)
def test_every_scenario_key_is_documented(struct: type) -> None:
    """Every key of the scenario format (top level, tables, list and generator sources) is in scenarios.md."""
    text = SCENARIOS_MD.read_text()
    missing = [f for f in struct.__struct_fields__ if not _mentioned(text, f)]
    assert not missing, f"{struct.__qualname__}: undocumented keys {missing}"


# ---------------------------------------------------------------- links


@pytest.mark.parametrize("page", [EVENTS_MD, SCENARIOS_MD], ids=lambda p: p.name)
def test_links_resolve(page: Path) -> None:
    """Relative links point to existing files, and #anchors to headings of the target page."""
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.M | re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        dest = page if not file else (page.parent / file)
        if file in PENDING_DOCS and not dest.exists():
            continue
        assert dest.exists(), f"{page.name}: broken link {target}"
        if anchor and dest.suffix == ".md":
            assert anchor in _anchors(dest), f"{page.name}: no heading for {target}"
