"""What the console prints: the run's summary table at the end of a run, a sweep's table of
points, and the lines after them that say where the pages are and what to run next."""

from __future__ import annotations

import shlex
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from harness.results import metrics
from harness.results.jobs import jobs_line
from harness.results.schema import RunSummary
from harness.results.summary import cache_hit_figures, is_number, structured_line
from harness.results.sweep_file import figure_name, varying_overrides


def _client_line(harness: dict[str, Any]) -> Optional[str]:
    lag, cores = harness.get("loop_lag_s") or {}, harness.get("cpu_cores")
    if not is_number(lag.get("p99")) or not is_number(cores):
        return None
    workers = harness.get("workers") or 1
    where = "this process" if workers == 1 else f"{workers} worker processes and the driver"
    return (
        f"client: event-loop lag p50 {lag['p50'] * 1000:.1f}, p99 {lag['p99'] * 1000:.1f} ms · "
        f"CPU {cores:.0%} of a core ({where})"
    )


def format_summary(summary: RunSummary) -> str:
    import pandas as pd

    lines = []
    head = summary.backend
    wl = summary.workload
    req = summary.requests
    reused = " · engine reused" if summary.engine.get("reused") else ""
    lines.append(
        f"{head.get('name')} ({head.get('engine')} {head.get('engine_version')}, {head.get('mode')}) · "
        f"model {summary.model.get('name')} · workload {wl.get('name')} · "
        f"{req['completed']}/{req['sent']} requests ok, {req['failed']} failed · "
        f"{summary.duration_s:.2f} s · {summary.status}{reused}"
    )
    rows = {}
    for key, metric in metrics.REQUEST_METRICS.items():
        d = summary.latency.get(key) or {}
        if metric.in_console and d.get("count"):
            rows[f"{metric.label} ({metric.unit})"] = {c: _shown(metric, d.get(c)) for c in metrics.STATS}
    if rows:
        lines.append(pd.DataFrame(rows).T.to_string(float_format=lambda v: f"{v:.1f}"))
    queue_line = _queue_wait_line(summary)
    if queue_line:
        lines.append(queue_line)
    measured: list[str] = []  # from the requests
    by_source: dict[str, list[str]] = defaultdict(list)  # the others, by their source (the GPUs)
    for key, run_metric in metrics.RUN_METRICS.items():
        value = summary.throughput.get(key)
        if run_metric.in_console and value is not None:
            text = f"{run_metric.label} {run_metric.show(value):.{run_metric.digits}f} {run_metric.unit}"
            (measured if run_metric.source is None else by_source[run_metric.source]).append(text)
    lines.append("throughput: " + " · ".join(measured))
    for source, figures in by_source.items():
        lines.append(f"{source.upper()} (measured phase): " + " · ".join(figures))
    dec, out_tps = summary.latency.get("decode_tps") or {}, summary.latency.get("output_tps") or {}
    if dec.get("count"):
        lines.append(
            f"per request: decode {dec['mean']:.1f} tok/s (mean), output {out_tps.get('mean') or 0:.1f} tok/s (mean)"
        )
    cache = summary.prefix_cache
    if cache.get("reported_by_engine") and cache.get("cached_share") is not None:
        lines.append(
            f"prefix cache: {cache['cached_share'] * 100:.1f}% of prompt tokens served from the engine's cache "
            f"({cache['cached_tokens_total']} tokens)"
        )
    hit_line = cache_hit_line(summary)
    if hit_line:
        lines.append(hit_line)
    checked_line = structured_line(summary.structured)
    if checked_line:
        lines.append(checked_line)
    job_line = jobs_line(summary.jobs)
    if job_line:
        lines.append(job_line)
    data = wl.get("data")
    if data:
        lines.append(
            f"data: {data.get('path')} ({data.get('format')}, {data.get('records')} records, "
            f"sha256 {str(data.get('sha256'))[:12]}…)"
        )
    lines.append(_memory_line(summary.memory))
    client_line = _client_line(summary.harness)
    if client_line:
        lines.append(client_line)
    server_line = _server_metrics_line(summary.server_metrics)
    if server_line:
        lines.append(server_line)
    turns = summary.per_turn
    if len(turns) > 1:
        df = pd.DataFrame(turns).set_index("turn")
        columns = ["requests", "prompt_tokens_mean", "ttft_mean_s", "ttft_p90_s", "e2e_mean_s"]
        names = ["requests", "prompt tok", "TTFT mean ms", "TTFT p90 ms", "E2E mean ms"]
        if cache.get("reported_by_engine"):
            columns.insert(2, "cached_share")
            names.insert(2, "cached %")
        df = df[columns].astype({c: float for c in columns if c != "requests"})
        for col in ("ttft_mean_s", "ttft_p90_s", "e2e_mean_s"):
            df[col] = df[col] * 1000
        if "cached_share" in df:
            df["cached_share"] = df["cached_share"] * 100
        df.columns = names
        lines.append("per turn:\n" + df.to_string(float_format=lambda v: f"{v:.1f}"))
    adapter_table = adapters_table(summary)
    if adapter_table:
        lines.append(adapter_table)
    for w in summary.warnings:
        lines.append(f"WARNING: {w}")
    if summary.taint:
        lines.append("TAINTED: " + "; ".join(summary.taint))
    return "\n".join(lines)


