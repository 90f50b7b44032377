"""Figures of the data workloads (issue 13), run as a user runs the harness:

1. sharegpt — a ShareGPT multi-turn run on vLLM and on llama.cpp: the cached share per turn.
2. trace    — a Mooncake trace replay on vLLM: the error of each request's actual send time
              against its (scaled) timestamp, p50 / p99, and the cached tokens.
3. target   — workload=shared_prefix at target_cache_hit 0.0, 0.5, 0.9 on vLLM with prefix
              caching (one engine, a three-point sweep): target, theoretical and measured rate.

    .venv/bin/python benchmarks/data_workloads.py                       # all three, small, generated data
    .venv/bin/python benchmarks/data_workloads.py --parts target
    .venv/bin/python benchmarks/data_workloads.py --sharegpt ShareGPT_V3_unfiltered_cleaned_split.json \
        --mooncake conversation_trace.jsonl --requests 64 --block-size 512 --model MODEL

Without --sharegpt / --mooncake it writes small files of the same formats from the corpus
(ShareGPT-like conversations; a Mooncake-like trace whose requests extend each other's hash
prefixes). vLLM on a CPU uses 128-token cache blocks by default; the script asks for
--vllm-block-size (32) so short prompts can hit. Figures depend on the machine: rerun on a
quiet one.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

from harness_runs import run_harness  # beside this script

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def harness(args: list[str], out: Path) -> list[Path]:
    """Run ``python -m harness`` (a sweep with -m); the run folders it wrote."""
    return sorted(run_harness(args, out))


def summary(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "summary.json").read_text())


# --- generated data, when no real file is given ---------------------------------------------


def sentences(n: int, rng: random.Random) -> list[str]:
    from workloads.corpus import corpus_text

    parts = [s.strip().replace("\n", " ") for s in corpus_text().split(".") if len(s.split()) > 6]
    return [rng.choice(parts) + "." for _ in range(n)]


def write_sharegpt(path: Path, conversations: int, turns: int, seed: int = 0) -> Path:
    rng = random.Random(seed)
    records = []
    for i in range(conversations):
        msgs = []
        for _ in range(turns):
            msgs.append({"from": "human", "value": "Explain this: " + " ".join(sentences(2, rng))})
            msgs.append({"from": "gpt", "value": " ".join(sentences(2, rng))})
        records.append({"id": f"gen{i}", "conversations": msgs})
    path.write_text(json.dumps(records))
    return path


def write_mooncake(path: Path, requests: int, block_size: int, mean_gap_ms: float, seed: int = 0) -> Path:
    """Chats as a trace: each request extends an earlier one's hash ids (or starts a new one)."""
    rng = random.Random(seed)
    chains: list[list[int]] = []
    next_id, t, lines = 0, 0.0, []
    for _ in range(requests):
        if chains and rng.random() < 0.6:
            chain = rng.choice(chains)
        else:
            chain = []
            chains.append(chain)
        for _ in range(rng.randint(1, 2)):
            chain.append(next_id)
            next_id += 1
        n_in = len(chain) * block_size - rng.randint(0, block_size // 2)
        lines.append({"timestamp": int(t), "input_length": n_in, "output_length": 8, "hash_ids": list(chain)})
        t += rng.expovariate(1.0 / mean_gap_ms)
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    return path


# --- the three figures -------------------------------------------------------------------


def sharegpt_part(a: argparse.Namespace, out: Path) -> dict[str, Any]:
    data = Path(a.sharegpt) if a.sharegpt else write_sharegpt(out / "sharegpt.json", max(a.sessions, 8), a.turns)
    figures = {}
    for backend, extra in (
        ("vllm", vllm_args(a)),
        ("llamacpp", ["backend.batched=true", "backend.keep_session_cache=true"]),
    ):
        runs = harness(
            [
                f"backend={backend}",
                f"model={a.model}",
                "workload=sharegpt",
                f"workload.path={data}",
                "workload.multi_turn=true",
                f"workload.sessions={a.sessions}",
                f"workload.max_turns={a.turns}",
                "workload.output_len_source=config",
                f"workload.output_len={a.output_len}",
                "workload.max_prompt_len=1500",
                "workload.concurrency=2",
                *extra,
            ],
            out / f"sharegpt-{backend}",
        )
        s = summary(runs[0])
        rows = [
            {
                "turn": t["turn"],
                "requests": t["requests"],
                "prompt_tokens_mean": round(t["prompt_tokens_mean"], 1),
                "cached_share": None if t["cached_share"] is None else round(t["cached_share"], 3),
                "ttft_mean_ms": round(t["ttft_mean_s"] * 1000, 1),
            }
            for t in s["per_turn"]
        ]
        figures[backend] = {"run": str(runs[0]), "cached_share": s["prefix_cache"]["cached_share"], "per_turn": rows}
        print(f"  {backend}: cached share {_pct(s['prefix_cache']['cached_share'])} overall")
        for r in rows:
            print(
                f"    turn {r['turn']}: {r['requests']} requests · {r['prompt_tokens_mean']} prompt tokens · "
                f"cached {_pct(r['cached_share'])} · TTFT {r['ttft_mean_ms']} ms"
            )
    return figures


def trace_part(a: argparse.Namespace, out: Path) -> dict[str, Any]:
    import pandas as pd

    data = Path(a.mooncake) if a.mooncake else write_mooncake(out / "mooncake.jsonl", a.requests, a.block_size, 600.0)
    runs = harness(
        [
            f"backend={a.trace_backend}",
            f"model={a.model}",
            "workload=trace",
            f"workload.path={data}",
            "workload.format=mooncake",
            f"workload.block_size={a.block_size}",
            f"workload.time_scale={a.time_scale}",
            f"workload.num_requests={a.requests}",
            "saturation.enabled=false",
            *(vllm_args(a) if a.trace_backend == "vllm" else []),
        ],
        out / "trace",
    )
    s = summary(runs[0])
    df = pd.read_parquet(runs[0] / "requests.parquet")
    err = (df.start_s - df.scheduled_s) * 1000
    figures = {
        "run": str(runs[0]),
        "requests": len(df),
        "trace_span_s": float(df.scheduled_s.max()),
        "send_error_ms": {
            "p50": round(float(err.quantile(0.5)), 2),
            "p99": round(float(err.quantile(0.99)), 2),
            "max": round(float(err.max()), 2),
        },
        "cached_tokens_total": s["prefix_cache"]["cached_tokens_total"],
        "cached_share": s["prefix_cache"]["cached_share"],
        "prompt_tokens_total": s["tokens"]["prompt_total"],
        "theoretical_cache_hit": s["workload"].get("theoretical_cache_hit"),
    }
    print(
        f"  {len(df)} requests over {figures['trace_span_s']:.1f} s of (scaled) trace · send time − timestamp: "
        f"p50 {figures['send_error_ms']['p50']} ms, p99 {figures['send_error_ms']['p99']} ms · cached "
        f"{figures['cached_tokens_total']} of {figures['prompt_tokens_total']} prompt tokens ({_pct(figures['cached_share'])}; "
        f"theoretical {_pct(figures['theoretical_cache_hit'])})"
    )
    return figures


def target_part(a: argparse.Namespace, out: Path) -> dict[str, Any]:
    runs = harness(
        [
            "-m",
            "backend=vllm",
            f"model={a.model}",
            "workload=shared_prefix",
            "workload.num_groups=2",
            f"workload.prompts_per_group={a.prompts_per_group}",
            f"workload.system_prompt_len={a.prompt_len - 32}",
            "workload.question_len=32",
            f"workload.output_len={a.output_len}",
            "workload.concurrency=1",
            "workload.target_cache_hit=0.0,0.5,0.9",
            *vllm_args(a),
        ],
        out / "target",
    )
    rows = []
    for run in runs:
        s = summary(run)
        wl = s["workload"]
        rows.append(
            {
                "target": wl.get("target_cache_hit"),
                "theoretical": wl.get("theoretical_cache_hit"),
                "measured": s["prefix_cache"]["cached_share"],
                "ttft_mean_ms": round(s["latency"]["ttft_s"]["mean"] * 1000, 1),
            }
        )
    rows.sort(key=lambda r: r["target"])
    for r in rows:
        print(
            f"  target {_pct(r['target'])} · theoretical {_pct(r['theoretical'])} · measured {_pct(r['measured'])} · "
            f"TTFT mean {r['ttft_mean_ms']} ms"
        )
    return {"points": rows}


def vllm_args(a: argparse.Namespace) -> list[str]:
    return ["backend.enable_prefix_caching=true", f"+backend.engine_args.block_size={a.vllm_block_size}"]


def _pct(v: Any) -> str:
    return "–" if v is None else f"{v * 100:.1f}%"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--parts", nargs="*", default=["sharegpt", "trace", "target"], choices=["sharegpt", "trace", "target"]
    )
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--out", default=None, help="folder for the runs and figures.json (default: a new one under /tmp)")
    p.add_argument("--sharegpt", default=None, help="a ShareGPT file (else a small generated one)")
    p.add_argument("--mooncake", default=None, help="a Mooncake trace (else a small generated one)")
    p.add_argument("--sessions", type=int, default=4)
    p.add_argument("--turns", type=int, default=3)
    p.add_argument("--output-len", type=int, default=8)
    p.add_argument("--requests", type=int, default=12, help="trace requests replayed")
    p.add_argument("--block-size", type=int, default=64, help="tokens per Mooncake hash id")
    p.add_argument("--time-scale", type=float, default=1.0)
    p.add_argument("--trace-backend", default="vllm")
    p.add_argument("--prompts-per-group", type=int, default=16)
    p.add_argument("--prompt-len", type=int, default=512, help="system + question tokens (shared_prefix)")
    p.add_argument("--vllm-block-size", type=int, default=32)
    a = p.parse_args()
    out = Path(a.out) if a.out else Path(f"/tmp/data-workloads-{time.strftime('%Y%m%d-%H%M%S')}")
    out.mkdir(parents=True, exist_ok=True)
    figures: dict[str, Any] = {}
    for part in a.parts:
        print(f"== {part}", flush=True)
        figures[part] = {"sharegpt": sharegpt_part, "trace": trace_part, "target": target_part}[part](a, out)
        (out / "figures.json").write_text(json.dumps(figures, indent=1))
    print(f"figures: {out / 'figures.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
