"""A comparison as GitHub markdown, for a job summary or a pull-request comment: no HTML, every cell escaped."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from harness.gate.verdicts import PASS, REGRESSION
from harness.reports.compare.comparison import Comparison
from harness.reports.compare.differences import ci_text, gate_results, pct_text
from harness.reports.compare.parts import adapters_rows, endpoints_rows, jobs_rows, stages_rows
from harness.reports.compare.runs import (
    Comparability,
    CompareError,
    Run,
    figure_label,
    figure_rows,
    present_figures,
    run_description,
)
from harness.reports.compare.token_agreement import AGREEMENT_HEADS, AGREEMENT_NOTE, agreement_cells, divergence_lines
from harness.reports.gate_text import decision_table_markdown
from harness.reports.html import fmt
from harness.reports.tables import md_table, md_text
from harness.results import metrics


def comparison_markdown(result: Comparison) -> str:
    """The comparison for a GitHub job summary or pull-request comment: no HTML, cells escaped."""
    sections = [
        _md_head(result),
        _md_problems(result.comparability),
        _md_gate(result),
        _md_runs(result.runs),
        _md_figures(result.table),
        _md_parts(result.runs),
        _md_differences(result),
        _md_agreement(result),
        _md_notes(result.comparability),
    ]
    return "\n\n".join(s for s in sections if s) + "\n"


def _md_head(result: Comparison) -> str:
    return (
        f"## Comparison of {len(result.runs)} runs\n\n"
        f"Baseline: **{md_text(result.baseline.label)}**. Changes of the {md_text(result.stat)} of per-request "
        "values against it, with 95% confidence intervals from the runs (within-run only for one run against one)."
    )


def _md_problems(comp: Comparability) -> str:
    if not comp.problems:
        return ""
    items = "\n".join(f"> - {md_text(p)}" for p in comp.problems)
    return f"> [!WARNING]\n> **These runs are not comparable**: the differences may not be the engine's.\n{items}"


def _md_gate(result: Comparison) -> str:
    parts = []
    if result.decisions:
        parts.append("### Gate decision\n\n" + "\n".join(decision_table_markdown(result.decisions)))
    if result.fail_pct is None:
        return "\n\n".join(parts)
    pct, m = result.fail_pct, metrics.get(result.metric)
    rows = gate_results(result.diffs, result.metric, pct, result.floor)
    found = {d.verdict for _, d in rows if d is not None}
    verdict = "FAILED" if REGRESSION in found else ("passed" if found == {PASS} else "inconclusive")
    what = f"{m.label} {result.stat}"
    cells = [
        [
            r["run"],
            fmt(r["value"], 2),
            pct_text(r["change_pct"]),
            ci_text(r),
            str(r["runs"]),
            d.verdict if d is not None else "not enough data",
        ]
        for r, d in rows
    ]
    parts.append(
        f"### Regression gate: {verdict}\n\n"
        f"A side regresses when its {md_text(what)} is worse than the baseline's beyond noise (the one-sided 95% "
        f"bound) and by more than the margin ({pct:g}%, or 3 × the noise floor when one is known); it passes when "
        "the bound is inside the margin; otherwise it is inconclusive, and never fails. One run against one run "
        "decides only with a noise floor.\n\n"
        + md_table(["run", f"{what} ({m.unit})", "change", "95% CI", "runs", "result"], cells, align="lrrrrl")
    )
    return "\n\n".join(parts)


def _md_runs(runs: Sequence[Run]) -> str:
    rows = [[run.label, *run_description(run).values()] for run in runs]
    return "### Runs\n\n" + md_table(["run", *run_description(runs[0])], rows, align="l" * len(rows[0]))


def _md_figures(table: pd.DataFrame) -> str:
    latency, whole_run = present_figures(table)
    heads = [f"{figure_label(m, st)} ({metrics.get(m).unit})" for m, st in latency]
    parts = ["### Figures", md_table(["run", *heads], figure_rows(table, latency, counts=False))]
    heads = ["ok", "failed", *(f"{figure_label(m, st)} ({metrics.get(m).unit})" for m, st in whole_run)]
    parts.append(md_table(["run", *heads], figure_rows(table, whole_run, counts=True)))
    return "\n\n".join(parts)


def _md_parts(runs: Sequence[Run]) -> str:
    """Per stage, endpoint, adapter and agent job, as compare.html shows them (request metrics: p50 / p99
    per stage, else p50 / p90)."""
    parts = []
    for title, rows in (
        ("Per stage", stages_rows(runs)),
        ("Per endpoint", endpoints_rows(runs)),
        ("Per adapter", adapters_rows(runs)),
        ("Agent jobs", jobs_rows(runs)),
    ):
        if rows:
            heads = list(rows[0])
            parts.append(f"### {title}\n\n" + md_table(heads, [[str(row.get(h, "")) for h in heads] for row in rows]))
    return "\n\n".join(parts)


def _md_differences(result: Comparison) -> str:
    if not result.diffs:
        return ""
    cells = [
        [
            r["run"],
            f"{r['label']} {r['stat']} ({r['unit']})",
            fmt(r["baseline_value"], 2),
            fmt(r["value"], 2),
            pct_text(r["change_pct"]),
            ci_text(r),
            f"{r['baseline_runs']} / {r['runs']}",
            r["verdict"],
        ]
        for r in result.diffs
    ]
    return "### Against the baseline\n\n" + md_table(
        ["run", "metric", "baseline", "this run", "change", "95% CI", "runs", "verdict"], cells, align="llrrrrrl"
    )


def _md_agreement(result: Comparison) -> str:
    if not result.agreements:
        return ""
    rows = [agreement_cells(a) for a in result.agreements]
    texts = [f"- {md_text(line)}" for a in result.agreements for line in divergence_lines(a)]
    return (
        "### Token agreement with the baseline\n\n"
        + md_text(AGREEMENT_NOTE)
        + "\n\n"
        + md_table(AGREEMENT_HEADS, rows, align="lllrrrl")
        + ("\n\n" + "\n".join(texts) if texts else "")
    )


def _md_notes(comp: Comparability) -> str:
    if not comp.notes:
        return ""
    return "### What differs\n\n" + "\n".join(f"- {md_text(n)}" for n in comp.notes)


def write_markdown(text: str, dest: str) -> None:
    """Append ``text`` to the file ``dest`` (a job summary collects several), after a blank line
    when it has content; ``-``: to stdout."""
    if dest == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    path = Path(dest)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        gap = "\n" if path.exists() and path.stat().st_size else ""
        with path.open("a", encoding="utf-8", errors="replace") as f:
            f.write(gap + text)
    except OSError as exc:
        raise CompareError(f"cannot write --markdown {dest}: {exc.strerror or exc}") from None
