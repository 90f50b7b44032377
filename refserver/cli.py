"""A reference OpenAI-compatible streaming server that emits tokens on a known schedule.

    python -m refserver --port 8000 --ttft-ms 50 --itl-ms 10 --tokens 64

(also ``python -m harness.reference_server``); ``--help`` lists every option.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import random
import signal
import sys
from typing import Optional

from refserver.app import ReferenceServer, Settings
from refserver.dialects import DIALECTS
from refserver.faults import FAULTS
from refserver.http11 import start_server


def parse_args(argv: Optional[list[str]] = None, prog: str = "python -m refserver") -> tuple[str, int, Settings]:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1", help="the address to listen on")
    p.add_argument("--port", type=int, default=8000, help="0: any free port (printed)")
    p.add_argument("--ttft-ms", type=float, default=50.0, help="the first token, this long after the request arrived")
    p.add_argument("--itl-ms", type=float, default=10.0, help="the gap between tokens")
    p.add_argument("--tokens", type=int, default=64, help="natural reply length; max_tokens caps it")
    p.add_argument("--jitter-ms", type=float, default=0.0, help="each due time moves by U(-j, +j)")
    p.add_argument("--error-rate", type=float, default=0.0, help="fraction of requests that fail")
    p.add_argument(
        "--error-kind",
        choices=FAULTS,
        default="status",
        help="how a failing request misbehaves: " + "; ".join(f"{k}: {v}" for k, v in FAULTS.items()),
    )
    p.add_argument("--fault-size-mib", type=float, default=32.0, help="size of huge-event and huge-error-body")
    p.add_argument("--seed", type=int, default=0, help="seeds the jitter, the faults and the replies")
    p.add_argument("--dialect", choices=DIALECTS, default="openai", help="the engine server whose stream it imitates")
    p.add_argument("--metrics", action="store_true", help="serve /metrics (Prometheus text)")
    p.add_argument("--exit-after", type=int, default=None, help="exit with code 3 when request N+1 arrives")
    p.add_argument("--chunk-tokens", type=int, default=1, help="tokens per streamed chunk")
    p.add_argument("--model-name", default="reference", help="the id GET /v1/models lists")
    p.add_argument("--api-key-env", default=None, help="require the key held by this environment variable")
    p.add_argument("--startup-delay-s", type=float, default=0.0, help="/health answers 503 this long")
    p.add_argument("--tokenizer", default=None, help="HF tokenizer folder to count prompt tokens exactly")
    p.add_argument(
        "--timer", choices=("thread", "asyncio"), default="thread", help="what wakes the due tokens (thread: sub-ms)"
    )
    p.add_argument(
        "--run-noise-cv",
        type=float,
        default=0.0,
        help="run-to-run noise: ttft and itl scaled by exp(N(0, cv)), drawn once per server start "
        "(unseeded: every start differs, as two runs of an engine do)",
    )
    p.add_argument("--max-running", type=int, default=0, help="requests served at once; more wait (0: no limit)")
    p.add_argument(
        "--batch-itl-ms",
        type=float,
        default=0.0,
        help="a request's ITL grows by this for each request running when it starts (a batch slows its steps)",
    )
    p.add_argument(
        "--kv-capacity-tokens",
        type=int,
        default=16384,
        help="the KV-use gauge: reply tokens reserved by the running requests / this",
    )
    p.add_argument("--metrics-drip-s", type=float, default=0.0, help="fault: /metrics written one byte every S seconds")
    p.add_argument(
        "--spec-draft-tokens", type=int, default=0, help="speculative-decoding counters: K draft tokens a chunk"
    )
    p.add_argument("--spec-acceptance", type=float, default=0.0, help="the share of draft tokens accepted")
    p.add_argument(
        "--reasoning-tokens",
        type=int,
        default=0,
        help="the first N tokens of a chat reply are reasoning (in the dialect's reasoning delta)",
    )
    p.add_argument(
        "--per-request-metrics",
        action="store_true",
        help="vLLM's --enable-per-request-metrics: a metrics object on the final usage chunk",
    )
    p.add_argument(
        "--lora-modules",
        nargs="*",
        default=[],
        metavar="NAME[=PATH]",
        help="LoRA adapters it serves: a request names one as its model, in lora_path (SGLang) or in "
        "lora ([{id, scale}], llama-server, by position); an unknown one gets 404",
    )
    p.add_argument(
        "--ignore-constraints",
        action="store_true",
        help="a lying engine: ignore response_format, regexes and tools, and answer in plain words",
    )
    a = p.parse_args(argv)
    if a.reasoning_tokens < 0:
        p.error("--reasoning-tokens must be >= 0")
    if a.batch_itl_ms < 0:
        p.error("--batch-itl-ms must be >= 0")
    if a.max_running < 0 or a.kv_capacity_tokens < 1 or a.metrics_drip_s < 0 or a.spec_draft_tokens < 0:
        p.error("--max-running, --metrics-drip-s and --spec-draft-tokens must be >= 0, --kv-capacity-tokens >= 1")
    if not 0 <= a.spec_acceptance <= 1:
        p.error("--spec-acceptance must be in [0, 1]")
    if a.tokens < 0 or a.ttft_ms < 0 or a.itl_ms < 0 or a.jitter_ms < 0 or a.chunk_tokens < 1:
        p.error("--tokens, --ttft-ms, --itl-ms and --jitter-ms must be >= 0, --chunk-tokens >= 1")
    if not 0 <= a.error_rate <= 1:
        p.error("--error-rate must be in [0, 1]")
    if a.run_noise_cv < 0:
        p.error("--run-noise-cv must be >= 0")
    run_factor = math.exp(random.SystemRandom().gauss(0.0, a.run_noise_cv)) if a.run_noise_cv else 1.0
    settings = Settings(
        ttft_ms=a.ttft_ms * run_factor,
        itl_ms=a.itl_ms * run_factor,
        tokens=a.tokens,
        jitter_ms=a.jitter_ms,
        error_rate=a.error_rate,
        error_kind=a.error_kind,
        fault_size_mib=a.fault_size_mib,
        seed=a.seed,
        dialect=a.dialect,
        metrics=a.metrics,
        exit_after=a.exit_after,
        chunk_tokens=a.chunk_tokens,
        model_name=a.model_name,
        api_key_env=a.api_key_env,
        startup_delay_s=a.startup_delay_s,
        tokenizer=a.tokenizer,
        timer=a.timer,
        max_running=a.max_running,
        batch_itl_ms=a.batch_itl_ms * run_factor,
        kv_capacity_tokens=a.kv_capacity_tokens,
        metrics_drip_s=a.metrics_drip_s,
        spec_draft_tokens=a.spec_draft_tokens,
        spec_acceptance=a.spec_acceptance,
        reasoning_tokens=a.reasoning_tokens,
        per_request_metrics=a.per_request_metrics,
        lora_adapters=tuple(m.split("=", 1)[0] for m in a.lora_modules),
        ignore_constraints=a.ignore_constraints,
    )
    return a.host, a.port, settings


async def serve(host: str, port: int, settings: Settings) -> None:
    server = ReferenceServer(settings)
    server.start_timer()
    _listener, bound = await start_server(server.handle, host, port)
    s = settings
    print(
        f"reference server ({s.dialect}) listening on http://{host}:{bound} · ttft {s.ttft_ms} ms · "
        f"itl {s.itl_ms} ms · tokens {s.tokens} · jitter {s.jitter_ms} ms · errors {s.error_rate}",
        flush=True,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    print("reference server: stopping", flush=True)


def main(argv: Optional[list[str]] = None, prog: str = "python -m refserver") -> None:
    host, port, settings = parse_args(argv, prog)
    sys.setswitchinterval(0.0005)  # the timer thread gets the GIL back within 0.5 ms
    try:
        asyncio.run(serve(host, port, settings))
    except OSError as exc:  # e.g. the port is in use
        print(f"reference server: {exc}", file=sys.stderr, flush=True)
        sys.exit(1)
    sys.stdout.flush()
    os._exit(0)  # streams still open are dropped at once, as a killed server's would be


if __name__ == "__main__":
    main()
