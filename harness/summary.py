"""The run's summary: per-run metrics from the request records, and the table a user reads."""
from __future__ import annotations

from collections import defaultdict
from typing import Any, Optional, Sequence

from harness import metrics
from harness.metrics import RequestRecord

LATENCY_METRICS = (
    ("ttft_s", "TTFT", "ms"),
    ("tpot_s", "TPOT", "ms"),
    ("itl_s", "ITL", "ms"),
    ("e2e_s", "E2E", "ms"),
    ("queue_wait_s", "queue wait", "ms"),
)


def summarize(records: Sequence[RequestRecord], duration_s: float, slo: Any) -> dict[str, Any]:
    """Per-run figures. Failed requests are counted apart and never enter a distribution."""
    ok = [r for r in records if r.ok]
    failed = [r for r in records if not r.ok]
    latency = {
        "ttft_s": metrics.distribution([r.ttft_s for r in ok]),
        "tpot_s": metrics.distribution([r.tpot_s for r in ok if r.tpot_s is not None]),
        "itl_s": metrics.distribution([gap for r in ok for gap in r.itl_s]),
        "e2e_s": metrics.distribution([r.e2e_s for r in ok]),
        "queue_wait_s": metrics.distribution([r.queue_wait_s for r in ok if r.queue_wait_s is not None]),
        "output_tps": metrics.distribution([r.output_tps for r in ok if r.output_tps is not None]),
        "decode_tps": metrics.distribution([r.decode_tps for r in ok if r.decode_tps is not None]),
    }
    meeting = [r for r in ok if metrics.meets_slo(r.ttft_s, r.tpot_s, r.e2e_s, slo)]
    throughput = {
        "requests_per_s": metrics.request_throughput(len(ok), duration_s),
        "output_tokens_per_s": metrics.output_token_throughput([r.output_tokens for r in ok], duration_s),
        "total_tokens_per_s": metrics.total_token_throughput(
            [r.prompt_tokens for r in ok], [r.output_tokens for r in ok], duration_s
        ),
        "goodput_requests_per_s": metrics.goodput(len(meeting), duration_s),
        "slo_attainment": len(meeting) / len(ok) if ok else None,
        "mean_concurrency": metrics.mean_concurrency([r.e2e_s for r in ok], duration_s),
    }
    return {
        "requests": {"sent": len(records), "completed": len(ok), "failed": len(failed)},
        "duration_s": duration_s,
        "latency": latency,
        "throughput": throughput,
        "prefix_cache": {
            "cached_share": metrics.cached_share([r.cached_tokens for r in ok], [r.prompt_tokens for r in ok]),
            "cached_tokens_total": sum(r.cached_tokens or 0 for r in ok),
            "reported_by_engine": any(r.cached_tokens is not None for r in ok),
        },
        "tokens": {
            "prompt_total": sum(r.prompt_tokens for r in ok),
            "output_total": sum(r.output_tokens for r in ok),
            "prompt_mean": _mean([r.prompt_tokens for r in ok]),
            "output_mean": _mean([r.output_tokens for r in ok]),
        },
        "per_turn": per_turn(ok),
        "harness": {
            "delivery_lag_max_s": metrics.distribution(
                [r.delivery_lag_max_s for r in ok if r.delivery_lag_max_s is not None]
            ),
            "send_lag_s": metrics.distribution(
                [r.start_s - r.scheduled_s for r in records if r.scheduled_s is not None]
            ),
        },
        "warnings": warnings(records),
    }


def per_turn(ok: Sequence[RequestRecord]) -> list[dict[str, Any]]:
    """TTFT and context length by turn number (chat); one row for single-turn workloads."""
    by_turn: dict[int, list[RequestRecord]] = defaultdict(list)
    for r in ok:
        by_turn[r.turn].append(r)
    rows = []
    for turn in sorted(by_turn):
        rs = by_turn[turn]
        ttft = metrics.distribution([r.ttft_s for r in rs])
        rows.append(
            {
                "turn": turn,
                "requests": len(rs),
                "prompt_tokens_mean": _mean([r.prompt_tokens for r in rs]),
                "output_tokens_mean": _mean([r.output_tokens for r in rs]),
                "cached_share": metrics.cached_share([r.cached_tokens for r in rs], [r.prompt_tokens for r in rs]),
                "ttft_mean_s": ttft["mean"],
                "ttft_p50_s": ttft["p50"],
                "ttft_p90_s": ttft["p90"],
                "e2e_mean_s": _mean([r.e2e_s for r in rs]),
            }
        )
    return rows


def warnings(records: Sequence[RequestRecord]) -> list[str]:
    """What makes a run's numbers suspect: failures and lengths that differ from the request."""
    out = []
    failed = [r for r in records if not r.ok]
    if failed:
        examples = "; ".join(sorted({r.error or "" for r in failed})[:3])
        out.append(f"{len(failed)} of {len(records)} requests failed ({examples})")
    ok = [r for r in records if r.ok]
    short = [r for r in ok if r.exact_output_len and r.output_tokens != r.requested_output_tokens]
    if short:
        out.append(
            f"{len(short)} requests asked for an exact output length but got another "
            f"(e.g. {short[0].output_tokens} instead of {short[0].requested_output_tokens} tokens)"
        )
    over = [r for r in ok if not r.exact_output_len and r.output_tokens > r.requested_output_tokens]
    if over:
        out.append(f"{len(over)} requests produced more than their maximum output length")
    off = [r for r in records if r.expected_prompt_tokens is not None and r.prompt_tokens != r.expected_prompt_tokens]
    if off:
        out.append(
            f"{len(off)} prompts differ from the requested length "
            f"(e.g. {off[0].prompt_tokens} instead of {off[0].expected_prompt_tokens} tokens)"
        )
    return out


