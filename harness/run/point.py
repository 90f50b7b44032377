"""A load point: one workload, at one load, run against an engine session → a typed result.

Order: validate the config (before any model loads) → open the session (in server mode its
server is launched first, and loads while the tokenizer is read) → build the workload from the
session's tokenizer → check it fits the engine (refused in one line, before any request) →
load the engine, or wait for the server, if the session has not yet → warm up (not counted) →
scrape the engine's metrics → the measured phase → scrape again → tables, summary and report,
also after an error or Ctrl-C.

``run_benchmark(cfg, run_dir)`` is one point on its own session, opened and closed for it.
"""
from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence

from omegaconf import DictConfig, OmegaConf

from core.errors import ConfigError, EngineFailed
from harness.client.client_load import ClientLoad
from harness.client.driver import Driver
from harness.client.saturation import SaturationDetector
from harness.config import RunConfig, config_sha256
from harness.results.formulas import kv_cache_bytes_per_token, kv_tokens_in_budget
from harness.results.record import RequestRecord
from harness.results.schema import COMPLETE, FAILED, INTERRUPTED, SATURATED, RunSummary
from harness.results.store import RunWriter, check_run_dir_free
from harness.results.summary import run_warnings, summarize
from harness.run.session import EngineSession
from harness.telemetry import memory as mem
from harness.telemetry import prometheus
from harness.telemetry.environment import capture_environment
from harness.telemetry.gpu_phase import GpuRun, run_figures
from workloads import workload_registry
from workloads.base import WorkloadPlan

log = logging.getLogger("harness")


@dataclass
class RunOutcome:
    run_dir: Path
    summary: RunSummary
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
    """One load point on an engine session of its own."""
    cfg.validate()
    session = EngineSession(cfg, run_dir)  # opened by run_point, after its own checks
    try:
        return run_point(session, cfg, run_dir, progress=progress)
    finally:
        session.close()


