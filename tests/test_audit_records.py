"""One decoder decides what a valid record is: the loader takes exactly what events.decode takes.

The loader decodes every line with events.decode; these tests prove that what
ends up in the events table is, line for line and value for value, what the
decoder made of the file, on generated records (hypothesis, seeded) that
include hostile ones: unknown types, newer versions, missing fields, "8" for 8,
integers beyond int64, duplicate keys, another type's keys, extra nested keys,
nulls, floats, deep nesting, a `type` that is an object, bad UTF-8, cut lines.
Then the bad-line rule (a cut last line loads the prefix; a bad line in the
middle refuses, naming it, unless skip_bad) and the run-name rule (never
replace a run without --replace).
"""

from __future__ import annotations

import gzip
import json
import random
import threading
from pathlib import Path
from typing import Any

import duckdb
import msgspec
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from audit import LogLoadError, RunExists, create_views, load
from audit.cli import main
from audit.records import storage_problem
from audit.schema import row_to_wire
from events import (
    AnyEvent,
    MalformedEvent,
    Slot,
    WorkloadPreempted,
    WorkloadStarted,
    decode,
    encode,
    encode_lines,
)
from events.factory import Inputs


def _templates() -> list[dict[str, Any]]:
    """One valid record of most event types, as the wire dicts a producer would send."""
    mk = Inputs()
    events = [
        mk.policy(team_depth=1, window_s=3600), mk.node("lab", managers=("admin",)),
        mk.node("lab/a", shares=3), mk.shares("lab", {"a": 2, "b": 1}), mk.host("h0", rack="r1"),
        mk.fault("h0", severity="failed", reason="xid 79"), mk.repair("h0", at=5),
        mk.submit("w1", "lab/a", 16, 600, at=7, hosts=2, kind="debug", resumable=True),
        mk.finish("w1", at=9), mk.cancel("w1", actor="admin", at=9, reason="because"), mk.tick(10),
        WorkloadStarted(id="e11/0", at=10, cause="e11", workload="w1", allocated=True,
                        protected_until=610, placement=(Slot(host="h0", gpus=8), Slot(host="h1", gpus=8))),
        WorkloadPreempted(id="e11/1", at=10, cause="e11", workload="w2", reason="fair_share",
                          by="w1", requeued=True),
    ]
    return [msgspec.to_builtins(e) for e in events]


TEMPLATES = _templates()
INT_KEYS = ("at", "gpus", "shares", "min_runtime_s", "protected_until", "window_s", "v", "priority")


