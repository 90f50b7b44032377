"""LoRA traffic (issue 26): throughput and TTFT with 1, 2 and 4 adapters against the base model
alone, per engine that serves adapters here, run as a user runs the harness.

Each arm is one run of ``workload=synthetic`` (``--requests`` requests, ``--concurrency`` in
flight, greedy, exact lengths) on ``--model`` (smollm2-135m): ``base`` without
``workload.lora``, then ``lora1`` / ``lora2`` / ``lora4`` with that many store adapters
(``store:adapter-i``, rank 8 on q_proj and v_proj) sharing the traffic equally. Engines:
transformers in-process (serial: one adapter per forward pass), vLLM in-process (punica
kernels mix adapters in a batch), llama.cpp in-process (one sequence at a time, the adapter set
on the context per request) and llama.cpp's llama-server (adapters per request).

    .venv/bin/python benchmarks/lora.py                              # every engine, ~16 requests per arm
    .venv/bin/python benchmarks/lora.py --engines vllm --requests 32

Figures depend on the machine: rerun on a quiet one.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

ENGINES: dict[str, list[str]] = {
    "transformers": ["backend=transformers", "backend.batching=serial"],
    "vllm": ["backend=vllm", "backend.max_model_len=1024", "backend.cpu_kvcache_space_gib=1"],
    "llamacpp": ["backend=llamacpp", "backend.n_ctx=1024"],
    "llama-server": ["backend=llamacpp", "backend.mode=server", "backend.server=llama-server"],
}
ARMS = {"base": 0, "lora1": 1, "lora2": 2, "lora4": 4}


def adapters_override(n: int) -> list[str]:
    if n == 0:
        return []
    entries = ", ".join(f'{{name: a{i}, path: "store:adapter-{i}"}}' for i in range(n))
    return [f"workload.lora.adapters=[{entries}]"]


def run_arm(engine: str, arm: str, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    overrides = [
        *ENGINES[engine],
        f"model={args.model}",
        "workload=synthetic",
        f"workload.num_requests={args.requests}",
        f"workload.concurrency={args.concurrency}",
        f"workload.input_len={args.input_len}",
        f"workload.output_len={args.output_len}",
        f"workload.warmup_requests={max(ARMS[arm], 1)}",
        *adapters_override(ARMS[arm]),
    ]
    run_dir = out / engine / arm
    cmd = [sys.executable, "-m", "harness", *overrides, "progress=false", "report=false", f"hydra.run.dir={run_dir}"]
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    took = time.perf_counter() - t
    if proc.returncode != 0:
        line = (proc.stderr.strip().splitlines() or ["?"])[-1]
        print(f"  {engine:13s} {arm:6s} FAILED ({took:.0f} s): {line}", flush=True)
        return {"engine": engine, "arm": arm, "error": line}
    s = json.loads((run_dir / "summary.json").read_text())
    row = {
        "engine": engine,
        "arm": arm,
        "ok": s["requests"]["completed"],
        "failed": s["requests"]["failed"],
        "output_tok_s": s["throughput"].get("output_tokens_per_s"),
        "ttft_p50_ms": (s["latency"].get("ttft_s") or {}).get("p50", 0) * 1000,
        "ttft_p90_ms": (s["latency"].get("ttft_s") or {}).get("p90", 0) * 1000,
        "tpot_p50_ms": (s["latency"].get("tpot_s") or {}).get("p50", 0) * 1000,
        "adapters": {k: v["completed"] for k, v in (s.get("adapters") or {}).items()},
        "wall_s": round(took, 1),
    }
    print(
        f"  {engine:13s} {arm:6s} {row['ok']:3d} ok · {row['output_tok_s']:7.1f} out tok/s · TTFT p50 "
        f"{row['ttft_p50_ms']:7.1f} ms (p90 {row['ttft_p90_ms']:.1f}) · TPOT p50 {row['tpot_p50_ms']:6.1f} ms · "
        f"{row['adapters'] or ''} · {took:.0f} s",
        flush=True,
    )
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--engines", default=",".join(ENGINES), help=f"comma-separated, of {', '.join(ENGINES)}")
    p.add_argument("--arms", default=",".join(ARMS))
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--requests", type=int, default=16)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--input-len", type=int, default=128)
    p.add_argument("--output-len", type=int, default=32)
    p.add_argument("--out", type=Path, default=None, help="where the run folders go (default: a temporary folder)")
    p.add_argument("--json", type=Path, default=None, help="write the rows here")
    args = p.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="lora-bench-"))
    rows = []
    for engine in args.engines.split(","):
        for arm in args.arms.split(","):
            rows.append(run_arm(engine, arm, args, out))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    print(f"run folders: {out}")


if __name__ == "__main__":
    main()