def run_point(
    session: EngineSession, cfg: RunConfig, run_dir: Path, progress: Optional[bool] = None,
    repeat: Optional[dict[str, int]] = None, prefix_cache_reset: Optional[bool] = None,
    on_loaded: Optional[Callable[[], None]] = None, overrides: Sequence[str] = (),
) -> RunOutcome:
    """Run ``cfg``'s workload against ``session``'s engine (loading it first if needed).

    ``overrides``: the command line's Hydra overrides, kept as overrides.yaml. (Hydra's own
    ``.hydra/`` copy is off: it is written before the run claims its folder, so a second run
    given the same folder would overwrite it.)"""
    cfg.validate()
    check_run_dir_free(run_dir)
    workload = workload_registry.create(cfg.workload.name, cfg.workload)
    # from before open(): a server launched there loads while the tokenizer is read
    sampler = mem.MemorySampler(cfg.memory.sample_interval_s, engine_process=lambda: session.engine_process()).start()
    reused = session.loaded
    try:
        session.open()
        assert session.backend is not None and session.renderer is not None and session.corpus is not None
        plan = workload.build(session.renderer, session.corpus, cfg.seed)
        session.backend.check_workload(plan)
        load_s = session.ensure_loaded()
    except BaseException:
        sampler.stop()
        raise
    backend = session.backend
    if not reused and on_loaded is not None:
        on_loaded()
    session.points_served += 1
    engine = {
        "reused": reused,
        "session_load_s": session.load_s,
        "import_s": session.import_s,
        "points_served": session.points_served,
        "prefix_cache_reset": prefix_cache_reset,
    }

    # The engine is up: from here on the run folder fills, and is finished even on error.
    writer = RunWriter(run_dir, save_output_text=cfg.save_output_text, tokenize=session.renderer.encode_batch)
    writer.write_text("config.yaml", OmegaConf.to_yaml(OmegaConf.structured(cfg)))
    writer.write_text("overrides.yaml", OmegaConf.to_yaml(list(overrides)))
    workload_json = plan.to_json()
    writer.write_json("workload.json", workload_json)
    writer.write_json("env.json", capture_environment())
    status, error = FAILED, None
    started_at = datetime.now(timezone.utc).astimezone().isoformat(timespec="seconds")
    duration_s, t_measured = 0.0, None
    t0 = time.perf_counter()
    scrapes: dict[str, Optional[str]] = {"before": None, "after": None}
    detector = SaturationDetector(cfg.saturation) if plan.open_loop and cfg.saturation.enabled else None
    on_record, close_progress = _with_progress(writer.append, plan, progress, cfg.progress)
    driver = Driver(session.backend, session.renderer, plan, on_record=on_record, saturation=detector,
                    workers=_client_workers(cfg, plan, backend), spin=cfg.client.pacing == "spin",
                    event_loop=cfg.client.event_loop)
    client_load = ClientLoad()
    try:

        warm_up = plan.warmup and (not reused or cfg.sweep.warmup_every_point)
        engine["warmed_up"] = bool(warm_up)

        async def warm_up_then_measure() -> float:
            if warm_up:
                log.info("warm-up: %d requests (not counted)", len(plan.warmup))
                await Driver(session.backend, session.renderer, plan, on_record=lambda r: None).run(plan.warmup, open_loop=False)
                _check_engine(session, writer, run_dir)
                if cfg.sweep.reset_prefix_cache:  # the warm-up's prompts must not be cached for the measured ones
                    engine["prefix_cache_reset"] = await session.reset_prefix_cache_async()
            scrapes["before"] = session.scrape_metrics()
            mem.reset_torch_gpu_peaks()
            client_load.start()
            try:
                return await driver.run(plan.sessions, plan.open_loop)
            finally:
                client_load.stop(driver.worker_loads)

        try:
            duration_s = session.run(warm_up_then_measure())
        finally:
            close_progress()
            if driver.t0:  # the measured phase began (also when it was interrupted)
                t0 = t_measured = driver.t0
        _check_engine(session, writer, run_dir)
        status = SATURATED if driver.saturated else COMPLETE
    except KeyboardInterrupt:
        status, error = INTERRUPTED, "interrupted by the user (Ctrl-C)"
        raise
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        with _interrupts_deferred():  # a second Ctrl-C must not cut the writing short
            # Each of the three is written on its own: one failing costs only itself, never the
            # others (requests.jsonl already holds every row).
            summary = _guarded("summary", lambda: _final_summary(
                session, cfg, plan, workload_json, writer, sampler, scrapes, driver, status, error, started_at,
                duration_s, t_measured, load_s, engine, repeat, client_load), run_dir)
            sampler.stop()
            if summary is None:
                summary = RunSummary(status=status, error=error, started_at=started_at, load_s=load_s, engine=engine,
                                     requests={"sent": len(writer.records), "completed": sum(r.ok for r in writer.records),
                                               "failed": sum(not r.ok for r in writer.records)})
            _guarded("requests.parquet and memory.parquet",
                     lambda: writer.write_tables(sampler.samples, t0, sampler.gpu_samples), run_dir)
            _guarded("summary.json", lambda: writer.write_summary(summary), run_dir)
            if cfg.report:
                _write_report(run_dir)
    return RunOutcome(run_dir, summary, writer.records)


def _final_summary(session: EngineSession, cfg: RunConfig, plan: WorkloadPlan, workload_json: dict[str, Any],
                   writer: RunWriter, sampler: mem.MemorySampler, scrapes: dict[str, Optional[str]], driver: Driver,
                   status: str, error: Optional[str], started_at: str, duration_s: float, t_measured: Optional[float],
                   load_s: float, engine: dict[str, Any], repeat: Optional[dict[str, int]],
                   client_load: ClientLoad) -> RunSummary:
    """The run's summary, after the last sample and the second scrape."""
    sampler.stop()  # its last sample comes after the measured phase
    if scrapes["before"] is not None:
        scrapes["after"] = session.scrape_metrics()
    if status not in (COMPLETE, SATURATED) and writer.records:
        duration_s = max(r.end_s for r in writer.records)
    gpu = _gpu_figures(sampler, t_measured, duration_s)
    summary = RunSummary(
        status=status, error=error, started_at=started_at, backend=session.describe(),
        model=session.model.describe() if session.model else {},
        workload=_workload_summary(cfg, plan, workload_json),
        seed=cfg.seed, **summarize(writer.records, duration_s, cfg.slo, gpu.phase if gpu else None),
        memory=_memory_summary(session, sampler, t_measured, cfg, gpu), load_s=load_s, engine=engine,
        config_sha256=config_sha256(cfg), repeat=repeat, saturated=driver.saturated,
        server_metrics=_server_metrics(scrapes, writer), gpu=gpu.section if gpu else None,
    )
    summary.harness.update(client_load.figures())
    summary.warnings = run_warnings(summary) + summary.warnings
    return summary


