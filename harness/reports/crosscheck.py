"""crosscheck.html: one server measured by several clients — the harness, vllm bench serve, GuideLLM,
AIPerf — their figures side by side, where they disagree and why, and (on the reference server)
how far each is from the truth.

Each client's run is a run folder (the peers' imported: harness/formats/imported.py), so every
figure here comes from a summary.json or a requests.parquet. A figure is set beside the others
by its *definition* (the harness metric it shares, harness/formats/definitions.py), never by its
name: a second table shows what each client calls TTFT, TPOT and ITL, which is where tools seem
to disagree most and only define differently. On the reference server (refserver/app.py, its
schedule read from ``/reference/schedule``) the truth is known: the first token ``ttft`` after
the request arrived, then one every ``itl``; each client's error is its figure minus that.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, TypeGuard

import numpy as np

from harness.formats import definitions
from harness.formats.definitions import CONCEPTS, HARNESS, NTPOT, TITLES, for_concept, named
from harness.reports import figures, html
from harness.reports.html import esc, fmt
from harness.results.schema import RunResult, completed

PAGE, DATA = "crosscheck.html", "crosscheck.json"
ROWS: tuple[tuple[str, Optional[str]], ...] = (
    ("ttft_s", "p50"),
    ("ttft_s", "mean"),
    ("tpot_s", "p50"),
    ("tpot_s", "mean"),
    ("itl_s", "p50"),
    ("itl_s", "mean"),
    ("itl_chunk_s", "p50"),
    ("itl_chunk_s", "mean"),
    (NTPOT, "p50"),
    ("e2e_s", "p50"),
    ("requests_per_s", None),
    ("output_tokens_per_s", None),
)
RATES = ("requests_per_s", "output_tokens_per_s")
NAMES = ("TTFT", "TPOT", "ITL")  # the names every tool uses, for different things
HARNESS_NAMES = {"TTFT": "TTFT", "TPOT": "TPOT", "ITL": "ITL per token"}
DISAGREE = 0.10  # a figure more than this share from the harness's is called a disagreement


@dataclass
class Measured:
    """One client's run of the cross-check."""

    tool: str  # definitions.HARNESS, VLLM_BENCH, GUIDELLM or AIPERF
    run: RunResult

    @property
    def title(self) -> str:
        version = (self.run.summary.source or {}).get("tool_version") if self.tool != HARNESS else None
        return f"{TITLES[self.tool]} {version}" if version else TITLES[self.tool]


@dataclass
class Truth:
    """The reference server's schedule: what a perfect client would measure."""

    ttft_s: float
    itl_s: float
    output_tokens: int
    chunk_tokens: int = 1
    role_chunk: Optional[str] = None  # the dialect's role-only first chunk ("empty", "bare"), if any
    dialect: str = "openai"

    def value(self, concept: str) -> Optional[float]:
        n = max(self.output_tokens, 1)
        e2e = self.ttft_s + (n - 1) * self.itl_s
        return {
            "ttft_s": self.ttft_s,
            "tpot_s": self.itl_s,
            "itl_s": self.itl_s,
            "itl_chunk_s": self.itl_s * self.chunk_tokens,
            NTPOT: e2e / n,
            "e2e_s": e2e,
        }.get(concept)


@dataclass
class Context:
    """What the cross-check ran: the server, the workload, the clients left out and why."""

    url: str
    model: str
    requests: int
    concurrency: int
    input_len: int
    output_len: int
    skipped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# --- figures ------------------------------------------------------------------------------


def _stat(values: np.ndarray, stat: str) -> Optional[float]:
    if values.size == 0:
        return None
    return float(values.mean()) if stat == "mean" else float(np.percentile(values, float(stat[1:])))


