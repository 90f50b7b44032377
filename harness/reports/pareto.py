"""Pareto fronts: the runs no other run beats on every figure, and the chart that draws them.

Capacity is a trade: more requests at once raise what one instance serves (output tokens/s
of the run, ``output_tokens_per_s``) and lower what each user sees (the per-request rate
``output_tps`` = output tokens / E2E, its median over the run's requests). Neither figure
alone picks a configuration; the front does — every configuration on it is the fastest per
user for its throughput — and where the machine has a price (``cost.usd_per_hour``), the
same trade reads as $ per million output tokens (``usd_per_million_output_tokens``) against
per-user speed.

A point is on the front when no other point is at least as good on every figure and better
on one. The chart draws every point and the front as a staircase: the edge of the region the
front's points dominate, so a configuration above it would be new, one below it is beaten.

Used by the search's own page (harness/reports/search_page.py: a trial per point, its
settings in the hover) and by compare.html (harness/reports/compare/page.py: a run per point,
when at least :data:`MIN_POINTS` runs have both figures).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Optional

from harness.reports import figures
from harness.reports.html import esc
from harness.results.schema import RunSummary

# (metric, statistic) of each axis, read from a run's summary.json
PER_USER = ("output_tps", "p50")
PER_INSTANCE = ("output_tokens_per_s", "")
COST = ("usd_per_million_output_tokens", "")
PER_USER_LABEL = "output tok/s per user (median of requests)"
PER_INSTANCE_LABEL = "output tok/s per instance (whole run)"
COST_LABEL = "$ per million output tokens"
MIN_POINTS = 3  # compare.html draws a front from this many runs with both figures

FRONT_COLOR, OTHER_COLOR, MARK_COLOR = "#f28e2b", "#9aa5b1", "#1f2933"


@dataclass
class Point:
    """One run (or trial) on the chart: its figures, a name, and lines for its hover."""

    name: str
    per_user: Optional[float]
    per_instance: Optional[float]
    usd_per_mtok: Optional[float] = None
    lines: list[str] = field(default_factory=list)  # settings and the like, shown under the name
    mark: str = ""  # "defaults" or "best": drawn with a ring of its own

    @classmethod
    def of(cls, summary: RunSummary, name: str, lines: Sequence[str] = (), mark: str = "") -> Point:
        per_user, per_instance = figure_of(summary, PER_USER), figure_of(summary, PER_INSTANCE)
        return cls(name, per_user, per_instance, figure_of(summary, COST), list(lines), mark)


def figure_of(summary: RunSummary, figure: tuple[str, str]) -> Optional[float]:
    """A figure of the summary; None when absent or not > 0 (no rate, no cost)."""
    value = summary.stat(*figure)
    return value if value is not None and value > 0 else None


# --- the front --------------------------------------------------------------------------------


def dominates(a: Sequence[float], b: Sequence[float], maximize: Sequence[bool]) -> bool:
    """``a`` is at least as good as ``b`` on every figure and better on one."""
    better = [(x > y) if up else (x < y) for x, y, up in zip(a, b, maximize)]
    worse = [(x < y) if up else (x > y) for x, y, up in zip(a, b, maximize)]
    return any(better) and not any(worse)


def pareto_front(values: Sequence[Sequence[float]], maximize: Sequence[bool]) -> list[int]:
    """The indices of the points no other point dominates, in input order (equal points are all kept)."""
    return [i for i, v in enumerate(values) if not any(dominates(w, v, maximize) for w in values)]


def staircase(
    front: Sequence[tuple[float, float]], maximize_x: bool, maximize_y: bool
) -> tuple[list[float], list[float]]:
    """The edge of what the front's points dominate: the points in order of x, and between each two
    the corner worse in both (for x and y both maximized, (x of the left, y of the right))."""
    pts = sorted(set(front))
    xs: list[float] = []
    ys: list[float] = []
    for i, (x, y) in enumerate(pts):
        if i:
            px, py = pts[i - 1]
            xs.append(min(px, x) if maximize_x else max(px, x))
            ys.append(min(py, y) if maximize_y else max(py, y))
        xs.append(x)
        ys.append(y)
    return xs, ys


# --- the chart --------------------------------------------------------------------------------


def pareto_figure(points: Sequence[Point], height: int = 460) -> Optional[figures.Figure]:
    """Per user against per instance (and, where points have a cost, $/Mtok against per user):
    every point, the front as a staircase, the marked points ringed; None under :data:`MIN_POINTS`
    points with both figures."""
    usable = [p for p in points if p.per_user is not None and p.per_instance is not None]
    if len(usable) < MIN_POINTS:
        return None
    costed = [p for p in usable if p.usd_per_mtok is not None]
    panels: list[tuple[str, str, list[Point], bool, bool]] = [
        ("per_instance", "per_user", usable, True, True),
    ]
    titles = ["per user against per instance"]
    if len(costed) >= MIN_POINTS:
        panels.append(("per_user", "usd_per_mtok", costed, True, False))
        titles.append("$ per million output tokens against per user")
    fig = figures.figure(1, len(panels), titles if len(panels) > 1 else None, height=height)
    for col, (x_key, y_key, pts, max_x, max_y) in enumerate(panels, start=1):
        _panel(fig, col, pts, x_key, y_key, max_x, max_y, legend=col == 1)
    fig.update_xaxes(title_text=PER_INSTANCE_LABEL, row=1, col=1)
    fig.update_yaxes(title_text=PER_USER_LABEL, row=1, col=1)
    if len(panels) > 1:
        fig.update_xaxes(title_text=PER_USER_LABEL, row=1, col=2)
        fig.update_yaxes(title_text=COST_LABEL, row=1, col=2)
    return fig


AXIS_TEXT = {
    "per_user": ("per user", "tok/s"),
    "per_instance": ("per instance", "tok/s"),
    "usd_per_mtok": ("cost", "$/Mtok"),
}


def _panel(
    fig: figures.Figure,
    col: int,
    pts: Sequence[Point],
    x_key: str,
    y_key: str,
    max_x: bool,
    max_y: bool,
    legend: bool,
) -> None:
    xy = [(float(getattr(p, x_key)), float(getattr(p, y_key))) for p in pts]
    on_front = set(pareto_front(xy, [max_x, max_y]))
    hover = [_hover(p) for p in pts]

    def markers(idx: list[int], name: str, marker: dict) -> None:
        if idx:
            fig.add_trace(
                figures.trace(
                    "scatter",
                    x=[xy[i][0] for i in idx],
                    y=[xy[i][1] for i in idx],
                    mode="markers",
                    name=name,
                    legendgroup=name,
                    showlegend=legend,
                    marker=marker,
                    hovertext=[hover[i] for i in idx],
                    hovertemplate=_template(x_key, y_key),
                ),
                1,
                col,
            )

    for front, name, colr, size in ((False, "dominated", OTHER_COLOR, 9), (True, "on the front", FRONT_COLOR, 11)):
        idx = [i for i in range(len(pts)) if (i in on_front) == front]
        markers(idx, name, dict(color=colr, size=size, line=dict(color="#ffffff", width=1)))
    xs, ys = staircase([xy[i] for i in sorted(on_front)], max_x, max_y)
    fig.add_trace(
        figures.trace(
            "scatter",
            x=xs,
            y=ys,
            mode="lines",
            name="the front",
            legendgroup="the front",
            showlegend=legend,
            line=dict(color=FRONT_COLOR, width=2),
            hoverinfo="skip",
        ),
        1,
        col,
    )
    for mark, symbol in (("defaults", "diamond-open"), ("best", "star-open")):
        idx = [i for i, p in enumerate(pts) if p.mark == mark]
        markers(idx, mark, dict(color=MARK_COLOR, size=20, symbol=symbol, line=dict(width=2)))


def _template(x_key: str, y_key: str) -> str:
    (xl, xu), (yl, yu) = AXIS_TEXT[x_key], AXIS_TEXT[y_key]
    x_fmt = ":.3f" if x_key == "usd_per_mtok" else ":.1f"
    y_fmt = ":.3f" if y_key == "usd_per_mtok" else ":.1f"
    return f"%{{hovertext}}<br>{xl} %{{x{x_fmt}}} {xu}, {yl} %{{y{y_fmt}}} {yu}<extra></extra>"


def _hover(point: Point) -> str:
    """The point's name in bold, then its lines, each escaped (plotly draws hover text as HTML)."""
    return "<br>".join([f"<b>{esc(point.name)}</b>", *(esc(line) for line in point.lines)])
