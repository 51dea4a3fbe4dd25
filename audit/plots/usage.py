"""Usage against entitlement: each team's (or managed node's) share of allocated GPU-hours over time.

Per node, the share of all allocated GPU-hours it was charged over the
trailing fair-share window (bold) and per hour (faint), against the fraction of
the cluster it is entitled to (dashed), one small panel per node.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import duckdb
import matplotlib
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import PercentFormatter

from audit.formatting import format_duration
from audit.plots.data import (
    UnknownManagerError,
    budget_managers,
    check_runs,
    epoch,
    policy_value,
    query,
    run_bounds,
    team_names,
)
from audit.plots.style import (
    DEFAULT_WINDOW_S,
    HOUR_S,
    STYLE,
    nan_list,
    natural_key,
    save,
    team_colours,
    time_unit,
)


def densify(hours: Iterable[int]) -> list[int]:
    """Every hour from the first to the last given (hour starts in Unix seconds)."""
    hs = sorted(set(hours))
    if not hs:
        return []
    return list(range(hs[0], hs[-1] + HOUR_S, HOUR_S))


def trailing_shares(
    node_gpu_h: Sequence[float], total_gpu_h: Sequence[float], window_h: int
) -> list[float | None]:
    """Per hour, the node's share of the total over the trailing ``window_h`` hours.

    Both sequences are on the same dense hourly grid; hour ``i`` covers hours
    ``i - window_h + 1 .. i``. None where the total over the window is zero.
    """
    if len(node_gpu_h) != len(total_gpu_h):
        raise ValueError("node and total series differ in length")
    if window_h < 1:
        raise ValueError(f"window of {window_h} hours")
    out: list[float | None] = []
    node_sum = 0.0
    total_sum = 0.0
    for i in range(len(total_gpu_h)):
        node_sum += node_gpu_h[i]
        total_sum += total_gpu_h[i]
        if i >= window_h:
            node_sum -= node_gpu_h[i - window_h]
            total_sum -= total_gpu_h[i - window_h]
        # Running sums drift by float rounding; below this the window is empty.
        out.append(node_sum / total_sum if total_sum > 1e-9 else None)
    return out


@dataclass(frozen=True, slots=True)
class UsageSeries:
    """One node's hourly usage share, trailing-window share and entitlement on a dense grid."""

    node: str
    hours: tuple[int, ...]
    hourly: tuple[float | None, ...]
    trailing: tuple[float | None, ...]
    entitlement: tuple[float | None, ...]
    run_share: float | None  # share of all allocated GPU-hours over the whole run
    mean_entitlement: float | None


def usage_series(
    con: duckdb.DuckDBPyConnection, run: str, nodes: Sequence[str], window_s: int
) -> list[UsageSeries]:
    """Usage shares and entitlement of ``nodes`` per hour of ``run``."""
    cap = query(con, "SELECT hour, allocated_gpu_h FROM capacity_by_hour WHERE run = ?", [run])
    total_by_hour = {epoch(h): float(a or 0.0) for h, a in cap}
    grid = densify(total_by_hour)
    total = [total_by_hour.get(h, 0.0) for h in grid]
    pos = {h: i for i, h in enumerate(grid)}
    usage: dict[str, list[float]] = {n: [0.0] * len(grid) for n in nodes}
    ent_points: dict[str, dict[int, float]] = {n: {} for n in nodes}
    if nodes:
        for node, h, a in query(con, """
                SELECT node, hour, allocated_gpu_h FROM gpu_hours_by_node_hour
                WHERE run = ? AND list_contains(?, node)""", [run, list(nodes)]):
            i = pos.get(epoch(h))
            if i is not None:
                usage[node][i] += float(a or 0.0)
        for node, h, f in query(con, """
                SELECT node, hour, fraction FROM entitlement_by_hour
                WHERE run = ? AND list_contains(?, node)""", [run, list(nodes)]):
            if f is not None:
                ent_points[node][epoch(h)] = float(f)
    window_h = max(1, math.ceil(window_s / HOUR_S))
    grand = sum(total)
    out: list[UsageSeries] = []
    for n in nodes:
        # Entitlement rows may exist only where it changes: carry the last value forward.
        ent: list[float | None] = []
        last: float | None = None
        points = ent_points[n]
        for h in grid:
            last = points.get(h, last)
            ent.append(last)
        known = [e for e in ent if e is not None]
        out.append(UsageSeries(
            node=n,
            hours=tuple(grid),
            hourly=tuple(trailing_shares(usage[n], total, 1)),
            trailing=tuple(trailing_shares(usage[n], total, window_h)),
            entitlement=tuple(ent),
            run_share=sum(usage[n]) / grand if grand > 0 else None,
            mean_entitlement=sum(known) / len(known) if known else None,
        ))
    return out


