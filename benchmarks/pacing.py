"""Open-loop pacing: how late the harness sends each request against the plan's schedule.

An open loop (``workload.rate``) schedules request i at ``arrival_s``; the harness records
when it actually went out (``start_s``), on the same clock. Send error = start_s − scheduled_s.
This script runs a constant-arrival synthetic workload against the reference server
(backend=reference, one-token replies right away, so the server costs little) at each rate,
with ``client.pacing=sleep`` (asyncio's timer alone: the harness before this change) and
``client.pacing=spin`` (harness/client/pacing.py), and optionally several client workers, and
prints the send error's p50 / p99 / max and the rate achieved.

    .venv/bin/python benchmarks/pacing.py [--rates 100 1000 5000] [--seconds 2] [--workers 1 2]
        [--pacing sleep spin] [--event-loop asyncio]

On a shared or small machine the error mixes in CPU contention (the server, the client and
everything else share the cores); the figures that matter come from an idle machine.
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
from harness.run.point import run_point
from harness.run.session import EngineSession


def config(rate: float, requests: int, pacing: str, workers: int, args: argparse.Namespace):
    from hydra import compose, initialize_config_dir

    overrides = [
        "backend=reference",
        f"model={args.model}",
        "workload=synthetic",
        "progress=false",
        "report=false",
        f"workload.num_requests={requests}",
        f"workload.rate={rate}",
        "workload.arrival=constant",
        "workload.warmup_requests=0",
        "workload.input_len=48",
        "workload.output_len=1",
        "backend.ttft_ms=0",
        "backend.itl_ms=0",
        "backend.count_prompt_tokens=false",
        "backend.metrics=false",
        "saturation.enabled=false",
        f"client.pacing={pacing}",
        f"client.workers={workers}",
        f"client.event_loop={args.event_loop}",
    ]
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return to_run_config(compose("config", overrides=overrides))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rates", type=float, nargs="+", default=[100, 1000, 5000])
    p.add_argument("--seconds", type=float, default=2.0, help="of arrivals at each rate")
    p.add_argument("--workers", type=int, nargs="+", default=[1])
    p.add_argument("--pacing", nargs="+", default=["sleep", "spin"])
    p.add_argument("--event-loop", default="asyncio")
    p.add_argument("--model", default="tiny-random")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING)
    register_everything()
    print("send error = start_s − scheduled_s, ms; constant arrivals, one-token replies from the reference server")
    print("| rate (req/s) | pacing | workers | sent | p50 | p99 | max | achieved req/s | loop lag p99 (ms) |")
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="pacing-") as tmp:
        first = config(args.rates[0], 1, args.pacing[0], 1, args)
        with EngineSession(first, Path(tmp) / "server") as session:
            n = 0
            for rate in args.rates:
                requests = max(10, int(rate * args.seconds))
                for workers in args.workers:
                    for pacing in args.pacing:
                        n += 1
                        run_dir = Path(tmp) / f"{n}"
                        outcome = run_point(session, config(rate, requests, pacing, workers, args), run_dir)
                        df = load_requests(run_dir)
                        late = (df.start_s - df.scheduled_s).to_numpy() * 1e3
                        span = df.start_s.max() - df.start_s.min()
                        lag = outcome.summary.harness.get("loop_lag_s") or {}
                        lag_p99 = f"{lag['p99'] * 1e3:.2f}" if lag.get("p99") is not None else "–"
                        print(
                            f"| {rate:g} | {pacing} | {workers} | {len(df)} | {np.percentile(late, 50):.3f} | "
                            f"{np.percentile(late, 99):.3f} | {late.max():.3f} | "
                            f"{(len(df) - 1) / span if span > 0 else float('nan'):.0f} | {lag_p99} |",
                            flush=True,
                        )


if __name__ == "__main__":
    main()
