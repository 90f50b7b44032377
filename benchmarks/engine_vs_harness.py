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
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from conftest import make_config  # noqa: E402  (composes configs exactly as the CLI does)

from harness.results import load_requests  # noqa: E402
from harness.runner import run_benchmark  # noqa: E402

ENGINE_RATE = {
    "llamacpp": ("backend.batched=false", lambda s: s["llama_n_eval"] / s["llama_t_eval_ms"] * 1000),
    "mlx": ("backend.batching=serial", lambda s: s["mlx_generation_tps"]),
}


def run(overrides: list[str]):
    with tempfile.TemporaryDirectory() as tmp:
        outcome = run_benchmark(make_config(*overrides), Path(tmp))
        return outcome.summary, load_requests(Path(tmp))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("backend", choices=sorted(ENGINE_RATE))
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--input-len", type=int, default=64)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--concurrency", default="1,4")
    parser.add_argument("--batched-option", default=None, help="the override that batches, for the throughput table")
    args = parser.parse_args()
    serial_option, engine_rate = ENGINE_RATE[args.backend]
    common = [f"backend={args.backend}", f"model={args.model}", "workload=synthetic",
              f"workload.num_requests={args.requests}", f"workload.input_len={args.input_len}",
              f"workload.output_len={args.output_len}"]

    _, df = run(common + [serial_option, "workload.concurrency=1"])
    stats = df.engine_stats.map(json.loads)
    harness = df.decode_tps.tolist()
    engine = [engine_rate(s) for s in stats]
    ratios = [h / e for h, e in zip(harness, engine)]
    print(f"{args.backend} on {args.model}: {args.requests} requests, {args.input_len} in / {args.output_len} out, concurrency 1")
    print(f"  harness decode tok/s per request: median {statistics.median(harness):.1f} ({min(harness):.1f}-{max(harness):.1f})")
    print(f"  engine's own decode tok/s:        median {statistics.median(engine):.1f} ({min(engine):.1f}-{max(engine):.1f})")
    print(f"  ratio harness / engine:           median {statistics.median(ratios):.3f}, min {min(ratios):.3f}")

    batched = args.batched_option or {"llamacpp": "backend.batched=true", "mlx": "backend.batching=continuous"}[args.backend]
    print("  aggregate output tok/s (Σ n_out / T):")
    for label, option in (("one at a time", serial_option), ("batched", batched)):
        cells = []
        for c in args.concurrency.split(","):
            summary, _ = run(common + [option, f"workload.concurrency={c}"])
            cells.append(f"c={c}: {summary['throughput']['output_tokens_per_s']:.1f}")
        print(f"    {label:14s} ({option}): " + ", ".join(cells))


if __name__ == "__main__":
    main()
