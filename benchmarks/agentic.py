"""Agent jobs (issue 26, item 1) run as a user runs the harness: ``workload=agentic`` on vLLM
in-process with prefix caching on and off, and on llama.cpp in-process (with its session cache
on): job completion time p50 / p90, the critical path, and the cached share per depth.
``--screenshots DIR``: each run's report.html opened in headless Chromium (tests/browser.py)
and saved as DIR/report-ENGINE.png.

    .venv/bin/python benchmarks/agentic.py                     # small: 3 jobs, smollm2-135m
    .venv/bin/python benchmarks/agentic.py --jobs 6 --turns 6 --engines vllm-cache llamacpp
    .venv/bin/python benchmarks/agentic.py --engines llamacpp --screenshots /tmp/agentic-shots

Every engine gets the same prompt token ids (the plan's sha256 is printed per run). vLLM on a
CPU uses 128-token cache blocks by default; the script asks for --vllm-block-size (32: its CPU
attention needs a multiple of 32) so the short prompts of a small run can hit. Figures depend
on the machine: rerun on a quiet one.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from harness_runs import read_summary, run_harness  # beside this script

REPO = Path(__file__).resolve().parent.parent

ENGINES = {
    "vllm-cache": ["backend=vllm", "backend.enable_prefix_caching=true"],
    "vllm-nocache": ["backend=vllm", "backend.enable_prefix_caching=false"],
    "llamacpp": ["backend=llamacpp", "backend.keep_session_cache=true"],
}


def row(name: str, s: dict[str, Any]) -> dict[str, Any]:
    jobs = s.get("jobs") or {}
    jct, path = jobs.get("job_s") or {}, jobs.get("critical_path_share") or {}
    depth = {d: v.get("cached_share") for d, v in (jobs.get("by_depth") or {}).items()}
    return {
        "engine": name,
        "jobs": f"{jobs.get('completed')}/{jobs.get('count')}",
        "jct_p50_s": jct.get("p50"),
        "jct_p90_s": jct.get("p90"),
        "critical_path_requests": (jobs.get("critical_path_requests") or {}).get("mean"),
        "critical_path_share": path.get("mean"),
        "cached_share_by_depth": depth,
        "ttft_p50_ms": ((s.get("latency") or {}).get("ttft_s") or {}).get("p50", 0) * 1000,
        "workload_sha256": (s.get("workload") or {}).get("sha256", "")[:12],
        "run": s["dir"],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--engines", nargs="+", default=list(ENGINES), choices=list(ENGINES))
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--jobs", type=int, default=3)
    p.add_argument("--turns", type=int, default=4)
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--output-len", type=int, default=8)
    p.add_argument("--vllm-block-size", type=int, default=32)
    p.add_argument("--out", default=str(REPO / "results" / "bench-agentic"))
    p.add_argument("--screenshots", type=Path, default=None, metavar="DIR", help="save each report as a PNG here")
    a = p.parse_args()
    workload = [
        "workload=agentic",
        f"workload.jobs={a.jobs}",
        f"workload.turns={a.turns}",
        f"workload.concurrency={a.concurrency}",
        f"workload.output_len={a.output_len}",
        "workload.system_prompt_len=64",
        "workload.task_len=32",
        "workload.tool_result_len=32",
        "workload.sub_task_len=16",
        "workload.fanout=2",
        "workload.depth=1",
        "workload.sub_turns=2",
        "workload.tool_gap_s=0.05",
        "slo.job_s=60",
        "sweep.reset_prefix_cache=true",
    ]
    rows = []
    for name in a.engines:
        extra = list(ENGINES[name])
        if name.startswith("vllm"):
            extra.append(f"+backend.engine_args.block_size={a.vllm_block_size}")
        summary = read_summary(
            run_harness([*extra, f"model={a.model}", *workload], Path(a.out) / name, report=True)[-1]
        )
        rows.append(row(name, summary))
        print(json.dumps(rows[-1], indent=None, default=str), flush=True)
    print("\nengine        jobs  JCT p50 s  JCT p90 s  crit.path req  crit.path %  TTFT p50 ms  cached share by depth")
    for r in rows:
        depth = ", ".join(
            f"{d}: {'–' if v is None else f'{v * 100:.0f}%'}" for d, v in r["cached_share_by_depth"].items()
        )
        print(
            f"{r['engine']:<13} {r['jobs']:<5} {r['jct_p50_s'] or 0:>9.2f} {r['jct_p90_s'] or 0:>10.2f} "
            f"{r['critical_path_requests'] or 0:>14.1f} {(r['critical_path_share'] or 0) * 100:>12.0f} "
            f"{r['ttft_p50_ms']:>12.1f}  {depth}   (workload {r['workload_sha256']})"
        )
    if a.screenshots is not None:
        screenshots(rows, a.screenshots)


def screenshots(rows: list[dict[str, Any]], out: Path) -> None:
    sys.path.insert(0, str(REPO / "tests"))
    from browser import Chromium, chromium_binary

    binary = chromium_binary()
    if binary is None:
        sys.exit("chromium is not installed: the reports are written, the screenshots are not")
    out.mkdir(parents=True, exist_ok=True)
    browser = Chromium(binary)
    try:
        for r in rows:
            page = browser.open(Path(r["run"]) / "report.html", screenshot=out / f"report-{r['engine']}.png")
            print(f"screenshot: {page.screenshot} ({len(page.plots)} plots, errors: {page.errors or 'none'})")
    finally:
        browser.close()


if __name__ == "__main__":
    main()
