"""Building a workload's plan before the run: microseconds per request, and the plan's sha256.

Every run builds its plan (rendered prompts of exact token lengths) before its first request; a
timed run of an hour at a high rate plans millions. This script builds synthetic plans with the
store model's tokenizer (as a run does: core.tokenizer.load_tokenizer) at each prompt length and
prints, per length: the build time per request, the time to hash the plan and stream
workload.json (per request), and the first 12 hex digits of the plan's sha256, which must not
change when the builder gets faster (the same seed gives the same prompts).

    .venv/bin/python benchmarks/plan_build.py [--requests 5000] [--input-len 32 128 512] [--seed 0]

Run it from another checkout (``git worktree add /tmp/before HEAD~1``, then
``.venv/bin/python /tmp/before/benchmarks/plan_build.py``) for a before/after: it imports the
checkout it sits in.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.tokenizer import load_tokenizer
from harness.config import ModelConfig
from harness.run.model_store import resolve_model
from workloads.corpus import TokenizedCorpus
from workloads.prompts import PromptRenderer
from workloads.synthetic import SyntheticConfig, SyntheticWorkload


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=5000)
    p.add_argument("--input-len", type=int, nargs="+", default=[32, 128, 512])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model", default="smollm2-135m")
    args = p.parse_args()
    tokenizer = load_tokenizer(resolve_model(ModelConfig(name=args.model)).hf_dir)
    renderer, corpus = PromptRenderer(tokenizer), TokenizedCorpus(tokenizer)
    print(
        f"synthetic plans of {args.requests} requests, model {args.model}, seed {args.seed}, "
        f"checkout {Path(__file__).resolve().parent.parent}"
    )
    print("| input_len | build (µs/request) | hash + workload.json (µs/request) | sha256 |")
    print("|---|---|---|---|")
    for input_len in args.input_len:
        cfg = SyntheticConfig(
            num_requests=args.requests,
            input_len=input_len,
            output_len=64,
            input_len_dist="uniform",
            input_len_spread=0.25,
        )
        t0 = time.perf_counter()
        plan = SyntheticWorkload(cfg).build(renderer, corpus, args.seed)
        t1 = time.perf_counter()
        hashes = plan.hashes()
        for _chunk in plan.json_chunks(hashes):
            pass
        t2 = time.perf_counter()
        n = plan.num_requests
        print(f"| {input_len} | {(t1 - t0) / n * 1e6:.0f} | {(t2 - t1) / n * 1e6:.0f} | {hashes['sha256'][:12]} |")


if __name__ == "__main__":
    main()