def _mean(values: Sequence[Optional[float]]) -> Optional[float]:
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


# --- the table printed at the end of a run ----------------------------------------------


def format_summary(summary: dict[str, Any]) -> str:
    import pandas as pd

    lines = []
    head = summary.get("backend", {})
    wl = summary.get("workload", {})
    req = summary["requests"]
    lines.append(
        f"{head.get('name')} ({head.get('engine')} {head.get('engine_version')}, {head.get('mode')}) · "
        f"model {summary.get('model', {}).get('name')} · workload {wl.get('name')} · "
        f"{req['completed']}/{req['sent']} requests ok, {req['failed']} failed · "
        f"{summary['duration_s']:.2f} s · {summary.get('status')}"
    )
    rows = {}
    for key, label, unit in LATENCY_METRICS:
        d = summary["latency"][key]
        if d["count"]:
            rows[f"{label} ({unit})"] = {c: _ms(d[c]) for c in ("mean", "p50", "p90", "p95", "p99")}
    if rows:
        lines.append(pd.DataFrame(rows).T.to_string(float_format=lambda v: f"{v:.1f}"))
    tp = summary["throughput"]
    lines.append(
        f"throughput: {tp['requests_per_s']:.3f} req/s · output {tp['output_tokens_per_s']:.1f} tok/s · "
        f"total {tp['total_tokens_per_s']:.1f} tok/s · goodput {tp['goodput_requests_per_s']:.3f} req/s · "
        f"mean concurrency {tp['mean_concurrency']:.2f}"
    )
    dec = summary["latency"]["decode_tps"]
    if dec["count"]:
        lines.append(f"per request: decode {dec['mean']:.1f} tok/s (mean), output {summary['latency']['output_tps']['mean']:.1f} tok/s (mean)")
    cache = summary.get("prefix_cache", {})
    if cache.get("reported_by_engine") and cache.get("cached_share") is not None:
        lines.append(f"prefix cache: {cache['cached_share'] * 100:.1f}% of prompt tokens served from the engine's cache "
                     f"({cache['cached_tokens_total']} tokens)")
    lines.append(_memory_line(summary.get("memory", {})))
    server_line = _server_metrics_line(summary.get("server_metrics"))
    if server_line:
        lines.append(server_line)
    turns = summary.get("per_turn", [])
    if len(turns) > 1:
        df = pd.DataFrame(turns).set_index("turn")
        columns = ["requests", "prompt_tokens_mean", "ttft_mean_s", "ttft_p90_s", "e2e_mean_s"]
        names = ["requests", "prompt tok", "TTFT mean ms", "TTFT p90 ms", "E2E mean ms"]
        if summary.get("prefix_cache", {}).get("reported_by_engine"):
            columns.insert(2, "cached_share")
            names.insert(2, "cached %")
        df = df[columns].astype({c: float for c in columns if c != "requests"})
        for col in ("ttft_mean_s", "ttft_p90_s", "e2e_mean_s"):
            df[col] = df[col] * 1000
        if "cached_share" in df:
            df["cached_share"] = df["cached_share"] * 100
        df.columns = names
        lines.append("per turn:\n" + df.to_string(float_format=lambda v: f"{v:.1f}"))
    for w in summary.get("warnings", []):
        lines.append(f"WARNING: {w}")
    return "\n".join(lines)


def _server_metrics_line(server_metrics: Optional[dict[str, Any]]) -> Optional[str]:
    """The server's own timings over the measured phase (from its Prometheus histograms)."""
    key = (server_metrics or {}).get("key") or {}
    parts = []
    for name, label in (("ttft_s", "TTFT"), ("itl_s", "ITL"), ("e2e_s", "E2E"), ("queue_s", "queue")):
        d = key.get(name)
        if d and d.get("mean") is not None:
            p99 = f", p99 ≈ {d['p99'] * 1000:.1f}" if d.get("p99") is not None else ""
            parts.append(f"{label} mean {d['mean'] * 1000:.1f}{p99} ms")
    return "server's own metrics: " + " · ".join(parts) if parts else None


def _ms(v: Optional[float]) -> float:
    return float("nan") if v is None else v * 1000


def _memory_line(mem: dict[str, Any]) -> str:
    parts = []
    if mem.get("rss_peak_bytes"):
        parts.append(f"peak RSS {_gib(mem['rss_peak_bytes'])}")
    if mem.get("gpu_peak_allocated_bytes"):
        parts.append(f"GPU peak allocated {_gib(mem['gpu_peak_allocated_bytes'])}")
    if mem.get("gpu_nvml_peak_used_bytes"):
        parts.append(f"GPU used (NVML) {_gib(mem['gpu_nvml_peak_used_bytes'])}")
    if mem.get("weights_bytes"):
        parts.append(f"weights {_gib(mem['weights_bytes'])}")
    if mem.get("kv_bytes_per_token"):
        parts.append(f"KV cache {mem['kv_bytes_per_token'] / 1024:.1f} KiB/token")
    if mem.get("kv_tokens_in_budget") is not None:
        parts.append(f"{mem['kv_tokens_in_budget']:,} KV tokens fit in {mem['budget_gib']} GiB")
    return "memory: " + (" · ".join(parts) if parts else "n/a")


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"
