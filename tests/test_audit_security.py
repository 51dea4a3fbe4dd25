"""The audit database is something analysts open, not a shell.

Every reading command (report, sql, plots) opens the database through one
sandboxed, read-only opener, and ``allot audit sql`` runs one statement. Each
attack below, tried through the command line as an analyst's query, is refused
with a one-line error and exit status 2, and leaves the database file, its
directory, the target paths and DuckDB's home directory exactly as they were.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import duckdb
import pytest
from test_audit_views import two_teams

from audit import NotAnAuditDatabase, QueryRefused, open_db, open_reader, run_query
from audit.cli import main
from events import encode_lines

# (name, query with {out} for a path in a fresh directory, a phrase of the refusal)
ATTACKS: list[tuple[str, str, str]] = [
    ("read a system file", "SELECT * FROM read_csv('/etc/passwd')", "disabled by configuration"),
    ("read a system file as text", "SELECT * FROM read_text('/etc/passwd')", "disabled"),
    ("read a file by name", "SELECT * FROM '/etc/passwd'", "does not exist"),
    ("sniff a file", "SELECT * FROM sniff_csv('/etc/passwd')", "disabled"),
    ("list a directory", "SELECT * FROM glob('/etc/*')", "disabled"),
    ("read the environment", "SELECT getenv('HOME')", "getenv"),
    ("write a file", "COPY (SELECT * FROM events) TO '{out}/stolen.csv'", "disabled"),
    ("export the database", "EXPORT DATABASE '{out}/export'", "disabled"),
    ("load rows from a file", "COPY events FROM '/etc/passwd'", "disabled"),
    ("create a database file", "ATTACH '{out}/new.duckdb' AS other", "disabled"),
    ("attach an in-memory database", "ATTACH ':memory:' AS scratch", "read-only"),
    ("a second statement", "SELECT 1; DELETE FROM events", "one statement per call, got 2"),
    ("a second statement after a comment", "SELECT 1 /* x */; DROP VIEW workloads",
     "one statement per call"),
    ("no statement", "-- nothing", "no SQL statement"),
    ("delete events", "DELETE FROM events", "read-only"),
    ("insert an event", "INSERT INTO events (run, seq, type) VALUES ('x', 1, 'clock.ticked')",
     "read-only"),
    ("drop a view", "DROP VIEW owed_received", "read-only"),
    ("create a table", "CREATE TABLE stash AS SELECT 1", "read-only"),
    ("install an extension", "INSTALL httpfs", "disabled"),
    ("load an extension", "LOAD httpfs", "disabled"),
    ("load an extension file", "LOAD '{out}/evil.duckdb_extension'", "disabled"),
    ("turn external access back on", "SET enable_external_access = true", "locked"),
    ("unlock the configuration", "SET lock_configuration = false", "locked"),
    ("spill to a directory", "SET temp_directory = '{out}/spill'", "locked"),
    ("write a profile", "SET profiling_output = '{out}/profile.json'", "locked"),
    ("log to a file", "CALL enable_logging(storage = 'file', storage_path = '{out}/log')", "locked"),
    ("store a secret on disk", "CREATE PERSISTENT SECRET s (TYPE s3, KEY_ID 'a', SECRET 'b')",
     "disabled"),
]


def _tree(path: Path) -> dict[str, tuple[int, str]]:
    """Every file under path, with its size and content hash."""
    out: dict[str, tuple[int, str]] = {}
    if not path.exists():
        return out
    for root, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(files):
            f = Path(root) / name
            out[str(f.relative_to(path))] = (f.stat().st_size, hashlib.sha256(f.read_bytes()).hexdigest())
    return out


@pytest.fixture(scope="module")
def audit_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database written by the loader, holding one run."""
    root = tmp_path_factory.mktemp("db")
    log = root / "logs" / "allot" / "events.jsonl"
    log.parent.mkdir(parents=True)
    log.write_bytes(encode_lines(two_teams().events))
    con = open_db(root / "audit.duckdb")
    from audit import load_log

    load_log(con, log)
    con.close()
    return root / "audit.duckdb"


