"""What a built plan holds in memory: bytes a request, of Python objects and of resident memory.

A run builds its whole plan before the first request and keeps it to the end; beyond
workloads.session_file.SPILL_AT sessions it keeps it on disk, and in memory only a few numbers a
session. Each count is built in a process of its own (RSS is the process's): a synthetic plan
with the store model's tokenizer, as a run builds it, its hashes and workload.json streamed once;
printed per count: tracemalloc's current and peak over the build, (in another process:
tracemalloc's tables take memory too) the growth of RSS, and the plan file's size, each in bytes
a request.

    .venv/bin/python benchmarks/plan_memory.py [--requests 10000 40000 80000] [--input-len 32]
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import tracemalloc
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent


def measure(n: int, input_len: int, model: str, trace: bool) -> dict[str, float]:
    sys.path.insert(0, str(ROOT))
    from core.tokenizer import load_tokenizer
    from harness.config import ModelConfig
    from harness.run.model_store import resolve_model
    from workloads.corpus import TokenizedCorpus
    from workloads.prompts import PromptRenderer
    from workloads.session_file import SessionFile
    from workloads.synthetic import SyntheticConfig, SyntheticWorkload

    renderer = PromptRenderer(load_tokenizer(resolve_model(ModelConfig(name=model)).hf_dir))
    corpus = TokenizedCorpus(renderer.tokenizer)
    SyntheticWorkload(SyntheticConfig(num_requests=8, input_len=input_len)).build(renderer, corpus, 1)  # fixed costs
    gc.collect()
    rss0 = psutil.Process().memory_info().rss
    if trace:
        tracemalloc.start()
    plan = SyntheticWorkload(SyntheticConfig(num_requests=n, input_len=input_len, output_len=64)).build(
        renderer, corpus, 0
    )
    for _chunk in plan.json_chunks(plan.hashes()):
        pass
    if trace:  # tracemalloc's own tables take memory too: RSS is measured in another process
        current, peak = tracemalloc.get_traced_memory()
        return {"traced_b": current / n, "traced_peak_b": peak / n}
    gc.collect()
    disk = plan.sessions.disk_bytes if isinstance(plan.sessions, SessionFile) else 0
    return {"rss_b": (psutil.Process().memory_info().rss - rss0) / n, "disk_b": disk / n}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, nargs="+", default=[10000, 40000, 80000])
    p.add_argument("--input-len", type=int, default=32)
    p.add_argument("--model", default="tiny-random")
    p.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a child: measure this count, print JSON
    p.add_argument("--trace", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.input_len, args.model, args.trace)))
        return
    print(f"synthetic plans, input_len {args.input_len}, model {args.model}: bytes a request")
    print("| requests | Python objects (tracemalloc) | peak while building | RSS growth | on disk |")
    print("|---|---|---|---|---|")
    for n in args.requests:
        r: dict[str, float] = {}
        for trace in ([], ["--trace"]):
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--one",
                    str(n),
                    "--input-len",
                    str(args.input_len),
                    "--model",
                    args.model,
                    *trace,
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            r.update(json.loads(out.stdout.strip().splitlines()[-1]))
        print(
            f"| {n:,} | {r['traced_b']:,.0f} | {r['traced_peak_b']:,.0f} | {r['rss_b']:,.0f} | {r['disk_b']:,.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
