"""The command line builds only the group of commands it is asked for: the same parser
for that command as the whole one, without importing what the other commands need."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from allot.cli import COMMAND_GROUPS, build_parser


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found.update(action.choices)
    return found


def helps(parser: argparse.ArgumentParser, path: str = "") -> dict[str, str]:
    """The help of a parser and of every subcommand under it, by their path."""
    out = {path: parser.format_help()}
    for name, child in subcommands(parser).items():
        out.update(helps(child, f"{path} {name}"))
    return out


ALL = [name for group in COMMAND_GROUPS for name in group.names]


def test_the_groups_declare_every_command_once_in_the_order_of_the_help() -> None:
    assert list(subcommands(build_parser())) == ALL


@pytest.mark.parametrize("group", COMMAND_GROUPS, ids=lambda g: g.names[0])
def test_a_group_adds_exactly_the_commands_it_declares(group: object) -> None:
    parser = argparse.ArgumentParser(prog="allot")
    sub = parser.add_subparsers(dest="command")
    group.add(sub)  # type: ignore[attr-defined]
    assert tuple(sub.choices) == group.names  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", ALL)
def test_a_command_built_alone_is_the_command_of_the_whole_parser(name: str) -> None:
    whole = subcommands(build_parser())[name]
    alone = subcommands(build_parser(name))[name]
    assert helps(alone) == helps(whole)


def test_an_unknown_or_absent_command_builds_them_all() -> None:
    assert list(subcommands(build_parser("nope"))) == ALL
    assert list(subcommands(build_parser(None))) == ALL


def test_the_worker_command_line_imports_no_audit_database_or_stream_processor() -> None:
    probe = ("import sys; from allot.cli import build_parser; build_parser('worker'); "
             "print(sorted(m for m in ('duckdb', 'faust', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
