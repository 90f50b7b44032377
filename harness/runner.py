"""One benchmark run, start to finish, and what it leaves in its run folder.

Order: validate the config (before any model loads) → resolve the model → build the
workload from the model's tokenizer → load the engine (in server mode: launch its server)
→ warm up (not counted) → scrape the engine's metrics → the measured phase → scrape again
→ tables and summary, also after an error or Ctrl-C.
"""
from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime, timezone
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf

from backends import Backend, check_backend_available, create_backend
from harness import memory as mem
from harness import prometheus
from harness.config import RunConfig
from harness.driver import Driver
from harness.environment import capture_environment
from harness.errors import ConfigError, EngineFailed, HarnessError
from harness.metrics import RequestRecord, kv_cache_bytes_per_token, kv_tokens_in_budget
from harness.model_store import ModelFiles, resolve_model
from harness.results import RunWriter, check_run_dir_free
from harness.summary import summarize
from workloads import workload_registry
from workloads.base import WorkloadPlan
from workloads.corpus import TokenizedCorpus
from workloads.prompts import PromptRenderer

log = logging.getLogger("harness")


@dataclass
class RunOutcome:
    run_dir: Path
    summary: dict[str, Any]
    records: list[RequestRecord]


def to_run_config(cfg: DictConfig) -> RunConfig:
    """The composed Hydra config as dataclasses, validated; ConfigError on bad values."""
    try:
        run_cfg = OmegaConf.to_object(cfg)
    except Exception as exc:  # noqa: BLE001 - omegaconf's errors are multi-line
        raise ConfigError(str(exc).splitlines()[0]) from None
    assert isinstance(run_cfg, RunConfig)
    run_cfg.validate()
    return run_cfg


def run_benchmark(cfg: RunConfig, run_dir: Path, progress: Optional[bool] = None) -> RunOutcome:
    cfg.validate()
    check_run_dir_free(run_dir)
    workload = workload_registry.create(cfg.workload.name, cfg.workload)
    check_backend_available(cfg.backend)

    model = resolve_model(cfg.model)
    backend: Backend = create_backend(cfg.backend, model)
    backend.run_dir = run_dir
    tokenizer = backend.get_tokenizer()
    renderer = PromptRenderer(tokenizer)
    plan = workload.build(renderer, TokenizedCorpus(tokenizer), cfg.seed)
    backend.check_workload(plan)

    sampler = mem.MemorySampler(cfg.memory.sample_interval_s).start()
    log.info("loading %s on %s", model.name, cfg.backend.name)
    t_load = time.perf_counter()
    try:
        backend.load()  # in server mode: launch the server and wait for its health
    except BaseException as exc:
        sampler.stop()
        _safe(backend.close)
        if isinstance(exc, Exception) and not isinstance(exc, HarnessError):
            log.debug("load failed", exc_info=True)
            detail = (str(exc).strip().splitlines() or [""])[0][:300]
            raise HarnessError(f"backend {cfg.backend.name} could not load {model.name}: {type(exc).__name__}: {detail}") from exc
        raise
    load_s = time.perf_counter() - t_load

    # The engine is up: from here on the run folder fills, and is finished even on error.
    writer = RunWriter(run_dir, save_output_text=cfg.save_output_text)
    writer.write_text("config.yaml", OmegaConf.to_yaml(OmegaConf.structured(cfg)))
    workload_json = plan.to_json()
    writer.write_json("workload.json", workload_json)
    writer.write_json("env.json", capture_environment())
    status, error = "failed", None
    started_at = datetime.now(timezone.utc).astimezone().isoformat(timespec="seconds")
    duration_s, t0, t_measured = 0.0, time.perf_counter(), None
    scrapes: dict[str, Optional[str]] = {"before": None, "after": None}
    try:
        on_record, close_progress = _with_progress(writer.append, plan, progress, cfg.progress)
        driver = Driver(backend, renderer, plan, on_record=on_record)

        async def warm_up_then_measure() -> float:
            # One event loop for both phases: engines (vLLM's AsyncLLM) and connection pools
            # bind to the loop they first run in.
            if plan.warmup:
                log.info("warm-up: %d requests (not counted)", len(plan.warmup))
                await Driver(backend, renderer, plan, on_record=lambda r: None).run(plan.warmup, open_loop=False)
                _check_engine(backend, writer, run_dir)
            scrapes["before"] = _scrape(backend)
            mem.reset_torch_gpu_peaks()
            return await driver.run(plan.sessions, plan.open_loop)

        try:
            duration_s = asyncio.run(warm_up_then_measure())
        finally:
            close_progress()
            if driver.t0:  # the measured phase began (also when it was interrupted)
                t0 = t_measured = driver.t0
        _check_engine(backend, writer, run_dir)
        status = "complete"
    except KeyboardInterrupt:
        status, error = "interrupted", "interrupted by the user (Ctrl-C)"
        raise
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        try:  # the measured data reaches disk first: closing an engine can be slow
            summary = _finish_summary(
                cfg, backend, model, plan, writer, sampler, scrapes, status=status, error=error,
                started_at=started_at, duration_s=duration_s, t_measured=t_measured, load_s=load_s,
                workload_sha256=workload_json["sha256"])
            writer.write_tables(sampler.samples, t0)
            writer.write_json("summary.json", summary)
        finally:
            try:
                backend.close()
            except Exception as exc:  # noqa: BLE001 - the results are written; say so and go on
                log.warning("closing the %s backend failed: %s", cfg.backend.name, exc)
            if cfg.report:
                _write_report(run_dir)
    return RunOutcome(run_dir, summary, writer.records)


