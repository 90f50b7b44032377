"""Regenerate tests/fixtures/peers/: result files that vllm bench serve, GuideLLM and AIPerf wrote
for real, against the reference server, for the importers' tests (tests/harness/formats/).

    python scripts/peer_fixtures.py [--guidellm EXE] [--aiperf EXE] [--vllm PYTHON]

The peers are found as ``python -m harness.crosscheck`` finds them (harness/interop/peers.py:
options, then HARNESS_VLLM_PYTHON, HARNESS_GUIDELLM, HARNESS_AIPERF, then PATH and
~/.cache/harness/peer-venvs/). Each runs the same small workload — 6 requests of 32 random prompt
tokens and exactly 8 output tokens, 2 in flight, streamed chat — against ``python -m refserver``
(first token 50 ms after arrival, then one every 10 ms; the openai dialect, whose streams open
with a role-only chunk; prompts counted with SmolLM2's tokenizer). vllm bench serve runs twice:
with ``--save-detailed`` (per request) and without (its statistics only).

Files are copied as the tools wrote them, except GuideLLM's ``benchmarks.json``, which is about
125 KB for any run: its per-modality summaries (``metrics.text``, ``image``, ``video``, ``audio``,
``tool_call``) and the confidence intervals and histograms of its distributions (``mean_ci``,
``percentile_cis``, ``pdf``) are dropped, and the distributions of a status no request had
(count 0) — none is read by the importer — to keep it well under 100 KB. tests/fixtures/peers/README.md records the versions and what was run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.interop import peers  # noqa: E402 - after the checkout is on the path

OUT = REPO / "tests" / "fixtures" / "peers"
TRIMMED_METRICS = ("text", "image", "video", "audio", "tool_call")
TRIMMED_STATS = ("mean_ci", "percentile_cis", "pdf")
SERVER = {"ttft_ms": 50, "itl_ms": 10, "tokens": 64}


def start_server(tokenizer: str) -> tuple[subprocess.Popen[bytes], str]:
    from backends.server.launch import free_port

    port = free_port()
    argv = [sys.executable, "-m", "refserver", "--port", str(port), "--model-name", "smollm2-135m"]
    argv += ["--ttft-ms", str(SERVER["ttft_ms"]), "--itl-ms", str(SERVER["itl_ms"]), "--tokens", str(SERVER["tokens"])]
    argv += ["--tokenizer", tokenizer]
    proc = subprocess.Popen(argv, env={**os.environ, "PYTHONPATH": str(REPO)})
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            urllib.request.urlopen(url + "/v1/models", timeout=2).read()
            return proc, url
        except OSError:
            time.sleep(0.3)
    proc.terminate()
    raise RuntimeError("the reference server did not start")


def strip_guidellm(data: dict[str, Any]) -> dict[str, Any]:
    """benchmarks.json less what the importer never reads (see the module's docstring)."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):  # and the distributions of a status no request had (count 0)
            return {
                k: strip(v)
                for k, v in value.items()
                if k not in TRIMMED_STATS and not (isinstance(v, dict) and v.get("count") == 0 and "mean" in v)
            }
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    for bench in data.get("benchmarks") or []:
        metrics = bench.get("metrics") or {}
        for key in TRIMMED_METRICS:
            metrics.pop(key, None)
    return strip(data)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--vllm", default=None)
    p.add_argument("--guidellm", default=None)
    p.add_argument("--aiperf", default=None)
    args = p.parse_args()
    from harness.interop.crosscheck_cli import tokenizer_dir

    tokenizer = tokenizer_dir("smollm2-135m")
    found = {}
    for tool, given in ((peers.VLLM_BENCH, args.vllm), (peers.GUIDELLM, args.guidellm), (peers.AIPERF, args.aiperf)):
        peer, where = peers.find(tool, given)
        if peer is None:
            raise SystemExit(where)
        found[tool] = peer
    work = Path(tempfile.mkdtemp(prefix="peer-fixtures-"))
    server, url = start_server(tokenizer)
    versions = {}
    try:
        w = peers.Workload(url, "smollm2-135m", tokenizer, 6, 2, 32, 8)
        for tool, peer in found.items():
            print(f"{peer.title}: running", flush=True)
            result = peers.run(peer, w, work / tool)
            target = OUT / tool
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir(parents=True)
            if tool == peers.GUIDELLM:
                data = strip_guidellm(json.loads(result.read_text()))
                (target / result.name).write_text(json.dumps(data) + "\n")
                versions[tool] = data["metadata"]["guidellm_version"]
            elif tool == peers.AIPERF:
                for name in ("profile_export_aiperf.json", "profile_export.jsonl"):
                    shutil.copyfile(result / name, target / name)
                versions[tool] = json.loads((result / "profile_export_aiperf.json").read_text())["aiperf_version"]
            else:
                shutil.copyfile(result, target / result.name)
                versions[tool] = peers.version(peer) or "unknown"
                # once more without --save-detailed: the file of a run that kept no requests
                argv, env, summary = peers.command(peer, w, work / "vllm-summary")
                (work / "vllm-summary").mkdir()
                subprocess.run([a for a in argv if a != "--save-detailed"], check=True, env={**os.environ, **env})
                shutil.copyfile(summary, target / "vllm-bench-summary.json")
    finally:
        server.terminate()
        server.wait(10)
    (OUT / "versions.json").write_text(json.dumps({"server": SERVER, "tools": versions}, indent=2) + "\n")
    for path in sorted(OUT.rglob("*")):
        if path.is_file():
            print(f"{path.relative_to(REPO)}: {path.stat().st_size / 1024:.1f} KB")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
