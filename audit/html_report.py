"""The audit as one self-contained HTML page: summary, owed/received per team, every plot.

The page is a single file an analyst can mail or attach to a ticket: the plots
are PNGs embedded as ``data:image/png;base64`` URIs, the CSS is inline, and it
references nothing outside itself (no scripts, fonts or links), so it renders
the same offline, in a mail client or years later.

It compares runs side by side: each summary metric is a row and each run a
column. The figures are ``audit.report.summary``'s, the one summary of a run:
given by the caller (``summaries``, nested or flat with dotted keys, e.g. with
the simulator's wall time), or computed here for a run without one.
"""

from __future__ import annotations

import base64
import html
import re
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from audit import plots
from audit.formatting import (
    MISSING,
    format_bound,
    format_count,
    format_duration,
    format_gpu_hours,
    format_percent,
)
from audit.plots import check_runs, kind_order, run_bounds
from audit.plots.data import MissingViewError, budget_managers
from audit.plots.usage import managed_nodes
from audit.report import summary as run_summary

# Rows of the summary table: key, label, how to format. Wait rows are added per
# kind found in the summaries; keys nobody listed here are shown at the end.
Formatter = Callable[[Any], str]


def format_seconds(value: Any) -> str:
    """Seconds, human-readably (None: a dash; infinity: never)."""
    return format_duration(None if value is None else float(value))


def format_generic(value: Any) -> str:
    """Any other value: numbers compactly, booleans as yes/no, the rest as text."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.4g}"
    return str(value)


SUMMARY_ROWS: tuple[tuple[str, str, Formatter], ...] = (
    ("scheduler", "Scheduler policy", str),
    ("events", "Events in the log", format_count),
    ("sim_seconds", "Simulated time", format_seconds),
    ("warmup_s", "Warm-up left out of every figure", format_seconds),
    ("measured_seconds", "Measured time (after the warm-up)", format_seconds),
    ("wall_seconds", "Wall-clock time", format_seconds),
    ("delivered_gpu_h", "Delivered GPU-hours (allocated + unallocated)", format_gpu_hours),
    ("occupancy", "Occupancy (busy / available GPU-hours)", format_percent),
    ("unallocated_share", "Unallocated share of delivered GPU-hours", format_percent),
    ("owed_received.total", "Owed GPU-hours received, all teams (funded work)", format_percent),
    ("owed_received.worst", "Owed GPU-hours received, worst team (funded work)", format_percent),
    ("owed_received.teams_at_least_95", "Teams receiving at least 95% of owed (funded work)",
     format_count),
    ("owed_received_all_work.total", "Owed GPU-hours received, all teams (all work)", format_percent),
    ("owed_received_all_work.worst", "Owed GPU-hours received, worst team (all work)",
     format_percent),
    ("owed_received_all_work.teams_at_least_95", "Teams receiving at least 95% of owed (all work)",
     format_count),
    ("owed_received_net_idle.total", "Owed GPU-hours received, all teams, net of idle holds",
     format_percent),
    ("owed_received_net_killed.total", "Owed GPU-hours received, all teams, net of killed work",
     format_percent),
    ("owed_received_net.total", "Owed GPU-hours received, all teams, net of both", format_percent),
    ("owed_received_net.worst", "Owed GPU-hours received, worst team, net of both", format_percent),
    ("owed_received_net.teams_at_least_95", "Teams receiving at least 95% of owed, net of both",
     format_count),
    ("idle_hold_gpu_h", "GPU-hours of squatters' idle holds (funded)", format_gpu_hours),
    ("killed_gpu_h", "GPU-hours of killed work (funded)", format_gpu_hours),
    ("preemptions", "Preemptions", format_count),
    ("lost_gpu_hours", "GPU-hours lost to preemption", format_gpu_hours),
    ("fragmentation", "Fragmentation (stranded GPU-hours / capacity)", format_percent),
    ("fragmentation_of_free", "Fragmented share of free GPU-hours (old figure)", format_percent),
    ("largest_gang.gpus", "Largest gang: GPUs", format_count),
    ("largest_gang.workloads", "Largest gang: workloads of that size", format_count),
    ("largest_gang.started", "Largest gang: of those, started", format_count),
    ("largest_gang_wait_s", "Largest gang: longest queue wait (never-started included)",
     format_seconds),
    ("largest_gang_wait_started_s", "Largest gang: longest queue wait (started only)",
     format_seconds),
)
WAIT_QUANTILES = ("p50", "p90", "p99")
# A figure shown as a lower bound ("≥ ...") when its flag is set.
_BOUNDS = {"largest_gang_wait_s": "largest_gang_wait_censored"}


def flatten(summary: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts as one level with dotted keys ({'a': {'b': 1}} -> {'a.b': 1})."""
    out: dict[str, Any] = {}
    for k, v in summary.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


