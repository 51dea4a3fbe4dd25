"""Where a recorded journal comes from, and how people name a moment of it.

``read_history(path, run)`` returns one recorded journal as events, in journal
order, from any of the forms the audit reads: a JSON-lines export
(``allot journal export``, a simulation's ``events.jsonl``, gzip too), a
``.parquet`` log, or an audit database (``.duckdb``: one ``run`` of its
``events`` table, in load order). Every record is decoded by ``events.decode``,
the same check as everywhere else.

``parse_moment`` reads ``--from`` / ``--to``: Unix seconds, an ISO 8601 date
or date-time (UTC unless it says otherwise), ``start`` / ``end`` of the
journal, or an offset from its start such as ``+7d``, ``+36h``, ``day 12``.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

from events import Event, decode, read_log
from whatif.rerun import WhatIfError

_UNITS = {"s": 1, "m": 60, "min": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}


def read_history(path: str | Path, run: str | None = None) -> list[Event]:
    """The events of a recorded journal (JSON lines, .parquet, or one run of an audit .duckdb)."""
    p = Path(path)
    if not p.exists():
        raise WhatIfError(f"{p}: no such journal or audit database")
    if p.is_dir():
        raise WhatIfError(f"{p}: is a directory; give a journal file (.jsonl, .parquet) "
                          f"or an audit database (.duckdb)")
    if p.suffix == ".duckdb":
        return _from_duckdb(p, run)
    if p.suffix == ".parquet":
        return _from_parquet(p)
    return read_log(p)


def _rows_to_events(con: object, sql: str, params: list[object]) -> list[Event]:
    from audit.schema import row_to_wire

    cur = con.execute(sql, params)  # type: ignore[attr-defined]
    names = [d[0] for d in cur.description]
    out: list[Event] = []
    while True:
        rows = cur.fetchmany(50_000)
        if not rows:
            return out
        for row in rows:
            wire = row_to_wire(dict(zip(names, row, strict=True)))
            out.append(decode(json.dumps(wire, default=str)))


def _from_duckdb(p: Path, run: str | None) -> list[Event]:
    from audit.database import open_reader

    con = open_reader(p)
    try:
        runs = [r[0] for r in con.execute("SELECT DISTINCT run FROM events ORDER BY run").fetchall()]
        if not runs:
            raise WhatIfError(f"{p}: the audit database holds no runs")
        if run is None:
            if len(runs) > 1:
                raise WhatIfError(f"{p}: holds runs {', '.join(runs)}; name one with --run")
            run = runs[0]
        elif run not in runs:
            raise WhatIfError(f"{p}: no run {run!r} (it holds {', '.join(runs)})")
        return _rows_to_events(con, "SELECT * FROM events WHERE run = ? ORDER BY seq", [run])
    finally:
        con.close()


def _from_parquet(p: Path) -> list[Event]:
    import duckdb

    from audit.load import load

    # The audit's own loader checks the file (the one reader of that format).
    con = duckdb.connect()
    try:
        load(con, p, run="history")
        return _rows_to_events(con, "SELECT * FROM events WHERE run = ? ORDER BY seq", ["history"])
    finally:
        con.close()


def parse_duration(text: str) -> int:
    """``90``, ``90s``, ``15m``, ``36h``, ``7d``, ``2w`` as whole seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(s|m|min|h|d|w)?\s*", text.lower())
    if m is None:
        raise WhatIfError(f"expected a duration such as 3600, 90m, 36h or 7d, got {text!r}")
    return int(float(m.group(1)) * _UNITS[m.group(2) or "s"])


def parse_moment(text: str, start: int, end: int) -> int:
    """A moment of a journal spanning [start, end] (trusted Unix seconds) as Unix seconds."""
    t = text.strip().lower()
    if t == "start":
        return start
    if t == "end":
        return end
    m = re.fullmatch(r"day\s+(\d+(?:\.\d+)?)", t)
    if m:
        return start + int(float(m.group(1)) * 86_400)
    if t.startswith("+"):
        return start + parse_duration(t[1:])
    if t.startswith("end-") or t.startswith("end -"):
        return end - parse_duration(t.split("-", 1)[1])
    if re.fullmatch(r"\d{9,}", t):
        return int(t)
    try:
        dt = datetime.fromisoformat(text.strip())
    except ValueError:
        raise WhatIfError(f"cannot read {text!r} as a moment: give an ISO date or date-time "
                          f"(2026-01-12, 2026-01-12T08:00), Unix seconds, start, end, "
                          f"+7d (after the start), end-2d or 'day 12'") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp())


def format_moment(t: int) -> str:
    """Unix seconds as an ISO date-time in UTC."""
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


__all__ = ["format_moment", "parse_duration", "parse_moment", "read_history"]