def _mutate(d: dict[str, Any], how: str, rng: random.Random) -> bytes:
    """A record made hostile in one way (or left valid), as one line's bytes."""
    d = json.loads(json.dumps(d))
    keys = [k for k in d if k != "type"]
    ints = [k for k in INT_KEYS if isinstance(d.get(k), int) and not isinstance(d.get(k), bool)]
    if how == "unknown_type":
        d["type"] = rng.choice(["future.thing", "workload.Submitted", "", "clock"])
    elif how == "newer_version":
        d["v"] = rng.choice([2, 99])
    elif how == "version_as_text":
        d["v"] = "1"
    elif how == "missing_field" and keys:
        del d[rng.choice(keys)]
    elif how == "int_as_text" and ints:
        k = rng.choice(ints)
        d[k] = str(d[k])
    elif how == "beyond_int64" and ints:
        k = rng.choice(ints)
        # The edges of int64 are valid values, except as times: a log stamped near them
        # spans more than the audit's hourly views cover (a file-level limit, tested apart).
        edges = [2**63 - 1, -(2**63)] if k != "at" else []
        d[k] = rng.choice([2**63, 2**64 - 1, -(2**63) - 1, *edges])
    elif how == "float_for_int" and ints:
        d[rng.choice(ints)] = rng.choice([1.0, 1e2, 0.5])
    elif how == "null_field" and keys:
        d[rng.choice(keys)] = None
    elif how == "foreign_keys":
        d.update({"gpus": 5, "host": "hX", "path": "lab/x", "severity": "failed", "hosts": 3,
                  "shares": 4, "workload": "ghost", "placement": [{"host": "h9", "gpus": 1}]})
        for k, v in TEMPLATES[rng.randrange(len(TEMPLATES))].items():
            if k not in d:
                d[k] = v
    elif how == "unknown_keys":
        d["novel"] = {"deep": [1, {"x": None}]}
        d["zz"] = "new"
    elif how == "nested_extra_key":
        for k in ("placement", "shares"):
            if isinstance(d.get(k), list) and d[k]:
                d[k][0]["extra"] = 1
    elif how == "bool_as_int":
        for k in ("allocated", "resumable", "requeued"):
            if k in d:
                d[k] = 1
    elif how == "type_object":
        d["type"] = rng.choice([{}, [], 3, None])
    elif how == "strings_escaped":
        for k in ("id", "actor", "reason"):
            if isinstance(d.get(k), str):
                d[k] = d[k] + rng.choice(["\u0000", "é", "\U0001f600", '"q"', "\\", "\u202e"])
    line = json.dumps(d, ensure_ascii=rng.random() < 0.5).encode()
    if how == "duplicate_key":
        k = rng.choice(["at", "id", "type", "actor"])
        dup = json.dumps({k: d.get(k, 1) if rng.random() < 0.5 else "dup"})[1:-1]
        line = b"{" + dup.encode() + b"," + line[1:]
    elif how == "deep":
        line = line[:-1] + b',"deep":' + b"[" * rng.choice([20, 200, 1200]) + b"]" * 0 + b"}"
    elif how == "cut" and len(line) > 2:
        line = line[: rng.randrange(1, len(line) - 1)]
    elif how == "bad_utf8":
        line = line.replace(b'"id": "', b'"id": "\xff\xfe', 1)
    elif how == "bom":
        line = b"\xef\xbb\xbf" + line
    elif how == "spaces":
        line = b"  \t" + line + b"  "
    elif how == "not_an_object":
        line = rng.choice([b"[1, 2]", b'"text"', b"42", b"null", b"{}"])
    return line


MUTATIONS = ["valid", "valid", "valid", "unknown_type", "newer_version", "version_as_text",
             "missing_field", "int_as_text", "beyond_int64", "float_for_int", "null_field",
             "foreign_keys", "unknown_keys", "nested_extra_key", "bool_as_int", "type_object",
             "strings_escaped", "duplicate_key", "deep", "cut", "bad_utf8", "bom", "spaces",
             "not_an_object"]


def generated_lines(rng: random.Random, n: int) -> list[bytes]:
    out = []
    for _ in range(n):
        template = TEMPLATES[rng.randrange(len(TEMPLATES))]
        out.append(_mutate(template, rng.choice(MUTATIONS), rng))
    return out


def decoder_verdict(line: bytes) -> Any | None:
    """What the decoder (and the storage rule) make of one line: the event, or None."""
    try:
        event = decode(line)
    except MalformedEvent:
        return None
    except Exception:  # until events.decode is hardened: a crash is a refusal too
        return None
    return event if storage_problem(event) is None else None


def verdicts_on_a_thread(lines: list[bytes]) -> list[Any]:
    """decoder_verdict per line, on a fresh thread as the loader decodes ("blank" for blank lines).

    Until events.decode bounds nesting itself (issue 7), how deep a record may
    nest before it raises RecursionError depends on the caller's stack: a
    200-deep record decodes on a fresh thread and fails under pytest's stack.
    """
    out: list[Any] = []
    worker = threading.Thread(target=lambda: out.extend(
        decoder_verdict(line) if line.strip() else "blank" for line in lines))
    worker.start()
    worker.join()
    return out


def loaded_events(con: duckdb.DuckDBPyConnection, run: str) -> list[Any]:
    """The run's rows as events again, in seq order."""
    cur = con.execute("SELECT * FROM events WHERE run = ? ORDER BY seq", [run])
    names = [d[0] for d in cur.description or ()]
    return [msgspec.convert(row_to_wire(dict(zip(names, r, strict=True))), AnyEvent)
            for r in cur.fetchall()]


def fresh() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    create_views(con)
    return con


