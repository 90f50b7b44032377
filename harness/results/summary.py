"""The run's summary: per-run figures from the request records, and the table a user reads.

Which figures exist, their units and formulas come from the metric registry
(harness/results/formulas.py); this module fills and prints them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Optional, TypeGuard

import numpy as np

from core.lora import BASE
from core.structured import validator_name
from harness.results import formulas, metrics
from harness.results.jobs import job_figures
from harness.results.kept import RequestTable, as_table
from harness.results.record import RequestRecord
from harness.results.schema import COMPLETE, INTERRUPTED, SATURATED, RunSummary
from harness.telemetry.gpu_phase import GpuPhase

# a "large" harness overhead: the runner got tokens (p90 over requests of each request's worst
# delivery lag) later than this after the engine made them, or later than this share of the
# median E2E; open loop: requests sent later than this after their scheduled time (p90)
OVERHEAD_WARN_S = 0.05
OVERHEAD_WARN_SHARE_OF_E2E = 0.2


def summarize(
    records: RequestTable | Sequence[RequestRecord],
    duration_s: float,
    slo: Any,
    gpu: Optional[GpuPhase] = None,
    usd_per_hour: Optional[float] = None,
    endpoint_urls: Optional[Sequence[Optional[str]]] = None,
    lora: Optional[Sequence[dict[str, Any]]] = None,
    job_calls: Optional[Mapping[int, int]] = None,
) -> dict[str, Any]:
    """Per-run figures. Failed requests are counted apart and never enter a distribution.
    ``records``: the run's kept requests (:class:`harness.results.kept.RequestTable`), or records.
    ``gpu``: the measured phase's GPU figures, and ``usd_per_hour`` the machine's price
    (``cost.*``), for the run metrics that need them. ``endpoint_urls``: the public URLs of
    the endpoints requests were routed over (several: an ``endpoints`` section). ``lora``: the
    plan's adapters ({name, path, share}: an ``adapters`` section, :func:`adapters`).
    ``job_calls``: each agent job's number of requests in the plan (a job cut short is unfinished)."""
    table = as_table(records, metrics.ENGINE_STAGES)
    ok = table.ok()
    by_endpoint = endpoints(table, duration_s, slo, endpoint_urls)
    by_adapter = adapters(table, duration_s, slo, lora)
    scheduled = table.column("scheduled_s")
    return {
        **({"endpoints": by_endpoint} if by_endpoint else {}),
        **({"adapters": by_adapter} if by_adapter else {}),
        **({"structured": checked} if (checked := structured(table)) else {}),
        **({"jobs": by_job} if (by_job := _job_figures(table, duration_s, slo, job_calls)) else {}),
        "requests": _counts(table),
        "duration_s": duration_s,
        "latency": metrics.distributions(ok),
        "throughput": metrics.run_figures(metrics.RunTotals(ok, _meeting(ok, slo), duration_s, gpu, usd_per_hour)),
        "prefix_cache": {
            "cached_share": _cached_share(ok),
            "cached_tokens_total": int(ok.values("cached_tokens").sum()),
            "reported_by_engine": bool(len(ok.values("cached_tokens"))),
        },
        "tokens": {
            "prompt_total": int(ok.values("prompt_tokens").sum()),
            "output_total": int(ok.values("output_tokens").sum()),
            "prompt_mean": _mean(ok.values("prompt_tokens")),
            "output_mean": _mean(ok.values("output_tokens")),
        },
        "per_turn": per_turn(ok),
        "engine_stages": metrics.engine_stage_figures(ok),
        "harness": {
            "delivery_lag_max_s": formulas.distribution(ok.values("delivery_lag_max_s")),
            "send_lag_s": formulas.distribution((table.column("start_s") - scheduled)[~np.isnan(scheduled)]),
        },
        "warnings": warnings(table),
    }


def _meeting(ok: RequestTable, slo: Any) -> int:
    """How many of the completed requests ``ok`` meet the SLO (:func:`formulas.meets_slo`)."""
    return int(np.count_nonzero(formulas.meets_slo(ok.column("ttft_s"), ok.column("tpot_s"), ok.column("e2e_s"), slo)))


def _cached_share(ok: RequestTable) -> Optional[float]:
    """:func:`formulas.cached_share` over the requests whose engine reported a cached count."""
    cached = ok.column("cached_tokens")
    told = ~np.isnan(cached)
    return formulas.cached_share(cached[told].tolist(), ok.column("prompt_tokens")[told].tolist())