# Keys the summary table leaves out: the run name is the column header, the
# per-team ratios have their own table, and the flags show as "≥" on their figure.
_HIDDEN_PREFIXES = ("owed_received.by_team.", "owed_received_all_work.by_team.",
                    "owed_received_net.by_team.", "owed_received_net_idle.by_team.",
                    "owed_received_net_killed.by_team.")
_HIDDEN_KEYS = frozenset({"run", "measured_from", *_BOUNDS.values()})
_STAT_LABELS = {"n": "workloads", "never_started": "never started"}
# Per-kind wait statistics that are counts, not durations.
_WAIT_COUNTS = frozenset({"n", "started", "never_started", "count"})


def normalise_summary(summary: Mapping[str, Any]) -> dict[str, Any]:
    """A summary as the table reads it: flat dotted keys, per-team ratios and run name dropped.

    ``preemptions`` may be a count or a mapping reason -> count; a mapping keeps
    its per-reason rows and gains the total under ``preemptions``.
    """
    flat = flatten(summary)
    pre = summary.get("preemptions")
    if isinstance(pre, Mapping):
        flat["preemptions"] = sum(int(v or 0) for v in pre.values())
    return {k: v for k, v in flat.items()
            if k not in _HIDDEN_KEYS and not k.startswith(_HIDDEN_PREFIXES)
            and not k.endswith("_censored")}


def format_metric(key: str, value: Any) -> str:
    """One summary value for display, chosen by its key; '—' when missing."""
    if value is None:
        return MISSING
    for k, _, fmt in SUMMARY_ROWS:
        if k == key:
            return fmt(value)
    if key.startswith("wait_s."):
        return format_count(value) if key.rsplit(".", 1)[-1] in _WAIT_COUNTS \
            else format_seconds(value)
    if key.startswith("preemptions."):
        return format_count(value)
    if key.endswith("_s") or key.endswith("_seconds"):
        return format_seconds(value)
    if key.endswith("_share") or key.endswith("ratio"):
        return format_percent(value)
    return format_generic(value)


def _lower_bound(key: str, flags: Mapping[str, Any]) -> bool:
    """Whether the figure at ``key`` rests on censored waits (its ``*_censored`` flag)."""
    if key in _BOUNDS:
        return bool(flags.get(_BOUNDS[key]))
    return bool(flags.get(f"{key}_censored"))


def _rows(con: duckdb.DuckDBPyConnection, sql: str, params: Sequence[Any]) -> list[Any]:
    try:
        return con.execute(sql, list(params)).fetchall()
    except (duckdb.CatalogException, duckdb.BinderException):
        return []  # a view (or column) not built yet: that part of the page stays '—'


def _dict_rows(con: duckdb.DuckDBPyConnection, sql: str,
               params: Sequence[Any]) -> list[dict[str, Any]]:
    try:
        cur = con.execute(sql, list(params))
    except duckdb.CatalogException:
        return []
    names = [d[0] for d in cur.description or ()]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


# -- plots --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PlotFile:
    """A written plot and the words the page puts around it."""

    path: Path
    title: str
    caption: str
    run: str | None  # None for plots comparing runs


