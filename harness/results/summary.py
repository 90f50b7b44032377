"""The run's summary: per-run figures from the request records, and the table a user reads.

Which figures exist, their units and formulas come from the metric registry
(harness/results/formulas.py); this module fills and prints them.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any, Mapping, Optional, Sequence

from core.lora import BASE
from harness.results import formulas
from harness.results import metrics
from core.structured import validator_name
from harness.results.jobs import job_figures
from harness.results.record import RequestRecord
from harness.results.schema import COMPLETE, INTERRUPTED, SATURATED, RunSummary
from harness.telemetry.gpu_phase import GpuPhase

# a "large" harness overhead: the runner got tokens (p90 over requests of each request's worst
# delivery lag) later than this after the engine made them, or later than this share of the
# median E2E; open loop: requests sent later than this after their scheduled time (p90)
OVERHEAD_WARN_S = 0.05
OVERHEAD_WARN_SHARE_OF_E2E = 0.2


def summarize(records: Sequence[RequestRecord], duration_s: float, slo: Any,
              gpu: Optional[GpuPhase] = None, usd_per_hour: Optional[float] = None,
              endpoint_urls: Optional[Sequence[Optional[str]]] = None,
              lora: Optional[Sequence[dict[str, Any]]] = None,
              job_calls: Optional[Mapping[int, int]] = None) -> dict[str, Any]:
    """Per-run figures. Failed requests are counted apart and never enter a distribution.
    ``gpu``: the measured phase's GPU figures, and ``usd_per_hour`` the machine's price
    (``cost.*``), for the run metrics that need them. ``endpoint_urls``: the public URLs of
    the endpoints requests were routed over (several: an ``endpoints`` section). ``lora``: the
    plan's adapters ({name, path, share}: an ``adapters`` section, :func:`adapters`).
    ``job_calls``: each agent job's number of requests in the plan (a job cut short is unfinished)."""
    ok = [r for r in records if r.ok]
    failed = [r for r in records if not r.ok]
    meeting = sum(1 for r in ok if formulas.meets_slo(r.ttft_s, r.tpot_s, r.e2e_s, slo))
    by_endpoint = endpoints(records, duration_s, slo, endpoint_urls)
    by_adapter = adapters(records, duration_s, slo, lora)
    return {
        **({"endpoints": by_endpoint} if by_endpoint else {}),
        **({"adapters": by_adapter} if by_adapter else {}),
        **({"structured": checked} if (checked := structured(records)) else {}),
        **({"jobs": by_job} if (by_job := job_figures(records, duration_s, getattr(slo, "job_s", None), job_calls)) else {}),
        "requests": {"sent": len(records), "completed": len(ok), "failed": len(failed)},
        "duration_s": duration_s,
        "latency": metrics.distributions(ok),
        "throughput": metrics.run_figures(metrics.RunTotals(ok, meeting, duration_s, gpu, usd_per_hour)),
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


def _counts(records: Sequence[RequestRecord]) -> dict[str, int]:
    ok = sum(1 for r in records if r.ok)
    return {"sent": len(records), "completed": ok, "failed": len(records) - ok}


def _load_figures(records: Sequence[RequestRecord], duration_s: float, slo: Any,
                  usd_per_hour: Optional[float]) -> dict[str, Any]:
    """requests, latency and throughput of some of a run's requests over ``duration_s``: the
    metric registry's own figures (GPU figures need the whole phase: none here)."""
    ok = [r for r in records if r.ok]
    meeting = sum(1 for r in ok if formulas.meets_slo(r.ttft_s, r.tpot_s, r.e2e_s, slo))
    return {"requests": _counts(records), "latency": metrics.distributions(ok),
            "throughput": metrics.run_figures(metrics.RunTotals(ok, meeting, duration_s, None, usd_per_hour))}


def time_windows(figures: dict[str, Any], records: Sequence[RequestRecord], slo: Any,
                 window: Optional[tuple[float, float]] = None, stages: Optional[Sequence[dict[str, Any]]] = None,
                 usd_per_hour: Optional[float] = None) -> dict[str, Any]:
    """``figures`` (what :func:`summarize` made) with the steady-state window and the stages.

    ``window`` (start_s, end_s): latency and throughput become those of the requests that
    started in [start_s, end_s], throughput over end_s − start_s; the whole run's move to
    ``whole_run``, and ``window`` says the bounds and the window's request counts. ``stages``
    (index, start_s, end_s, rate | concurrency: the schedule's): each request belongs to the
    stage it started in (its ``stage``, else its start_s: before the first stage → the first,
    after the last → the last), each stage gets the registry's distributions and run metrics
    over its own length. Requests and their counts in ``requests`` stay the whole run's."""
    out = dict(figures)
    if window is not None:
        start, end = window
        inside = [r for r in records if start <= r.start_s <= end]
        length = max(end - start, 0.0)
        windowed = _load_figures(inside, length, slo, usd_per_hour)
        out["whole_run"] = {"requests": figures["requests"], "duration_s": figures["duration_s"],
                            "latency": figures["latency"], "throughput": figures["throughput"]}
        out["window"] = {"start_s": start, "end_s": end, "duration_s": length, "requests": windowed["requests"]}
        out["latency"], out["throughput"] = windowed["latency"], windowed["throughput"]
        if not inside:
            out["warnings"] = [*figures.get("warnings", []),
                               f"No request started in the steady-state window [{start:g}, {end:g}] s: "
                               "shorten workload.warmup_s or workload.cooldown_s."]
    if stages:
        by_stage: dict[int, list[RequestRecord]] = defaultdict(list)
        for r in records:
            by_stage[r.stage if r.stage is not None else stage_at(stages, r.start_s)].append(r)
        rows = []
        for stage in stages:
            figs = _load_figures(by_stage.get(stage["index"], []), stage["end_s"] - stage["start_s"], slo, usd_per_hour)
            rows.append({**stage, **figs})
        out["stages"] = rows
    return out


def stage_at(stages: Sequence[dict[str, Any]], t: float) -> int:
    """The index of the stage holding ``t`` (the first before it, the last after it)."""
    for stage in stages:
        if t < stage["end_s"]:
            return stage["index"]
    return stages[-1]["index"]


def endpoints(records: Sequence[RequestRecord], duration_s: float, slo: Any,
              urls: Optional[Sequence[Optional[str]]] = None) -> Optional[dict[str, dict[str, Any]]]:
    """Figures per endpoint (``backend.urls``, ``backend.replicas``), keyed by its index as a
    string: its public URL, requests sent, completed and failed, the registry's distributions
    and run figures over its completed requests (throughputs over the whole run's duration: each
    endpoint's share of the run's throughput), and its cached share. None with one endpoint."""
    indexes = set(range(len(urls or ()))) | {r.endpoint for r in records if r.endpoint is not None}
    if len(indexes) < 2:
        return None
    out = {}
    for i in sorted(indexes):
        mine = [r for r in records if r.endpoint == i]
        ok = [r for r in mine if r.ok]
        meeting = sum(1 for r in ok if formulas.meets_slo(r.ttft_s, r.tpot_s, r.e2e_s, slo))
        out[str(i)] = {
            "url": urls[i] if urls and i < len(urls) else None,
            "requests": len(mine),
            "completed": len(ok),
            "failed": len(mine) - len(ok),
            "latency": metrics.distributions(ok),
            "throughput": metrics.run_figures(metrics.RunTotals(ok, meeting, duration_s)),
            "cached_share": formulas.cached_share([r.cached_tokens for r in ok], [r.prompt_tokens for r in ok]),
        }
    return out


def adapters(records: Sequence[RequestRecord], duration_s: float, slo: Any,
             lora: Optional[Sequence[dict[str, Any]]] = None) -> Optional[dict[str, dict[str, Any]]]:
    """Figures per LoRA adapter (workload.lora.adapters), keyed by its name ("base": requests
    without an adapter), in the plan's order: its planned share (s_i / Σ s), requests sent,
    completed and failed, the registry's distributions and run figures over its completed
    requests (throughputs over the whole run's duration: each adapter's part of the run's
    throughput). None for a run without adapters."""
    if not lora and all(r.adapter is None for r in records):
        return None
    total = sum(float(e.get("share") or 0) for e in lora or ()) or None
    names = [str(e["name"]) for e in lora or ()]
    for r in records:
        name = r.adapter if r.adapter is not None else BASE
        if name not in names:
            names.append(name)
    out = {}
    for name in names:
        mine = [r for r in records if (r.adapter if r.adapter is not None else BASE) == name]
        ok = [r for r in mine if r.ok]
        meeting = sum(1 for r in ok if formulas.meets_slo(r.ttft_s, r.tpot_s, r.e2e_s, slo))
        share = next((float(e.get("share") or 0) for e in lora or () if e.get("name") == name), None)
        out[name] = {
            "share": share / total if share is not None and total else None,
            "requests": len(mine),
            "completed": len(ok),
            "failed": len(mine) - len(ok),
            "latency": metrics.distributions(ok),
            "throughput": metrics.run_figures(metrics.RunTotals(ok, meeting, duration_s)),
        }
    return out


def structured(records: Sequence[RequestRecord]) -> Optional[dict[str, Any]]:
    """The checks of constrained replies (workload.response_format, workload.tools; core/structured.py):
    ``checked`` (completed requests whose reply was checked), ``valid``, ``valid_share`` = valid /
    checked, the same ``by_kind`` (json_schema, regex, tool_call), up to three ``examples`` of why
    replies were invalid, and the JSON schema ``validator`` that ran. None when nothing was checked."""
    checked = [r for r in records if r.ok and r.output_valid is not None]
    if not checked:
        return None

    def counts(rs: Sequence[RequestRecord]) -> dict[str, Any]:
        valid = sum(1 for r in rs if r.output_valid)
        return {"checked": len(rs), "valid": valid, "valid_share": valid / len(rs)}

    kinds = sorted({r.output_check or "?" for r in checked})
    reasons = sorted({r.output_invalid_reason or "" for r in checked if not r.output_valid})
    return {**counts(checked), "by_kind": {k: counts([r for r in checked if r.output_check == k]) for k in kinds},
            "examples": reasons[:3], "validator": validator_name()}


def structured_line(section: Optional[dict[str, Any]]) -> Optional[str]:
    """One line of the summary's ``structured`` section, for the console and the report."""
    if not section or not section.get("checked"):
        return None
    kinds = " · ".join(f"{k} {v['valid']}/{v['checked']}" for k, v in (section.get("by_kind") or {}).items())
    line = (f"structured output: {section['valid']} of {section['checked']} checked replies valid "
            f"({section['valid_share'] * 100:.1f} %; {kinds})")
    examples = section.get("examples") or []
    return line + (f" · e.g. {examples[0]}" if examples else "")


def run_warnings(summary: RunSummary) -> list[str]:
    """What the ending and the harness's own overhead add to the request warnings."""
    out = []
    req = summary.requests
    planned = summary.workload.get("requests_planned")
    if summary.status == INTERRUPTED:
        out.append(f"The run was interrupted: {req.get('completed', 0)} of {planned} planned requests completed "
                   f"({req.get('sent', 0)} sent); the figures cover those.")
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
    invalid = [r for r in ok if r.output_valid is False]
    if invalid:
        checked = sum(1 for r in ok if r.output_valid is not None)
        out.append(f"{len(invalid)} of {checked} checked replies broke their constraint "
                   f"(e.g. {invalid[0].output_check}: {invalid[0].output_invalid_reason})")
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
