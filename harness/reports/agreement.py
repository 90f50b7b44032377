"""Cross-engine token agreement: do two runs of the same greedy workload produce the same tokens?

Each run records its reply's token ids per request (``output_token_ids`` in
requests.parquet). For a run against a baseline, over the requests both completed:

- identical share = requests whose id sequences are equal / requests compared;
- common prefix = the number of leading ids the two replies share; its mean over the
  requests, and that mean over the baseline's mean reply length (prefix share);
- first divergence = the request whose replies part earliest: the token position where they
  part (0-based), and both replies' text from a little before that point.

Greedy decoding makes an engine's reply a function of the prompt ids and the numerics, so a
difference comes from the numerics (dtype, quantization, kernels, batching) or from the
engine doing other work (a template, a BOS token, an EOS set). Each run's dtype and
quantization (summary.backend) are kept beside its figures to tell the two apart.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

import pandas as pd

from core.sequences import common_prefix
from harness.results.schema import WORKLOAD_PARTS, RunResult, completed

CONTEXT_CHARS = 24  # text shown before the first divergent character
TAIL_CHARS = 48  # text shown from it


@dataclass
class Divergence:
    """Where one request's two replies part."""

    request_id: int
    position: int  # token index of the first differing id (= common prefix length)
    baseline_tokens: int
    tokens: int
    baseline_text: str  # from a little before the first differing character
    text: str


@dataclass
class Agreement:
    """One run against the baseline."""

    baseline: str
    run: str
    dtype: Optional[str]
    quantization: Optional[str]
    compared: int  # requests both runs completed, with ids
    identical: int
    mean_common_prefix: Optional[float]  # tokens
    mean_baseline_tokens: Optional[float]
    first: Optional[Divergence] = None  # the earliest divergence over the requests
    problems: list[str] = field(default_factory=list)  # why figures are missing or not meaningful
    baseline_dtype: Optional[str] = None
    baseline_quantization: Optional[str] = None

    @property
    def identical_share(self) -> Optional[float]:
        return self.identical / self.compared if self.compared else None

    @property
    def prefix_share(self) -> Optional[float]:
        if self.mean_common_prefix is None or not self.mean_baseline_tokens:
            return None
        return self.mean_common_prefix / self.mean_baseline_tokens

    def row(self) -> dict[str, Any]:
        """A flat row for agreement.csv."""
        first = asdict(self.first) if self.first else {}
        return {
            "baseline": self.baseline,
            "run": self.run,
            "dtype": self.dtype,
            "quantization": self.quantization,
            "compared": self.compared,
            "identical": self.identical,
            "identical_share": self.identical_share,
            "mean_common_prefix": self.mean_common_prefix,
            "prefix_share": self.prefix_share,
            "first_divergence_request": first.get("request_id"),
            "first_divergence_position": first.get("position"),
            "baseline_text": first.get("baseline_text"),
            "text": first.get("text"),
            "problems": "; ".join(self.problems),
        }


def numerics(result: RunResult) -> tuple[Optional[str], Optional[str]]:
    """The run's dtype and quantization as its summary recorded them."""
    b = result.summary.backend
    return b.get("dtype"), b.get("quantization")


def _ids(value: Any) -> Optional[list[int]]:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return [int(v) for v in value]


def _replies(result: RunResult) -> dict[int, tuple[list[int], str]]:
    """request id → (output ids, output text), for the completed requests that recorded ids."""
    df = completed(result.requests)
    out: dict[int, tuple[list[int], str]] = {}
    if df.empty or "output_token_ids" not in df.columns:
        return out
    for rid, ids, text in zip(df["request_id"], df["output_token_ids"], df["output_text"]):
        ids = _ids(ids)
        if ids is not None:
            out[int(rid)] = (ids, text if isinstance(text, str) else "")
    return out


