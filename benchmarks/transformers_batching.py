"""transformers' serial, static and continuous batching: aggregate output tokens/s by concurrency.

Runs, as a user would, one sweep per batching mode over the same synthetic workload (same
seed, so the same prompts and arrivals), and reads each point's summary.json:

    python -m harness -m backend=transformers backend.batching=MODE model=smollm2-135m \
        workload=synthetic workload.num_requests=16 workload.input_len=64 workload.output_len=32 \
        workload.concurrency=1,4,8

    .venv/bin/python benchmarks/transformers_batching.py
    .venv/bin/python benchmarks/transformers_batching.py --modes continuous --concurrency 1,8 --extra backend.dtype=bfloat16

Prints one row per mode and concurrency: output tokens/s (the whole run's output tokens over its
measured duration), mean TTFT and mean TPOT. Static batching uses ``backend.max_batch_size=8``
and no ``batch_wait_s``; continuous uses ``backend.max_batch_size=8`` requests per step.
On a CPU shared with other work, pass ``--extra backend.num_threads=1``: two torch threads
that wait on each other's time slices made a decode step ~10x slower on such a machine.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def sweep(mode: str, args: argparse.Namespace, root: Path) -> list[dict]:
    out = root / mode
    cmd = [
        sys.executable,
        "-m",
        "harness",
        "-m",
        "backend=transformers",
        f"backend.batching={mode}",
        "backend.max_batch_size=8",
        f"model={args.model}",
        "workload=synthetic",
        f"workload.num_requests={args.num_requests}",
        f"workload.input_len={args.input_len}",
        f"workload.output_len={args.output_len}",
        f"workload.concurrency={args.concurrency}",
        "progress=false",
        "report=false",
        f"output_root={out}",
        *args.extra,
    ]
    print("$", " ".join(cmd[1:]), flush=True)
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
        raise SystemExit(f"the {mode} sweep failed (exit {proc.returncode})")
    rows = []
    for summary_path in sorted(out.glob("**/summary.json")):
        summary = json.loads(summary_path.read_text())
        rows.append(
            {
                "mode": mode,
                "concurrency": summary["workload"].get("concurrency"),
                "status": summary["status"],
                "completed": summary["requests"]["completed"],
                "output_tokens_per_s": summary["throughput"].get("output_tokens_per_s"),
                "ttft_ms": _mean_ms(summary, "ttft_s"),
                "tpot_ms": _mean_ms(summary, "tpot_s"),
            }
        )
    return sorted(rows, key=lambda r: r["concurrency"] or 0)


def _mean_ms(summary: dict, key: str):
    mean = summary["latency"].get(key, {}).get("mean")
    return None if mean is None else mean * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--modes", default="serial,static,continuous")
    parser.add_argument("--concurrency", default="1,4,8")
    parser.add_argument("--num-requests", type=int, default=16)
    parser.add_argument("--input-len", type=int, default=64)
    parser.add_argument("--output-len", type=int, default=32)
    parser.add_argument("--extra", nargs="*", default=[], help="more overrides, e.g. backend.dtype=bfloat16")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()

    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="tf-batching-") as tmp:
        for mode in args.modes.split(","):
            rows += sweep(mode, args, Path(tmp))
    print(f"\n{'mode':<11} {'conc':>4} {'done':>5} {'out tok/s':>10} {'TTFT ms':>9} {'TPOT ms':>9}")

    def fmt(v, spec: str) -> str:
        return "—" if v is None else format(v, spec)

    for r in rows:
        print(
            f"{r['mode']:<11} {r['concurrency']!s:>4} {r['completed']:>5} {fmt(r['output_tokens_per_s'], '10.1f')} "
            f"{fmt(r['ttft_ms'], '9.0f')} {fmt(r['tpot_ms'], '9.0f')}"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
