"""The harness's figures held against a server's own, on the same requests (issue "say why").

For each request of a server-mode run, the ratio of the harness's figure to the engine's own
report of the nearest interval, p50 and p90 over the requests:

- llama.cpp's llama-server (``timings`` on the last chunk): TTFT / prompt_ms, and
  TPOT / (predicted_ms / (predicted_n − 1));
- vLLM with ``--enable-per-request-metrics`` (``metrics`` on the usage chunk): TTFT /
  (queue_time_ms + time_to_first_token_ms), and (E2E − TTFT) / generation_time_ms.

A ratio above 1 is the path outside the engine's clock (HTTP, the server's input and output
path, the client); the engine's own clock starts later and stops earlier than the harness's.
With speculation on, the acceptance from the server's counters (``server_metrics.speculative``)
and from the requests (``spec_*`` in engine_stats) are printed side by side.

    .venv/bin/python benchmarks/server_timings.py llama-server [--requests 16] [--concurrency 1]
    .venv/bin/python benchmarks/server_timings.py llama-server --draft same
    .venv/bin/python benchmarks/server_timings.py vllm
    .venv/bin/python benchmarks/server_timings.py vllm --ngram 3   # n-gram speculation, K draft tokens
    .venv/bin/python benchmarks/server_timings.py reference
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from harness.cli import compose_config
from harness.results.store import load_requests
from harness.run.point import run_benchmark

ENGINES = {
    "llama-server": ["backend=llamacpp", "backend.mode=server", "backend.server=llama-server"],
    "vllm": ["backend=vllm", "backend.mode=server"],
    "reference": ["backend=reference", "backend.per_request_metrics=true", "backend.ttft_ms=40", "backend.itl_ms=8"],
}


def ratios(df: pd.DataFrame) -> dict[str, np.ndarray]:
    """Per request: the harness's figure ÷ the engine's own, by interval."""
    ok = df[df.error.isna()]
    stats = [json.loads(s) if isinstance(s, str) else (s or {}) for s in ok.engine_stats]
    out: dict[str, list[float]] = {}
    for (_, row), s in zip(ok.iterrows(), stats):
        if "llama_server_prompt_ms" in s:
            out.setdefault("TTFT / prompt_ms", []).append(row.ttft_s * 1e3 / s["llama_server_prompt_ms"])
            n = s.get("llama_server_predicted_n", 0)
            if n > 1 and row.tpot_s and s.get("llama_server_predicted_ms"):
                out.setdefault("TPOT / (predicted_ms / (n - 1))", []).append(
                    row.tpot_s * 1e3 / (s["llama_server_predicted_ms"] / (n - 1))
                )
        if "vllm_prefill_s" in s:
            engine_ttft = s["vllm_prefill_s"] + s.get("vllm_queue_s", 0.0)
            out.setdefault("TTFT / (queue + time_to_first_token)", []).append(row.ttft_s / engine_ttft)
            if s.get("vllm_decode_s"):
                out.setdefault("(E2E - TTFT) / generation_time", []).append(
                    (row.e2e_s - row.ttft_s) / s["vllm_decode_s"]
                )
    return {k: np.asarray(v) for k, v in out.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("engine", choices=ENGINES)
    p.add_argument("--requests", type=int, default=16)
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=32)
    p.add_argument("--draft", default=None, help="llama-server: backend.draft_model (a GGUF path, or 'same')")
    p.add_argument(
        "--ngram",
        type=int,
        default=None,
        help="vllm: n-gram speculation with this many draft tokens (backend.speculative_config)",
    )
    p.add_argument("--out", default=None, help="keep the run folder here")
    p.add_argument("overrides", nargs="*")
    a = p.parse_intermixed_args()
    overrides = [
        *ENGINES[a.engine],
        "workload=synthetic",
        f"workload.num_requests={a.requests}",
        f"workload.concurrency={a.concurrency}",
        f"workload.input_len={a.input_len}",
        f"workload.output_len={a.output_len}",
        "progress=false",
        *a.overrides,
    ]
    if a.draft:
        overrides.append(f"backend.draft_model={a.draft}")
    if a.ngram:
        spec = f"{{method: ngram, num_speculative_tokens: {a.ngram}, prompt_lookup_max: 3}}"
        overrides.append(f"backend.speculative_config={spec}")
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(a.out) if a.out else Path(tmp) / "run"
        outcome = run_benchmark(compose_config(*overrides), run_dir)
        df = load_requests(run_dir)
        summary = outcome.summary.to_dict()
    print(f"{a.engine}: {len(df)} requests, concurrency {a.concurrency}, {a.input_len} → {a.output_len} tokens")
    for name, values in ratios(df).items():
        print(
            f"  {name:40s} p50 {np.percentile(values, 50):.3f}  p90 {np.percentile(values, 90):.3f}  (n={len(values)})"
        )
    spec = (summary.get("server_metrics") or {}).get("speculative") or {}
    if spec:
        print(f"  speculative, from the counters: {json.dumps(spec)}")
    stats = [json.loads(s) if isinstance(s, str) else (s or {}) for s in df.engine_stats]
    drafted = sum(s.get("spec_num_draft_tokens", 0) for s in stats)
    accepted = sum(s.get("spec_num_accepted_tokens", 0) for s in stats)
    if drafted:
        print(
            f"  speculative, from the requests: {accepted:.0f} of {drafted:.0f} draft tokens accepted "
            f"({accepted / drafted:.1%})"
        )


if __name__ == "__main__":
    main()
