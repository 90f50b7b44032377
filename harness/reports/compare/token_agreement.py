"""Token agreement with the baseline as compare shows it: the table's cells, the first divergence, the note."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

from harness.reports import agreement
from harness.reports.compare.runs import Run
from harness.reports.tables import text_table, wrap

AGREEMENT_NOTE = (
    "Greedy replies compared token for token with the baseline's, over the requests both completed. "
    "Numerics (bf16 against fp32, a quantized GGUF, other kernels or batch shapes) make replies part after a "
    "while; a reply that differs from the first token, or in every request, points at other work "
    "(template, BOS, EOS set, weights)."
)

AGREEMENT_HEADS = [
    "run",
    "dtype",
    "quantization",
    "identical",
    "mean common prefix",
    "prefix share",
    "first divergence",
]

AGREEMENT_CONSOLE_HEADS = [
    ["run"],
    ["dtype"],
    ["quantization"],
    ["identical"],
    ["mean common", "prefix"],
    ["prefix", "share"],
    ["first", "divergence"],
]


def token_agreement(runs: Sequence[Run]) -> list[agreement.Agreement]:
    """Each run against the baseline, when the runs recorded output ids (else none). Runs imported
    from another tool are left out: they sent that tool's prompts and kept no token ids."""
    own = [r for r in runs if not r.summary.source]
    if len(own) < 2 or runs[0].summary.source or not any(agreement.any_ids(r.data) for r in own):
        return []
    return agreement.against_baseline([r.data for r in own], [r.label for r in own])


def _numerics_text(value: Optional[str]) -> str:
    return value if value else "–"


def agreement_cells(a: agreement.Agreement) -> list[str]:
    share = a.identical_share
    first = f"request {a.first.request_id}, token {a.first.position}" if a.first else ("none" if a.compared else "–")
    return [
        a.run,
        _numerics_text(a.dtype),
        _numerics_text(a.quantization),
        f"{a.identical}/{a.compared} ({share:.0%})" if share is not None else "–",
        f"{a.mean_common_prefix:.1f} tokens" if a.mean_common_prefix is not None else "–",
        f"{a.prefix_share:.0%}" if a.prefix_share is not None else "–",
        first,
    ]


def divergence_lines(a: agreement.Agreement) -> list[str]:
    """The first divergence's two texts, and why the figures may not mean much."""
    lines = [f"{a.run}: {p}" for p in a.problems]
    if a.first:
        lines.append(
            f"{a.run}, request {a.first.request_id} parts at token {a.first.position}: "
            f"baseline {a.first.baseline_text!r} · this run {a.first.text!r}"
        )
    return lines


def format_agreement(agreements: Sequence[agreement.Agreement]) -> list[str]:
    a0 = agreements[0]
    lines = wrap(
        f"token agreement with the baseline ({a0.baseline}: dtype {_numerics_text(a0.baseline_dtype)}, "
        f"quantization {_numerics_text(a0.baseline_quantization)}), greedy replies token for token:"
    )
    lines += text_table(AGREEMENT_CONSOLE_HEADS, [agreement_cells(a) for a in agreements], align="lllrrrl")
    lines += [
        line for a in agreements for text in divergence_lines(a) for line in wrap(text, first="  ", indent="    ")
    ]
    return lines