def safe_name(run: str) -> str:
    """A run name usable in a file name."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", run).strip("._") or "run"


def render_plots(
    con: duckdb.DuckDBPyConnection,
    runs: Sequence[str],
    out_dir: str | Path,
    *,
    gantt_hours: float | None = None,
    max_gpus: int | None = 256,
) -> list[PlotFile]:
    """Every plot for ``runs`` into ``out_dir``, with titles and captions, in page order."""
    runs = list(runs)
    if not runs:
        raise ValueError("no runs given")
    check_runs(con, runs)
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    names: dict[str, str] = {}
    for r in runs:
        base = safe_name(r)
        name = base
        n = 2
        while name in names.values():  # two runs that differ only in odd characters
            name = f"{base}-{n}"
            n += 1
        names[r] = name
    files = [
        PlotFile(plots.occupancy(con, runs, d / "occupancy.png"), "Occupancy",
                 "Every GPU-hour of each hour, stacked: allocated (charged to a budget), "
                 "unallocated (free, preemptible), idle, unavailable (faulty hosts). The black "
                 "line is the GPUs in the cluster.", None),
        PlotFile(plots.wait_cdfs(con, runs, d / "wait_cdfs.png"), "Queue waits",
                 "Share of workloads of each kind that started within a given wait (log "
                 "scale). Higher and further left is better. Workloads that never started "
                 "keep the curve below 100%; dotted lines mark the median and p90.", None),
    ]
    for r in runs:
        files.append(PlotFile(
            plots.usage_vs_entitlement(con, r, d / f"usage_teams_{names[r]}.png"),
            f"{r}: usage against entitlement, per team",
            "Each team's share of all allocated GPU-hours over the trailing fair-share "
            "window (bold) and per hour (faint), against its entitlement (dashed). Above "
            "the dashed line the team is over-served and sorts later; below, it sorts earlier.",
            r))
        try:
            owners, _ = managed_nodes(budget_managers(con, r))
        except MissingViewError:
            owners = []
        if owners:
            files.append(PlotFile(
                plots.usage_vs_entitlement(con, r, d / f"usage_managers_{names[r]}.png",
                                           level="manager"),
                f"{r}: usage against entitlement, per managed budget node",
                "The same reading for every budget node that has a manager (a program or "
                "project lead): how the subtree they fund is being served.", r))
        files.append(PlotFile(
            plots.gantt(con, r, d / f"gantt_{names[r]}.png", hours=gantt_hours,
                        max_gpus=max_gpus),
            f"{r}: tasks per GPU",
            "One row per GPU, one bar per task, one hue per team (shades tell workloads "
            "apart). Hatched: interruptible (unallocated, or past its minimum runtime). "
            "Red edge: preempted there. Pale red band: host faulty until repaired.", r))
    return files


def write_plots(con: duckdb.DuckDBPyConnection, runs: Sequence[str],
                out_dir: str | Path) -> list[Path]:
    """Write every plot for ``runs`` as PNGs into ``out_dir``; return their paths."""
    return [f.path for f in render_plots(con, runs, out_dir)]


# -- the page -----------------------------------------------------------------------------

_CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 2rem auto;
       max-width: 1400px; padding: 0 1rem; color: #1d1d1d; line-height: 1.45; }
h1 { font-size: 1.6rem; margin-bottom: 0.2rem; }
h2 { font-size: 1.25rem; margin-top: 2.2rem; border-bottom: 1px solid #ddd; padding-bottom: .2rem; }
h3 { font-size: 1.05rem; margin-top: 1.6rem; }
p.meta { color: #555; margin-top: 0; }
nav ul { columns: 2; padding-left: 1.2rem; }
table { border-collapse: collapse; margin: .6rem 0 1rem; font-size: .9rem; }
th, td { border: 1px solid #d6d6d6; padding: .3rem .6rem; text-align: right; }
th { background: #f3f3f3; }
td.label, th.label { text-align: left; }
tr.group td { background: #fafafa; font-weight: 600; text-align: left; }
td.low { color: #b00020; font-weight: 600; }
td.missing { color: #999; }
figure { margin: 1rem 0 2rem; }
figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { color: #444; font-size: .9rem; max-width: 70rem; }
"""


