"""The gate's decisions as text: console lines and GitHub markdown, with the interval, the
number of runs and what set the margin (:mod:`harness.gate.verdicts`)."""

from __future__ import annotations

from collections.abc import Sequence

from harness.gate.intervals import METHOD_TEXT
from harness.gate.verdicts import INCONCLUSIVE, PASS, REGRESSION, Decision

VERDICT_MARK = {REGRESSION: "**REGRESSION**", PASS: "pass", INCONCLUSIVE: "inconclusive"}


def pct(v: float) -> str:
    return f"{v * 100:+.1f}%"


def interval_text(d: Decision) -> str:
    """The one-sided bounds the verdict is read from: [lower, upper] of the change."""
    i = d.interval
    return f"[{pct(i.lower_bound - 1)}, {pct(i.upper_bound - 1)}]"


def runs_text(d: Decision) -> str:
    i = d.interval
    return f"{i.blocks} blocks" if i.blocks else f"{i.n_a} vs {i.n_b} runs"


def decision_lines(decisions: Sequence[Decision]) -> list[str]:
    """One line per figure, for the console."""
    return [d.text() for d in decisions]


def decision_table_markdown(decisions: Sequence[Decision]) -> list[str]:
    confidence = f"{(1 - decisions[0].interval.alpha) * 100:.4g}%" if decisions else "95%"
    lines = [
        f"| figure | change | one-sided {confidence} bounds | runs | margin | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for d in decisions:
        lines.append(
            f"| {d.figure.label} | {pct(d.change)} | {interval_text(d)} | {runs_text(d)} | "
            f"{d.margin * 100:.1f}% ({d.margin_source}) | {VERDICT_MARK[d.verdict]} |"
        )
    methods = sorted({METHOD_TEXT[d.interval.method] for d in decisions})
    if methods:
        lines += ["", "Interval: " + "; ".join(methods) + "."]
    return lines
