"""What the harness does with each misbehaving server, one line per fault.

Starts this tree's reference server once per fault (``--error-kind``, half the requests,
seeded), runs ``python -m harness backend=openai`` against it, and prints a markdown table:
the exit code, which result files exist, failed/sent, the first error, the output
throughput. Two more rows: a credential in the URL's query, and two runs started on one
folder (whose ``.hydra``/``overrides.yaml`` must be the winner's).

    .venv/bin/python benchmarks/fault_matrix.py                        # this tree
    .venv/bin/python benchmarks/fault_matrix.py --harness-root /tmp/old  # another checkout's harness

``--harness-root`` runs another checkout's harness (``python -m harness`` in that folder)
against this tree's server: before/after tables from one command.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's packages first

from backends.server.launch import free_port
from backends.server.process import ManagedServer
from refserver.faults import FAULTS

REPO = Path(__file__).resolve().parents[1]
RUN = [
    "model=tiny-random",
    "workload=synthetic",
    "workload.input_len=48",
    "workload.output_len=8",
    "workload.num_requests=8",
    "workload.concurrency=4",
    "workload.warmup_requests=0",
    "progress=false",
    "backend.idle_timeout_s=1",
    "backend.request_timeout_s=60",
    "backend.max_event_mib=1",
]


def harness(root: Path, out: Path, *args: str) -> tuple[int, str, float]:
    t = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "harness", *args, f"output_root={out}"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return proc.returncode, proc.stderr, time.perf_counter() - t


def describe(run_dirs: list[Path]) -> tuple[str, str, str, str]:
    if not run_dirs:
        return "-", "-", "-", "-"
    d = run_dirs[0]
    files = " ".join(n.split(".")[0] for n in ("summary.json", "requests.parquet", "report.html") if (d / n).exists())
    if not (d / "summary.json").exists():
        return files or "none", "-", "-", "-"
    s = json.loads((d / "summary.json").read_text())
    req = s["requests"]
    import pandas as pd

    errors = pd.read_parquet(d / "requests.parquet").error.dropna()
    first = errors.iloc[0][:70].replace("|", "/") if len(errors) else "-"
    tps = s["throughput"]["output_tokens_per_s"]
    return files, f"{req['failed']}/{req['sent']}", first, f"{tps:.3g}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--harness-root", type=Path, default=REPO)
    a = p.parse_args()
    root = a.harness_root.resolve()
    print(f"harness: {root} · server: {REPO}\n")
    print("| case | exit | files | failed/sent | first error | output tok/s | s |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for fault in FAULTS:
            port = free_port()
            server = ManagedServer(
                [
                    sys.executable,
                    "-m",
                    "refserver",
                    "--port",
                    str(port),
                    "--ttft-ms",
                    "2",
                    "--itl-ms",
                    "1",
                    "--error-kind",
                    fault,
                    "--error-rate",
                    "0.5",
                    "--seed",
                    "4",
                    "--fault-size-mib",
                    "4",
                ],
                port=port,
                log_path=tmp / f"{fault}.log",
                name="reference",
                health_path="/health",
            )
            server.start()
            try:
                server.wait_healthy(60)
                out = tmp / fault
                code, err, took = harness(root, out, "backend=openai", f"backend.url={server.url_root}/v1", *RUN)
            finally:
                server.stop()
            files, failed, first, tps = describe(sorted(out.glob("*")) if out.exists() else [])
            print(f"| {fault} | {code} | {files} | {failed} | {first} | {tps} | {took:.1f} |", flush=True)

        # a credential in the URL's query: refused, or written to the run folder?
        out = tmp / "credential"
        code, err, _ = harness(root, out, "backend=openai", "backend.url='http://127.0.0.1:9/v1?sig=SECRET-SIG'", *RUN)
        leaked = (
            [str(f.relative_to(out)) for f in out.rglob("*") if f.is_file() and b"SECRET-SIG" in f.read_bytes()]
            if out.exists()
            else []
        )
        line = err.strip().splitlines()[-1][:90] if err.strip() else ""
        print(f"| url ?sig=… | {code} | written to: {', '.join(leaked) or 'nothing'} | - | {line} | - | - |")

        # two runs on one folder: is the folder's record of its command line the winner's?
        same = tmp / "same"
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "harness",
                    *RUN,
                    "backend=transformers",
                    f"seed={seed}",
                    f"hydra.run.dir={same}",
                ],
                cwd=root,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            for seed in (1, 2)
        ]
        codes = sorted(proc.wait(600) for proc in procs)
        import yaml

        seed = yaml.safe_load((same / "config.yaml").read_text())["seed"] if (same / "config.yaml").exists() else None
        record = same / (".hydra/overrides.yaml" if (same / ".hydra").exists() else "overrides.yaml")
        recorded = yaml.safe_load(record.read_text()) if record.exists() else []
        agrees = f"seed={seed}" in recorded
        print(
            f"| two runs, one folder | {codes} | {record.relative_to(same)} | - | "
            f"{'agrees with' if agrees else 'CONTRADICTS'} config.yaml (seed={seed}, recorded {recorded[-2:]}) | - | - |"
        )


if __name__ == "__main__":
    main()