def write_html(
    con: duckdb.DuckDBPyConnection,
    runs: Sequence[str],
    out_path: str | Path,
    summaries: Mapping[str, Mapping[str, Any]] | None = None,
    title: str = "allot audit",
) -> Path:
    """Write the audit of ``runs`` as one self-contained HTML file; return its path.

    ``summaries`` maps a run name to its summary (flat dotted keys or nested);
    runs without one get ``audit.report.summary``.
    """
    runs = list(runs)
    if not runs:
        raise ValueError("no runs given")
    check_runs(con, runs)
    flat: dict[str, dict[str, Any]] = {}
    flags: dict[str, dict[str, Any]] = {}
    for r in runs:
        given = (summaries or {}).get(r)
        figures = given if given is not None else run_summary(con, r)
        flags[r] = {k: v for k, v in flatten(figures).items() if k.endswith("_censored")}
        flat[r] = normalise_summary(figures)
    with tempfile.TemporaryDirectory(prefix="allot-plots-") as tmp:
        files = render_plots(con, runs, tmp)
        images = {f.path: base64.b64encode(f.path.read_bytes()).decode("ascii") for f in files}

    e = html.escape
    spans = []
    for r in runs:
        lo, hi = run_bounds(con, r)
        spans.append(f"{e(r)} ({e(format_duration(hi - lo))} of log)")
    parts: list[str] = [
        "<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{e(title)}</title>", f"<style>{_CSS}</style>", "</head>", "<body>",
        f"<h1>{e(title)}</h1>",
        f'<p class="meta">Runs: {", ".join(spans)}.</p>',
        "<nav><ul>",
        '<li><a href="#summary">Summary</a></li>',
        '<li><a href="#owed">Owed and received, per team</a></li>',
    ]
    for i, f in enumerate(files):
        parts.append(f'<li><a href="#plot-{i}">{e(f.title)}</a></li>')
    parts += ["</ul></nav>", '<h2 id="summary">Summary</h2>', _summary_table(runs, flat, flags)]
    parts += ['<h2 id="owed">Owed and received, per team</h2>', _owed_table(con, runs)]
    parts.append('<h2 id="plots">Plots</h2>')
    for i, f in enumerate(files):
        parts += [
            f'<figure id="plot-{i}">', f"<h3>{e(f.title)}</h3>",
            f'<img src="data:image/png;base64,{images[f.path]}" alt="{e(f.title)}">',
            f"<figcaption>{e(f.caption)}</figcaption>", "</figure>",
        ]
    parts += ["</body>", "</html>", ""]
    path = Path(out_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(parts), encoding="utf-8")
    return path