def usage_vs_entitlement(
    con: duckdb.DuckDBPyConnection,
    run: str,
    out: str | Path,
    level: Literal["team", "manager"] = "team",
    manager: str | None = None,
    window_s: int | None = None,
    max_panels: int = 36,
) -> Path:
    """Small multiples: each node's allocated-usage share against its entitlement over time.

    ``level="team"``: one panel per team (budget nodes at the policy's team
    depth). ``level="manager"``: one panel per budget node a manager owns and,
    when ``manager`` is given, also the children whose shares that manager sets.
    Usage share = the node's allocated GPU-hours / all allocated GPU-hours, over
    the trailing ``window_s`` (default: the run's policy window, else 7 days).
    """
    check_runs(con, [run])
    if level not in ("team", "manager"):
        raise ValueError(f"level must be 'team' or 'manager', got {level!r}")
    if window_s is None:
        window_s = policy_value(con, run, "window_s", DEFAULT_WINDOW_S)
    t0, _ = run_bounds(con, run)
    subtitle: dict[str, str] = {}
    if level == "team":
        nodes = team_names(con, run)
        what = "team"
    else:
        nodes, subtitle = managed_nodes(budget_managers(con, run), manager)
        what = f"node managed by {manager}" if manager else "managed budget node"
    total_panels = len(nodes)
    nodes = nodes[:max_panels]
    series = usage_series(con, run, nodes, window_s)
    palette = node_colours(nodes, team_names(con, run))

    ncols = 1 if len(series) <= 1 else 2 if len(series) <= 4 else 3 if len(series) <= 9 else 4
    nrows = max(1, math.ceil(len(series) / ncols))
    with matplotlib.rc_context(STYLE):
        fig = Figure(figsize=(4.3 * ncols + 0.4, 2.5 * nrows + 1.1), layout="constrained")
        axes = fig.subplots(nrows, ncols, sharex=True, squeeze=False)
        span = (series[0].hours[-1] - series[0].hours[0] + HOUR_S) if series and \
            series[0].hours else HOUR_S
        div, unit = time_unit(span)
        win_label = format_duration(window_s)
        for k, ax in enumerate(axes.flat):
            if k >= len(series):
                ax.set_visible(False)
                continue
            s = series[k]
            colour = palette.get(s.node, (0.2, 0.2, 0.2))
            # Hour values mark the *start* of each hour: draw steps across the hour.
            xs = [(h - t0) / div for h in s.hours] + [(s.hours[-1] + HOUR_S - t0) / div] \
                if s.hours else []
            ax.step(xs, nan_list(s.hourly) + nan_list(s.hourly[-1:]), where="post", color=colour,
                    alpha=0.3, linewidth=0.6)
            ax.step(xs, nan_list(s.trailing) + nan_list(s.trailing[-1:]), where="post", color=colour,
                    linewidth=1.8)
            ax.step(xs, nan_list(s.entitlement) + nan_list(s.entitlement[-1:]), where="post",
                    color="black", linestyle="--", linewidth=1.2)
            peak = max([v for v in (*s.trailing, *s.entitlement) if v is not None] or [0.0])
            ax.set_ylim(0, max(0.05, min(1.0, peak * 1.3)))
            ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
            ax.grid(color="#e6e6e6", linewidth=0.5)
            title = s.node + (f"  ({subtitle[s.node]})" if s.node in subtitle else "")
            if s.run_share is not None and s.mean_entitlement is not None:
                title += (f"\nwhole run: used {s.run_share:.1%}, "
                          f"entitled {s.mean_entitlement:.1%}")
            ax.set_title(title, loc="left", fontsize=8.5)
            if k % ncols == 0:
                ax.set_ylabel("share of allocated GPU-h")
            if k >= len(series) - ncols:
                ax.set_xlabel(f"{unit} since run start")
                ax.xaxis.set_tick_params(labelbottom=True)
        if not series:
            axes[0][0].set_visible(True)
            axes[0][0].text(0.5, 0.5, "no budget nodes to show", ha="center", va="center",
                            transform=axes[0][0].transAxes)
        more = f" (first {len(series)} of {total_panels})" if total_panels > len(series) else ""
        fig.suptitle(f"{run}: allocated usage share vs entitlement, per {what}{more}",
                     x=0.01, ha="left", fontsize=11)
        fig.legend(handles=[
            Line2D([], [], color="#555555", linewidth=1.8,
                                    label=f"usage share, trailing {win_label} window"),
            Line2D([], [], color="#555555", alpha=0.3, linewidth=0.6,
                                    label="usage share, each hour"),
            Line2D([], [], color="black", linestyle="--", linewidth=1.2,
                                    label="entitlement (fraction of cluster)"),
        ], loc="outside lower center", ncols=3, frameon=False)
        return save(fig, out)


def managed_nodes(
    managers: Mapping[str, Sequence[str]], manager: str | None = None
) -> tuple[list[str], dict[str, str]]:
    """The nodes to show for budget owners, and a 'managed by ...' note per node.

    Without ``manager``: every non-root node that has a manager. With one: the
    nodes that manager owns (except the root, which is always 100%) and their
    direct children, whose shares the manager sets.
    """
    owners: dict[str, list[str]] = {}
    for path, ms in managers.items():
        for m in ms:
            owners.setdefault(m, []).append(path)
    notes = {p: "managed by " + ", ".join(ms) for p, ms in managers.items() if ms}
    if manager is None:
        nodes = sorted((p for p, ms in managers.items() if ms and "/" in p), key=natural_key)
        return nodes, notes
    if manager not in owners:
        raise UnknownManagerError(manager, sorted(owners))
    chosen: set[str] = set()
    for p in owners[manager]:
        if "/" in p:
            chosen.add(p)
        chosen.update(c for c in managers if c.rsplit("/", 1)[0] == p and "/" in c)
    return sorted(chosen, key=natural_key), notes


def node_colours(nodes: Iterable[str], teams: Iterable[str]
                 ) -> dict[str, tuple[float, float, float]]:
    """Team colours for teams and the nodes below them; dark grey for nodes above teams."""
    palette = team_colours(teams)
    out: dict[str, tuple[float, float, float]] = {}
    for n in nodes:
        team = next((t for t in palette if n == t or n.startswith(t + "/")), None)
        out[n] = palette[team] if team is not None else (0.27, 0.27, 0.27)
    return out