def _job_figures(
    table: RequestTable, duration_s: float, slo: Any, job_calls: Optional[Mapping[int, int]]
) -> Optional[dict[str, Any]]:
    """The agent jobs' figures from their own requests (none in a run without jobs)."""
    in_jobs = table.where(~np.isnan(table.column("job_id")))
    return job_figures(list(in_jobs), duration_s, getattr(slo, "job_s", None), job_calls) if len(in_jobs) else None


def _counts(table: RequestTable) -> dict[str, int]:
    ok = int(np.count_nonzero(table.ok_mask()))
    return {"sent": len(table), "completed": ok, "failed": len(table) - ok}


def _load_figures(table: RequestTable, duration_s: float, slo: Any, usd_per_hour: Optional[float]) -> dict[str, Any]:
    """requests, latency and throughput of some of a run's requests over ``duration_s``: the
    metric registry's own figures (GPU figures need the whole phase: none here)."""
    ok = table.ok()
    return {
        "requests": _counts(table),
        "latency": metrics.distributions(ok),
        "throughput": metrics.run_figures(metrics.RunTotals(ok, _meeting(ok, slo), duration_s, None, usd_per_hour)),
    }


def time_windows(
    figures: dict[str, Any],
    records: RequestTable | Sequence[RequestRecord],
    slo: Any,
    window: Optional[tuple[float, float]] = None,
    stages: Optional[Sequence[dict[str, Any]]] = None,
    usd_per_hour: Optional[float] = None,
) -> dict[str, Any]:
    """``figures`` (what :func:`summarize` made) with the steady-state window and the stages.

    ``window`` (start_s, end_s): latency and throughput become those of the requests that
    started in [start_s, end_s], throughput over end_s − start_s; the whole run's move to
    ``whole_run``, and ``window`` says the bounds and the window's request counts. ``stages``
    (index, start_s, end_s, rate | concurrency: the schedule's): each request belongs to the
    stage it started in (its ``stage``, else its start_s: before the first stage → the first,
    after the last → the last), each stage gets the registry's distributions and run metrics
    over its own length. Requests and their counts in ``requests`` stay the whole run's."""
    out = dict(figures)
    table = as_table(records, metrics.ENGINE_STAGES)
    starts = table.column("start_s")
    if window is not None:
        start, end = window
        inside = table.where((starts >= start) & (starts <= end))
        length = max(end - start, 0.0)
        windowed = _load_figures(inside, length, slo, usd_per_hour)
        out["whole_run"] = {
            "requests": figures["requests"],
            "duration_s": figures["duration_s"],
            "latency": figures["latency"],
            "throughput": figures["throughput"],
        }
        out["window"] = {"start_s": start, "end_s": end, "duration_s": length, "requests": windowed["requests"]}
        out["latency"], out["throughput"] = windowed["latency"], windowed["throughput"]
        if not len(inside):
            out["warnings"] = [
                *figures.get("warnings", []),
                f"No request started in the steady-state window [{start:g}, {end:g}] s: "
                "shorten workload.warmup_s or workload.cooldown_s.",
            ]
    if stages:
        told = table.column("stage")
        ends = np.array([stage["end_s"] for stage in stages], dtype=float)
        indexes = np.array([stage["index"] for stage in stages], dtype=float)
        # each start's stage: the first stage ending after it, else the last
        by_start = indexes[np.minimum(np.searchsorted(ends, starts, side="right"), len(stages) - 1)]
        stage_of = np.where(np.isnan(told), by_start, told)
        rows = []
        for stage in stages:
            figs = _load_figures(
                table.where(stage_of == stage["index"]), stage["end_s"] - stage["start_s"], slo, usd_per_hour
            )
            rows.append({**stage, **figs})
        out["stages"] = rows
    return out


def endpoints(
    records: RequestTable | Sequence[RequestRecord],
    duration_s: float,
    slo: Any,
    urls: Optional[Sequence[Optional[str]]] = None,
) -> Optional[dict[str, dict[str, Any]]]:
    """Figures per endpoint (``backend.urls``, ``backend.replicas``), keyed by its index as a
    string: its public URL, requests sent, completed and failed, the registry's distributions
    and run figures over its completed requests (throughputs over the whole run's duration: each
    endpoint's share of the run's throughput), and its cached share. None with one endpoint."""
    table = as_table(records, metrics.ENGINE_STAGES)
    served = table.column("endpoint")
    indexes = set(range(len(urls or ()))) | {int(i) for i in np.unique(served[~np.isnan(served)])}
    if len(indexes) < 2:
        return None
    out = {}
    for i in sorted(indexes):
        mine = table.where(served == i)
        ok = mine.ok()
        out[str(i)] = {
            "url": urls[i] if urls and i < len(urls) else None,
            "requests": len(mine),
            "completed": len(ok),
            "failed": len(mine) - len(ok),
            "latency": metrics.distributions(ok),
            "throughput": metrics.run_figures(metrics.RunTotals(ok, _meeting(ok, slo), duration_s)),
            "cached_share": _cached_share(ok),
        }
    return out