def _summary_table(runs: Sequence[str], flat: Mapping[str, Mapping[str, Any]],
                   flags: Mapping[str, Mapping[str, Any]]) -> str:
    e = html.escape
    head = "".join(f"<th>{e(r)}</th>" for r in runs)
    lines = ["<table>", f'<tr><th class="label">Metric</th>{head}</tr>']
    all_keys = {k for s in flat.values() for k in s}
    shown: set[str] = set()

    def row(key: str, label: str) -> None:
        shown.add(key)
        cells = []
        for r in runs:
            present = key in flat[r]
            value = flat[r].get(key)
            text = format_metric(key, value) if present else MISSING
            if present and _lower_bound(key, flags.get(r, {})):
                text = format_bound(text, True)
            teams = key.removesuffix("_at_least_95")
            if key.endswith(".teams_at_least_95") and present and flat[r].get(teams) is not None:
                text = f"{text} of {format_count(flat[r][teams])}"
            cls = "" if present else ' class="missing"'
            cells.append(f"<td{cls}>{e(text)}</td>")
        lines.append(f'<tr><td class="label">{e(label)}</td>{"".join(cells)}</tr>')

    for key, label, _ in SUMMARY_ROWS:
        row(key, label)
        if key == "preemptions":
            for sub in sorted(k for k in all_keys if k.startswith("preemptions.")):
                row(sub, f"  by reason: {sub.split('.', 1)[1]}")
    shown.update({"owed_received.teams", "owed_received_all_work.teams", "owed_received_net.teams",
                  "owed_received_net_idle.teams", "owed_received_net_killed.teams"})
    kinds = {k.split(".")[1] for k in all_keys if k.startswith("wait_s.") and k.count(".") >= 2}
    # 'all' (every kind together) reads best after the kinds it sums up.
    wait_kinds = kind_order(kinds - {"all"}) + (["all"] if "all" in kinds else [])
    if wait_kinds:
        lines.append(f'<tr class="group"><td colspan="{len(runs) + 1}">Queue wait until first '
                     "start, by workload kind</td></tr>")
    for kind in wait_kinds:
        for q in WAIT_QUANTILES:
            row(f"wait_s.{kind}.{q}", f"{kind}: {q}")
        # Any other statistic given for this kind (n, never started...) follows its quantiles.
        for key in sorted(k for k in all_keys if k.startswith(f"wait_s.{kind}.") and k not in shown):
            stat = key.split(".", 2)[2]
            row(key, f"{kind}: {_STAT_LABELS.get(stat, stat)}")
    extra = sorted(all_keys - shown)
    if extra:
        lines.append(f'<tr class="group"><td colspan="{len(runs) + 1}">Other figures</td></tr>')
        for key in extra:
            row(key, key)
    lines.append("</table>")
    return "\n".join(lines)


def _owed_table(con: duckdb.DuckDBPyConnection, runs: Sequence[str]) -> str:
    e = html.escape
    by_run = {r: {str(t["team"]): t for t in _dict_rows(
        con, "SELECT * FROM owed_received_by_team WHERE run = ?", [r])} for r in runs}
    teams = sorted({t for rows in by_run.values() for t in rows}, key=plots.natural_key)
    if not teams:
        return "<p>No owed/received figures (the owed_received_by_team view is empty or missing).</p>"
    columns = [(c, label) for c, label in (("owed_gpu_h", "owed GPU-h"),
                                           ("received_capped", "received ≤ owed, GPU-h"),
                                           ("received_gpu_h", "received, all GPU-h"),
                                           ("ratio", "ratio"))
               if any(c in row for rows in by_run.values() for row in rows.values())]
    head1 = "".join(f'<th colspan="{len(columns)}">{e(r)}</th>' for r in runs)
    head2 = "".join(f"<th>{e(label)}</th>" for _ in runs for _, label in columns)
    lines = ["<table>", f'<tr><th class="label" rowspan="2">Team</th>{head1}</tr>',
             f"<tr>{head2}</tr>"]
    for team in teams:
        cells = []
        for r in runs:
            row = by_run[r].get(team, {})
            for c, _ in columns:
                v = row.get(c)
                if v is None:
                    cells.append('<td class="missing">—</td>')
                elif c == "ratio":
                    low = ' class="low"' if float(v) < 0.95 else ""
                    cells.append(f"<td{low}>{e(format_percent(v))}</td>")
                else:
                    cells.append(f"<td>{e(f'{float(v):,.1f}')}</td>")
        lines.append(f'<tr><td class="label">{e(team)}</td>{"".join(cells)}</tr>')
    lines.append("</table>")
    lines.append("<p>Owed: the team's entitlement capped hour by hour at its funded demand. "
                 "Ratio: GPU-hours received (each hour capped at what was owed) over owed; "
                 "under 95% in red. Received, all: every allocated GPU-hour, including "
                 "bursts above the allocation.</p>")
    return "\n".join(lines)


__all__ = [
    "SUMMARY_ROWS", "PlotFile", "flatten", "format_count", "format_generic",
    "format_gpu_hours", "format_metric", "format_percent", "format_seconds", "normalise_summary",
    "render_plots", "safe_name", "write_html", "write_plots",
]