def check_file_loads_as_the_decoder_says(tmp_path: Path, lines: list[bytes]) -> int:
    """The loader (skip_bad) keeps exactly the lines the decoder takes, with the decoder's values;
    without skip_bad it follows the bad-line rule. Returns how many lines were refused."""
    path = tmp_path / "log" / "events.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\n".join(lines) + b"\n")
    verdicts = verdicts_on_a_thread(lines)
    good = [v for v in verdicts if v is not None and v != "blank"]
    bad = [n for n, v in enumerate(verdicts, 1) if v is None]
    con = fresh()
    if not good:
        with pytest.raises(LogLoadError, match=f"line {bad[0]} is not a valid event"):
            load(con, path, "skip", skip_bad=True)
        return len(bad)
    result = load(con, path, "skip", skip_bad=True)
    assert [b.line for b in result.skipped] == bad
    assert loaded_events(con, "skip") == good
    assert [r[0] for r in con.execute("SELECT line FROM skipped_lines ORDER BY line").fetchall()] == bad
    # The default rule: a single bad line after the last event is a cut; any other refuses.
    strict = con
    last_good = max(n for n, v in enumerate(verdicts, 1) if v not in (None, "blank"))
    if not bad:
        assert loaded_events(strict, "s") == good if load(strict, path, "s") else False
    elif len(bad) == 1 and bad[0] > last_good:
        assert load(strict, path, "s").cut.line == bad[0]  # type: ignore[union-attr]
        assert loaded_events(strict, "s") == good
    else:
        with pytest.raises(LogLoadError, match=f"line {bad[0]} is not a valid event"):
            load(strict, path, "s")
        assert strict.execute("SELECT count(*) FROM events WHERE run = 's'").fetchone() == (0,)
    return len(bad)


def test_three_hundred_generated_records_load_exactly_as_the_decoder_takes_them(tmp_path: Path) -> None:
    """The issue's experiment, redone: 300 records, hostile ones included, in one log."""
    rng = random.Random(20_240_607)
    lines = generated_lines(rng, 300)
    refused = check_file_loads_as_the_decoder_says(tmp_path, lines)
    # The mix really is hostile: a good share of the records are refused.
    assert 60 < refused < 240


@seed(7)
@settings(max_examples=15, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.randoms(use_true_random=False), st.integers(min_value=1, max_value=12))
def test_generated_logs_load_exactly_as_the_decoder_takes_them(tmp_path_factory: pytest.TempPathFactory,
                                                                rng: random.Random, n: int) -> None:
    """Any short log, any mix of valid and hostile records and blank lines: same verdicts."""
    lines = generated_lines(rng, n)
    if rng.random() < 0.3:
        lines.insert(rng.randrange(len(lines) + 1), b"   ")
    check_file_loads_as_the_decoder_says(tmp_path_factory.mktemp("gen"), lines)


# -- the bad-line rule ---------------------------------------------------------------------


def write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def ticks(n: int) -> bytes:
    mk = Inputs()
    return encode_lines([mk.tick(i) for i in range(n)])


def test_a_log_cut_mid_line_loads_its_prefix_and_names_the_cut_line(tmp_path: Path) -> None:
    """A crash while writing leaves half a line at the end: the lines before it load."""
    whole = ticks(5)
    cut = whole[: whole.rindex(b"\n", 0, len(whole) - 1) + 12]  # line 5 cut after 11 bytes
    path = write(tmp_path, "crash/events.jsonl", cut)
    con = fresh()
    result = load(con, path)
    assert result.events == 4 and result.cut is not None and result.cut.line == 5
    assert con.execute("SELECT max(seq), count(*) FROM events").fetchone() == (4, 4)
    assert con.execute("SELECT run, line FROM skipped_lines").fetchall() == [("crash", 5)]
    assert con.execute("SELECT cut_line, events, lines FROM loaded_runs").fetchall() == [(5, 4, 5)]


