"""JSON mode (response_format {"type": "json_object"}) against free text, per engine: the share of valid replies and the speed

The same prompts twice per engine, each arm one ``python -m harness`` run of
``workload=structured`` (conf/workload/structured.yaml: each prompt asks for a JSON object):
**JSON mode** (``workload.response_format.type=json_object``: every engine constrains decoding to
the grammar of any JSON object — vLLM's ``json_object`` structured output, llama.cpp's GBNF grammar
of an object, llama-server's ``response_format`` passed through — and a reply is valid when it
parses as a JSON object) and **free text** (``workload.response_format=null``: same prompts, same
maximum output, no constraint). The free arm's replies are checked too, after the run, with the
same rule (core/structured.py ``check_reply``), so the table says how often the model writes a
JSON object unasked for.

Speed: output tokens/s over the run (Σ output tokens / T), TPOT p50 (decode time per token, first
excluded), TTFT p50 and the mean reply length; "× free" is JSON mode's output tokens/s and TPOT
over the free arm's. A reply cut at the output limit is not a whole object: it counts as invalid.
Each arm loads its engine (load time is not in the figures); ``ENGINE:json`` runs JSON mode
only, one load (vLLM takes minutes to start on a CPU). The last command below wrote
docs/measurements/json-mode.md (PAGE), vLLM in JSON mode only. Figures depend on the machine and
what else runs on it: rerun on a quiet one, and compare arms of one engine, run one after the other.

    .venv/bin/python benchmarks/json_mode.py                          # llama.cpp, llama-server, vLLM
    .venv/bin/python benchmarks/json_mode.py --engines llamacpp --requests 16 --concurrency 2
    .venv/bin/python benchmarks/json_mode.py --engines llamacpp,llama-server,vllm:json --requests 8 --page PAGE
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any, Optional

import pandas as pd
from harness_runs import read_summary, run_harness  # beside this script
from measurement_page import add_page_option, recording

from core.structured import check_reply

ENGINES = {
    "llamacpp": ["backend=llamacpp", "backend.n_ctx=1024"],
    "llama-server": ["backend=llamacpp", "backend.mode=server", "backend.server=llama-server", "backend.n_ctx=1024"],
    "vllm": ["backend=vllm", "backend.max_model_len=1024", "backend.cpu_kvcache_space_gib=1"],
}
ARMS = {"free text": ["workload.response_format=null"], "JSON mode": ["workload.response_format.type=json_object"]}
JSON_MODE = {"type": "json_object"}


def valid_share(run_dir: Path) -> tuple[int, int]:
    """(valid, checked) of a run's completed replies, each checked as JSON mode checks it."""
    df = pd.read_parquet(run_dir / "requests.parquet")
    ok = df[df["error"].isna()]
    valid = sum(
        bool(check_reply(text, None, JSON_MODE, None, None, finish).valid)
        for text, finish in zip(ok["output_text"], ok["finish_reason"])
    )
    return valid, len(ok)


def row(engine: str, arm: str, s: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    valid, checked = valid_share(run_dir)
    structured = s.get("structured") or {}
    if structured:  # the run's own check (JSON mode) must agree with the one here
        assert structured["valid"] == valid, (structured, valid)
    return {
        "engine": engine,
        "arm": arm,
        "requests": s["requests"]["completed"],
        "valid JSON objects": f"{valid}/{checked} ({valid / checked:.0%})" if checked else "–",
        "output tok/s": s["throughput"].get("output_tokens_per_s"),
        "TPOT p50 ms": ((s["latency"].get("tpot_s") or {}).get("p50") or 0) * 1000,
        "TTFT p50 ms": ((s["latency"].get("ttft_s") or {}).get("p50") or 0) * 1000,
        "output tokens (mean)": s["tokens"].get("output_mean"),
    }


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--engines",
        default=",".join(ENGINES),
        help=f"comma-separated: {', '.join(ENGINES)}; ENGINE:json runs JSON mode only (no free-text arm)",
    )
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--requests", type=int, default=16)
    p.add_argument("--concurrency", type=int, default=2)
    p.add_argument("--output-len", type=int, default=96)
    p.add_argument("--out", type=Path, default=None, help="where the run folders go (default: a temporary folder)")
    add_page_option(p)
    a = p.parse_args(argv)
    out = a.out or Path(tempfile.mkdtemp(prefix="json-mode-"))
    with recording(a.page, __doc__):
        rows = []
        for spec in a.engines.split(","):
            engine, _, only = spec.partition(":")
            if engine not in ENGINES or only not in ("", "json"):
                p.error(f"--engines: {spec!r} is not one of {', '.join(ENGINES)} (with :json at most)")
            for arm, extra in ARMS.items():
                if only == "json" and arm != "JSON mode":
                    continue
                args = [
                    *ENGINES[engine],
                    f"model={a.model}",
                    "workload=structured",
                    f"workload.num_requests={a.requests}",
                    f"workload.concurrency={a.concurrency}",
                    f"workload.output_len={a.output_len}",
                    *extra,
                ]
                found = run_harness(args, out / engine / arm.replace(" ", "-"), exit_on_failure=False)
                if found:
                    rows.append(row(engine, arm, read_summary(found[-1]), found[-1]))
        if not rows:
            return 1
        for r in rows:  # JSON mode against the free arm of its engine
            free = next((f for f in rows if f["engine"] == r["engine"] and f["arm"] == "free text"), None)
            speed, tpot = r["output tok/s"], r["TPOT p50 ms"]
            r["tok/s × free"] = speed / free["output tok/s"] if free and speed and free["output tok/s"] else None
            r["TPOT × free"] = tpot / free["TPOT p50 ms"] if free and tpot and free["TPOT p50 ms"] else None
        cols = list(rows[0])
        print(
            f"\n{a.requests} requests a run, {a.concurrency} in flight, at most {a.output_len} output tokens, "
            f"model {a.model}, prompts of workload=structured\n"
        )
        print("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
        for r in rows:
            cells = [f"{v:.2f}" if isinstance(v, float) else ("–" if v is None else str(v)) for v in r.values()]
            print("| " + " | ".join(cells) + " |")
        print(f"\nrun folders: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
