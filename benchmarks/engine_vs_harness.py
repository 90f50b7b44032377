"""The harness's decode rate against the engine's own counters, on the same requests.

For each request of a run, the harness's decode tokens/s is (n_out − 1) / (E2E − TTFT),
from its own stamps; the engine's is what the engine itself reports for that request:
- llama.cpp (batched=false): llama_perf_context's n_eval / t_eval (decode steps only);
- MLX (batching=serial): mlx-lm's generation_tps.
The ratio harness / engine says how much the harness's path (stamping, the hop to the event
loop) costs; 1.0 means nothing. Then the aggregate output tokens/s at several concurrencies.

    .venv/bin/python benchmarks/engine_vs_harness.py llamacpp
    .venv/bin/python benchmarks/engine_vs_harness.py mlx --model tiny-random
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from harness.cli import compose_config
from harness.results.store import load_requests
from harness.run.point import run_benchmark

ENGINE_RATE = {
    "llamacpp": ("backend.batched=false", lambda s: s["llama_n_eval"] / s["llama_t_eval_ms"] * 1000),
    "mlx": ("backend.batching=serial", lambda s: s["mlx_generation_tps"]),
}


def run(overrides: list[str]):
    with tempfile.TemporaryDirectory() as tmp:
        outcome = run_benchmark(compose_config("progress=false", "report=false", *overrides), Path(tmp))
        workload = json.loads((Path(tmp) / "workload.json").read_text())
        return outcome.summary.to_dict(), load_requests(Path(tmp)), workload


def bare_llama_loop(prompts: list[list[int]], n: int) -> list[tuple[float, float]]:
    """The same requests through a bare ``Llama.generate`` loop, with the same end-of-generation
    suppression the backend uses: (loop decode tok/s, llama.cpp's n_eval / t_eval) per prompt."""
    import llama_cpp
    import numpy as np

    from harness.config import ModelConfig
    from harness.run.model_store import resolve_model

    llm = llama_cpp.Llama(str(resolve_model(ModelConfig()).gguf_file), n_ctx=4096, verbose=False)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    eog = [t for t in range(llm.n_vocab()) if llama_cpp.llama_vocab_is_eog(vocab, t)]

    def suppress(_ids, scores):
        scores[eog] = -np.inf
        return scores

    out = []
    for ids in prompts:
        llm.reset()
        llama_cpp.llama_perf_context_reset(llm.ctx)
        stamps = []
        for _ in llm.generate(
            ids,
            reset=True,
            temp=0.0,
            top_k=1,
            min_p=0.0,
            repeat_penalty=1.0,
            logits_processor=llama_cpp.LogitsProcessorList([suppress]),
        ):
            stamps.append(time.perf_counter())
            if len(stamps) == n:
                break
        perf = llama_cpp.llama_perf_context(llm.ctx)
        out.append(((n - 1) / (stamps[-1] - stamps[0]), perf.n_eval / perf.t_eval_ms * 1000))
    llm.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("backend", choices=sorted(ENGINE_RATE))
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--input-len", type=int, default=64)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--concurrency", default="1,4")
    parser.add_argument("--batched-option", default=None, help="the override that batches, for the throughput table")
    parser.add_argument("overrides", nargs="*", help="more config overrides, e.g. memory.sample_interval_s=0.2")
    args = parser.parse_args()
    serial_option, engine_rate = ENGINE_RATE[args.backend]
    common = [
        f"backend={args.backend}",
        f"model={args.model}",
        "workload=synthetic",
        f"workload.num_requests={args.requests}",
        f"workload.input_len={args.input_len}",
        f"workload.output_len={args.output_len}",
        *args.overrides,
    ]

    _, df, workload = run(common + [serial_option, "workload.concurrency=1"])
    stats = df.engine_stats.map(json.loads)
    harness = df.decode_tps.tolist()
    engine = [engine_rate(s) for s in stats]
    ratios = [h / e for h, e in zip(harness, engine)]
    print(
        f"{args.backend} on {args.model}: {args.requests} requests, {args.input_len} in / {args.output_len} out, concurrency 1"
    )
    print(
        f"  harness decode tok/s per request: median {statistics.median(harness):.1f} ({min(harness):.1f}-{max(harness):.1f})"
    )
    print(
        f"  engine's own decode tok/s:        median {statistics.median(engine):.1f} ({min(engine):.1f}-{max(engine):.1f})"
    )
    print(f"  ratio harness / engine:           median {statistics.median(ratios):.3f}, min {min(ratios):.3f}")
    if args.backend == "llamacpp":
        prompts = [s["turns"][0]["prompt_token_ids"] for s in workload["sessions"]]
        bare = bare_llama_loop(prompts, args.output_len)
        print(
            f"  bare Llama.generate loop, same prompts: median {statistics.median(b for b, _ in bare):.1f} tok/s, "
            f"ratio to llama.cpp's counters median {statistics.median(b / e for b, e in bare):.3f} "
            "(what llama-cpp-python's Python sampling path costs without any harness)"
        )

    batched = (
        args.batched_option or {"llamacpp": "backend.batched=true", "mlx": "backend.batching=continuous"}[args.backend]
    )
    print("  aggregate output tok/s (Σ n_out / T):")
    for label, option in (("one at a time", serial_option), ("batched", batched)):
        cells = []
        for c in args.concurrency.split(","):
            summary, _, _ = run(common + [option, f"workload.concurrency={c}"])
            cells.append(f"c={c}: {summary['throughput']['output_tokens_per_s']:.1f}")
        print(f"    {label:14s} ({option}): " + ", ".join(cells))


if __name__ == "__main__":
    main()