@pytest.mark.parametrize(("name", "query", "refusal"), ATTACKS, ids=[a[0] for a in ATTACKS])
def test_every_attack_is_refused_and_changes_nothing(audit_db: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str],
                                                     name: str, query: str, refusal: str) -> None:
    """One line on stderr, status 2; the database, its directory and the targets unchanged."""
    out = tmp_path / "target"
    out.mkdir()
    home = Path.home() / ".duckdb"
    before = (_tree(audit_db.parent), _tree(out), _tree(home))
    code = main(["audit", "sql", query.format(out=out), "--db", str(audit_db)])
    _, err = capsys.readouterr()
    assert code == 2, name
    assert err.startswith("allot audit: error: ") and err.count("\n") == 1, err
    assert refusal in err, err
    assert "Traceback" not in err
    assert (_tree(audit_db.parent), _tree(out), _tree(home)) == before


def test_ordinary_queries_still_work(audit_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Reading the views, and TEMP objects that live in memory only, are what sql is for."""
    before = _tree(audit_db.parent)
    assert main(["audit", "sql", "SELECT count(*) AS n FROM events", "--db", str(audit_db),
                 "--csv"]) == 0
    assert capsys.readouterr().out.splitlines() == ["n", str(len(two_teams().events))]
    assert main(["audit", "sql", "CREATE TEMP TABLE t AS SELECT 1 AS x", "--db", str(audit_db)]) == 0
    assert _tree(audit_db.parent) == before


def test_the_reader_is_read_only_and_locked(audit_db: Path) -> None:
    """open_reader's connection: read-only, file system closed, configuration locked."""
    con = open_reader(audit_db)
    try:
        settings = dict(con.execute(
            "SELECT name, value FROM duckdb_settings() WHERE name IN ('enable_external_access', "
            "'lock_configuration', 'autoload_known_extensions', 'autoinstall_known_extensions')"
        ).fetchall())
        assert settings == {"enable_external_access": "false", "lock_configuration": "true",
                            "autoload_known_extensions": "false",
                            "autoinstall_known_extensions": "false"}
        assert con.execute("SELECT readonly FROM duckdb_databases() "
                           "WHERE database_name = current_database()").fetchone() == (True,)
        with pytest.raises(QueryRefused):
            run_query(con, "SELECT 1; SELECT 2")
    finally:
        con.close()


def test_the_reader_refuses_a_missing_file_or_another_database(tmp_path: Path) -> None:
    """No database is created by reading, and a DuckDB file the loader did not write is not one."""
    with pytest.raises(NotAnAuditDatabase, match="no audit database"):
        open_reader(tmp_path / "missing.duckdb")
    assert not (tmp_path / "missing.duckdb").exists()
    other = tmp_path / "other.duckdb"
    duckdb.connect(str(other)).close()
    with pytest.raises(NotAnAuditDatabase, match="not an audit database"):
        open_reader(other)


def test_a_database_from_another_version_is_named_not_misread(audit_db: Path, tmp_path: Path) -> None:
    """Stored views from another version would answer with other definitions: refuse, say how."""
    copy = tmp_path / "old.duckdb"
    copy.write_bytes(audit_db.read_bytes())
    con = duckdb.connect(str(copy))
    con.execute("UPDATE audit_meta SET value = 'older' WHERE key = 'views'")
    con.close()
    with pytest.raises(NotAnAuditDatabase, match=r"another version.*allot audit load --replace"):
        open_reader(copy)


@pytest.mark.parametrize("command", [["report"], ["sql", "SELECT 1"], ["plots"]])
def test_every_reading_command_goes_through_the_reader(command: list[str], tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """report, sql and plots all open the database with open_reader (and only with it)."""
    import audit.cli

    opened: list[str] = []

    def spy(path: str, **kw: object) -> duckdb.DuckDBPyConnection:
        opened.append(str(path))
        raise NotAnAuditDatabase("spied")

    monkeypatch.setattr(audit.cli, "open_reader", spy)
    monkeypatch.setattr(audit.cli, "open_db", lambda *a, **k: pytest.fail("a reader opened the writer"))
    db = str(tmp_path / "x.duckdb")
    assert main(["audit", *command, "--db", db]) == 2
    assert opened == [db] and "spied" in capsys.readouterr().err
