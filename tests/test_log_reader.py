"""The command line's log reader: ``events.iter_lines`` and ``events.read_log``.

Every command that takes a LOG (explain, replay, the demo) reads it through
these. The reader skips blank lines and nothing else: a line it cannot decode
(cut in the middle, of an unknown type, too deep...) stops it with a
``MalformedEvent`` that carries the 1-based line number, never a silent skip.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from events import MalformedEvent, encode, iter_lines, read_log
from events.factory import Inputs
from events.limits import MAX_RECORD_BYTES

mk = Inputs(cluster="c", prefix="r")
EVENTS = [mk.node("lab", managers=("admin",)), mk.host("h1"), mk.tick(60),
          mk.submit("w1", "lab", gpus=2, min_runtime_s=60, at=60)]
LINES = [encode(e) for e in EVENTS]


def _write(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "events.jsonl"
    path.write_bytes(data)
    return path


def test_reads_every_event_in_order(tmp_path: Path) -> None:
    path = _write(tmp_path, b"\n".join(LINES) + b"\n")
    assert read_log(path) == EVENTS


# (file contents, the events it holds)
GOOD = [
    pytest.param(b"\n".join(LINES), id="no-final-newline"),
    pytest.param(b"\n\n" + b"\n\n".join(LINES) + b"\n\n\n", id="blank-lines"),
    pytest.param(b"\r\n".join(LINES) + b"\r\n", id="crlf"),
    pytest.param(b"  \t\n".join(LINES) + b"\n   \n", id="whitespace-lines"),
]


@pytest.mark.parametrize("data", GOOD)
def test_blank_lines_are_skipped_and_nothing_else(tmp_path: Path, data: bytes) -> None:
    assert read_log(_write(tmp_path, data)) == EVENTS


def test_an_empty_file_is_an_empty_log(tmp_path: Path) -> None:
    assert read_log(_write(tmp_path, b"")) == []


# (the bad line, a fragment of its reason): it goes in as line 3 of 5, after a blank line.
BAD_LINES = [
    pytest.param(LINES[3][: len(LINES[3]) // 2], "not JSON", id="cut-in-the-middle"),
    pytest.param(b'{"type":"workload.foo","id":"x","at":1}', "unknown event type",
                 id="unknown-type"),
    pytest.param(b'{"type":{},"id":"x","at":1}', "Expected `str`", id="type-object"),
    pytest.param(b'{"type":"clock.ticked","id":"x","at":1,"x":' + b"[" * 5000 + b"]" * 5000
                 + b"}", "nested deeper", id="deep"),
    pytest.param(b"\xff\xfe garbage", "not JSON", id="not-utf8"),
    pytest.param(b'{"type":"clock.ticked","id":"x","at":1,"v":7}', "newer than this reader",
                 id="newer-version"),
]


@pytest.mark.parametrize("line, fragment", BAD_LINES)
def test_a_bad_line_stops_the_reader_with_its_number(tmp_path: Path, line: bytes,
                                                     fragment: str) -> None:
    data = LINES[0] + b"\n\n" + line + b"\n" + LINES[1] + b"\n" + LINES[2] + b"\n"
    with pytest.raises(MalformedEvent) as info:
        read_log(_write(tmp_path, data))
    exc = info.value
    assert exc.line == 3
    assert fragment in exc.reason
    assert str(exc) == f"line 3: {exc.reason}"
    assert not exc.reason.startswith("line ")


def test_iter_lines_yields_the_good_prefix_before_the_bad_line() -> None:
    """A consumer that streams a log gets every event before the bad line, then the error."""
    got = []
    with pytest.raises(MalformedEvent) as info:
        for e in iter_lines([LINES[0], LINES[1], b'{"type":"nope"}', LINES[2]]):
            got.append(e)
    assert got == EVENTS[:2]
    assert info.value.line == 3


def test_the_position_survives_the_line_number() -> None:
    bad = LINES[3].replace(b'"gpus":2', b'"gpus":"2"')
    with pytest.raises(MalformedEvent) as info:
        list(iter_lines([LINES[0], bad]))
    assert (info.value.line, info.value.position) == (2, "$.gpus")


def test_a_huge_line_is_refused_without_reading_it_all(tmp_path: Path) -> None:
    """A "line" of 3 MB (no newline) is refused as over the record limit, naming its line."""
    path = _write(tmp_path, LINES[0] + b"\n" + b"x" * (3 * MAX_RECORD_BYTES * 4))
    with pytest.raises(MalformedEvent) as info:
        read_log(path)
    assert info.value.line == 2
    assert "over the limit" in info.value.reason


def test_a_directory_is_an_os_error(tmp_path: Path) -> None:
    """Not a MalformedEvent: the command line reports it as a file it cannot read."""
    with pytest.raises(IsADirectoryError):
        read_log(tmp_path)
