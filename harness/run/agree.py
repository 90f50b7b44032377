"""``python -m harness.agree``: run one short greedy workload on every installed engine and
print how far their replies agree, token for token.

Every engine gets the same prompt ids (the chat template is rendered once, by the harness)
and decodes greedily, one request at a time (no batching numerics). Each engine's run is an
ordinary run folder under ``--out``; the matrix compares every pair, and the comparison
against the baseline (the first engine) is written as a ``python -m harness.compare`` folder
(``--out``/compare: compare.html and agreement.csv). ``--runs`` skips the runs and compares
existing run folders instead.

    python -m harness.agree                       # transformers fp32 and bf16, vLLM, llama.cpp, MLX
    python -m harness.agree --engines transformers-fp32,llamacpp --requests 8 --output-len 32
    python -m harness.agree --workload structured # the same JSON schema on every engine
    python -m harness.agree --workload lora       # the store's adapter a0 and the base model

``--workload`` picks what every engine is sent: ``chat`` (default), ``structured`` (replies
under workload=structured's JSON schema; the valid share is printed per engine), ``agentic``
(workload=agentic's jobs: the same tree, prompts grown from the same stand-in replies) or
``lora`` (chats split between the store's ``adapter-0`` and the base model: engines that
apply the same adapter agree as the base model does).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Optional

from backends.registry import backend_registry
from core.errors import BackendUnavailable
from core.parent import die_with
from harness.reports import agreement
from harness.reports.compare.comparison import CompareOptions
from harness.reports.compare.outputs import compare_runs
from harness.reports.compare.token_agreement import format_agreement  # rendering lives there
from harness.reports.tables import text_table, wrap
from harness.results.schema import RunResult
from harness.results.store import load_run
from harness.run.held import EXIT_INTERRUPTED, Interrupted, raise_interrupted, stop_as_ctrl_c

# engine label → the backend and the settings that make it that engine
ENGINES: dict[str, list[str]] = {
    "transformers-fp32": ["backend=transformers", "backend.dtype=float32"],
    "transformers-bf16": ["backend=transformers", "backend.dtype=bfloat16"],
    "vllm": ["backend=vllm", "backend.max_model_len=1024", "backend.cpu_kvcache_space_gib=1"],
    "llamacpp": ["backend=llamacpp"],
    "mlx": ["backend=mlx", "backend.batching=serial"],
}


def installed(label: str) -> Optional[str]:
    """None when the engine behind ``label`` is installed, else why not (one line)."""
    name = ENGINES[label][0].removeprefix("backend=")
    backend_registry.discover()
    try:
        backend_registry.get(name).cls.check_available()
    except BackendUnavailable as exc:
        return str(exc)
    return None


def chat(requests: int, output_len: int) -> list[str]:
    """One-turn chats of real text (the corpus)."""
    return ["workload=chat", f"workload.sessions={requests}", "workload.turns=1", f"workload.output_len={output_len}"]


def structured(requests: int, output_len: int) -> list[str]:
    """Prompts that ask for a JSON object, each reply under workload=structured's schema."""
    return ["workload=structured", f"workload.num_requests={requests}", f"workload.output_len={output_len}"]


def agentic(requests: int, output_len: int) -> list[str]:
    """workload=agentic's jobs, one at a time (its sub-agents still run side by side)."""
    return ["workload=agentic", f"workload.jobs={requests}", f"workload.output_len={output_len}"]


def lora(requests: int, output_len: int) -> list[str]:
    """Chats split between the store's seeded adapter-0 and the base model."""
    return [*chat(requests, output_len), 'workload.lora.adapters=[{name: a0, path: "store:adapter-0"}, {name: base}]']


# --workload → (its overrides, its default --output-len: a JSON object needs room to close)
STOP_GRACE_S = 30.0  # a stopped run's time to write what it measured

WORKLOADS = {"chat": (chat, 24), "structured": (structured, 96), "agentic": (agentic, 16), "lora": (lora, 24)}


def workload_overrides(model: str, requests: int, output_len: Optional[int], workload: str = "chat") -> list[str]:
    """The workload, each reply answered until its end-of-sequence or ``output_len`` tokens,
    greedily and one at a time."""
    build, default_len = WORKLOADS[workload]
    return [
        f"model={model}",
        *build(requests, output_len or default_len),
        "workload.exact_output_len=false",
        "workload.concurrency=1",
        "workload.temperature=0",
        "workload.warmup_requests=0",
        "seed=0",
        "progress=false",
        "report=false",
    ]


def run_engine(label: str, out: Path, common: Sequence[str], timeout_s: float) -> tuple[Optional[Path], str]:
    """One engine's run as ``python -m harness`` (its output in ``<label>.log``); (run folder or
    None, what happened). Ctrl-C, SIGTERM or a timeout stop the run as Ctrl-C would, so it keeps
    what it measured; a SIGKILL of this process ends it with SIGTERM (the kernel's)."""
    run_dir = out / label
    argv = [sys.executable, "-m", "harness", *ENGINES[label], *common, f"hydra.run.dir={run_dir}"]
    log_path = out / f"{label}.log"
    start = time.perf_counter()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with(os.getpid()))
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            stop_as_ctrl_c(proc, STOP_GRACE_S)
            return None, f"timed out after {timeout_s:g} s (what it measured is in {run_dir})"
        except KeyboardInterrupt as exc:  # the run had the terminal's Ctrl-C too, not SIGTERM or SIGHUP
            stop_as_ctrl_c(proc, STOP_GRACE_S, signalled=not isinstance(exc, Interrupted))
            raise
    took = f"{time.perf_counter() - start:.0f} s"
    if code != 0:
        lines = [line for line in log_path.read_text(errors="replace").splitlines() if line.strip()]
        last = next(
            (line for line in reversed(lines) if line.startswith("error:")), lines[-1] if lines else "(no output)"
        )
        return None, f"failed (exit {code}, {took}): {last.strip()}"
    return run_dir, f"ok ({took})"


