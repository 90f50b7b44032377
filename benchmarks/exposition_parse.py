"""How fast a Prometheus ``/metrics`` scrape parses: the harness's parser against prometheus_client's.

The server-metrics sampler (harness/telemetry/server_metrics.py) parses every scrape during the
run, on the client's machine, so the parser's cost is taken from the client. The input is a
vLLM-like exposition written by prometheus_client itself (vLLM exports through it): vLLM's
histograms (TTFT, ITL, E2E, queue, prefill, decode, token counts) with their buckets, counters and
gauges, labelled ``model_name`` and ``engine`` (one label value per data-parallel engine, as many as
it takes to reach ``--kb``), with ``_created`` samples. Both parsers read the same text; their
samples (name, labels, value, in order) must be equal. Each is timed best of ``--repeats``, in
the process's own CPU time (a busy machine stretches wall time, not this).

prometheus_client is not a dependency of the harness: vLLM and SGLang bring it (or ``pip install
prometheus-client``).

    .venv/bin/python benchmarks/exposition_parse.py [--kb 1024] [--repeats 7] [--page docs/measurements/exposition-parse.md]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import platform
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's packages first

from measurement_page import add_page_option, recording
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from harness.telemetry import prometheus

LATENCY = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0)
TOKENS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)
HISTOGRAMS = {
    "vllm:time_to_first_token_seconds": LATENCY,
    "vllm:inter_token_latency_seconds": LATENCY,
    "vllm:e2e_request_latency_seconds": LATENCY,
    "vllm:request_queue_time_seconds": LATENCY,
    "vllm:request_prefill_time_seconds": LATENCY,
    "vllm:request_decode_time_seconds": LATENCY,
    "vllm:request_inference_time_seconds": LATENCY,
    "vllm:request_prompt_tokens": TOKENS,
    "vllm:request_generation_tokens": TOKENS,
    "vllm:iteration_tokens_total": TOKENS,
    "vllm:request_max_num_generation_tokens": TOKENS,
}
COUNTERS = ("vllm:prompt_tokens", "vllm:generation_tokens", "vllm:num_preemptions", "vllm:prefix_cache_queries")
GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")


def exposition(kb: int, seed: int = 0) -> str:
    """A vLLM-like exposition of about ``kb`` KiB, from prometheus_client's own writer."""
    rng = random.Random(seed)
    text, engines = "", 1
    while len(text) < kb * 1024:
        registry = CollectorRegistry()
        labels = ("model_name", "engine")
        hists = [Histogram(n, f"{n} help.", labels, buckets=b, registry=registry) for n, b in HISTOGRAMS.items()]
        counters = [Counter(n, f"{n} help.", labels, registry=registry) for n in COUNTERS]
        success = Counter("vllm:request_success", "Finished requests.", (*labels, "finished_reason"), registry=registry)
        gauges = [Gauge(n, f"{n} help.", labels, registry=registry) for n in GAUGES]
        for engine in range(engines):
            key = ("meta-llama/Llama-3.1-8B-Instruct", str(engine))
            for h in hists:
                for _ in range(20):
                    h.labels(*key).observe(rng.lognormvariate(-2, 1.5) * (100 if "tokens" in h._name else 1))
            for c in counters:
                c.labels(*key).inc(rng.randint(1, 10**6))
            for reason in ("stop", "length", "abort"):
                success.labels(*key, reason).inc(rng.randint(0, 1000))
            for g in gauges:
                g.labels(*key).set(rng.random() * 100)
        text = generate_latest(registry).decode()
        engines = max(engines + 1, int(engines * kb * 1024 / max(len(text), 1)))
    return text


def ours(text: str) -> list[tuple[str, tuple[tuple[str, str], ...], float]]:
    return [
        (s.name, tuple(sorted(s.labels.items())), s.value) for f in prometheus.parse(text).values() for s in f.samples
    ]


def theirs(text: str) -> list[tuple[str, tuple[tuple[str, str], ...], float]]:
    return [
        (s.name, tuple(sorted(s.labels.items())), s.value)
        for f in text_string_to_metric_families(text)
        for s in f.samples
    ]


def best_of(parse, text: str, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.process_time()
        parse(text)
        times.append(time.process_time() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kb", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=7)
    add_page_option(parser)
    args = parser.parse_args()
    with recording(args.page, __doc__):
        run(args)


def run(args: argparse.Namespace) -> None:
    text = exposition(args.kb)
    a, b = ours(text), theirs(text)
    same = sorted(a) == sorted(b)
    print(
        f"{len(text) / 1024:.0f} KiB, {text.count(chr(10))} lines, {len(a)} samples; "
        f"same samples: {same}; {platform.machine()}, Python {platform.python_version()}"
    )
    if not same:
        only_a, only_b = set(a) - set(b), set(b) - set(a)
        print(f"  only ours: {sorted(only_a)[:3]} …\n  only prometheus_client: {sorted(only_b)[:3]} …")
    print(f"{'parser':<44} {'CPU s':>8} {'MB/s':>7}")
    for name, parse in (
        ("harness.telemetry.prometheus.parse", prometheus.parse),
        (
            f"prometheus_client {importlib.metadata.version('prometheus_client')} text_string_to_…",
            lambda t: list(text_string_to_metric_families(t)),
        ),
    ):
        seconds = best_of(parse, text, args.repeats)
        print(f"{name:<44} {seconds:>8.3f} {len(text) / seconds / 1e6:>7.1f}")


if __name__ == "__main__":
    main()