def adapters_table(summary: RunSummary) -> Optional[str]:
    """Per LoRA adapter (the summary's ``adapters``): share, requests, TTFT and TPOT p50, output tokens/s."""
    import pandas as pd

    if not summary.adapters:
        return None
    rows = {}
    for name, ad in summary.adapters.items():
        lat, thr = ad.get("latency") or {}, ad.get("throughput") or {}
        rows[name] = {
            "share %": (ad.get("share") or 0) * 100,
            "ok": ad.get("completed", 0),
            "failed": ad.get("failed", 0),
            "TTFT p50 ms": ((lat.get("ttft_s") or {}).get("p50") or float("nan")) * 1000,
            "TPOT p50 ms": ((lat.get("tpot_s") or {}).get("p50") or float("nan")) * 1000,
            "output tok/s": thr["output_tokens_per_s"] if is_number(thr.get("output_tokens_per_s")) else float("nan"),
        }
    return "per LoRA adapter:\n" + pd.DataFrame(rows).T.to_string(float_format=lambda v: f"{v:.1f}")


def cache_hit_line(summary: RunSummary) -> Optional[str]:
    figures = cache_hit_figures(summary)
    if figures is None:
        return None

    def pct(v: Optional[float]) -> str:
        return "–" if v is None else f"{v * 100:.1f}%"

    target = f"target {pct(figures['target'])} · " if figures["target"] is not None else ""
    return (
        f"prefix-cache hit rate: {target}theoretical {pct(figures['theoretical'])} · "
        f"measured {pct(figures['measured'])}"
        + ("" if figures["measured"] is not None else " (the engine reports no cached tokens)")
    )


def _shown(metric: type[metrics.Metric], value: Optional[float]) -> float:
    return float("nan") if value is None else metric.show(value)


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


def _queue_wait_line(summary: RunSummary) -> Optional[str]:
    """What the queue wait means, where it is a large part of the TTFT (a quarter or more at the median)."""
    queue, first = summary.latency.get("queue_wait_s") or {}, summary.latency.get("ttft_s") or {}
    queue_p50, ttft_p50 = queue.get("p50"), first.get("p50")
    if not queue.get("count") or not ttft_p50 or not queue_p50 or queue_p50 < 0.25 * ttft_p50:
        return None
    note = ((summary.backend.get("info") or {}).get("notes") or {}).get("queue_wait")  # the engine's own word on it
    hint = f": {note}" if note else ""
    return (
        f"queue wait: {queue_p50 * 1e3:.0f} ms of the TTFT p50 {ttft_p50 * 1e3:.0f} ms passed before the engine "
        f"began the request, waiting behind the requests it was serving{hint}"
    )


def _memory_line(mem: dict[str, Any]) -> str:
    parts = []
    if mem.get("rss_peak_bytes"):
        parts.append(f"peak RSS {_gib(mem['rss_peak_bytes'])}")
    if mem.get("gpu_peak_allocated_bytes"):
        parts.append(f"GPU peak allocated {_gib(mem['gpu_peak_allocated_bytes'])}")
    if mem.get("gpu_nvml_peak_used_bytes"):
        parts.append(f"GPU used (NVML) {_gib(mem['gpu_nvml_peak_used_bytes'])}")
    if mem.get("gpu_nvml_peak_process_used_bytes"):
        parts.append(f"GPU used by the engine (NVML) {_gib(mem['gpu_nvml_peak_process_used_bytes'])}")
    if mem.get("weights_bytes"):
        parts.append(f"weights {_gib(mem['weights_bytes'])}")
    if mem.get("kv_bytes_per_token"):
        parts.append(f"KV cache {mem['kv_bytes_per_token'] / 1024:.1f} KiB/token")
    if mem.get("kv_tokens_in_budget") is not None:
        parts.append(f"{mem['kv_tokens_in_budget']:,} KV tokens fit in {mem['budget_gib']} GiB")
    return "memory: " + (" · ".join(parts) if parts else "n/a")


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


