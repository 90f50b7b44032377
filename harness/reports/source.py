"""What the pages say of a run another tool measured (summary.json's ``source``): who measured, and
what each of its figures means.

A run imported from vllm bench serve, GuideLLM or AIPerf (harness/formats/imported.py) carries
the tool's name, version and files, its figures as it reported them, and its own definitions of
them. The report shows these in its header and in a section of their own, so no one reads a
tool's "ITL" as the harness's: the same word means a gap between chunks in one tool and the decode
time per token in another.
"""

from __future__ import annotations

from typing import Any, Optional

from harness.reports import html
from harness.reports.html import fmt
from harness.results.schema import RunSummary

HARNESS_CLIENT = "harness"
FIGURE_STATS = ("mean", "p50", "p90", "p99")


def client_text(summary: RunSummary) -> str:
    """Who measured the run: ``harness``, or the tool and its version (``GuideLLM 0.8.1``)."""
    source = summary.source
    if not source:
        return HARNESS_CLIENT
    version = source.get("tool_version")
    return f"{source.get('title') or source.get('tool')} {version or '(version unknown)'}"


def client_short(summary: RunSummary) -> str:
    """The client in a label: ``harness``, ``vllm-bench``, ``guidellm``, ``aiperf``."""
    return str((summary.source or {}).get("tool") or HARNESS_CLIENT)


def header_item(summary: RunSummary) -> Optional[tuple[str, str]]:
    """The report header's line of an imported run: the tool, its version, the files, and how."""
    source = summary.source
    if not source:
        return None
    files = ", ".join(str(f.get("name")) for f in source.get("files") or [])
    label = f" · benchmark {source['label']}" if source.get("label") else ""
    return (
        "measured by",
        f"{client_text(summary)} · imported from {files} ({source.get('format')}){label} · "
        f"{'per-request records' if source.get('per_request') else 'no per-request records: its own statistics only'}",
    )


def figures_html(summary: RunSummary) -> str:
    """The tool's figures as it reported them (its names, its units) beside its definitions; and
    the harness figures it does not have. Empty for the harness's own runs."""
    source = summary.source
    if not source:
        return ""
    definitions: dict[str, Any] = source.get("definitions") or {}
    rows = []
    for name, figure in (source.get("figures") or {}).items():
        stats = figure.get("stats") or {}
        meaning = definitions.get(name) or {}
        rows.append(
            {
                "figure": name,
                "field": str(figure.get("field") or ""),
                "unit": str(figure.get("unit") or ""),
                **{stat: fmt(stats.get(stat), 2) for stat in FIGURE_STATS},
                "definition": str(meaning.get("definition") or ""),
                "the harness's": _concept_text(meaning),
            }
        )
    text_columns = ["figure", "field", "unit", "definition", "the harness's"]
    out = html.note(
        f"The figures {source.get('title')} reported, under its own names and in its own units, with its "
        "definitions (from its code). The tables above hold them in the harness's metrics where the "
        "definition is the same, computed from its per-request records where it kept them."
    )
    if rows:
        out += html.table(rows, list(rows[0]), text_columns=text_columns)
    absent = source.get("absent") or []
    if absent:
        out += html.note(f"Not in {source.get('title')}'s files, so absent here (not zero): {', '.join(absent)}.")
    return out


def _concept_text(meaning: dict[str, Any]) -> str:
    """Which harness figure shares the definition, and where it departs."""
    concept = meaning.get("concept")
    if not concept:
        return "none"
    differs = meaning.get("differs")
    return f"{concept}" + (f" — but {differs}" if differs else " (same definition)")