def matrix_lines(results: Sequence[RunResult], labels: Sequence[str]) -> list[str]:
    """The identical share of every pair, then the mean common prefix against the first run."""
    frame = agreement.matrix(results, labels)
    rows = [[lab, *(f"{v:.0%}" if v == v and v is not None else "–" for v in frame.loc[lab])] for lab in labels]
    lines = ["identical replies, every pair (row against column):"]
    lines += text_table([[""], *([lab] for lab in labels)], rows)
    return lines


def valid_share(result: RunResult) -> str:
    """The share of replies that kept the run's constraint ("–" for free text)."""
    checked = result.summary.structured or {}
    share = checked.get("valid_share")
    return "–" if share is None else f"{share:.0%}"


def numerics_lines(results: Sequence[RunResult], labels: Sequence[str]) -> list[str]:
    """Per run: the engine, its mode and numerics, and (under a constraint) its valid replies."""
    constrained = any(r.summary.structured for r in results)
    rows = []
    for r, lab in zip(results, labels):
        dtype, quant = agreement.numerics(r)
        b = r.summary.backend
        rows.append(
            [
                lab,
                f"{b.get('engine') or '?'} {b.get('engine_version') or ''}".strip(),
                b.get("mode") or "?",
                dtype or "–",
                quant or "–",
                *([valid_share(r)] if constrained else []),
            ]
        )
    heads = [["run"], ["engine"], ["mode"], ["dtype"], ["quantization"], *([["valid"]] if constrained else [])]
    return text_table(heads, rows, align="l" * len(heads))


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m harness.agree", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--engines",
        default=",".join(ENGINES),
        help=f"comma-separated, the first is the baseline (default: {','.join(ENGINES)})",
    )
    parser.add_argument("--model", default="smollm2-135m", help="model config name (default: smollm2-135m)")
    parser.add_argument("--requests", type=int, default=4, help="one-turn chats (default: 4)")
    parser.add_argument(
        "--workload", choices=list(WORKLOADS), default="chat", help="what every engine is sent (default: chat)"
    )
    parser.add_argument(
        "--output-len", type=int, default=None, help="most tokens per reply (default: 24; structured 96, agentic 16)"
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="folder of the runs (default: results/agree-<date>-<time>)"
    )
    parser.add_argument("--timeout-s", type=float, default=1200.0, help="per engine run (default: 1200)")
    parser.add_argument(
        "--runs", nargs="+", type=Path, default=None, help="compare these run folders instead of running"
    )
    return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    previous = {
        sig: signal.signal(sig, raise_interrupted)
        for sig in (signal.SIGTERM, signal.SIGHUP)
        if signal.getsignal(sig) is not signal.SIG_IGN
    }  # both end it as Ctrl-C does; the engine's run is told at once, since the signal was ours alone
    try:
        return agree(args)
    except KeyboardInterrupt:
        print("\ninterrupted: the runs so far (each kept what it measured) are in the output folder", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def agree(args: argparse.Namespace) -> int:
    if args.runs:
        folders, labels = list(args.runs), [p.name for p in args.runs]
        out = args.out or Path("results") / f"agree-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    else:
        labels = [e.strip() for e in args.engines.split(",") if e.strip()]
        unknown = [e for e in labels if e not in ENGINES]
        if unknown:
            print(f"error: unknown engine {unknown[0]!r}: choose from {', '.join(ENGINES)}", file=sys.stderr)
            return 2
        if args.requests < 1 or (args.output_len is not None and args.output_len < 1):
            print("error: --requests and --output-len must be >= 1", file=sys.stderr)
            return 2
        out = args.out or Path("results") / f"agree-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
        out.mkdir(parents=True, exist_ok=True)
        common = workload_overrides(args.model, args.requests, args.output_len, args.workload)
        folders, kept = [], []
        for label in labels:
            missing = installed(label)
            if missing:
                print(f"{label}: not installed, left out ({missing})", flush=True)
                continue
            run_dir, what = run_engine(label, out, common, args.timeout_s)
            print(f"{label}: {what}", flush=True)
            if run_dir is not None:
                folders.append(run_dir)
                kept.append(label)
        labels = kept
    if len(folders) < 2:
        print("error: fewer than two runs to compare", file=sys.stderr)
        return 1
    results = [load_run(p, with_workload=False) for p in folders]
    lines = ["", *numerics_lines(results, labels), "", *matrix_lines(results, labels), ""]
    compare_runs(folders, out / "compare", CompareOptions(resamples=200))
    lines += format_agreement(agreement.against_baseline(results, labels))
    lines += ["", *wrap(f"runs: {out} · comparison: {out / 'compare' / 'compare.html'}", indent="")]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