TABLE_FIGURES = (
    ("ttft_s", "p50"),
    ("ttft_s", "p99"),
    ("tpot_s", "p50"),
    ("output_tokens_per_s", None),
    ("requests_per_s", None),
)


def format_sweep(sweep: dict[str, Any]) -> str:
    """One row per point: overrides, status, load, key figures (mean ± CI half-width across
    repeats); under a time-shaped point, a row per stage ("3.0", "3.1", …) with the stage's own."""
    import pandas as pd

    rows = []
    points = sweep.get("points", [])
    varying = varying_overrides([p.get("overrides") or [] for p in points])
    sourced = [
        (k, None)
        for k, m in metrics.RUN_METRICS.items()
        if m.source and any(k in (p.get("figures") or {}) for p in points)
    ]
    for p, changed in zip(points, varying):
        row: dict[str, Any] = {
            "point": p.get("index"),
            "overrides": " ".join(changed) or "-",
            "status": p.get("status"),
            "load s": f"{p.get('load_s') or 0:.1f}",
            "reused": "yes" if p.get("engine_reused") else "no",
        }
        _add_figures(row, p.get("figures") or {}, sourced)
        rows.append(row)
        for stage in p.get("stages") or []:  # a time-shaped point: a row per stage below its own
            stage_row: dict[str, Any] = {
                "point": f"{p.get('index')}.{stage.get('index')}",
                "overrides": f"  stage {stage.get('index')}: {stage.get('load')}",
                "status": "",
                "load s": "",
                "reused": "",
            }
            _add_figures(stage_row, stage.get("figures") or {}, sourced)
            rows.append(stage_row)
    lines = []
    if rows:
        lines.append(pd.DataFrame(rows).set_index("point").to_string())
    lines.append(f"engine loads: {sweep.get('engine_loads', 0)} for {len(rows)} points")
    search = sweep.get("slo_search")
    if search:
        lines.append(search.get("answer_text", ""))
    return "\n".join(lines)


def _add_figures(row: dict[str, Any], figures: dict[str, Any], sourced: Sequence[tuple[str, None]]) -> None:
    """The table's figure columns of a point (or a stage of one) into ``row``."""
    for metric, stat in (*TABLE_FIGURES, *sourced):
        m = metrics.get(metric)
        label = f"{m.label} {stat}" if stat else m.label
        row[f"{label} ({m.unit})"] = _figure_text(m, figures.get(figure_name(metric, stat)))


def _figure_text(metric: type[metrics.Metric], value: Any) -> str:
    if isinstance(value, dict):  # repeats: mean ± half-width of the 95 % CI
        mean = value.get("mean")
        if mean is None:
            return "-"
        text = f"{metric.show(mean):.{metric.digits}f}"
        if value.get("ci_high") is not None:
            text += f" ± {metric.show(value['ci_high'] - mean):.{metric.digits}f}"
        return text
    return "-" if value is None else f"{metric.show(value):.{metric.digits}f}"


def pages_lines(folder: Path) -> list[str]:
    """Where a run's pages are: its report.html; compare.html of a run with repeats or a sweep."""
    return [f"{page.stem}: {page}" for page in (folder / "report.html", folder / "compare.html") if page.is_file()]


def next_run_lines(run_dir: Path, engine: str, workload: str, other: str, overrides: Sequence[str]) -> list[str]:
    """The commands that run the same overrides on engine ``other`` into a folder beside
    ``run_dir`` and compare the two: exact, so they can be pasted as printed."""
    suffix = f"-{engine}-{workload}"
    if run_dir.name.endswith(suffix):  # the default name, <date>-<time>-<engine>-<workload>: the same time
        stem = run_dir.name.removesuffix(suffix)
        other_dir, compare_dir = run_dir.with_name(f"{stem}-{other}-{workload}"), run_dir.with_name(f"compare-{stem}")
    else:
        other_dir, compare_dir = (
            run_dir.with_name(f"{run_dir.name}-{other}"),
            run_dir.with_name(f"compare-{run_dir.name}"),
        )
    run = ["python", "-m", "harness", f"backend={other}", *overrides, f"hydra.run.dir={other_dir}"]
    compare = ["python", "-m", "harness.compare", str(run_dir), str(other_dir), "--out", str(compare_dir)]
    return [
        f"next: the same run on {other}, then the two side by side:",
        "  " + shlex.join(run),
        "  " + shlex.join(compare),
    ]