def concept_value(m: Measured, concept: str, stat: Optional[str]) -> Optional[float]:
    """A client's figure of a concept (SI units), from its run folder; None where it has none."""
    s = m.run.summary
    if concept in RATES:
        value = s.throughput.get(concept)
    elif concept == NTPOT:
        ok = completed(m.run.requests)
        pairs = zip(ok["e2e_s"], ok["output_tokens"]) if len(ok) else []
        per = np.asarray([e / n for e, n in pairs if _finite(e) and _finite(n) and n > 0], dtype=float)
        value = _stat(per, stat or "p50")
        if value is None and m.tool == definitions.GUIDELLM:  # GuideLLM's own TPOT is this concept
            figure = ((s.source or {}).get("figures") or {}).get("TPOT") or {}
            raw = (figure.get("stats") or {}).get(stat or "p50")
            value = raw * 1e-3 if _finite(raw) else None
    else:
        value = (s.latency.get(concept) or {}).get(stat or "p50")
    return float(value) if _finite(value) else None


def _finite(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float, np.integer, np.floating)) and math.isfinite(float(value))


def _shown(concept: str, value: Optional[float]) -> Optional[float]:
    """SI → what the page shows: ms for times, the rate as it is."""
    if value is None:
        return None
    return value if concept in RATES else value * 1000.0


def _unit(concept: str) -> str:
    return {"requests_per_s": "req/s", "output_tokens_per_s": "tok/s"}.get(concept, "ms")


def rows(measured: Sequence[Measured], truth: Optional[Truth]) -> list[dict[str, Any]]:
    """The side-by-side table as data: per concept and statistic, each client's figure (display
    units), the spread between them, and each one's gap to the harness and to the truth."""
    out = []
    harness = next((m for m in measured if m.tool == HARNESS), None)
    for concept, stat in ROWS:
        values = {m.tool: _shown(concept, concept_value(m, concept, stat)) for m in measured}
        present = {k: v for k, v in values.items() if v is not None}
        base = values.get(HARNESS) if harness is not None else None
        true = _shown(concept, truth.value(concept)) if truth is not None else None
        spread = None
        if len(present) > 1:
            ref = base if base else float(np.median(list(present.values())))
            spread = (max(present.values()) - min(present.values())) / abs(ref) if ref else None
        out.append(
            {
                "concept": concept,
                "label": CONCEPTS[concept] + (f" {stat}" if stat else ""),
                "stat": stat,
                "unit": _unit(concept),
                "values": values,
                "spread": spread,
                "vs_harness": {
                    k: (v - base) / abs(base) if base and v is not None else None
                    for k, v in values.items()
                    if k != HARNESS
                },
                "truth": true,
                "error": {k: (v - true if v is not None and true is not None else None) for k, v in values.items()},
            }
        )
    return out


def disagreements(measured: Sequence[Measured], table: Sequence[dict[str, Any]]) -> list[str]:
    """Each figure of a client more than DISAGREE away from the harness's, with the definitions
    that explain it (or, where the definitions agree, what else differs)."""
    out, said = [], set()
    for row in table:
        for tool, gap in row["vs_harness"].items():
            if gap is None or abs(gap) <= DISAGREE or (tool, row["concept"]) in said:
                continue
            said.add((tool, row["concept"]))  # one line a figure: its first statistic that disagrees
            meaning = for_concept(tool, row["concept"])
            why = (
                f"{TITLES[tool]} calls it {meaning.name!r}: {meaning.differs}"
                if meaning is not None and meaning.differs
                else (
                    f"{TITLES[tool]}'s {meaning.name!r} has the harness's definition: the gap is in the clients "
                    "(each one's own delays on a busy machine, new connections without a warm-up, where it "
                    "stamps a chunk) or in the prompts each sent"
                    if meaning is not None
                    else f"{TITLES[tool]} has no figure of this definition; the harness derived it from its records"
                )
            )
            out.append(
                f"{row['label']}: {TITLES[tool]} {fmt(row['values'][tool], 2)} {row['unit']} vs the harness's "
                f"{fmt(row['values'][HARNESS], 2)} ({gap * 100:+.0f} %) — {why}"
            )
    return out


