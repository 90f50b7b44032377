"""The run's summary: per-run figures from the request records, and the table a user reads.

Which figures exist, their units and formulas come from the metric registry
(harness/results/formulas.py); this module fills and prints them.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any, Optional, Sequence

from harness.results import formulas
from harness.results import metrics
from harness.results.record import RequestRecord
from harness.results.schema import COMPLETE, INTERRUPTED, SATURATED, RunSummary
from harness.telemetry.gpu_phase import GpuPhase

# a "large" harness overhead: the runner got tokens (p90 over requests of each request's worst
# delivery lag) later than this after the engine made them, or later than this share of the
# median E2E; open loop: requests sent later than this after their scheduled time (p90)
OVERHEAD_WARN_S = 0.05
OVERHEAD_WARN_SHARE_OF_E2E = 0.2


def summarize(records: Sequence[RequestRecord], duration_s: float, slo: Any,
              gpu: Optional[GpuPhase] = None) -> dict[str, Any]:
    """Per-run figures. Failed requests are counted apart and never enter a distribution.
    ``gpu``: the measured phase's GPU figures, for the run metrics that need them."""
    ok = [r for r in records if r.ok]
    failed = [r for r in records if not r.ok]
    meeting = sum(1 for r in ok if formulas.meets_slo(r.ttft_s, r.tpot_s, r.e2e_s, slo))
    return {
        "requests": {"sent": len(records), "completed": len(ok), "failed": len(failed)},
        "duration_s": duration_s,
        "latency": metrics.distributions(ok),
        "throughput": metrics.run_figures(metrics.RunTotals(ok, meeting, duration_s, gpu)),
        "prefix_cache": {
            "cached_share": formulas.cached_share([r.cached_tokens for r in ok], [r.prompt_tokens for r in ok]),
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
        "engine_stages": metrics.engine_stage_figures(ok),
        "harness": {
            "delivery_lag_max_s": formulas.distribution(
                [r.delivery_lag_max_s for r in ok if r.delivery_lag_max_s is not None]
            ),
            "send_lag_s": formulas.distribution(
                [r.start_s - r.scheduled_s for r in records if r.scheduled_s is not None]
            ),
        },
        "warnings": warnings(records),
    }


def run_warnings(summary: RunSummary) -> list[str]:
    """What the ending and the harness's own overhead add to the request warnings."""
    out = []
    req = summary.requests
    planned = summary.workload.get("requests_planned")
    if summary.status == INTERRUPTED:
        out.append(f"The run was interrupted: {req.get('sent', 0)} of {planned} planned requests finished; the figures cover those.")
    elif summary.status == SATURATED:
        out.append(f"The point was stopped early, over-saturated ({summary.saturated}); "
                   f"{req.get('sent', 0)} of {planned} planned requests were sent.")
    elif summary.status != COMPLETE:
        out.append(f"The run {summary.status}: {summary.error or 'no error recorded'}")
    if req.get("completed", 0) == 0:
        out.append("No request completed: there are no latency figures.")
    return out + overhead_warnings(summary.harness, summary.latency) + client_warnings(summary)


# the client (one event loop) may be the bottleneck beyond these
LOOP_LAG_WARN_S = 0.01  # event-loop lag p99
CLIENT_CPU_WARN_CORES = 0.9  # of the one core an event loop can use


def client_warnings(summary: RunSummary) -> list[str]:
    """The client's own state (harness/client/client_load.py): an HTTP client near its limit delays
    every stream's stamps."""
    harness, out = summary.harness, []
    lag = (harness.get("loop_lag_s") or {}).get("p99")
    if is_number(lag) and lag > LOOP_LAG_WARN_S:
        out.append(f"The client may be the bottleneck: its event loop ran {lag * 1000:.0f} ms late (p99), "
                   "and chunk stamps wait as long.")
    cores = harness.get("cpu_cores")
    if is_number(cores):
        cores /= harness.get("workers") or 1  # each worker's loop uses one core at most
    # a busy core that does not delay the loop (a short run, the sampler's thread) is no bottleneck
    lagging = is_number(lag) and lag > LOOP_LAG_WARN_S / 2
    if is_number(cores) and cores > CLIENT_CPU_WARN_CORES and lagging and summary.backend.get("mode") != "inprocess":
        out.append(f"The client may be the bottleneck: it used {cores:.0%} of a core (one event loop's limit).")
    return out


def overhead_warnings(harness: dict[str, Any], latency: dict[str, Any]) -> list[str]:
    """Harness overhead worth a warning (thresholds: OVERHEAD_WARN_S, OVERHEAD_WARN_SHARE_OF_E2E)."""
    out = []
    lag = (harness.get("delivery_lag_max_s") or {}).get("p90")
    e2e = (latency.get("e2e_s") or {}).get("p50")
    if is_number(lag) and (lag > OVERHEAD_WARN_S or (is_number(e2e) and e2e > 0 and lag > OVERHEAD_WARN_SHARE_OF_E2E * e2e)):
        e2e_text = f"{e2e * 1000:.0f}" if is_number(e2e) else "–"
        out.append(
            f"Large harness overhead: tokens reached the runner up to {lag * 1000:.0f} ms after the engine made them "
            f"(p90 over requests of the worst delivery lag; median E2E {e2e_text} ms)."
        )
    send = (harness.get("send_lag_s") or {}).get("p90")
    if is_number(send) and send > OVERHEAD_WARN_S:
        out.append(f"Large harness overhead: open-loop requests were sent {send * 1000:.0f} ms late (p90) after their scheduled time.")
    return out


def is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and v == v


def per_turn(ok: Sequence[RequestRecord]) -> list[dict[str, Any]]:
    """TTFT and context length by turn number (chat); one row for single-turn workloads."""
    by_turn: dict[int, list[RequestRecord]] = defaultdict(list)
    for r in ok:
        by_turn[r.turn].append(r)
    rows = []
    for turn in sorted(by_turn):
        rs = by_turn[turn]
        ttft = formulas.distribution([r.ttft_s for r in rs])
        rows.append(
            {
                "turn": turn,
                "requests": len(rs),
                "prompt_tokens_mean": _mean([r.prompt_tokens for r in rs]),
                "output_tokens_mean": _mean([r.output_tokens for r in rs]),
                "cached_share": formulas.cached_share([r.cached_tokens for r in rs], [r.prompt_tokens for r in rs]),
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


def cache_hit_figures(summary: RunSummary) -> Optional[dict[str, Optional[float]]]:
    """Prefix-cache hit rate three ways (workload=shared_prefix): the workload's target, the
    theoretical rate of its prompts (an unbounded cache), and the engine's measured cached share."""
    wl = summary.workload
    if wl.get("theoretical_cache_hit") is None:
        return None
    measured = summary.prefix_cache.get("cached_share") if summary.prefix_cache.get("reported_by_engine") else None
    return {"target": wl.get("target_cache_hit"), "theoretical": wl.get("theoretical_cache_hit"), "measured": measured}
