"""The harness's timing error and overhead, measured against the reference server.

The reference server (refserver/app.py) sends token k of a request at
arrival + ttft + k · itl exactly (to its timer's precision). The harness runs a synthetic
workload against it through the whole server-mode path (backend=reference: launch, client,
runner) at each concurrency, and this script prints, over every request and token:

- TTFT error = measured TTFT − scheduled TTFT (ttft_ms). It includes the HTTP round trip,
  the server's own lateness and the client's parsing: all that a real server's TTFT would
  carry on top of its true value.
- gap error = measured inter-token gap − scheduled gap (itl_ms), pooled over tokens.
- server lateness = write time − due time on the server (its /metrics, bucket estimates),
  so the part of the error that is the server's own can be told apart.
- overhead = mean client TTFT − mean server TTFT (the server's own sum/count, exact): what
  the HTTP hop and the harness add to a request's first token.
- delivery lag = runner receipt − chunk stamp (worst per request): the async hop inside
  the harness.

    .venv/bin/python benchmarks/reference_timing.py [--concurrency 1 32] [--ttft-ms 50] [--itl-ms 10]
        [--tokens 64] [--requests 24 128] [--dialect openai] [--machine-state on|off]

Goal: |error| within 2 ms at p99 on an idle machine. Numbers from a loaded 2-core machine
mix in CPU contention (server, client and the rest share the cores).
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.cli import CONF_DIR, register_everything
from harness.config import to_run_config
from harness.results.store import load_requests
from harness.run.point import run_benchmark


def config(concurrency: int, requests: int, args: argparse.Namespace):
    from hydra import compose, initialize_config_dir

    overrides = [
        "backend=reference",
        f"model={args.model}",
        "workload=synthetic",
        "progress=false",
        f"workload.num_requests={requests}",
        f"workload.concurrency={concurrency}",
        f"workload.warmup_requests={concurrency}",
        "workload.input_len=64",
        f"workload.output_len={args.tokens}",
        f"backend.ttft_ms={args.ttft_ms}",
        f"backend.itl_ms={args.itl_ms}",
        f"backend.dialect={args.dialect}",
        f"backend.endpoint={args.endpoint}",
        f"backend.count_prompt_tokens={args.count_prompt_tokens}",
        f"memory.sample_interval_s={args.sample_interval_s}",
        f"machine.enabled={args.machine_state == 'on'}",
    ]
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return to_run_config(compose("config", overrides=overrides))


def ms(values) -> str:
    a = np.asarray(values, dtype=float) * 1e3
    return f"p50 {np.percentile(a, 50):+7.3f}  p99 {np.percentile(a, 99):+7.3f}  max {a.max():+7.3f}  (n={a.size})"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 32])
    p.add_argument("--requests", type=int, nargs="+", default=None, help="per concurrency (default 24, 4×c)")
    p.add_argument("--ttft-ms", type=float, default=50.0)
    p.add_argument("--itl-ms", type=float, default=10.0)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--dialect", default="openai")
    p.add_argument("--endpoint", default="chat")
    p.add_argument("--model", default="tiny-random")
    p.add_argument(
        "--count-prompt-tokens",
        action="store_true",
        help="let the server count prompt tokens with the chat template (costs it CPU time)",
    )
    p.add_argument("--sample-interval-s", type=float, default=0.05, help="the harness's memory sampling period")
    p.add_argument(
        "--machine-state",
        choices=("on", "off"),
        default="on",
        help="sample the machine's state during the run (machine.json): on, as a run does by default",
    )
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    register_everything()
    requests = args.requests or [max(24, 4 * c) for c in args.concurrency]
    ttft, itl = args.ttft_ms / 1e3, args.itl_ms / 1e3
    print(f"schedule: ttft {args.ttft_ms} ms, itl {args.itl_ms} ms, {args.tokens} tokens, dialect {args.dialect}")
    for concurrency, n in zip(args.concurrency, requests):
        with tempfile.TemporaryDirectory(prefix="reference-timing-") as tmp:
            outcome = run_benchmark(config(concurrency, n, args), Path(tmp))
            df = load_requests(Path(tmp))
        ok = df[df.error.isna()]
        summary = outcome.summary.to_dict()
        key = summary.get("server_metrics", {}).get("key", {})
        lateness = summary.get("server_metrics", {}).get("histograms", {}).get("reference:token_lateness_seconds", {})
        gaps = [g for row in ok.itl_s for g in row]
        print(f"\nconcurrency {concurrency}: {len(ok)}/{len(df)} requests ok, {len(gaps)} gaps")
        print(f"  TTFT error  (measured − {args.ttft_ms:g} ms): {ms(ok.ttft_s - ttft)}")
        print(f"  gap error   (measured − {args.itl_ms:g} ms): {ms(np.asarray(gaps) - itl)}")
        if lateness:
            print(
                f"  server lateness (write − due, bucket estimates): mean {lateness['mean'] * 1e3:.3f} ms  "
                f"p50 ≈ {lateness['p50'] * 1e3:.3f}  p99 ≈ {lateness['p99'] * 1e3:.3f} ms"
            )
        if key.get("ttft_s"):
            overhead = ok.ttft_s.mean() - key["ttft_s"]["mean"]
            print(f"  overhead: mean client TTFT − mean server TTFT = {overhead * 1e3:.3f} ms")
        lag = summary["harness"]["delivery_lag_max_s"]
        if lag["count"]:
            print(
                f"  delivery lag (runner receipt − chunk stamp, worst per request): "
                f"p50 {lag['p50'] * 1e3:.3f} ms  p99 {lag['p99'] * 1e3:.3f} ms  max {lag['max'] * 1e3:.3f} ms"
            )
        tp = summary["throughput"]
        print(
            f"  throughput: {tp['output_tokens_per_s']:.0f} tok/s  (schedule allows {concurrency / itl:.0f} tok/s in decode)"
        )


if __name__ == "__main__":
    main()
