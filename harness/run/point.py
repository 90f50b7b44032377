"""A load point: one workload, at one load, run against an engine session → a typed result.

Order: validate the config (before any model loads) → open the session (in server mode its
server is launched first, and loads while the tokenizer is read) → build the workload from the
session's tokenizer → check it fits the engine (refused in one line, before any request) →
load the engine, or wait for the server, if the session has not yet → warm up (not counted) →
scrape the engine's metrics → the measured phase (the machine's state sampled around it:
machine.json, and ``taint`` in the summary; the server's /metrics sampled every
``server_metrics.interval_s``: server_metrics.parquet) → scrape again → tables, summary and
report, also after an error or Ctrl-C. Every scrape runs off the event loop with a deadline of
``server_metrics.timeout_s`` as a whole (harness/telemetry/server_metrics.py): a server whose
/metrics is slow costs a run at most that, once per scrape it gives up.

The measured phase runs in this process (:class:`harness.client.driver.Driver`), or in
client worker processes (:class:`harness.client.workers.WorkerPool`, ``client.workers``) where
the backend can be driven from them (``Backend.worker_client()``): the point chooses. With
``client.cluster=ray`` it runs on the hosts of a Ray cluster (:class:`harness.client.ray_pool.RayPool`):
the cluster is reached first of all (refused in seconds, before any folder or server), the
hosts are started and their clocks measured once the engine is up (harness/run/cluster.py), and
they end with the point.

``run_benchmark(cfg, run_dir)`` is one point on its own session, opened and closed for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np
from omegaconf import OmegaConf

from core.errors import EngineFailed
from core.interrupts import interrupts_held, interrupts_kept
from core.structured import describe_constraint
from harness.client.client_load import ClientLoad
from harness.client.driver import Driver
from harness.client.ray_hosts import RayHosts
from harness.client.ray_pool import RayPool
from harness.client.saturation import SaturationDetector
from harness.client.workers import WorkerPool, resolve_workers
from harness.config import RunConfig, config_sha256
from harness.reports.run_report import write_report
from harness.results.formulas import kv_cache_bytes_per_token, kv_tokens_in_budget
from harness.results.kept import RequestTable
from harness.results.record import RequestRecord
from harness.results.schema import (
    COMPLETE,
    FAILED,
    HOSTS,
    INTERRUPTED,
    INTERRUPTED_ERROR,
    MACHINE,
    METRICS_AFTER,
    METRICS_BEFORE,
    SATURATED,
    SERVER_METRICS,
    RunSummary,
)
from harness.results.store import RunWriter, check_run_dir_free
from harness.results.summary import run_warnings, summarize, time_windows
from harness.run.cluster import connect_cluster, start_hosts
from harness.run.session import EngineSession
from harness.telemetry import memory as mem
from harness.telemetry import prometheus
from harness.telemetry import server_metrics as server_series
from harness.telemetry.environment import capture_environment
from harness.telemetry.gpu_phase import GpuRun, run_figures
from harness.telemetry.machine_monitor import MachineMonitor
from harness.telemetry.machine_state import MachineState
from workloads import workload_registry
from workloads.base import WorkloadPlan, has_sub_agents
from workloads.lora import describe_traffic

log = logging.getLogger("harness")


@dataclass
class RunOutcome:
    run_dir: Path
    summary: RunSummary
    records: RequestTable  # what the summary reads (harness/results/kept.py)


def run_benchmark(cfg: RunConfig, run_dir: Path, progress: Optional[bool] = None) -> RunOutcome:
    """One load point on an engine session of its own."""
    cfg.validate()
    session = EngineSession(cfg, run_dir)  # opened by run_point, after its own checks
    try:
        return run_point(session, cfg, run_dir, progress=progress)
    finally:
        session.close()


def run_point(
    session: EngineSession,
    cfg: RunConfig,
    run_dir: Path,
    progress: Optional[bool] = None,
    repeat: Optional[dict[str, int]] = None,
    prefix_cache_reset: Optional[bool] = None,
    on_loaded: Optional[Callable[[], None]] = None,
    overrides: Sequence[str] = (),
) -> RunOutcome:
    """Run ``cfg``'s workload against ``session``'s engine (loading it first if needed).

    ``overrides``: the command line's Hydra overrides, kept as overrides.yaml. (Hydra's own
    ``.hydra/`` copy is off: it is written before the run claims its folder, so a second run
    given the same folder would overwrite it.)"""
    cfg.validate()
    cluster = connect_cluster(cfg)  # client.cluster=ray: reached now, or refused in seconds
    check_run_dir_free(run_dir)
    workload = workload_registry.create(cfg.workload.name, cfg.workload)
    hosts: Optional[RayHosts] = None
    # from before open(): a server launched there loads while the tokenizer is read
    sampler = mem.MemorySampler(cfg.memory.sample_interval_s, engine_process=lambda: session.engine_process()).start()
    reused = session.loaded
    try:
        session.open()
        assert session.backend is not None and session.renderer is not None and session.corpus is not None
        t_plan = time.perf_counter()
        plan = workload.build(session.renderer, session.corpus, cfg.seed)
        plan_s = time.perf_counter() - t_plan
        if plan_s >= 2.0:  # a long timed run plans its requests for minutes before the first is sent
            log.info("workload plan: %d requests in %.1f s", plan.num_requests, plan_s)
        if plan.bytes_on_disk is not None:  # where TMPDIR is a tmpfs, that is memory: point it at a disk
            log.info(
                "workload plan: %d sessions kept on disk in %s (%.0f MB, removed at exit; TMPDIR sets the folder)",
                len(plan.sessions),
                tempfile.gettempdir(),
                plan.bytes_on_disk / 1e6,
            )
        warn_of_a_long_span(plan)
        session.backend.check_workload(plan)
        load_s = session.ensure_loaded()
        if cluster is not None:
            hosts = start_hosts(cluster, cfg, session, plan)
    except BaseException:
        sampler.stop()
        raise
    if not reused and on_loaded is not None:
        on_loaded()
    session.points_served += 1

    try:  # the client hosts (client.cluster=ray) end with the point, however it ends
        # The engine is up: from here on the run folder fills, and is finished even on error.
        writer = RunWriter(run_dir, save_output_text=cfg.save_output_text, tokenize=session.renderer.encode_batch)
        writer.write_text("config.yaml", OmegaConf.to_yaml(OmegaConf.structured(cfg)))
        writer.write_text("overrides.yaml", OmegaConf.to_yaml(list(overrides)))
        # streamed a session at a time: a long run's plan is never one JSON document in memory
        hashes = plan.hashes()
        writer.write_chunks("workload.json", plan.json_chunks(hashes))
        writer.write_json("env.json", capture_environment())
        detector = SaturationDetector(cfg.saturation) if plan.open_loop and cfg.saturation.enabled else None
        on_record, close_progress = _with_progress(writer.append, plan, progress, cfg.progress)
        driver = Driver(
            session.backend,
            session.renderer,
            plan,
            on_record=on_record,
            saturation=detector,
            spin=cfg.client.pacing == "spin",
            schedule=plan.schedule,
        )
        point = PointRun(
            session=session,
            cfg=cfg,
            plan=plan,
            workload_hashes=hashes,
            writer=writer,
            sampler=sampler,
            driver=driver,
            load_s=load_s,
            plan_s=plan_s,
            repeat=repeat,
            engine={
                "reused": reused,
                "session_load_s": session.load_s,
                "import_s": session.import_s,
                "points_served": session.points_served,
                "prefix_cache_reset": prefix_cache_reset,
            },
        )
        point.scraper = server_series.DeadlineScrape(
            lambda deadline_s: session.backend.scrape_metrics(deadline_s) if session.backend is not None else None,
            cfg.server_metrics.timeout_s,
        )
        measurement = _measurement(driver, session, cfg, plan, hosts)
        point.hosts = measurement if isinstance(measurement, RayPool) else None
    except BaseException:
        if hosts is not None:
            hosts.close()
        raise
    try:
        with interrupts_kept():
            try:
                point.duration_s = session.run(_warm_up_then_measure(point, measurement))
            finally:
                point.stop_machine_monitor()  # already stopped unless the measured phase was cut short
                close_progress()
                if driver.t0:  # the measured phase began (also when it was interrupted)
                    point.t_measured, point.t_stopped = driver.t0, time.perf_counter()
            _check_engine(session, writer, run_dir)
            point.status = SATURATED if driver.saturated else COMPLETE
    except KeyboardInterrupt:
        point.status, point.error = INTERRUPTED, INTERRUPTED_ERROR
        raise
    except Exception as exc:
        point.error = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        try:
            with _interrupts_deferred():  # a second Ctrl-C must not cut the writing short
                summary = _write_results(point, run_dir)
        finally:
            if hosts is not None:
                hosts.close()
    return RunOutcome(run_dir, summary, writer.records)


Measurement = Union[Driver, WorkerPool, RayPool]
LONG_SPAN_S = 3600.0


def warn_of_a_long_span(plan: WorkloadPlan) -> None:
    """A run of a count whose arrivals span over an hour is more often a rate or a trace's
    timestamps in the wrong unit than a wish: say so before the wait begins."""
    if not plan.open_loop or plan.schedule is not None:
        return
    last = plan.last_arrival()
    if last > LONG_SPAN_S:
        log.warning(
            "open loop: the last of %d requests is due %.3g h after the first (check workload.rate, or a "
            "trace's timestamps and workload.time_scale); Ctrl-C keeps what was measured",
            plan.num_requests,
            last / 3600,
        )


def _measurement(
    driver: Driver, session: EngineSession, cfg: RunConfig, plan: WorkloadPlan, hosts: Optional[RayHosts] = None
) -> Measurement:
    """The measured phase on the client hosts of a Ray cluster (``client.cluster=ray``); else in
    this process, or in ``client.workers`` client processes where the backend can be driven from
    them and the point has sessions and slots for more than one."""
    assert session.backend is not None
    if hosts is not None:
        remote = session.backend.remote_client()
        assert remote is not None and session.renderer is not None  # start_hosts checked it
        return RayPool(driver, hosts, remote, session.renderer, cfg.client)
    client = session.backend.worker_client()
    in_flight = driver.cap(plan.open_loop)
    workers = resolve_workers(cfg.client.workers, client is not None, in_flight)
    if plan.schedule is not None and not plan.open_loop:  # a cap that follows a schedule: one process
        if (cfg.client.workers or 1) > 1:
            log.info("client.workers=%d: a closed loop with a schedule runs in one client process", cfg.client.workers)
        return driver
    if has_sub_agents(plan.sessions):  # agent jobs: sub-agents wait on their parent's turn
        if (cfg.client.workers or 1) > 1:
            log.info("client.workers=%d: agent jobs (sub-agents) run in one client process", cfg.client.workers)
        return driver
    if client is None or min(workers, len(plan.sessions), in_flight or len(plan.sessions)) <= 1:
        return driver
    return WorkerPool(driver, client, workers, cfg.client.event_loop)


async def _warm_up_then_measure(point: PointRun, measurement: Measurement) -> float:
    session, cfg, plan = point.session, point.cfg, point.plan
    warm_up = bool(plan.warmup) and (not point.engine["reused"] or cfg.sweep.warmup_every_point)
    point.engine["warmed_up"] = warm_up
    if warm_up:
        log.info("warm-up: %d requests (not counted)", len(plan.warmup))
        assert session.backend is not None and session.renderer is not None  # the session is open
        await Driver(session.backend, session.renderer, plan, on_record=lambda r: None).run(
            plan.warmup, open_loop=False
        )
        _check_engine(session, point.writer, point.writer.run_dir)
        if cfg.sweep.reset_prefix_cache:  # the warm-up's prompts must not be cached for the measured ones
            point.engine["prefix_cache_reset"] = await session.reset_prefix_cache_async()
    point.scrapes["before"] = await point.scrape_off_loop("before")
    mem.reset_torch_gpu_peaks()
    point.start_machine_monitor()
    point.start_server_sampler()
    point.client_load.start()
    try:
        return await measurement.run(plan.sessions, plan.open_loop)
    finally:
        if point.server_sampler is not None:
            point.server_sampler.request_stop()  # joined off the loop, with the summary
        point.stop_machine_monitor()
        point.worker_loads = measurement.worker_loads if isinstance(measurement, (WorkerPool, RayPool)) else []
        point.client_load.stop(point.worker_loads)


@dataclass
class PointRun:
    """One point while it runs: what it was given, what it gathers, and how it ended. The
    summary is made from it at the end, also after an error or Ctrl-C."""

    session: EngineSession
    cfg: RunConfig
    plan: WorkloadPlan
    workload_hashes: Mapping[str, Optional[str]]  # workload.json's sha256 and prompts_sha256
    writer: RunWriter
    sampler: mem.MemorySampler
    driver: Driver
    load_s: float  # the engine's load paid by this point (0 when it reused a loaded engine)
    plan_s: float  # building the workload's plan (summary.workload.plan_s), before the engine's load
    engine: dict[str, Any]  # summary.engine: reused, session_load_s, import_s, points_served, …
    repeat: Optional[dict[str, int]] = None
    started_at: str = field(
        default_factory=lambda: datetime.now(timezone.utc).astimezone().isoformat(timespec="seconds")
    )
    client_load: ClientLoad = field(default_factory=ClientLoad)
    worker_loads: list[tuple[list[float], float]] = field(default_factory=list)
    scrapes: dict[str, Optional[str]] = field(default_factory=lambda: {"before": None, "after": None})
    status: str = FAILED
    error: Optional[str] = None
    duration_s: float = 0.0  # the measured phase's wall time
    t_measured: Optional[float] = None  # when the measured phase began (perf_counter)
    t_stopped: Optional[float] = None  # when it ended, finished or cut short (perf_counter)
    t_created: float = field(default_factory=time.perf_counter)  # the tables' zero when nothing was measured
    machine_monitor: Optional[MachineMonitor] = None  # sampling the machine during the measured phase
    machine: Optional[MachineState] = None  # what it found (machine.json); None when off or never started
    scraper: Optional[server_series.DeadlineScrape] = None  # every /metrics scrape, with its deadline
    scrape_status: dict[str, str] = field(default_factory=dict)  # before/after: ok | failed | slow | skipped | none
    server_sampler: Optional[server_series.ServerMetricsSampler] = None  # /metrics during the measured phase
    hosts: Optional[RayPool] = None  # client.cluster=ray: the client hosts (the summary's hosts, hosts.json)

    async def scrape_off_loop(self, when: str) -> Optional[str]:
        """One bounded scrape (before the phase) on a thread: the event loop goes on meanwhile."""
        return await asyncio.get_running_loop().run_in_executor(None, self.scrape, when)

    def scrape(self, when: str) -> Optional[str]:
        """One scrape with its deadline: the text, or None (no /metrics, failed, slow)."""
        if self.scraper is None:
            return None
        text, self.scrape_status[when] = server_series.scrape_text(self.scraper, when)
        return text

    def start_server_sampler(self) -> None:
        """Sample /metrics during the measured phase (``server_metrics.enabled``) where the
        backend has one (a slow or failed scrape before the phase does not stop it); a sampler
        that fails to start costs only its table."""
        if (
            not self.cfg.server_metrics.enabled
            or self.scraper is None
            or self.scrape_status.get("before", "none") == "none"
        ):
            return
        try:
            self.server_sampler = server_series.ServerMetricsSampler(
                self.scraper, self.cfg.server_metrics.interval_s
            ).start()
        except Exception as exc:  # noqa: BLE001 - the measurement goes on without it
            log.warning("the server's metrics are not sampled (%s: %s)", type(exc).__name__, exc)

    def stop_server_sampler(self) -> None:
        """End the sampling (idempotent; returns within about one scrape deadline)."""
        if self.server_sampler is not None:
            self.server_sampler.stop()

    def start_machine_monitor(self) -> None:
        """The machine's state before the measured phase, then sampled on a thread of its own
        (``machine.enabled``); a monitor that fails to start costs only machine.json."""
        settings = self.cfg.machine
        if not settings.enabled or self.machine_monitor is not None:
            return
        try:
            self.machine_monitor = MachineMonitor(
                settings.interval_s,
                engine_process=self.session.engine_process,
                gpu=self.sampler.gpu,
                ignore=settings.ignore,
            ).start()
        except Exception as exc:  # noqa: BLE001 - the measurement goes on without it
            log.warning("the machine's state is not recorded (%s: %s)", type(exc).__name__, exc)

    def stop_machine_monitor(self) -> None:
        """Stop the sampling (idempotent): ``machine`` holds the record and the taint."""
        if self.machine_monitor is None or self.machine is not None:
            return
        try:
            self.machine = self.machine_monitor.stop()
        except Exception as exc:  # noqa: BLE001 - the run's figures do not depend on it
            log.warning("the machine's state is not recorded (%s: %s)", type(exc).__name__, exc)

    def summary(self) -> RunSummary:
        """The run's summary, after the last memory sample and the second scrape."""
        self.sampler.stop()  # its last sample comes after the measured phase
        self.stop_server_sampler()
        if self.scrapes["before"] is not None:
            self.scrapes["after"] = self.scrape("after")
        records = self.writer.records
        if self.status not in (COMPLETE, SATURATED):  # cut short: T runs to the interrupt (or the error)
            ran = self.t_stopped - self.t_measured if self.t_measured and self.t_stopped else 0.0
            self.duration_s = max(ran, float(np.max(records.values("end_s"), initial=0.0)))
        gpu = self._gpu_figures()
        summary = RunSummary(
            status=self.status,
            error=self.error,
            started_at=self.started_at,
            backend=self.session.describe(),
            model=self.session.model.describe() if self.session.model else {},
            workload=self._workload_summary(),
            seed=self.cfg.seed,
            **time_windows(
                summarize(
                    records,
                    self.duration_s,
                    self.cfg.slo,
                    gpu.phase if gpu else None,
                    self.cfg.cost.machine_usd_per_hour(),
                    endpoint_urls=self._endpoint_urls(),
                    lora=self.plan.lora,
                    job_calls=self._job_calls(),
                ),
                records,
                self.cfg.slo,
                self._window(),
                self._stages(),
                self.cfg.cost.machine_usd_per_hour(),
            ),
            memory=self._memory_summary(gpu),
            load_s=self.load_s,
            engine=self.engine,
            config_sha256=config_sha256(self.cfg),
            repeat=self.repeat,
            saturated=self.driver.saturated,
            server_metrics=self._server_metrics(),
            gpu=gpu.section if gpu else None,
            taint=self.taint(),
        )
        summary.harness.update(self.client_load.figures())
        if self.hosts is not None:
            summary.hosts = self.hosts.figures()
            summary.warnings = self.hosts.warnings + self.hosts.clock_warnings() + summary.warnings
        sampled = records.sampling()
        if sampled is not None:  # a long run: its pooled ITL gaps were thinned to a budget
            summary.harness["itl_sampled"] = sampled
        summary.warnings = run_warnings(summary) + summary.warnings
        return summary

    def _endpoint_urls(self) -> Optional[list[Optional[str]]]:
        """The public URLs requests were routed over (backend.urls, backend.replicas), or None with one."""
        backend = self.session.backend
        info = backend.engine_info() if backend is not None else {}
        return info.get("endpoints") if isinstance(info, dict) else None

    def fallback_summary(self) -> RunSummary:
        """When the summary itself failed: how the run ended and its request counts."""
        records = self.writer.records
        completed = int(records.ok_mask().sum())
        return RunSummary(
            status=self.status,
            error=self.error,
            started_at=self.started_at,
            load_s=self.load_s,
            engine=self.engine,
            requests={"sent": len(records), "completed": completed, "failed": len(records) - completed},
            taint=self.taint(),
        )

    def taint(self) -> list[str]:
        return list(self.machine.taint) if self.machine is not None else []

    def _window(self) -> Optional[tuple[float, float]]:
        """The steady-state window [warmup_s, L − cooldown_s], L the schedule's length (else the
        measured phase's T), ending at T when the run ended early; None when both are 0
        (docs/metrics.md)."""
        wl = self.cfg.workload
        warm, cool = getattr(wl, "warmup_s", 0.0) or 0.0, getattr(wl, "cooldown_s", 0.0) or 0.0
        if not warm and not cool:
            return None
        span = self.plan.schedule.duration_s if self.plan.schedule is not None else self.duration_s
        end = span - float(cool)
        if self.status != COMPLETE:  # interrupted, saturated or failed: the schedule's end never came
            end = min(end, self.duration_s)
        return float(warm), max(float(warm), end)

    def _job_calls(self) -> Optional[dict[int, int]]:
        """Each agent job's number of requests in the plan; None without jobs."""
        calls: dict[int, int] = {}
        if not self.plan.has_jobs:
            return None
        for session in self.plan.sessions:
            if session.job_id is not None:
                calls[session.job_id] = calls.get(session.job_id, 0) + len(session.turns)
        return calls or None

    def _stages(self) -> Optional[list[dict[str, Any]]]:
        """The schedule's stages; when the run ended early, those it reached, the last one ending
        at the measured phase's end (``planned_end_s`` keeps the schedule's)."""
        if self.plan.schedule is None:
            return None
        stages = self.plan.schedule.to_json()
        if self.status == COMPLETE:
            return stages
        reached = [stage for stage in stages if stage["start_s"] < self.duration_s] or stages[:1]
        for stage in reached:
            if stage["end_s"] > self.duration_s:
                stage["planned_end_s"], stage["end_s"] = stage["end_s"], max(stage["start_s"], self.duration_s)
        return reached

    def _workload_summary(self) -> dict[str, Any]:
        plan = self.plan
        return {
            "name": plan.name,
            "sha256": self.workload_hashes["sha256"],
            "prompts_sha256": self.workload_hashes.get("prompts_sha256"),
            "requests_planned": plan.num_requests,
            "plan_s": round(self.plan_s, 3),
            "sessions": len(plan.sessions),
            "open_loop": plan.open_loop,
            "concurrency": plan.concurrency,
            "rate": getattr(self.cfg.workload, "rate", None),
            **(
                {"schedule": {"kind": plan.schedule.kind, "duration_s": plan.schedule.duration_s}}
                if plan.schedule is not None
                else {}
            ),
            "exact_output_len": plan.exact_output_len,
            **(
                {"data": {k: v for k, v in plan.source.items() if k in ("path", "format", "sha256", "records")}}
                if plan.source
                else {}
            ),
            **plan.info,
            "greedy": float(plan.sampling.get("temperature", 0.0)) == 0.0,
            **({"constraint": describe_constraint(plan.structured)} if getattr(plan, "structured", None) else {}),
            **({"lora": describe_traffic(plan.lora)} if plan.lora else {}),
        }

    def _server_metrics(self) -> Optional[dict[str, Any]]:
        """Both raw scrapes into the run folder, the measured phase's difference for the summary,
        and what the sampler saw during the phase (``sampled``)."""
        out = self._phase_difference()
        sampled = self._sampled()
        if sampled is not None:
            out = {**(out or {}), "sampled": sampled}
        return out

    def _phase_difference(self) -> Optional[dict[str, Any]]:
        before, after = self.scrapes["before"], self.scrapes["after"]
        if before is None:
            return None
        self.writer.write_text(METRICS_BEFORE, before)
        if after is None:
            return None
        self.writer.write_text(METRICS_AFTER, after)
        try:
            return prometheus.phase_difference(before, after)
        except Exception as exc:  # noqa: BLE001 - a scrape that does not parse costs itself only
            log.warning("could not parse the engine's metrics: %s", exc)
            return None

    def _sampled(self) -> Optional[dict[str, Any]]:
        """``server_metrics.sampled``: the sampler's figures, or why there are none (one line)."""
        status = dict(self.scrape_status)
        if self.server_sampler is not None:
            return {**self.server_sampler.figures(), "around": status}
        if self.t_measured is None:  # the measured phase never began
            return None
        if not self.cfg.server_metrics.enabled:
            why = "server_metrics.enabled=false"
        elif status.get("before") == "none" or not status:
            mode = getattr(self.cfg.backend, "mode", None)
            why = "the backend exposes no Prometheus /metrics" + (
                " (an in-process engine)"
                if mode == "inprocess"
                else " (backend.metrics_url is not set)"
                if mode == "remote"
                else ""
            )
        else:
            why = f"the scrape before the measured phase was {status.get('before')}"
        return {"absent": why, "around": status}

    def _gpu_figures(self) -> Optional[GpuRun]:
        """The GPUs' figures from NVML's samples; None without NVML (a CPU machine)."""
        sampler = self.sampler
        if sampler.gpu is None or not sampler.gpu_samples:
            return None
        t0 = self.t_measured
        t1 = t0 + self.duration_s if t0 is not None else None
        return run_figures(
            [d.describe() for d in sampler.gpu.devices],
            sampler.gpu.notes,
            sampler.gpu_samples,
            sampler.engine_local,
            t0,
            t1,
            max(sampler.interval_s, sampler.GPU_MIN_INTERVAL_S),
        )

    def _memory_summary(self, gpu: Optional[GpuRun]) -> dict[str, Any]:
        sampler, cfg = self.sampler, self.cfg
        engine = self.session.engine_memory()
        out: dict[str, Any] = {
            "rss_peak_bytes": sampler.peak_rss(),
            "rss_peak_measured_bytes": sampler.peak_rss(self.t_measured) if self.t_measured else None,
            "gpu_nvml_peak_used_bytes": None,
            "gpu_nvml_peak_process_used_bytes": None,
            **(gpu.memory if gpu else {}),
            **mem.torch_gpu_peaks(),
            **engine,
        }
        bytes_per_value = engine.get("kv_bytes_per_value")
        if bytes_per_value:
            out["kv_bytes_per_token"] = kv_cache_bytes_per_token(self.session.hf_config(), bytes_per_value)
            if cfg.memory.budget_gib and out["kv_bytes_per_token"] and engine.get("weights_bytes"):
                out["budget_gib"] = cfg.memory.budget_gib
                out["kv_tokens_in_budget"] = kv_tokens_in_budget(
                    cfg.memory.budget_gib * 2**30, engine["weights_bytes"], out["kv_bytes_per_token"]
                )
        return out


