"""Tests for loading logs into DuckDB: explicit columns from the event structs, log order,
the scheduler clock, run replacement, defaults, Parquet, and clear errors."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import duckdb
import msgspec
import pytest

from audit import (
    LogLoadError,
    NotAnAuditDatabase,
    create_views,
    default_run_name,
    load_log,
    open_db,
)
from audit.load import COLUMNS
from events import ALL_TYPES, HostFaulted, PolicyConfigured, encode_lines, tag_of
from events.factory import Inputs


def write(path: Path, lines: list[dict] | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = lines if isinstance(lines, bytes) else b"".join(
        json.dumps(d).encode() + b"\n" for d in lines)
    path.write_bytes(data)
    return path


@pytest.fixture
def con() -> duckdb.DuckDBPyConnection:
    c = duckdb.connect()
    create_views(c)
    return c


def columns(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    return {n: t for n, t, *_ in con.execute("DESCRIBE events").fetchall()}


def test_every_struct_field_has_a_column(con: duckdb.DuckDBPyConnection) -> None:
    """Each field of each event type maps to exactly one events column."""
    have = columns(con)
    for name in ("run", "seq", "t", "type"):
        assert name in have
    for cls in ALL_TYPES:
        tag = tag_of(cls)
        owners = [c for c in COLUMNS if tag in c.tags]
        assert sorted(c.key for c in owners) == sorted(f.encode_name for f in msgspec.structs.fields(cls))
        assert all(c.name in have for c in owners)


def test_clashing_fields_get_their_own_columns(con: duckdb.DuckDBPyConnection) -> None:
    """A field name typed differently by two event types is split into two typed columns."""
    have = columns(con)
    assert have["shares"] == "BIGINT"
    assert have["child_shares"] == "STRUCT(child VARCHAR, shares BIGINT)[]"
    assert have["hosts"] == "BIGINT"
    assert have["placement"] == "STRUCT(host VARCHAR, gpus BIGINT)[]"


def test_a_rare_event_type_keeps_its_fields(con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    """One host.faulted after thousands of ticks is loaded with every field (no sampling)."""
    mk = Inputs()
    events = [mk.tick(i) for i in range(30_000)]
    events.append(mk.fault("h7", severity="failed", at=30_000, reason="xid 79"))
    load_log(con, write(tmp_path / "rare" / "events.jsonl", encode_lines(events)))
    assert con.execute("""SELECT seq, host, severity, reason FROM events
                          WHERE type = 'host.faulted'""").fetchall() == [(30_001, "h7", "failed", "xid 79")]


def test_seq_is_log_order_and_t_is_the_scheduler_clock(con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    """seq numbers events in file order (whatever the connection's settings); t never goes back."""
    con.execute("SET preserve_insertion_order = false")
    mk = Inputs()
    ats = [5, 5, 3, 9, 1, 9, 12]
    load_log(con, write(tmp_path / "x" / "events.jsonl", encode_lines(mk.tick(a) for a in ats)))
    assert con.execute('SELECT seq, id, "at", t FROM events ORDER BY seq').fetchall() == [
        (1, "e1", 5, 5), (2, "e2", 5, 5), (3, "e3", 3, 5), (4, "e4", 9, 9),
        (5, "e5", 1, 9), (6, "e6", 9, 9), (7, "e7", 12, 12)]
    assert con.execute("SELECT current_setting('preserve_insertion_order')").fetchone() == (False,)


def test_loading_a_run_again_replaces_it_only_when_asked(con: duckdb.DuckDBPyConnection,
                                                          tmp_path: Path) -> None:
    """With replace, the run holds the second load's rows only; other runs are kept."""
    mk = Inputs()
    big = write(tmp_path / "a" / "events.jsonl", encode_lines(mk.tick(i) for i in range(10)))
    small = write(tmp_path / "b" / "events.jsonl", encode_lines(mk.tick(i) for i in range(3)))
    assert load_log(con, big, "r1") == 10
    assert load_log(con, big, "r2") == 10
    assert load_log(con, small, "r1", replace=True) == 3
    assert con.execute("SELECT run, count(*) FROM events GROUP BY run ORDER BY run").fetchall() == [
        ("r1", 3), ("r2", 10)]


def test_default_run_is_the_log_directory(con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    """out/allot/events.jsonl loads as run 'allot' unless a run name is given."""
    path = write(tmp_path / "out" / "allot" / "events.jsonl", encode_lines([Inputs().tick(1)]))
    assert default_run_name(path) == "allot"
    load_log(con, path)
    assert con.execute("SELECT DISTINCT run FROM events").fetchall() == [("allot",)]


def test_omitted_fields_get_their_struct_defaults(con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    """A producer may omit defaulted fields; the table holds what msgspec would decode."""
    path = write(tmp_path / "min" / "events.jsonl", [
        {"type": "policy.configured", "id": "p", "at": 0, "team_depth": 1},
        {"type": "workload.submitted", "id": "s", "at": 1, "workload": "w", "budget": "lab/a",
         "user": "u", "gpus": 2, "min_runtime_s": 60},
        {"type": "host.added", "id": "h", "at": 2, "host": "h0"},
    ])
    load_log(con, path)
    got = con.execute("""SELECT type, cluster, actor, v, kind, hosts, resumable, priority, gpus,
                                team_depth, window_s FROM events ORDER BY seq""").fetchall()
    default = PolicyConfigured(id="x", at=0)
    assert got == [
        ("policy.configured", "default", "unknown", 1, None, None, None, None, None, 1, default.window_s),
        ("workload.submitted", "default", "unknown", 1, "training", 1, False, 0, 2, None, None),
        ("host.added", "default", "unknown", 1, None, None, None, None, 8, None, None),
    ]


def test_policy_view_falls_back_to_the_struct_defaults(con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    """A log without policy.configured gets exactly PolicyConfigured's defaults."""
    load_log(con, write(tmp_path / "p" / "events.jsonl", encode_lines([Inputs().tick(1)])))
    cur = con.execute("SELECT * EXCLUDE (run, configured_at, policy_event) FROM policy")
    got = dict(zip([d[0] for d in cur.description], cur.fetchone(), strict=True))
    expected = {k: v for k, v in msgspec.structs.asdict(PolicyConfigured(id="x", at=0)).items()
                if k not in {"id", "at", "cluster", "actor", "source", "cause", "v"}}
    assert got == expected


def test_unknown_event_types_are_refused_as_the_decoder_refuses_them(
        con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    """A type events.decode does not know is a bad line, named by its number; nothing loads."""
    path = write(tmp_path / "n" / "events.jsonl", [
        {"type": "clock.ticked", "id": "t1", "at": 1},
        {"type": "future.thing", "id": "f1", "at": 7, "actor": "later", "novel": [1, 2]},
        {"type": "clock.ticked", "id": "t2", "at": 8}])
    with pytest.raises(LogLoadError, match="line 2 is not a valid event: unknown event type"):
        load_log(con, path)
    assert con.execute("SELECT count(*) FROM events").fetchone() == (0,)


def test_parquet_round_trip(con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    """A run exported with COPY loads back identical, in its seq order."""
    mk = Inputs()
    events = [mk.policy(team_depth=1), mk.node("lab", managers=("admin",)),
              mk.shares("lab", {"a": 2}, at=3), mk.tick(2), mk.tick(1)]
    load_log(con, write(tmp_path / "j" / "events.jsonl", encode_lines(events)), "json")
    out = tmp_path / "events.parquet"
    # Shuffled on purpose: seq in the file, not row order, is the log order.
    con.execute(f"COPY (SELECT * FROM events ORDER BY seq DESC) TO '{out}'")
    assert load_log(con, out, "pq") == 5
    diff = con.execute("""SELECT * EXCLUDE (run) FROM events WHERE run = 'pq'
                          EXCEPT SELECT * EXCLUDE (run) FROM events WHERE run = 'json'""").fetchall()
    assert diff == []


def test_gzipped_logs_load(con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    """A .jsonl.gz log loads like the plain one."""
    path = tmp_path / "z" / "events.jsonl.gz"
    path.parent.mkdir()
    path.write_bytes(gzip.compress(encode_lines([Inputs().tick(4), Inputs().tick(6)])))
    assert load_log(con, path) == 2


def test_missing_file_is_a_load_error(con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    """A path that does not exist raises LogLoadError naming it."""
    with pytest.raises(LogLoadError, match="no such log file"):
        load_log(con, tmp_path / "nope.jsonl")


def test_malformed_log_changes_nothing(con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    """Bad JSON or a line without a type raises LogLoadError and keeps the loaded run."""
    good = write(tmp_path / "r" / "events.jsonl", encode_lines([Inputs().tick(1)]))
    load_log(con, good)
    bad = write(tmp_path / "r" / "bad.jsonl", b'{"type": "clock.ticked", "id": "a", "at": 1}\n{oops\n'
                                                b'{"type": "clock.ticked", "id": "b", "at": 2}\n')
    with pytest.raises(LogLoadError, match="line 2 is not a valid event"):
        load_log(con, bad, "r", replace=True)
    typeless = write(tmp_path / "r" / "typeless.jsonl", [{"id": "a", "at": 1}, {"id": "b", "at": 2}])
    with pytest.raises(LogLoadError, match="line 1 is not a valid event"):
        load_log(con, typeless, "r", replace=True)
    wrong = write(tmp_path / "r" / "wrong.jsonl", [{"type": "clock.ticked", "id": "a", "at": "soon"},
                                                  {"type": "clock.ticked", "id": "b", "at": 2}])
    with pytest.raises(LogLoadError, match=r"line 1 .*Expected `int`"):
        load_log(con, wrong, "r", replace=True)
    assert con.execute("SELECT run, count(*) FROM events GROUP BY run").fetchall() == [("r", 1)]


def test_database_file_needs_no_python(tmp_path: Path) -> None:
    """A database made by open_db is queried by a plain DuckDB connection, views and all."""
    db = tmp_path / "audit.duckdb"
    con = open_db(db)
    mk = Inputs()
    load_log(con, write(tmp_path / "allot" / "events.jsonl", encode_lines([
        mk.policy(team_depth=1), mk.node("lab", managers=("admin",)), mk.node("lab/a"),
        mk.host("h0"), mk.submit("w", "lab/a", 8, 60, at=0), mk.tick(3600)])))
    con.close()
    plain = duckdb.connect(str(db), read_only=True)
    plain.execute("SET VARIABLE allot_warmup_s = 0")  # the log is an hour long; keep all of it
    assert plain.execute("SELECT run, workload, status FROM workloads").fetchall() == [
        ("allot", "w", "pending")]
    assert plain.execute("SELECT team, owed_gpu_h FROM owed_received_by_team").fetchall() == [
        ("lab/a", 8.0)]


def test_open_db_without_create_needs_an_existing_file(tmp_path: Path) -> None:
    """Reports and queries refuse to invent an empty database."""
    with pytest.raises(NotAnAuditDatabase, match="no audit database"):
        open_db(tmp_path / "missing.duckdb", create=False)


def test_struct_faults_round_trip_through_the_table(con: duckdb.DuckDBPyConnection, tmp_path: Path) -> None:
    """Literal-typed fields (severity) load as their string values."""
    e = HostFaulted(id="f", at=3, host="h", severity="degraded")
    load_log(con, write(tmp_path / "f" / "events.jsonl", encode_lines([e])))
    assert con.execute("SELECT severity, reason FROM events").fetchall() == [("degraded", "")]
