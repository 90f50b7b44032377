"""What a harness process costs before and after its requests: the imports (the tokenizer's, and
torch with transformers) and a whole 3-request run, against the reference server and on
transformers' tiny-random model. The test suite starts a few hundred such processes.

The first two cases are core/json_tokenizer.py's reason: the store's tokenizer loaded the
harness's way (tokenizers and jinja2 alone) and by transformers' AutoTokenizer.

    .venv/bin/python benchmarks/process_start.py            # 3 repeats, the median of each
    .venv/bin/python benchmarks/process_start.py --only tokenizer   # the cases whose name holds it

Run it with PYTHONDONTWRITEBYTECODE=1 in a venv installed without .pyc files (uv without
--compile-bytecode) to see what compiling every import costs.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUN = [
    "model=tiny-random",
    "workload=synthetic",
    "workload.input_len=48",
    "workload.output_len=4",
    "workload.num_requests=3",
    "progress=false",
]
CASES = {
    "import core.tokenizer, load the store's tokenizer": [
        "-c",
        "from harness.config import ModelConfig; from harness.run.model_store import resolve_model; "
        "from core.tokenizer import load_tokenizer; "
        "load_tokenizer(resolve_model(ModelConfig(name='tiny-random')).hf_dir)",
    ],
    "import transformers, AutoTokenizer loads the store's tokenizer": [
        "-c",
        "from harness.config import ModelConfig; from harness.run.model_store import resolve_model; "
        "from transformers import AutoTokenizer; "
        "AutoTokenizer.from_pretrained(resolve_model(ModelConfig(name='tiny-random')).hf_dir)",
    ],
    "import torch and transformers' AutoModel": ["-c", "import torch, transformers.models.auto.auto_factory"],
    "python -m harness backend=reference (3 requests)": ["-m", "harness", "backend=reference", *RUN],
    "python -m harness backend=transformers (3 requests)": ["-m", "harness", "backend=transformers", *RUN],
}


def seconds(args: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, *args, f"output_root={cwd}"] if args[0] == "-m" else [sys.executable, *args],
        cwd=ROOT if args[0] == "-c" else cwd,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        sys.exit(f"error: {' '.join(args[:3])} failed: {proc.stderr.strip().splitlines()[-1:]}")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", default="", help="run the cases whose name holds this text")
    options = parser.parse_args()
    repeats = options.repeats
    with tempfile.TemporaryDirectory() as tmp:
        for name, args in CASES.items():
            if options.only not in name:
                continue
            times = [seconds(args, Path(tmp)) for _ in range(repeats)]
            runs = ", ".join(f"{t:.1f}" for t in times)
            print(f"{name:55s} median {statistics.median(times):5.1f} s  (runs: {runs})")


if __name__ == "__main__":
    main()