@contextlib.contextmanager
def _interrupts_deferred() -> Iterator[None]:
    """Ctrl-C (SIGINT) during the final writes is held until they are done, then raised; SIGTERM
    and SIGHUP come as SIGINT (harness/cli.py). Outside the main thread nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pressed: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: pressed.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if pressed:
        log.warning("interrupted again while writing the results: they were written first")
        raise KeyboardInterrupt


def _guarded(what: str, write: Callable[[], Any], run_dir: Path) -> Any:
    """Do one of the final writes; a failure is one warning line, and the others go on."""
    try:
        return write()
    except Exception as exc:  # noqa: BLE001 - the other files of the run folder still get written
        log.warning("%s not written (%s: %s); requests.jsonl in %s has every finished request",
                    what, type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "", run_dir)
        return None


def _client_workers(cfg: RunConfig, plan: WorkloadPlan, backend: Any) -> int:
    """``client.workers`` resolved: an HTTP backend's setting or default; 1 in-process."""
    from backends.http.backend import HTTPBackend
    from harness.client.workers import resolve_workers

    in_flight = plan.concurrency or (None if plan.open_loop else 1)
    return resolve_workers(cfg.client.workers, isinstance(backend, HTTPBackend), in_flight)


def _workload_summary(cfg: RunConfig, plan: WorkloadPlan, workload_json: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": plan.name,
        "sha256": workload_json["sha256"],
        "prompts_sha256": workload_json.get("prompts_sha256"),
        "requests_planned": plan.num_requests,
        "sessions": len(plan.sessions),
        "open_loop": plan.open_loop,
        "concurrency": plan.concurrency,
        "rate": getattr(cfg.workload, "rate", None),
        "exact_output_len": plan.exact_output_len,
        **({"data": {k: v for k, v in plan.source.items() if k in ("path", "format", "sha256", "records")}}
           if plan.source else {}),
        **plan.info,
        "greedy": float(plan.sampling.get("temperature", 0.0)) == 0.0,
    }


def _write_report(run_dir: Path) -> None:
    """report.html from the finished run folder; a failure loses the report only, never the data."""
    try:
        from harness.reports.run_report import write_report

        log.info("report: %s", write_report(run_dir))
    except Exception as exc:  # noqa: BLE001 - the run's tables and summary are already on disk
        log.warning("report.html not written (%s: %s); rebuild it with: python -m harness.report %s",
                    type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "", run_dir)


def _check_engine(session: EngineSession, writer: RunWriter, run_dir: Path) -> None:
    """End the run, keeping what was measured, when the engine can no longer serve."""
    reason = session.fatal_error()
    if reason:
        failed = sum(1 for r in writer.records if not r.ok)
        raise EngineFailed(
            f"{reason}; {failed} of {len(writer.records)} requests failed; the results so far are in {run_dir}"
        )


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


def _gpu_figures(sampler: mem.MemorySampler, t_measured: Optional[float], duration_s: float) -> Optional[GpuRun]:
    """The GPUs' figures from NVML's samples; None without NVML (a CPU machine)."""
    if sampler.gpu is None or not sampler.gpu_samples:
        return None
    t1 = t_measured + duration_s if t_measured is not None else None
    return run_figures([d.describe() for d in sampler.gpu.devices], sampler.gpu.notes, sampler.gpu_samples,
                       sampler.engine_local, t_measured, t1, max(sampler.interval_s, sampler.GPU_MIN_INTERVAL_S))


def _memory_summary(session: EngineSession, sampler: mem.MemorySampler, t_measured, cfg: RunConfig,
                    gpu: Optional[GpuRun]) -> dict[str, Any]:
    engine = session.engine_memory()
    out: dict[str, Any] = {
        "rss_peak_bytes": sampler.peak_rss(),
        "rss_peak_measured_bytes": sampler.peak_rss(t_measured) if t_measured else None,
        "gpu_nvml_peak_used_bytes": None,
        "gpu_nvml_peak_process_used_bytes": None,
        **(gpu.memory if gpu else {}),
        **mem.torch_gpu_peaks(),
        **engine,
    }
    bytes_per_value = engine.get("kv_bytes_per_value")
    if bytes_per_value:
        out["kv_bytes_per_token"] = kv_cache_bytes_per_token(session.hf_config(), bytes_per_value)
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