def _finish_summary(
    cfg: RunConfig, backend: Backend, model: ModelFiles, plan: WorkloadPlan, writer: RunWriter,
    sampler: mem.MemorySampler, scrapes: dict[str, Optional[str]], *, status: str, error: Optional[str],
    started_at: str, duration_s: float, t_measured: Optional[float], load_s: float, workload_sha256: str,
) -> dict[str, Any]:
    """summary.json: the run's figures and what ran (also for failed or interrupted runs)."""
    sampler.sample()
    sampler.stop()
    if scrapes["before"] is not None:
        scrapes["after"] = _scrape(backend)
    if status != "complete" and writer.records:
        duration_s = max(r.end_s for r in writer.records)
    summary = {
        "status": status,
        "error": error,
        "started_at": started_at,
        "backend": {
            "name": cfg.backend.name,
            "mode": cfg.backend.mode,
            "engine": _safe(lambda: backend.engine_name),
            "engine_version": _safe(lambda: backend.engine_version),
            "info": _safe(backend.engine_info) or {},
        },
        "model": model.describe(),
        "workload": {
            "name": plan.name,
            "sha256": workload_sha256,
            "requests_planned": plan.num_requests,
            "sessions": len(plan.sessions),
            "open_loop": plan.open_loop,
            "concurrency": plan.concurrency,
            "exact_output_len": plan.exact_output_len,
        },
        "seed": cfg.seed,
        **summarize(writer.records, duration_s, cfg.slo),
        "memory": _memory_summary(backend, model, sampler, t_measured, cfg),
        "load_s": load_s,
    }
    server_metrics = _server_metrics(scrapes, writer)
    if server_metrics is not None:
        summary["server_metrics"] = server_metrics
    return summary


def _write_report(run_dir: Path) -> None:
    """report.html from the finished run folder; a failure loses the report only, never the data."""
    try:
        from harness.report import write_report

        log.info("report: %s", write_report(run_dir))
    except Exception as exc:  # noqa: BLE001 - the run's tables and summary are already on disk
        log.warning("report.html not written (%s: %s); rebuild it with: python -m harness.report %s",
                    type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "", run_dir)


def _check_engine(backend: Backend, writer: RunWriter, run_dir: Path) -> None:
    """End the run, keeping what was measured, when the engine can no longer serve."""
    reason = _safe(backend.fatal_error)
    if reason:
        failed = sum(1 for r in writer.records if not r.ok)
        raise EngineFailed(
            f"{reason}; {failed} of {len(writer.records)} requests failed; the results so far are in {run_dir}"
        )


def _scrape(backend: Backend) -> Optional[str]:
    """The engine's Prometheus text, or None (no endpoint, or it did not answer)."""
    try:
        return backend.scrape_metrics()
    except Exception as exc:  # noqa: BLE001 - metrics are extra; the run goes on without them
        log.warning("could not scrape the engine's metrics: %s", exc)
        return None


def _server_metrics(scrapes: dict[str, Optional[str]], writer: RunWriter) -> Optional[dict[str, Any]]:
    """Both raw scrapes into the run folder, and the measured phase's difference for the summary."""
    before, after = scrapes["before"], scrapes["after"]
    if before is None:
        return None
    writer.write_text("metrics_before.txt", before)
    if after is None:
        return None
    writer.write_text("metrics_after.txt", after)
    try:
        return prometheus.summarize(before, after)
    except Exception as exc:  # noqa: BLE001
        log.warning("could not parse the engine's metrics: %s", exc)
        return None


def _memory_summary(backend: Backend, model: ModelFiles, sampler: mem.MemorySampler, t_measured, cfg: RunConfig) -> dict[str, Any]:
    engine = _safe(backend.memory) or {}
    out: dict[str, Any] = {
        "rss_peak_bytes": sampler.peak_rss(),
        "rss_peak_measured_bytes": sampler.peak_rss(t_measured) if t_measured else None,
        "gpu_nvml_peak_used_bytes": sampler.peak_gpu_used(),
        **mem.torch_gpu_peaks(),
        **engine,
    }
    bytes_per_value = engine.get("kv_bytes_per_value")
    if bytes_per_value:
        hf_config = _safe(model.hf_config) or {}
        out["kv_bytes_per_token"] = kv_cache_bytes_per_token(hf_config, bytes_per_value)
        if cfg.memory.budget_gib and out["kv_bytes_per_token"] and engine.get("weights_bytes"):
            out["budget_gib"] = cfg.memory.budget_gib
            out["kv_tokens_in_budget"] = kv_tokens_in_budget(
                cfg.memory.budget_gib * 2**30, engine["weights_bytes"], out["kv_bytes_per_token"]
            )
    return out


def _with_progress(append, plan: WorkloadPlan, override: Optional[bool], enabled: bool):
    """The record callback, ticking a progress bar on stderr; and the bar's close."""
    show = enabled if override is None else override
    if not show:
        return append, lambda: None
    from tqdm import tqdm

    bar = tqdm(total=plan.num_requests, unit="req", desc="requests", dynamic_ncols=True)

    def append_and_tick(record: RequestRecord) -> None:
        append(record)
        bar.update(1)

    return append_and_tick, bar.close


def _safe(fn):
    try:
        return fn()
    except Exception:  # noqa: BLE001 - reporting must not mask the run's own error
        return None
