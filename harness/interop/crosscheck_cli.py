"""``python -m harness.crosscheck --url URL [--tools vllm,guidellm,aiperf]``: one server, several clients.

Runs the same closed-loop workload against one OpenAI-compatible server through the harness and
through each peer client that is installed (each in its own environment: harness/interop/peers.py
finds them; one that is not found is left out with the line that says how to give it), one
client after the other. Each peer's files are imported as a run folder (harness/formats/), and
``--out`` gets:

- ``harness/`` and one folder per peer (``vllm-bench/``, ``guidellm/``, ``aiperf/``): run folders,
  with the peers' own files under ``<tool>/raw/`` and their logs;
- ``crosscheck.html`` (harness/reports/crosscheck.py): TTFT, TPOT, ITL (per token and per chunk),
  E2E and throughput side by side, where the clients disagree and by how much, the definitions
  that explain it, and — on the reference server, whose schedule ``GET /reference/schedule``
  tells — each client's error against the truth; ``crosscheck.json``, the same as data;
- ``compare/compare.html``: the runs through ``python -m harness.compare`` (the harness's run the
  baseline).

The clients send the same shape of workload, not the same prompts: each makes its own random
ones (compare's warning about the workload says so). A small workload is the default: every peer
starts in 6 to 60 s on its own (vllm's module import is the slowest).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Optional

from core.errors import HarnessError
from harness.formats.definitions import HARNESS
from harness.formats.detect import read_results
from harness.formats.imported import write_run
from harness.interop import peers
from harness.reports import crosscheck
from harness.reports.compare.outputs import write_comparison
from harness.reports.run_report import write_report
from harness.results.store import is_run_dir, load_run
from harness.telemetry.environment import capture_environment

EXIT_BAD_INPUT = 2
REPO = Path(__file__).resolve().parents[2]  # this checkout: the harness runs from it


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m harness.crosscheck",
        description="Run one workload against one server through the harness and each installed peer "
        "client (vllm bench serve, GuideLLM, AIPerf); crosscheck.html shows their figures side by side.",
    )
    p.add_argument("--url", required=True, help="the server's root or API root, e.g. http://127.0.0.1:8000[/v1]")
    p.add_argument(
        "--tools",
        default="vllm,guidellm,aiperf",
        help="the peer clients, comma-separated: vllm, guidellm, aiperf (default: all three)",
    )
    p.add_argument("--vllm", default=None, help="a Python with vllm installed (vllm bench serve)")
    p.add_argument("--guidellm", default=None, help="the guidellm executable (its own virtual environment)")
    p.add_argument("--aiperf", default=None, help="the aiperf executable (its own virtual environment)")
    p.add_argument(
        "--model",
        default="smollm2-135m",
        help="the harness's model (conf/model/): its tokenizer makes the prompts (default: smollm2-135m)",
    )
    p.add_argument("--tokenizer", default=None, help="a tokenizer folder for the peers (default: the model's)")
    p.add_argument("--served-model", default=None, help="the model name sent (default: the first of /v1/models)")
    p.add_argument("--requests", type=int, default=16, help="requests per client (default: 16)")
    p.add_argument("--concurrency", type=int, default=2, help="requests in flight (default: 2)")
    p.add_argument("--input-len", type=int, default=32, help="prompt tokens (default: 32)")
    p.add_argument("--output-len", type=int, default=16, help="output tokens, exact (default: 16)")
    p.add_argument("--out", type=Path, default=None, help="output folder (default: results/crosscheck-<date>-<time>)")
    p.add_argument("--timeout-s", type=float, default=900.0, help="each client's time limit (default: 900)")
    p.add_argument(
        "--harness-overrides",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="more overrides for the harness's run, e.g. client.workers=1",
    )
    args = p.parse_args(argv)
    if min(args.requests, args.concurrency, args.input_len, args.output_len) < 1:
        p.error("--requests, --concurrency, --input-len and --output-len must be >= 1")
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    try:
        page = crosscheck_server(args)
    except (HarnessError, OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"crosscheck: {page}")
    return 0


def api_root(url: str) -> str:
    """``http://host:port`` from a root or an API root (``…/v1``)."""
    url = url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


