"""Structured output (issue 26): the same prompts with and without a JSON schema, per engine that
runs here, run as a user runs the harness (``workload=structured``, conf/workload/structured.yaml):
output tokens/s, TTFT p50, mean output tokens and the share of valid replies.

    .venv/bin/python benchmarks/structured_output.py                          # llama.cpp, llama-server, vLLM
    .venv/bin/python benchmarks/structured_output.py --engines llamacpp --requests 32 --concurrency 4

The free arm is the same workload with ``workload.response_format=null`` (same prompts, same
maximum output, no constraint: its replies are not checked). Each arm is one ``python -m harness``
run, so each loads its engine (load time is not in the figures). Figures depend on the machine:
rerun on a quiet one.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any, Optional

from harness_runs import read_summary, run_harness  # beside this script

REPO = Path(__file__).resolve().parent.parent

ENGINES = {
    "llamacpp": ["backend=llamacpp", "backend.n_ctx=1024"],
    "llama-server": ["backend=llamacpp", "backend.mode=server", "backend.server=llama-server", "backend.n_ctx=1024"],
    "vllm": ["backend=vllm", "backend.max_model_len=1024", "backend.cpu_kvcache_space_gib=1"],
}
ARMS = {"free": ["workload.response_format=null"], "json_schema": []}


def row(engine: str, arm: str, s: dict[str, Any]) -> dict[str, Any]:
    structured = s.get("structured") or {}
    return {
        "engine": engine,
        "arm": arm,
        "requests": s["requests"]["completed"],
        "output_tok_s": s["throughput"].get("output_tokens_per_s"),
        "ttft_p50_ms": (s["latency"].get("ttft_s") or {}).get("p50", 0) * 1000,
        "tpot_p50_ms": ((s["latency"].get("tpot_s") or {}).get("p50") or 0) * 1000,
        "output_tokens_mean": s["tokens"].get("output_mean"),
        "valid": f"{structured['valid']}/{structured['checked']}" if structured else "–",
    }


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--engines", default=",".join(ENGINES), help=f"comma-separated: {', '.join(ENGINES)}")
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--requests", type=int, default=16)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--output-len", type=int, default=96)
    p.add_argument("--out", type=Path, default=None, help="where the run folders go (default: a temporary folder)")
    a = p.parse_args(argv)
    out = a.out or Path(tempfile.mkdtemp(prefix="structured-"))
    rows = []
    for engine in a.engines.split(","):
        for arm, extra in ARMS.items():
            args = [
                *ENGINES[engine],
                f"model={a.model}",
                "workload=structured",
                f"workload.num_requests={a.requests}",
                f"workload.concurrency={a.concurrency}",
                f"workload.output_len={a.output_len}",
                *extra,
            ]
            found = run_harness(args, out / engine / arm, exit_on_failure=False)
            s = read_summary(found[-1]) if found else None
            if s is not None:
                rows.append(row(engine, arm, s))
    if not rows:
        return 1
    cols = list(rows[0])
    print("\n| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(f"{v:.1f}" if isinstance(v, float) else str(v) for v in r.values()) + " |")
    print(f"\nrun folders: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