def by_name(measured: Sequence[Measured]) -> list[dict[str, str]]:
    """What each client calls TTFT, TPOT and ITL: its own figure of that name, and what it is."""
    out = []
    for name in NAMES:
        row = {"name": name}
        for m in measured:
            meaning = named(m.tool, HARNESS_NAMES[name] if m.tool == HARNESS else name)
            if meaning is None:
                row[m.title] = "– (no figure of this name)"
                continue
            if m.tool == HARNESS:
                dist = m.run.summary.latency.get(str(meaning.concept)) or {}
                p50, mean = (v * 1000.0 if _finite(v := dist.get(k)) else None for k in ("p50", "mean"))
            else:
                figure = ((m.run.summary.source or {}).get("figures") or {}).get(name) or {}
                scale = {"ms": 1.0, "s": 1000.0, "sec": 1000.0}.get(str(figure.get("unit")), 1.0)
                stats = figure.get("stats") or {}
                p50, mean = (stats[k] * scale if _finite(stats.get(k)) else None for k in ("p50", "mean"))
            concept = CONCEPTS.get(str(meaning.concept), "no harness figure")
            row[m.title] = f"p50 {fmt(p50, 2)} · mean {fmt(mean, 2)} ms = {concept}"
        out.append(row)
    return out


# --- the page -----------------------------------------------------------------------------


def write(out_dir: Path, measured: Sequence[Measured], truth: Optional[Truth], context: Context) -> Path:
    """crosscheck.html and crosscheck.json in ``out_dir``; the page's path."""
    out_dir = Path(out_dir)
    table = rows(measured, truth)
    data = {
        "url": context.url,
        "model": context.model,
        "requests": context.requests,
        "concurrency": context.concurrency,
        "input_len": context.input_len,
        "output_len": context.output_len,
        "clients": {m.tool: {"title": m.title, "run": str(m.run.run_dir)} for m in measured},
        "skipped": context.skipped,
        "truth": truth.__dict__ if truth is not None else None,
        "rows": table,
        "disagreements": disagreements(measured, table),
    }
    (out_dir / DATA).write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    page = build_page(measured, truth, context, table)
    path = out_dir / PAGE
    path.write_text(page, encoding="utf-8")
    return path


def build_page(
    measured: Sequence[Measured], truth: Optional[Truth], context: Context, table: Sequence[dict[str, Any]]
) -> str:
    sections = [
        html.section("Side by side", _side_by_side(measured, table), _side_note(truth)),
        html.section("Where they disagree, and why", _disagreement_html(measured, table)),
        html.section(
            "What each client calls TTFT, TPOT and ITL",
            html.table(by_name(measured), ["name", *(m.title for m in measured)], text_columns=["name"]),
            "The same name, different figures: each cell is the client's own figure of that name (its "
            "statistics, in ms) and the harness figure of the same definition.",
        ),
    ]
    if truth is not None:
        sections.append(html.section("Against the known schedule", _truth_html(measured, table, truth)))
    for made in (_bars(measured, table), _cdfs(measured)):
        if made is not None:
            div_id, title, fig, note = made
            sections.append(html.section(title, figures.figure_div(fig, div_id), note))
    sections.append(html.section("Definitions", _definitions_html(measured)))
    header = [
        ("server", context.url),
        ("model", context.model),
        (
            "workload",
            f"{context.requests} requests, {context.input_len} → {context.output_len} tokens, "
            f"closed loop at concurrency {context.concurrency}, end of sequence ignored",
        ),
        ("clients", " · ".join(m.title for m in measured)),
    ]
    header += [("left out", line) for line in context.skipped]
    header += [("note", line) for line in context.notes]
    return html.page(
        "crosscheck.html.j2",
        "Cross-check · " + context.url,
        header=header,
        truth=truth is not None,
        sections=html.safe(sections),
    )


def _side_note(truth: Optional[Truth]) -> str:
    return (
        "Each client's figure of the same definition (the harness's metric of that name; "
        "harness/formats/definitions.py), from its own per-request records where it kept them. "
        "– : the client has no figure of this definition (absent, not zero). Spread: (max − min) / the harness's."
        + (" Truth: the reference server's schedule." if truth is not None else "")
    )


def _side_by_side(measured: Sequence[Measured], table: Sequence[dict[str, Any]]) -> str:
    titles = [m.title for m in measured]
    out = []
    for row in table:
        cells = {"figure": row["label"], "unit": row["unit"]}
        digits = 3 if row["concept"] == "requests_per_s" else 2
        for m, title in zip(measured, titles):
            cells[title] = fmt(row["values"].get(m.tool), digits)
        if any(r["truth"] is not None for r in table):
            cells["truth"] = fmt(row["truth"], digits)
        cells["spread"] = fmt(row["spread"], 0, 100, " %")
        out.append(cells)
    return html.table(out, list(out[0]), text_columns=["figure", "unit"])