def adapters(
    records: RequestTable | Sequence[RequestRecord],
    duration_s: float,
    slo: Any,
    lora: Optional[Sequence[dict[str, Any]]] = None,
) -> Optional[dict[str, dict[str, Any]]]:
    """Figures per LoRA adapter (workload.lora.adapters), keyed by its name ("base": requests
    without an adapter), in the plan's order: its planned share (s_i / Σ s), requests sent,
    completed and failed, the registry's distributions and run figures over its completed
    requests (throughputs over the whole run's duration: each adapter's part of the run's
    throughput). None for a run without adapters."""
    table = as_table(records, metrics.ENGINE_STAGES)
    served = np.array([BASE if a is None else a for a in table.column("adapter")], dtype=object)
    if not lora and (served == BASE).all():
        return None
    total = sum(float(e.get("share") or 0) for e in lora or ()) or None
    names = [str(e["name"]) for e in lora or ()]
    for name in dict.fromkeys(served.tolist()):
        if name not in names:
            names.append(name)
    out = {}
    for name in names:
        mine = table.where(served == name)
        ok = mine.ok()
        share = next((float(e.get("share") or 0) for e in lora or () if e.get("name") == name), None)
        out[name] = {
            "share": share / total if share is not None and total else None,
            "requests": len(mine),
            "completed": len(ok),
            "failed": len(mine) - len(ok),
            "latency": metrics.distributions(ok),
            "throughput": metrics.run_figures(metrics.RunTotals(ok, _meeting(ok, slo), duration_s)),
        }
    return out


def structured(records: RequestTable | Sequence[RequestRecord]) -> Optional[dict[str, Any]]:
    """The checks of constrained replies (workload.response_format, workload.tools; core/structured.py):
    ``checked`` (completed requests whose reply was checked), ``valid``, ``valid_share`` = valid /
    checked, the same ``by_kind`` (json_schema, json_object, regex, tool_call), up to three ``examples`` of why
    replies were invalid, and the JSON schema ``validator`` that ran. None when nothing was checked."""
    table = as_table(records, metrics.ENGINE_STAGES)
    valid = table.column("output_valid")
    checked_rows = table.ok_mask() & ~np.isnan(valid)
    if not checked_rows.any():
        return None
    valid, kind = valid[checked_rows] == 1, table.column("output_check")[checked_rows]
    kind = np.array(["?" if k is None else k for k in kind], dtype=object)

    def counts(mask: np.ndarray) -> dict[str, Any]:
        n, good = int(mask.sum()), int((valid & mask).sum())
        return {"checked": n, "valid": good, "valid_share": good / n}

    reasons = table.column("output_invalid_reason")[checked_rows][~valid]
    examples = sorted({r or "" for r in reasons})
    return {
        **counts(np.ones(len(valid), dtype=bool)),
        "by_kind": {k: counts(kind == k) for k in sorted(set(kind))},
        "examples": examples[:3],
        "validator": validator_name(),
    }


def structured_line(section: Optional[dict[str, Any]]) -> Optional[str]:
    """One line of the summary's ``structured`` section, for the console and the report."""
    if not section or not section.get("checked"):
        return None
    kinds = " · ".join(f"{k} {v['valid']}/{v['checked']}" for k, v in (section.get("by_kind") or {}).items())
    line = (
        f"structured output: {section['valid']} of {section['checked']} checked replies valid "
        f"({section['valid_share'] * 100:.1f} %; {kinds})"
    )
    examples = section.get("examples") or []
    return line + (f" · e.g. {examples[0]}" if examples else "")


def run_warnings(summary: RunSummary) -> list[str]:
    """What the ending and the harness's own overhead add to the request warnings."""
    out = []
    req = summary.requests
    planned = summary.workload.get("requests_planned")
    if summary.status == INTERRUPTED:
        out.append(
            f"The run was interrupted: {req.get('completed', 0)} of {planned} planned requests completed "
            f"({req.get('sent', 0)} sent); the figures cover those."
        )
    elif summary.status == SATURATED:
        out.append(
            f"The point was stopped early, over-saturated ({summary.saturated}); "
            f"{req.get('sent', 0)} of {planned} planned requests were sent."
        )
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
        out.append(
            f"The client may be the bottleneck: its event loop ran {lag * 1000:.0f} ms late (p99), "
            "and chunk stamps wait as long."
        )
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
    if is_number(lag) and (
        lag > OVERHEAD_WARN_S or (is_number(e2e) and e2e > 0 and lag > OVERHEAD_WARN_SHARE_OF_E2E * e2e)
    ):
        e2e_text = f"{e2e * 1000:.0f}" if is_number(e2e) else "–"
        out.append(
            f"Large harness overhead: tokens reached the runner up to {lag * 1000:.0f} ms after the engine made them "
            f"(p90 over requests of the worst delivery lag; median E2E {e2e_text} ms)."
        )
    send = (harness.get("send_lag_s") or {}).get("p90")
    if is_number(send) and send > OVERHEAD_WARN_S:
        out.append(
            f"Large harness overhead: open-loop requests were sent {send * 1000:.0f} ms late (p90) after their scheduled time."
        )
    return out