def _write_results(point: PointRun, run_dir: Path) -> RunSummary:
    """summary.json, the tables and the report. Each is written on its own: one failing costs
    only itself, never the others (requests.jsonl already holds every row). After a full disk
    nothing more is tried: the run ends in the one line that says so (:class:`DiskFull`)."""
    point.stop_machine_monitor()
    if point.writer.disk_full:
        point.sampler.stop()
        point.stop_server_sampler()
        return point.fallback_summary()
    if point.machine is not None:
        machine = point.machine
        _guarded(MACHINE, lambda: point.writer.write_json(MACHINE, machine.to_dict()), run_dir)
    summary = _guarded("summary", point.summary, run_dir)
    point.sampler.stop()
    if summary is None:
        summary = point.fallback_summary()
    writer, sampler = point.writer, point.sampler
    t0 = point.t_measured if point.t_measured is not None else point.t_created
    _guarded(
        "requests.parquet and memory.parquet",
        lambda: writer.write_tables(sampler.samples, t0, sampler.gpu_samples),
        run_dir,
    )
    point.stop_server_sampler()
    series = point.server_sampler
    if series is not None and series.rows:
        _guarded(SERVER_METRICS, lambda: writer.write_server_metrics(series.frame(t0)), run_dir)
    hosts = point.hosts
    if hosts is not None:
        _guarded(HOSTS, lambda: writer.write_json(HOSTS, hosts.hosts_json()), run_dir)
    _guarded("summary.json", lambda: writer.write_summary(summary), run_dir)
    if point.cfg.report:
        _write_report(run_dir)
    return summary