def _disagreement_html(measured: Sequence[Measured], table: Sequence[dict[str, Any]]) -> str:
    lines = disagreements(measured, table)
    if not any(m.tool == HARNESS for m in measured):
        return html.note("The harness did not run: nothing to set the others against.")
    if not lines:
        return html.note(f"Every client is within {DISAGREE:.0%} of the harness on every figure they share.")
    return html.note(
        f"Figures more than {DISAGREE:.0%} from the harness's, with the definitions that explain the gap:"
    ) + "".join(html.note("• " + line) for line in lines)


def _truth_html(measured: Sequence[Measured], table: Sequence[dict[str, Any]], truth: Truth) -> str:
    out = []
    for row in table:
        if row["truth"] is None:
            continue
        cells = {"figure": row["label"], "truth": fmt(row["truth"], 2)}
        for m in measured:
            error = row["error"].get(m.tool)
            cells[m.title] = (
                f"{error:+.2f} ms ({error / row['truth'] * 100:+.0f} %)" if error is not None and row["truth"] else "–"
            )
        out.append(cells)
    role = (
        f" Its {truth.dialect} dialect opens each chat stream with a role-only chunk ({truth.role_chunk}): a client "
        "that stamps the first chunk, not the first token, sees a TTFT near zero."
        if truth.role_chunk
        else ""
    )
    note = html.note(
        f"The reference server sends the first token {truth.ttft_s * 1000:g} ms after a request reached it, then "
        f"one every {truth.itl_s * 1000:g} ms, {truth.chunk_tokens} a chunk; E2E is ttft + (n − 1)·itl. Error = "
        f"the client's figure − the schedule, in ms (a client's TTFT also holds its network path and its own "
        f"delays; the server's own lateness is a fraction of a ms).{role}"
    )
    return note + html.table(out, list(out[0]), text_columns=["figure"])


def _bars(measured: Sequence[Measured], table: Sequence[dict[str, Any]]):
    latency = [r for r in table if r["stat"] == "p50" and r["concept"] not in RATES]
    fig = figures.figure(1, 1, height=380)
    for i, m in enumerate(measured):
        fig.add_trace(
            figures.trace(
                "bar",
                x=[r["label"] for r in latency],
                y=[r["values"].get(m.tool) for r in latency],
                name=esc(m.title),
                marker=dict(color=figures.color(i)),
                hovertemplate=f"{esc(m.title)}<br>%{{x}}: %{{y:.2f}} ms<extra></extra>",
            )
        )
    truths = [r["truth"] for r in latency]
    if any(t is not None for t in truths):
        fig.add_trace(
            figures.trace(
                "scatter",
                x=[r["label"] for r in latency],
                y=truths,
                mode="markers",
                marker=dict(symbol="line-ew-open", size=28, color="#111", line=dict(width=3)),
                name="truth (the schedule)",
            )
        )
    fig.update_layout(barmode="group")
    fig.update_yaxes(title_text="ms", type="log")
    return (
        "bars",
        "p50 of each figure, by client",
        fig,
        "Log scale. A missing bar: the client has no figure of that definition.",
    )


def _cdfs(measured: Sequence[Measured]):
    fig = figures.latency_cdfs([(esc(m.title), m.run.values) for m in measured])
    if fig is None:
        return None
    return (
        "cdfs",
        "Per-request distributions",
        fig,
        "From each client's own per-request records, under the harness's definitions (GuideLLM's per-request "
        "ITL is this TPOT; AIPerf's ITL too).",
    )


def _definitions_html(measured: Sequence[Measured]) -> str:
    tools = [m.tool for m in measured]
    rows_ = [
        {
            "client": TITLES[d.tool],
            "its name": d.name,
            "field": d.field,
            "definition": d.definition,
            "the harness's figure": CONCEPTS.get(str(d.concept), "none"),
            "where it departs": d.differs or "same definition",
        }
        for d in definitions.TABLE
        if d.tool in tools
    ]
    return html.table(rows_, list(rows_[0]), text_columns=list(rows_[0])) if rows_ else ""