def test_a_gzipped_log_cut_mid_line_loads_its_prefix(tmp_path: Path) -> None:
    """The same for a compressed log; line numbers are of the decompressed text."""
    path = write(tmp_path, "z/events.jsonl.gz", gzip.compress(ticks(3) + b'{"type": "clock.ti'))
    result = load(fresh(), path)
    assert (result.events, result.cut.line if result.cut else None) == (3, 4)


def test_the_cli_names_the_cut_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The warning names the bad line itself (not the one after it), and the load succeeds."""
    path = write(tmp_path, "crash/events.jsonl", ticks(2) + b'{"type": "clock.ticked", "id"')
    assert main(["audit", "load", str(path), "--db", str(tmp_path / "a.duckdb")]) == 0
    out, err = capsys.readouterr()
    assert "loaded 2 events" in out
    assert "line 3 (the last) is not a valid event" in err and "ends mid-line" in err


def test_a_bad_line_in_the_middle_refuses_the_load_naming_it(tmp_path: Path) -> None:
    """Valid lines after a bad one: the log is corrupt, so nothing loads, and the line is named."""
    lines = ticks(6).splitlines(keepends=True)
    lines[2] = b'{"type": "clock.ticked", "id": "x", "at": "8"}\n'
    path = write(tmp_path, "r/events.jsonl", b"".join(lines))
    con = fresh()
    with pytest.raises(LogLoadError, match=r"line 3 is not a valid event: Expected `int`.*--skip-bad"):
        load(con, path)
    assert con.execute("SELECT count(*) FROM events").fetchone() == (0,)


def test_skip_bad_loads_every_valid_line_and_records_the_others(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """--skip-bad: the valid lines load in order, each skipped line is in skipped_lines."""
    lines = ticks(6).splitlines(keepends=True)
    lines[1] = b'{"type": "future.thing", "id": "x", "at": 1}\n'
    lines[3] = b"{oops\n"
    path = write(tmp_path, "r/events.jsonl", b"".join(lines))
    db = tmp_path / "a.duckdb"
    assert main(["audit", "load", str(path), "--db", str(db), "--skip-bad"]) == 0
    assert "skipped 2 bad line(s)" in capsys.readouterr().err
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT id FROM events ORDER BY seq").fetchall() == [
        ("e1",), ("e3",), ("e5",), ("e6",)]
    skipped = con.execute("SELECT line, reason FROM skipped_lines ORDER BY line").fetchall()
    assert [line for line, _ in skipped] == [2, 4]
    assert "unknown event type" in skipped[0][1]


def test_duplicate_keys_load_as_the_decoder_takes_them(tmp_path: Path) -> None:
    """DuckDB's reader refuses duplicate keys; the decoder takes the last. The loader agrees
    with the decoder (the file is re-encoded), and says it read a copy."""
    line = b'{"type": "clock.ticked", "id": "a", "at": 1, "at": 5}\n'
    path = write(tmp_path, "d/events.jsonl", line + ticks(1))
    con = fresh()
    result = load(con, path)
    assert result.rewritten and result.events == 2
    assert con.execute('SELECT id, "at", t FROM events ORDER BY seq').fetchall() == [
        ("a", 5, 5), ("e1", 0, 5)]


def test_another_types_keys_are_not_stored(tmp_path: Path) -> None:
    """A tick carrying gpus and host keys is a tick: msgspec ignores them, so does the table."""
    line = b'{"type": "clock.ticked", "id": "a", "at": 1, "gpus": 5, "host": "h", "hosts": 2}\n'
    con = fresh()
    load(con, write(tmp_path, "f/events.jsonl", line))
    assert con.execute("SELECT gpus, host, hosts FROM events").fetchall() == [(None, None, None)]


def test_an_integer_beyond_int64_is_a_bad_line(tmp_path: Path) -> None:
    """The events table holds BIGINT: a line with a larger integer is bad, named, never a crash."""
    lines = ticks(3).splitlines(keepends=True)
    lines[1] = b'{"type": "clock.ticked", "id": "big", "at": 9223372036854775808}\n'
    path = write(tmp_path, "b/events.jsonl", b"".join(lines))
    # The decoder's own bound on time (events.limits.MAX_TIME) refuses it first.
    with pytest.raises(LogLoadError, match=r"line 2 is not a valid event: .*<= \d+ - at `\$\.at`"):
        load(fresh(), path)
    result = load(fresh(), path, skip_bad=True)
    assert [b.line for b in result.skipped] == [2] and result.events == 2


def test_a_parquet_row_the_decoder_refuses_is_named(tmp_path: Path) -> None:
    """Parquet in the events layout goes through the same decoder, row by row."""
    con = fresh()
    load(con, write(tmp_path, "j/events.jsonl", ticks(3)), "json")
    out = tmp_path / "events.parquet"
    con.execute(f"COPY (SELECT * REPLACE (CASE WHEN seq = 2 THEN 'future.thing' ELSE type END AS type) "
                f"FROM events WHERE run = 'json' ORDER BY seq) TO '{out}'")
    with pytest.raises(LogLoadError, match="line 2 is not a valid event: unknown event type"):
        load(con, out, "pq")
    assert load(con, out, "pq", skip_bad=True).events == 2


def test_a_time_the_hourly_views_cannot_cover_is_refused_not_hung(tmp_path: Path) -> None:
    """One valid event stamped 2**39 (the decoder allows up to 2**40) would make the log span
    10**8 hours: refused, named."""
    lines = ticks(3) + b'{"type": "clock.ticked", "id": "far", "at": 549755813888}\n'
    with pytest.raises(LogLoadError, match=r"at=549755813888 \(event 4\).*at most 150 years"):
        load(fresh(), write(tmp_path, "far/events.jsonl", lines))
    lines = b'{"type": "clock.ticked", "id": "min", "at": -9223372036854775808}\n'
    with pytest.raises(LogLoadError, match="at most 150 years"):
        load(fresh(), write(tmp_path, "min/events.jsonl", lines))


def test_a_file_with_no_event_at_all_is_refused(tmp_path: Path) -> None:
    """A single bad line is not "a log cut before its first line": it is not a log."""
    with pytest.raises(LogLoadError, match="line 1 is not a valid event"):
        load(fresh(), write(tmp_path, "n/events.jsonl", b"hello\n"))


# -- the run-name rule ---------------------------------------------------------------------


def test_monday_and_tuesday_do_not_replace_each_other(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """daily/monday.jsonl then daily/tuesday.jsonl: the second is refused and the error says how."""
    db = str(tmp_path / "a.duckdb")
    monday = write(tmp_path, "daily/monday.jsonl", ticks(3))
    tuesday = write(tmp_path, "daily/tuesday.jsonl", ticks(5))
    assert main(["audit", "load", str(monday), "--db", db]) == 0
    capsys.readouterr()
    assert main(["audit", "load", str(tuesday), "--db", db]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "run 'daily' already holds 3 events" in err
    assert "monday.jsonl" in err and "--run NAME" in err and "--replace" in err
    assert main(["audit", "load", str(tuesday), "--db", db, "--run", "tuesday"]) == 0
    assert main(["audit", "load", str(tuesday), "--db", db, "--replace"]) == 0
    con = duckdb.connect(db, read_only=True)
    assert con.execute("SELECT run, count(*) FROM events GROUP BY run ORDER BY run").fetchall() == [
        ("daily", 5), ("tuesday", 5)]


def test_the_python_api_refuses_too(tmp_path: Path) -> None:
    """load() raises RunExists, an AllotError, unless replace=True."""
    from events.errors import AllotError

    con = fresh()
    path = write(tmp_path, "r/events.jsonl", ticks(2))
    load(con, path)
    with pytest.raises(RunExists) as info:
        load(con, path)
    assert isinstance(info.value, AllotError)
    assert load(con, path, replace=True).events == 2


def test_encoded_events_round_trip_through_the_table(tmp_path: Path) -> None:
    """Every template, as events.encode writes it, comes back out of the table equal."""
    events = [decode(json.dumps(t)) for t in TEMPLATES]
    con = fresh()
    load(con, write(tmp_path, "t/events.jsonl", b"".join(encode(e) + b"\n" for e in events)))
    assert loaded_events(con, "t") == events
