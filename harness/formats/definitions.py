"""What each benchmark client means by the figures it names: one table, read from the clients' code.

The same name means different things in different tools, and different names mean the same
thing. "ITL" is the gap between streamed chunks in ``vllm bench serve`` (per chunk), the decode
time per token of one request in AIPerf and GuideLLM (what the harness and vLLM call TPOT), and
the gap between tokens in the harness (per token); GuideLLM's "TPOT" counts the first token too.
A comparison across tools is only honest when it compares like with like, so every figure an
importer reads is mapped here to the harness metric of the *same definition* (``concept``), and
``differs`` says where the tool's own definition departs from the harness's and by what.

Concepts are harness metric keys (harness/results/metrics.py), plus ``ntpot`` (time per output
token *including* the first: E2E / n_out), which llm-d calls normalized TPOT and GuideLLM calls
TPOT, and which the harness reports under no name of its own.

Sources (read for the versions named; /work/notes/formats.md has the line-by-line reading):
vLLM ``vllm/benchmarks/serve.py`` and ``lib/endpoint_request_func.py`` (0.11 to 0.32, the
definitions unchanged), GuideLLM 0.8.1 ``schemas/base/request_stats.py`` and ``metrics.py``,
AIPerf 0.13.0 ``aiperf/metrics/types/*.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

HARNESS, VLLM_BENCH, GUIDELLM, AIPERF = "harness", "vllm-bench", "guidellm", "aiperf"
TOOLS = (HARNESS, VLLM_BENCH, GUIDELLM, AIPERF)
TITLES = {HARNESS: "harness", VLLM_BENCH: "vllm bench serve", GUIDELLM: "GuideLLM", AIPERF: "AIPerf"}

NTPOT = "ntpot"  # time per output token with the first: E2E / n_out (llm-d's normalized TPOT)

# the concepts a cross-check sets side by side, in order, with the harness's label of each
CONCEPTS = {
    "ttft_s": "TTFT",
    "tpot_s": "TPOT",
    "itl_s": "ITL per token",
    "itl_chunk_s": "ITL per chunk",
    NTPOT: "NTPOT (first token included)",
    "e2e_s": "E2E latency",
    "requests_per_s": "requests/s",
    "output_tokens_per_s": "output tokens/s",
}


@dataclass(frozen=True)
class ToolMetric:
    """One figure as a tool names and defines it, and the harness concept of the same definition."""

    tool: str
    name: str  # what the tool calls it, as it prints it
    field: str  # where it is in the tool's file(s)
    concept: Optional[str]  # the harness metric (or NTPOT) whose definition it shares; None: no such
    definition: str
    differs: Optional[str] = None  # where its definition departs from the concept's in the harness

    @property
    def same(self) -> bool:
        return self.differs is None


_VLLM_CHUNK = "a chunk is an SSE event whose JSON has a non-empty ``choices`` (a role-only or empty delta counts)"

TABLE: tuple[ToolMetric, ...] = (
    # --- the harness (harness/results/metrics.py holds the formulas) ---
    ToolMetric(HARNESS, "TTFT", "latency.ttft_s", "ttft_s", "t(first chunk carrying an output token) − t(send)"),
    ToolMetric(HARNESS, "TPOT", "latency.tpot_s", "tpot_s", "(E2E − TTFT) / (n_out − 1) per request"),
    ToolMetric(
        HARNESS,
        "ITL per token",
        "latency.itl_s",
        "itl_s",
        "gaps between tokens, pooled: a chunk of k tokens after a gap g gives k gaps of g/k (n_out − 1 a request)",
    ),
    ToolMetric(
        HARNESS,
        "ITL per chunk",
        "latency.itl_chunk_s",
        "itl_chunk_s",
        "gaps between consecutive chunks that carry tokens, pooled over requests",
    ),
    ToolMetric(HARNESS, "E2E", "latency.e2e_s", "e2e_s", "t(last output token) − t(send)"),
    ToolMetric(HARNESS, "requests/s", "throughput.requests_per_s", "requests_per_s", "completed requests / T"),
    ToolMetric(HARNESS, "output tokens/s", "throughput.output_tokens_per_s", "output_tokens_per_s", "Σ n_out / T"),
    # --- vllm bench serve ---
    ToolMetric(
        VLLM_BENCH,
        "TTFT",
        "ttfts, *_ttft_ms",
        "ttft_s",
        f"t(first chunk) − t(send), {_VLLM_CHUNK}",
        differs="a server that opens the stream with a role-only chunk (vLLM's own server, the reference "
        "server's openai dialect) makes it the time to that chunk, before any token",
    ),
    ToolMetric(
        VLLM_BENCH,
        "TPOT",
        "*_tpot_ms",
        "tpot_s",
        "(E2EL − TTFT) / (output tokens − 1) per request, requests of more than one token; stats over requests",
        differs="inherits TTFT's and E2EL's chunk stamps: an early role-only chunk moves time from TTFT into it",
    ),
    ToolMetric(
        VLLM_BENCH,
        "ITL",
        "itls, *_itl_ms",
        "itl_chunk_s",
        f"gaps between consecutive chunks, pooled over requests; {_VLLM_CHUNK}",
        differs="per chunk, not per token (the harness's ITL is per token); a role-only first chunk adds one "
        "gap the length of the time to the first token, and the finishing chunk one more",
    ),
    ToolMetric(
        VLLM_BENCH,
        "E2EL",
        "latencies, *_e2el_ms",
        "e2e_s",
        f"t(last chunk) − t(send), {_VLLM_CHUNK} (the finishing chunk included; the usage chunk not)",
    ),
    ToolMetric(
        VLLM_BENCH, "request throughput", "request_throughput", "requests_per_s", "completed requests / duration"
    ),
    ToolMetric(
        VLLM_BENCH,
        "output token throughput",
        "output_throughput",
        "output_tokens_per_s",
        "Σ output tokens (the server's usage, else the tokenizer's count) / duration",
    ),
    # --- GuideLLM ---
    ToolMetric(
        GUIDELLM,
        "TTFT",
        "time_to_first_token_ms",
        "ttft_s",
        "t(first SSE line that yields a token iteration) − t(request_start), wall clock (time.time())",
    ),
    ToolMetric(
        GUIDELLM,
        "ITL",
        "inter_token_latency_ms",
        "tpot_s",
        "(t(last token iteration) − t(first token iteration)) / (output tokens − 1) per request; the "
        "aggregate weights each request by its output tokens − 1",
        differs="GuideLLM's ITL is the harness's TPOT (one value a request), not a gap between tokens; its "
        "aggregate mean is token-weighted, which is the harness's ITL-per-token mean",
    ),
    ToolMetric(
        GUIDELLM,
        "TPOT",
        "time_per_output_token_ms",
        NTPOT,
        "(t(last token iteration) − t(request_start)) / output tokens per request: the first token included",
        differs="includes the first token (TTFT spread over every token): larger than the harness's TPOT "
        "by about TTFT / n_out",
    ),
    ToolMetric(
        GUIDELLM,
        "request latency",
        "request_latency",
        "e2e_s",
        "t(request_end) − t(request_start): until the response stream closed",
        differs="ends when the stream closes (after the last token, usage and [DONE]); the imported E2E is "
        "t(last token iteration) − t(request_start), the harness's definition, from the same request's stamps",
    ),
    ToolMetric(
        GUIDELLM,
        "requests/s",
        "requests_per_second",
        "requests_per_s",
        "a rate distribution over the benchmark's time (mean), from completion times",
        differs="the mean of a rate over time, not completed / duration (close for a steady run)",
    ),
    ToolMetric(
        GUIDELLM,
        "output tokens/s",
        "output_tokens_per_second",
        "output_tokens_per_s",
        "a rate distribution over the benchmark's time (mean), tokens counted at their iteration",
        differs="the mean of a rate over time, not Σ output tokens / duration (close for a steady run)",
    ),
    # --- AIPerf ---
    ToolMetric(
        AIPERF,
        "TTFT",
        "time_to_first_token",
        "ttft_s",
        "t(first non-empty content response) − t(request start), perf_counter_ns; no warm-up request by "
        "default, so the first request of each connection also waits for its connect",
    ),
    ToolMetric(
        AIPERF,
        "ITL",
        "inter_token_latency",
        "tpot_s",
        "(request latency − TTFT) / (output tokens − 1) per request",
        differs="AIPerf's ITL is the harness's TPOT (one value a request), not a gap between tokens",
    ),
    ToolMetric(
        AIPERF,
        "ICL",
        "inter_chunk_latency",
        "itl_chunk_s",
        "gaps between content responses, per request",
        differs="stamped per socket read: chunks that arrive in one read have gaps of zero",
    ),
    ToolMetric(AIPERF, "request latency", "request_latency", "e2e_s", "t(last content response) − t(request start)"),
    ToolMetric(
        AIPERF,
        "request throughput",
        "request_throughput",
        "requests_per_s",
        "completed requests / benchmark duration",
    ),
    ToolMetric(
        AIPERF,
        "output token throughput",
        "output_token_throughput",
        "output_tokens_per_s",
        "Σ output tokens / benchmark duration",
    ),
)


def of_tool(tool: str) -> list[ToolMetric]:
    """The figures one tool names, in the table's order."""
    return [m for m in TABLE if m.tool == tool]


def for_concept(tool: str, concept: str) -> Optional[ToolMetric]:
    """The tool's figure of the same definition as ``concept``, or None where it has none."""
    return next((m for m in TABLE if m.tool == tool and m.concept == concept), None)


def named(tool: str, name: str) -> Optional[ToolMetric]:
    """The tool's figure it calls ``name`` (TTFT, TPOT, ITL…), or None."""
    return next((m for m in TABLE if m.tool == tool and m.name == name), None)


def definitions_of(tool: str) -> dict[str, dict[str, object]]:
    """The tool's definitions as summary.json keeps them: {name: {field, concept, definition, differs}}."""
    return {
        m.name: {"field": m.field, "concept": m.concept, "definition": m.definition, "differs": m.differs}
        for m in of_tool(tool)
    }