def is_number(v: Any) -> TypeGuard[float]:
    """A figure that is there: an int or float, not NaN."""
    return isinstance(v, (int, float)) and v == v


def per_turn(ok: RequestTable | Sequence[RequestRecord]) -> list[dict[str, Any]]:
    """TTFT and context length by turn number (chat); one row for single-turn workloads."""
    table = as_table(ok, metrics.ENGINE_STAGES)
    turns = table.column("turn")
    rows = []
    for turn in np.unique(turns[~np.isnan(turns)]):
        rs = table.where(turns == turn)
        ttft = formulas.distribution(rs.values("ttft_s"))
        rows.append(
            {
                "turn": int(turn),
                "requests": len(rs),
                "prompt_tokens_mean": _mean(rs.values("prompt_tokens")),
                "output_tokens_mean": _mean(rs.values("output_tokens")),
                "cached_share": _cached_share(rs),
                "ttft_mean_s": ttft["mean"],
                "ttft_p50_s": ttft["p50"],
                "ttft_p90_s": ttft["p90"],
                "e2e_mean_s": _mean(rs.values("e2e_s")),
            }
        )
    return rows


def warnings(records: RequestTable | Sequence[RequestRecord]) -> list[str]:
    """What makes a run's numbers suspect: failures and lengths that differ from the request."""
    table = as_table(records, metrics.ENGINE_STAGES)
    out = []
    ok_rows = table.ok_mask()
    if not ok_rows.all():
        errors = table.column("error")[~ok_rows]
        examples = "; ".join(sorted(set(errors.tolist()))[:3])
        out.append(f"{len(errors)} of {len(table)} requests failed ({examples})")
    got, asked = table.column("output_tokens"), table.column("requested_output_tokens")
    exact = table.column("exact_output_len") == 1
    short = np.flatnonzero(ok_rows & exact & (got != asked))
    if len(short):
        i = short[0]
        out.append(
            f"{len(short)} requests asked for an exact output length but got another "
            f"(e.g. {int(got[i])} instead of {int(asked[i])} tokens)"
        )
    over = ok_rows & ~exact & (got > asked)
    if over.any():
        out.append(f"{int(over.sum())} requests produced more than their maximum output length")
    valid = table.column("output_valid")
    invalid = np.flatnonzero(ok_rows & (valid == 0))
    if len(invalid):
        checked = int((ok_rows & ~np.isnan(valid)).sum())
        i = invalid[0]
        out.append(
            f"{len(invalid)} of {checked} checked replies broke their constraint "
            f"(e.g. {table.column('output_check')[i]}: {table.column('output_invalid_reason')[i]})"
        )
    prompt, expected = table.column("prompt_tokens"), table.column("expected_prompt_tokens")
    off = np.flatnonzero(~np.isnan(expected) & (prompt != expected))
    if len(off):
        i = off[0]
        out.append(
            f"{len(off)} prompts differ from the requested length "
            f"(e.g. {int(prompt[i])} instead of {int(expected[i])} tokens)"
        )
    return out


def _mean(values: np.ndarray) -> Optional[float]:
    """Σ / n, summed in order as Python's sum does (numpy's pairwise sum differs in the last digit)."""
    return float(sum(values.tolist())) / len(values) if len(values) else None


# --- the table printed at the end of a run ----------------------------------------------


def cache_hit_figures(summary: RunSummary) -> Optional[dict[str, Optional[float]]]:
    """Prefix-cache hit rate three ways (workload=shared_prefix): the workload's target, the
    theoretical rate of its prompts (an unbounded cache), and the engine's measured cached share."""
    wl = summary.workload
    if wl.get("theoretical_cache_hit") is None:
        return None
    measured = summary.prefix_cache.get("cached_share") if summary.prefix_cache.get("reported_by_engine") else None
    return {"target": wl.get("target_cache_hit"), "theoretical": wl.get("theoretical_cache_hit"), "measured": measured}
