"""What a server says about its own handling of one request, as ``engine_stats`` keys.

Two dialects carry per-request figures in a stream (see ../docs/metrics.md, "The engine's own
figures over HTTP"):

- **vLLM** with ``--enable-per-request-metrics``: a top-level ``metrics`` object on the final
  usage chunk: ``queue_time_ms`` (queued → scheduled), ``time_to_first_token_ms`` (scheduled →
  first token: about prefill), ``generation_time_ms`` (first → last token), ``mean_itl_ms``,
  and with ``--per-request-spec-decode-metrics`` a ``speculative_decoding`` object
  (``mean_acceptance_length``, ``draft_acceptance_rate``, ``num_spec_steps``,
  ``num_draft_tokens``, ``num_accepted_draft_tokens``; checked in vLLM 0.32);
- **llama.cpp's llama-server**: a ``timings`` object on the last chunk: ``prompt_n``,
  ``prompt_ms`` (prompt processing, up to the first token), ``cache_n`` (prompt tokens reused
  from the slot's cache), ``predicted_n``, ``predicted_ms`` (the tokens after the prompt), and
  ``draft_n``, ``draft_n_accepted`` when it speculates.

Each becomes the keys the in-process engines use where the interval is the same (``vllm_*_s``,
``cached_tokens``), else keys of its own, with ``engine_timings_source`` naming where they came
from. A figure that is not a finite number ≥ 0 is left out and counted in
``engine_timings_invalid`` (a server that lies does not fail the request: the figures are
context, not the measurement).
"""

from __future__ import annotations

import math
from typing import Any, Optional

VLLM_SOURCE = "vllm metrics"
LLAMA_SERVER_SOURCE = "llama-server timings"
# vLLM's per-request speculative-decoding figures (its SpeculativeDecodingMetrics, over HTTP and
# in-process alike) → engine_stats keys
VLLM_SPEC_KEYS = (
    ("spec_mean_acceptance_length", "mean_acceptance_length"),  # 1 + accepted / steps
    ("spec_acceptance_rate", "draft_acceptance_rate"),  # accepted / draft tokens, a fraction
    ("spec_num_drafts", "num_spec_steps"),
    ("spec_num_draft_tokens", "num_draft_tokens"),
    ("spec_num_accepted_tokens", "num_accepted_draft_tokens"),
)


def _number(value: Any) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) and value >= 0 else None


def vllm_speculative_stats(spec: dict[str, Any]) -> dict[str, float]:
    """The engine_stats of vLLM's per-request speculative figures (in-process: trusted, no count
    of invalid ones kept); a figure that is not a finite number ≥ 0 is left out."""
    numbers = {ours: _number(spec.get(theirs)) for ours, theirs in VLLM_SPEC_KEYS}
    return {key: value for key, value in numbers.items() if value is not None}


class EngineTimings:
    """Collects a stream's per-request figures into ``stats``. ``queue_s`` is the engine's own
    queue time where it says (vLLM): the request's ``queue_wait_s`` over HTTP, where the
    harness cannot see when the engine began work."""

    def __init__(self) -> None:
        self.stats: dict[str, Any] = {}
        self.invalid = 0

    def _put(self, key: str, value: Any, scale: float = 1.0) -> Optional[float]:
        number = _number(value)
        if number is None:
            if value is not None:
                self.invalid += 1
            return None
        self.stats[key] = number / scale
        return number / scale

    def take(self, chunk: dict[str, Any]) -> None:
        """A chunk that may carry ``metrics`` (vLLM) or ``timings`` (llama-server)."""
        metrics = chunk.get("metrics")
        if type(metrics) is dict:
            self._vllm(metrics)
        timings = chunk.get("timings")
        if type(timings) is dict:
            self._llama_server(timings)

    def _vllm(self, m: dict[str, Any]) -> None:
        self.stats["engine_timings_source"] = VLLM_SOURCE
        queue = self._put("vllm_queue_s", m.get("queue_time_ms"), 1000.0)
        if queue is not None:
            self.stats["queue_s"] = queue
        self._put("vllm_prefill_s", m.get("time_to_first_token_ms"), 1000.0)
        self._put("vllm_decode_s", m.get("generation_time_ms"), 1000.0)
        self._put("vllm_mean_itl_s", m.get("mean_itl_ms"), 1000.0)
        spec = m.get("speculative_decoding")
        if type(spec) is dict:  # vLLM 0.28.1 on, --per-request-spec-decode-metrics summary|detailed
            for ours, theirs in VLLM_SPEC_KEYS:
                self._put(ours, spec.get(theirs))
        self._finish()

    def _llama_server(self, t: dict[str, Any]) -> None:
        self.stats["engine_timings_source"] = LLAMA_SERVER_SOURCE
        self._put("llama_server_prompt_ms", t.get("prompt_ms"))
        self._put("llama_server_predicted_ms", t.get("predicted_ms"))
        self._put("llama_server_prompt_n", t.get("prompt_n"))
        self._put("llama_server_predicted_n", t.get("predicted_n"))
        cached = _number(t.get("cache_n"))
        if cached is not None and cached == int(cached):
            self.stats["llama_server_cache_n"] = int(cached)
        drafted = self._put("spec_num_draft_tokens", t.get("draft_n"))
        accepted = self._put("spec_num_accepted_tokens", t.get("draft_n_accepted"))
        if drafted and accepted is not None:
            self.stats["spec_acceptance_rate"] = accepted / drafted
        self._finish()

    def _finish(self) -> None:
        if self.invalid:
            self.stats["engine_timings_invalid"] = self.invalid