@contextlib.contextmanager
def _interrupts_deferred() -> Iterator[None]:
    """Ctrl-C (SIGINT) during the final writes is held until they are done, then raised; SIGTERM
    and SIGHUP come as SIGINT (harness/cli.py). Outside the main thread nothing changes."""
    with interrupts_held() as pressed:
        yield
    if pressed:
        log.warning("interrupted again while writing the results: they were written first")
        raise KeyboardInterrupt


def _guarded(what: str, write: Callable[[], Any], run_dir: Path) -> Any:
    """Do one of the final writes; a failure is one warning line, and the others go on."""
    try:
        return write()
    except Exception as exc:  # noqa: BLE001 - the other files of the run folder still get written
        log.warning(
            "%s not written (%s: %s); requests.jsonl in %s has every finished request",
            what,
            type(exc).__name__,
            str(exc).splitlines()[0] if str(exc) else "",
            run_dir,
        )
        return None


def _write_report(run_dir: Path) -> None:
    """report.html from the finished run folder; a failure loses the report only, never the data."""
    try:
        log.info("report: %s", write_report(run_dir))
    except Exception as exc:  # noqa: BLE001 - the run's tables and summary are already on disk
        log.warning(
            "report.html not written (%s: %s); rebuild it with: python -m harness.report %s",
            type(exc).__name__,
            str(exc).splitlines()[0] if str(exc) else "",
            run_dir,
        )


def _check_engine(session: EngineSession, writer: RunWriter, run_dir: Path) -> None:
    """End the run, keeping what was measured, when the engine can no longer serve."""
    reason = session.fatal_error()
    if reason:
        failed = len(writer.records) - int(writer.records.ok_mask().sum())
        raise EngineFailed(
            f"{reason}; {failed} of {len(writer.records)} requests failed; the results so far are in {run_dir}"
        )


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