def get_json(url: str, timeout_s: float = 10.0) -> Optional[Any]:
    """The JSON at ``url``, or None where there is none (404, not JSON, no answer)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return json.loads(response.read().decode())
    except (urllib.error.URLError, OSError, ValueError):
        return None


def served_model(root: str) -> str:
    models = get_json(root + "/v1/models")
    data = models.get("data") if isinstance(models, dict) else None
    if not data:
        raise HarnessError(f"{root}/v1/models does not answer with a model: is the server up at {root}?")
    return str(data[0].get("id"))


def schedule_truth(root: str, output_len: int) -> Optional[crosscheck.Truth]:
    """The reference server's schedule (``/reference/schedule``); None for any other server."""
    s = get_json(root + "/reference/schedule")
    if not isinstance(s, dict) or "ttft_ms" not in s:
        return None
    return crosscheck.Truth(
        ttft_s=float(s["ttft_ms"]) / 1e3,
        itl_s=float(s["itl_ms"]) / 1e3,
        output_tokens=output_len,
        chunk_tokens=int(s.get("chunk_tokens") or 1),
        role_chunk=s.get("role_chunk"),
        dialect=str(s.get("dialect") or "openai"),
    )


def tokenizer_dir(model: str) -> str:
    """The model store's tokenizer folder of a harness model (conf/model/<name>.yaml)."""
    from harness.config import ModelConfig
    from harness.run.model_store import resolve_model

    return str(resolve_model(ModelConfig(name=model)).hf_dir)


def run_harness(w: peers.Workload, model: str, run_dir: Path, overrides: Sequence[str], timeout_s: float) -> Path:
    """The harness's own run of the workload, as ``python -m harness`` (its log beside the run)."""
    argv = [
        sys.executable,
        "-m",
        "harness",
        "backend=openai",
        f"backend.url={w.url}/v1",
        f"backend.model_name={w.model}",
        f"model={model}",
        "workload=synthetic",
        f"workload.num_requests={w.requests}",
        f"workload.concurrency={w.concurrency}",
        f"workload.input_len={w.input_len}",
        f"workload.output_len={w.output_len}",
        "backend.ignore_eos=true",
        "progress=false",
        f"hydra.run.dir={run_dir}",
        *overrides,
    ]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    }
    log = run_dir.parent / "harness.log"
    with open(log, "w", encoding="utf-8") as f:
        try:
            proc = subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, env=env, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise HarnessError(f"the harness ran past {timeout_s:.0f} s (its log: {log})") from None
    if proc.returncode != 0 or not is_run_dir(run_dir):
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] or [""]
        raise HarnessError(f"the harness's run failed (exit {proc.returncode}): {tail[0][:300]} (its log: {log})")
    return run_dir


def crosscheck_server(args: argparse.Namespace) -> Path:
    root = api_root(args.url)
    model_name = args.served_model or served_model(root)
    tools = [peers.SHORT.get(t.strip()) for t in args.tools.split(",") if t.strip()]
    if None in tools:
        raise HarnessError(f"--tools takes vllm, guidellm and aiperf (got {args.tools!r})")
    out = args.out or Path("results") / f"crosscheck-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    if out.exists() and any(out.iterdir()):
        raise HarnessError(f"{out} is not empty: give a new --out")
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = args.tokenizer or tokenizer_dir(args.model)
    w = peers.Workload(root, model_name, tokenizer, args.requests, args.concurrency, args.input_len, args.output_len)
    truth = schedule_truth(root, args.output_len)
    context = crosscheck.Context(root, model_name, args.requests, args.concurrency, args.input_len, args.output_len)
    if truth is not None:
        print(f"the reference server: ttft {truth.ttft_s * 1e3:g} ms, itl {truth.itl_s * 1e3:g} ms (the truth)")

    print("harness: running", flush=True)
    measured = [
        crosscheck.Measured(
            HARNESS, load_run(run_harness(w, args.model, out / HARNESS, args.harness_overrides, args.timeout_s))
        )
    ]
    given = {peers.VLLM_BENCH: args.vllm, peers.GUIDELLM: args.guidellm, peers.AIPERF: args.aiperf}
    env = capture_environment()
    for tool in dict.fromkeys(t for t in tools if t is not None):
        peer, where = peers.find(tool, given.get(tool))
        if peer is None:
            print(f"skipped: {where}", flush=True)
            context.skipped.append(where)
            continue
        print(f"{peer.title}: running ({where})", flush=True)
        raw = out / tool / "raw"
        try:
            result = peers.run(peer, w, raw, args.timeout_s)
            (imported,) = read_results([result], tool, peers.version(peer))
            run_dir = write_run(imported, out / tool, model_name=args.model, env=env)
        except (HarnessError, ValueError) as exc:
            print(f"failed: {exc}", flush=True)
            context.skipped.append(f"{peer.title}: failed — {exc}")
            continue
        write_report(run_dir)
        measured.append(crosscheck.Measured(tool, load_run(run_dir)))
    if len(measured) > 1:
        write_comparison([m.run.run_dir for m in measured], out / "compare")
        context.notes.append(f"compare.html of the same runs: {out / 'compare' / 'compare.html'}")
    return crosscheck.write(out, measured, truth, context)


if __name__ == "__main__":
    sys.exit(main())
