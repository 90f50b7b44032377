"""search.html: a search's trials on the capacity chart, its front, its best and the check.

Written by the search (harness/run/search.py) after every trial from its record (search.json),
so the page of a search cut short shows what it measured. The chart is the Pareto page of
harness/reports/pareto.py: every complete trial a point (per-user speed against the instance's
throughput, and $/Mtok where the machine has a price), the front drawn, the defaults and the best
ringed, each trial's settings in its hover. Below: the best against the defaults (the check),
the objectives trial by trial, every trial with its state and why a pruned one was refused, and
the space.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

from harness.reports import figures, html, pareto
from harness.reports.run_report import REPORT_NAME
from harness.results.schema import RunSummary

PAGE_NAME = "search.html"
STATE_CLASS = {"complete": "faster", "pruned": "slower", "fail": "nodata", "running": "nodiff", "waiting": "nodiff"}


def trial_figures(summary: RunSummary) -> dict[str, Optional[float]]:
    """The page's figures of a trial's run, kept in the study (user_attrs.figures)."""
    return {
        "per_user": pareto.figure_of(summary, pareto.PER_USER),
        "per_instance": pareto.figure_of(summary, pareto.PER_INSTANCE),
        "usd_per_mtok": pareto.figure_of(summary, pareto.COST),
    }


def settings_lines(trial: dict[str, Any]) -> list[str]:
    """``key=value`` per searched setting; the defaults trial says so."""
    settings = trial.get("settings") or {}
    lines = [f"{k}={_value(v)}" for k, v in settings.items()]
    return (["the defaults:"] if trial.get("defaults") else []) + lines


def _value(v: Any) -> str:
    return "null" if v is None else ("true" if v is True else "false" if v is False else str(v))


def points(record: dict[str, Any]) -> list[pareto.Point]:
    out = []
    for t in record["trials"]:
        f = t.get("figures") or {}
        if t["state"] != "complete" or not f:
            continue
        mark = "best" if t["number"] == record.get("best") else ("defaults" if t.get("defaults") else "")
        out.append(
            pareto.Point(
                f"trial {t['number']}",
                f.get("per_user"),
                f.get("per_instance"),
                f.get("usd_per_mtok"),
                settings_lines(t),
                mark,
            )
        )
    return out


def check_banner(check: Optional[dict[str, Any]]) -> str:
    if not check:
        return html.banner(
            ["the best is checked against the defaults after the trials (search.check_best)"],
            "Best against the defaults: not yet",
            "info",
        )
    rows = check.get("figures") or []
    outcomes = {r.get("outcome") for r in rows}
    if check.get("status") != "complete":
        kind, title = "info", "Best against the defaults: not checked"
    elif "better beyond noise" in outcomes and "worse beyond noise" not in outcomes:
        kind, title = "ok", "Best against the defaults: the gain is beyond noise"
    elif "better beyond noise" in outcomes:
        kind, title = "warning", "Best against the defaults: a gain beyond noise, and a loss"
    else:
        kind, title = "warning", "Best against the defaults: no gain beyond noise"
    return html.banner([check.get("text", "")], title, kind)


def objectives_figure(record: dict[str, Any]) -> Optional[figures.Figure]:
    """Each objective trial by trial, with the best so far (one objective) or the front marked."""
    objectives = record["objectives"]
    done = [t for t in record["trials"] if t["state"] == "complete" and t.get("values")]
    if not done:
        return None
    fig = figures.figure(1, len(objectives), [f"{o['label']} ({o['unit']})" for o in objectives], height=340)
    front = set(record.get("front") or [])
    for j, o in enumerate(objectives, start=1):
        xs = [t["number"] for t in done]
        ys = [t["values"][j - 1] for t in done]
        hover = ["<br>".join(html.esc(line) for line in [f"trial {t['number']}", *settings_lines(t)]) for t in done]
        fig.add_trace(
            figures.trace(
                "scatter",
                x=xs,
                y=ys,
                mode="markers",
                name="trial",
                showlegend=j == 1,
                legendgroup="trial",
                marker=dict(
                    size=9, color=[pareto.FRONT_COLOR if t["number"] in front else pareto.OTHER_COLOR for t in done]
                ),
                hovertext=hover,
                hovertemplate="%{hovertext}<br>%{y:.4g}<extra></extra>",
            ),
            1,
            j,
        )
        best, running = None, []
        for y in ys:
            best = y if best is None else (max(best, y) if o["direction"] == "maximize" else min(best, y))
            running.append(best)
        fig.add_trace(
            figures.trace(
                "scatter",
                x=xs,
                y=running,
                mode="lines",
                line=dict(shape="hv", color="#4e79a7"),
                name="best so far",
                showlegend=j == 1,
                legendgroup="best",
                hoverinfo="skip",
            ),
            1,
            j,
        )
        fig.update_xaxes(title_text="trial", row=1, col=j)
    return fig


def trials_table(record: dict[str, Any], out_dir: Path) -> str:
    objectives = record["objectives"]
    front = set(record.get("front") or [])
    costed = any((t.get("figures") or {}).get("usd_per_mtok") for t in record["trials"])
    shown = {o["figure"] for o in objectives}  # the page's own figures get a column when no objective is one
    rows = []
    for t in record["trials"]:
        f = t.get("figures") or {}
        values = t.get("values") or []
        row: dict[str, Any] = {
            "trial": str(t["number"]) + (" ★" if t["number"] == record.get("best") else ""),
            "state": t["state"],
            "on the front": "yes" if t["number"] in front else "",
            "settings": " ".join(settings_lines(t)),
        }
        for i, o in enumerate(objectives):
            row[f"{o['label']} ({o['unit']})"] = (
                html.fmt(values[i], 4 if o["unit"] == "$" else 2) if i < len(values) else "–"
            )
        if "output_tps.p50" not in shown:
            row["per user (tok/s)"] = html.fmt(f.get("per_user"), 2)
        if "output_tokens_per_s" not in shown:
            row["per instance (tok/s)"] = html.fmt(f.get("per_instance"), 2)
        if costed and "usd_per_million_output_tokens" not in shown:
            row["$/Mtok"] = html.fmt(f.get("usd_per_mtok"), 3)
        row["engine"] = "reused" if t.get("engine_reused") else ("loaded" if t["state"] == "complete" else "")
        row["note"] = "; ".join(
            x for x in [t.get("error") or "", "tainted: " + "; ".join(t["taint"]) if t.get("taint") else ""] if x
        )
        report = Path(t.get("run_dir") or "") / REPORT_NAME
        row["report"] = (_href(report, out_dir), "report") if t.get("run_dir") and report.is_file() else ""
        rows.append(row)
    if not rows:
        return html.note("no trial yet")
    return html.table(
        rows,
        list(rows[0]),
        text_columns=["trial", "settings", "note"],
        classes={"state": _state_class},
        link_columns=["report"],
    )


def _state_class(state: str) -> str:
    return STATE_CLASS.get(state, "nodata")


def _href(target: Path, out_dir: Path) -> str:
    rel = os.path.relpath(target.resolve(), out_dir.resolve())
    return rel if rel.startswith((".", "/")) else "./" + rel


def space_table(record: dict[str, Any]) -> str:
    defaults = record.get("defaults") or {}
    rows = [{"setting": k, "space": v, "default": _value(defaults.get(k))} for k, v in record["space"].items()]
    return html.table(rows, ["setting", "space", "default"], text_columns=["setting", "space", "default"])


def build_search_html(record: dict[str, Any], out_dir: Path) -> str:
    trials = record["trials"]
    count = {s: sum(1 for t in trials if t["state"] == s) for s in ("complete", "pruned", "fail")}
    parts = [check_banner(record.get("check"))]
    best = record.get("best")
    parts.append(
        html.cards(
            [
                ("trials", f"{len(trials)} of {record.get('trials_planned')}"),
                ("complete · pruned · failed", f"{count['complete']} · {count['pruned']} · {count['fail']}"),
                ("on the front", str(len(record.get("front") or []))),
                ("best", f"trial {best}" if best is not None else "–"),
            ]
        )
    )
    fig = pareto.pareto_figure(points(record))
    parts.append(
        html.section(
            "Capacity: per user against per instance",
            figures.figure_div(fig, "pareto")
            if fig is not None
            else html.note(f"fewer than {pareto.MIN_POINTS} complete trials: no front yet"),
            "One point per complete trial: the median of its requests' output tokens/s (what a user sees) against "
            "its run's output tokens/s (what the instance serves); with a machine price (cost.usd_per_hour), $ per "
            "million output tokens against per user. Orange: on the front (no other trial is faster on both); the "
            "line is the front's edge. Rings: the defaults (◇) and the best (☆), the one checked against the defaults.",
        )
    )
    by_trial = objectives_figure(record)
    if by_trial is not None:
        parts.append(
            html.section(
                "The objectives, trial by trial",
                figures.figure_div(by_trial, "objectives"),
                "Each objective of each complete trial, in the order they ran (orange: on the front of the "
                "objectives), and the best so far.",
            )
        )
    parts.append(
        html.section(
            "Trials",
            trials_table(record, out_dir),
            "Pruned: the settings the config or the engine refused (its line in the note). "
            "Failed: measured nothing usable (interrupted, a figure missing).",
        )
    )
    parts.append(html.section("Search space", space_table(record), "The defaults are the first trial."))
    objectives = ", ".join(f"{o['label']} ({o['direction'][:3]})" for o in record["objectives"])
    return html.page(
        "search.html.j2",
        f"Search · {record.get('backend')} · {len(trials)} trials",
        heading=f"{record.get('backend')} · {record.get('model')} · {record.get('workload')}",
        sub=f"{record.get('folder')} · objectives: {objectives} · stopped: {record.get('stopped') or 'running'} · "
        f"{record.get('updated_at')}",
        parts=html.safe(parts),
    )


def write_search_page(out_dir: Path, record: dict[str, Any]) -> Path:
    """search.html, written whole or not at all (a reader never sees half a page)."""
    path = Path(out_dir) / PAGE_NAME
    tmp = path.with_suffix(".html.tmp")
    tmp.write_text(build_search_html(record, Path(out_dir)), encoding="utf-8", errors="replace")
    tmp.replace(path)
    return path
