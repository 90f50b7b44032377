"""trend.html: every point × figure of a history over time, with its change points and alerts.

One figure per series: the untainted runs (hover: run id, commit, engine version), each
segment's mean as a step line, a dashed vertical line at each change point labelled with its
relative change, tainted runs in grey (left out of the change points and alerts), and the
runs that raised an alert in red, and the nightlies the nightly gate flagged
(harness/history/nightly.py) as diamonds: open while the next nightly has not judged them yet,
filled red once it confirmed the regression, grey once it cleared it. The page opens with the
alerts, then the nightly gate's flags, then a table of every change point. Self-contained: plotly.js is inlined (harness.reports.html.page).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

import pandas as pd

from harness.history.alerts import DEFAULT_RULE, AlertRule
from harness.history.analysis import SeriesReport, alert_cells
from harness.history.changepoints import segment_means
from harness.history.nightly import CLEARED, CONFIRMED, SUSPECT, marks
from harness.reports.figures import figure, figure_div, trace
from harness.reports.html import esc, fmt, page, safe, table

CHANGE_COLOR, ALERT_COLOR, TAINT_COLOR, RUN_COLOR, STEP_COLOR = "#8a4a05", "#d62728", "#b0b7c0", "#4e79a7", "#59a14f"
# how the nightly gate left a flagged nightly: (legend name, marker)
GATE_MARKS = {
    SUSPECT: ("flagged by the nightly gate (the next nightly decides)", dict(symbol="diamond-open", size=15,
                                                                        color=ALERT_COLOR, line=dict(width=2))),
    CONFIRMED: ("regression confirmed by the next nightly", dict(symbol="diamond", size=14, color=ALERT_COLOR,
                                                               line=dict(color="#000", width=1))),
    CLEARED: ("flagged, then cleared by the next nightly", dict(symbol="diamond-open", size=15, color=TAINT_COLOR,
                                                              line=dict(width=2))),
}  # fmt: skip


def hover(runs: pd.DataFrame, unit: str, scale: float, digits: int) -> list[str]:
    out = []
    for row in runs.to_dict("records"):
        commit = (row["git_commit"] or "")[:10] if isinstance(row["git_commit"], str) else "–"
        text = (
            f"{fmt(row['value'], digits, scale)} {unit}<br>{pd.Timestamp(row['started_at']):%Y-%m-%d %H:%M}<br>"
            f"run {row['run_id']}<br>commit {commit}<br>engine {row['engine_version'] or '–'}"
        )
        if row["tainted"]:
            text += "<br>tainted: " + esc(", ".join(row["taint"] if row["taint"] is not None else []))
        out.append(text)
    return out


def times(runs: pd.DataFrame) -> list[str]:
    return [pd.Timestamp(t).isoformat() for t in runs["started_at"]]


def change_x(clean: pd.DataFrame, index: int) -> str:
    """Halfway between the last run before the change and the first after it."""
    before, after = pd.Timestamp(clean["started_at"].iloc[index - 1]), pd.Timestamp(clean["started_at"].iloc[index])
    return (before + (after - before) / 2).isoformat()


def series_figure(report: SeriesReport, div_id: str, gate_marks: Optional[dict[str, str]] = None) -> str:
    definition = report.figure.definition
    scale, unit, digits = definition.scale, definition.unit, definition.digits
    clean, tainted = report.clean, report.runs[report.runs["tainted"]]
    fig = figure(height=330)
    fig.add_trace(
        trace(
            "scatter",
            x=times(clean),
            y=clean["value"].to_numpy() * scale,
            mode="lines+markers",
            name="runs",
            line=dict(color=RUN_COLOR, width=1),
            marker=dict(color=RUN_COLOR, size=7),
            text=hover(clean, unit, scale, digits),
            hovertemplate="%{text}<extra></extra>",
        )
    )
    means = [m * scale for m in segment_means(clean["value"].to_numpy(), report.verdict.points)]
    fig.add_trace(
        trace(
            "scatter",
            x=times(clean),
            y=means,
            mode="lines",
            name="segment mean",
            line=dict(color=STEP_COLOR, shape="hv", width=2),
            hoverinfo="skip",
        )
    )
    if not tainted.empty:
        fig.add_trace(
            trace(
                "scatter",
                x=times(tainted),
                y=tainted["value"].to_numpy() * scale,
                mode="markers",
                name="tainted (left out)",
                marker=dict(color=TAINT_COLOR, size=8, symbol="x"),
                text=hover(tainted, unit, scale, digits),
                hovertemplate="%{text}<extra></extra>",
            )
        )
    alert = report.verdict.alert
    if alert is not None:
        bad = clean.iloc[len(clean) - len(alert.latest) :]
        fig.add_trace(
            trace(
                "scatter",
                x=times(bad),
                y=bad["value"].to_numpy() * scale,
                mode="markers",
                name="alert",
                marker=dict(color=ALERT_COLOR, size=12, line=dict(color="#000", width=1)),
                text=hover(bad, unit, scale, digits),
                hovertemplate="%{text}<extra></extra>",
            )
        )
    for status, (name, marker) in GATE_MARKS.items():
        batches = {b for b, s in (gate_marks or {}).items() if s == status}
        flagged = report.runs[report.runs["batch"].isin(batches)] if batches and "batch" in report.runs else None
        if flagged is not None and not flagged.empty:
            fig.add_trace(
                trace(
                    "scatter",
                    x=times(flagged),
                    y=flagged["value"].to_numpy() * scale,
                    mode="markers",
                    name=name,
                    marker=marker,
                    text=hover(flagged, unit, scale, digits),
                    hovertemplate="%{text}<extra></extra>",
                )
            )
    for cp in report.verdict.points:
        fig.add_vline(
            change_x(clean, cp.index),
            line=dict(color=CHANGE_COLOR, dash="dash", width=2),
            annotation_text=f"change point {cp.relative_change * 100:+.1f} %",
        )
    fig.update_layout(
        title=dict(text=esc(f"{report.figure.label} · {report.point_label}"), font=dict(size=13)),
        margin=dict(l=60, r=20, t=70, b=40),
    )
    fig.update_yaxes(title_text=esc(f"{definition.label} ({unit})"))
    return figure_div(fig, div_id)


def alert_rows(reports: Sequence[SeriesReport]) -> list[dict[str, Any]]:
    return [
        {"point": r.point_label, "figure": r.figure.name, **cells}
        for r in reports
        if (cells := alert_cells(r)) is not None
    ]


def change_rows(reports: Sequence[SeriesReport]) -> list[dict[str, Any]]:
    rows = []
    for r in reports:
        d = r.figure.definition
        for cp in r.verdict.points:
            rows.append(
                {
                    "point": r.point_label,
                    "figure": r.figure.name,
                    "first run after": f"{pd.Timestamp(r.clean['started_at'].iloc[cp.index]):%Y-%m-%d %H:%M}",
                    "commit": str(r.clean["git_commit"].iloc[cp.index] or "")[:10],
                    "before": fmt(cp.mean_before, d.digits, d.scale),
                    "after": fmt(cp.mean_after, d.digits, d.scale),
                    "change": f"{cp.relative_change * 100:+.1f} %",
                    "p": f"{cp.p_value:.3f}",
                }
            )
    return rows


def gate_rows(reports: Sequence[SeriesReport], decisions: Optional[pd.DataFrame]) -> list[dict[str, Any]]:
    """Every nightly the nightly gate flagged, with how the next nightly left it."""
    rows = []
    for r in reports:
        for batch, status in marks(decisions, r.point, r.figure.name).items():
            runs = r.runs[r.runs["batch"] == batch] if "batch" in r.runs else r.runs.iloc[0:0]
            if runs.empty:
                continue
            d = r.figure.definition
            rows.append(
                {
                    "point": r.point_label,
                    "figure": r.figure.name,
                    "nightly": f"{pd.Timestamp(runs['started_at'].min()):%Y-%m-%d %H:%M}",
                    "value": fmt(float(runs["value"].mean()), d.digits, d.scale),
                    "state": GATE_MARKS[status][0],
                }
            )
    return rows


def trend_page(
    reports: Sequence[SeriesReport],
    root: Path,
    rule: AlertRule = DEFAULT_RULE,
    decisions: Optional[pd.DataFrame] = None,
) -> str:
    alerts = alert_rows(reports)
    flags = gate_rows(reports, decisions)
    rule_text = (
        f"Alert rule: the last {rule.consecutive} untainted runs are each worse than the mean of the segment "
        f"before the last change point by more than {rule.margin * 100:g} %, and that change point is at most "
        f"{rule.max_age} runs old. Change points: E-divisive means with a permutation test."
    )
    changes = change_rows(reports)
    return page(
        "trend.html.j2",
        "History trend",
        root=root,
        points=len({r.point for r in reports}),
        series=len(reports),
        values=sum(len(r.runs) for r in reports),
        alerts=[f"{a['figure']} at {a['point']}: {a['change']} since {a['since']}" for a in alerts],
        alert_table=safe(
            table(alerts, list(alerts[0]), text_columns=("point", "figure", "since", "latest")) if alerts else ""
        ),
        rule=rule_text,
        change_table=safe(
            table(changes, list(changes[0]), text_columns=("point", "figure", "first run after", "commit"))
            if changes
            else ""
        ),
        gate_table=safe(
            table(flags, list(flags[0]), text_columns=("point", "figure", "nightly", "state")) if flags else ""
        ),
        figures=safe(
            "".join(
                series_figure(r, f"trend-{i}", marks(decisions, r.point, r.figure.name)) for i, r in enumerate(reports)
            )
        ),
    )


def write_trend(
    path: Path,
    reports: Sequence[SeriesReport],
    root: Path,
    rule: AlertRule = DEFAULT_RULE,
    decisions: Optional[pd.DataFrame] = None,
) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(trend_page(reports, root, rule, decisions), encoding="utf-8")
    tmp.replace(path)
    return path