def text_from_divergence(a: str, b: str) -> tuple[str, str]:
    """Both texts from a little before their first differing character (``…`` marks a cut)."""
    i = common_prefix([ord(c) for c in a], [ord(c) for c in b])
    start = max(0, i - CONTEXT_CHARS)

    def cut(text: str) -> str:
        part = text[start : i + TAIL_CHARS]
        return ("…" if start else "") + part + ("…" if len(text) > i + TAIL_CHARS else "")

    return cut(a), cut(b)


def comparable_problems(baseline: RunResult, run: RunResult) -> list[str]:
    """Why token agreement between these two runs would mean nothing (empty: it is meaningful)."""
    problems = []
    for r in (baseline, run):
        if r.summary.workload.get("greedy") is False:
            problems.append(f"{r.name} sampled (temperature > 0): only greedy runs can agree token for token")
    a, b = (r.summary.workload.get("prompts_sha256") for r in (baseline, run))
    parts = []  # the hash covers these too; say which differs
    for key, what in WORKLOAD_PARTS:
        pa, pb = (r.summary.workload.get(key) for r in (baseline, run))
        if pa != pb:
            parts.append(f"the runs differ in their {what}: {pa or 'none'} vs {pb or 'none'}")
    problems += parts
    if not parts and a and b and a != b:
        problems.append("the runs sent different prompts (workload prompts_sha256 differs)")
    if (baseline.summary.model.get("name") or "") != (run.summary.model.get("name") or ""):
        problems.append("the runs used different models")
    return problems


def agreement(baseline: RunResult, run: RunResult, baseline_label: str = "", label: str = "") -> Agreement:
    """``run`` against ``baseline``, over the requests both completed with recorded ids."""
    dtype, quant = numerics(run)
    result = Agreement(baseline_label or baseline.name, label or run.name, dtype, quant, 0, 0, None, None)
    result.baseline_dtype, result.baseline_quantization = numerics(baseline)
    result.problems = comparable_problems(baseline, run)
    base, other = _replies(baseline), _replies(run)
    shared = sorted(set(base) & set(other))
    if not shared:
        missing = [r.name for r, rep in ((baseline, base), (run, other)) if not rep]
        result.problems.append(
            f"no output_token_ids recorded in {', '.join(missing)} (a run older than this harness version?)"
            if missing
            else "no request completed in both runs"
        )
        return result
    prefixes, lengths = [], []
    for rid in shared:
        (a_ids, a_text), (b_ids, b_text) = base[rid], other[rid]
        n = common_prefix(a_ids, b_ids)
        prefixes.append(n)
        lengths.append(len(a_ids))
        if a_ids == b_ids:
            result.identical += 1
        elif result.first is None or n < result.first.position:
            shown_a, shown_b = text_from_divergence(a_text, b_text)
            result.first = Divergence(rid, n, len(a_ids), len(b_ids), shown_a, shown_b)
    result.compared = len(shared)
    result.mean_common_prefix = sum(prefixes) / len(prefixes)
    result.mean_baseline_tokens = sum(lengths) / len(lengths)
    return result


def against_baseline(results: Sequence[RunResult], labels: Sequence[str]) -> list[Agreement]:
    """Every run but the first against the first."""
    return [agreement(results[0], r, labels[0], lab) for r, lab in zip(results[1:], labels[1:])]


def matrix(results: Sequence[RunResult], labels: Sequence[str]) -> pd.DataFrame:
    """Identical share of every pair of runs (rows: baseline, columns: run); 1 on the diagonal."""
    cells: dict[str, dict[str, Optional[float]]] = {lab: {} for lab in labels}
    for i, (a, la) in enumerate(zip(results, labels)):
        for j, (b, lb) in enumerate(zip(results, labels)):
            cells[lb][la] = 1.0 if i == j else agreement(a, b, la, lb).identical_share
    return pd.DataFrame(cells, index=list(labels), columns=list(labels))


def any_ids(result: RunResult) -> bool:
    """Whether the run recorded output ids (runs before this version did not)."""
    return bool(_replies(result))
