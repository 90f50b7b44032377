"""SLO search: the capacity, the load (request rate or concurrency) up to which the SLO holds,
stated as an interval with the runs and the time it took.

``python -m harness slo_search.enabled=true slo.ttft_s=0.5 slo.tpot_s=0.05 workload=synthetic``

The engine loads once; each probe is a load point of the sweep (``probe-NN-<load>/``, one entry
in ``sweep.json``), run again (``run-1/``, ``run-2/`` …) until its verdict is clear.

**The verdict of a probe** (:mod:`harness.gate.slo_verdict`). With a the attainment
(``slo_search.attainment``), per SLO limit L_k (``slo.ttft_s``, ``slo.tpot_s``, ``slo.e2e_s``) and
run i, q_ik is the run's a-quantile of that metric over its requests, a failed or unfinished
request counting as +∞, and d_ik = ln(q_ik / L_k) (:mod:`harness.gate.slo_margins`). Over the
probe's n runs, d̄_k ± t(1 − α/L, n − 1) · √(s_k² / n + σ_time,k²) are the one-sided bounds of
the mean, where σ_time is the spread between sessions made apart of the configuration's stored
noise floor (``slo_search.noise_dir``, figure ``<metric>.p<100 a>``; 0 without one) and L the
number of looks (``max_runs_per_probe − min_runs + 1``, Bonferroni: the verdict is looked at
after every run). The probe **meets** when every limit's upper bound is < 0, **misses** when
some limit's lower bound is > 0 or a run failed or was stopped saturated, and otherwise runs
again, from ``min_runs`` up to ``max_runs_per_probe`` runs; still unclear then, it **cannot tell**.

**The joint share** is kept beside it, as a figure: the share of a run's planned requests that
met every limit at once (failures as misses) = slo_attainment × completed / planned. It is not
the verdict: one run's share flips with noise.

**The loads** (:mod:`harness.run.capacity_search`): doubling from ``low`` until a probe misses
(or ``high``), then bisecting the gap between the highest load that meets and the lowest that
misses, on either side of the cannot-tell loads inside it, until each part is within
``tolerance`` (relative; 1 for concurrency) or the budget (``max_runs``, ``max_time_s``,
``max_probes``) ends. **The answer** (:mod:`harness.run.slo_answer`): ``capacity_low`` –
``capacity_high`` with the loads that bound it, the runs and the wall time, printed and written
to sweep.json (``slo_max_rate`` / ``slo_max_concurrency`` = capacity_low, as before). A search
that did not finish has no answer.
"""

from __future__ import annotations

import copy
import logging
import math
from pathlib import Path
from typing import Any, Optional

from harness.config import RunConfig, SLOSearchConfig
from harness.gate import noise
from harness.gate.slo_margins import run_margins
from harness.results.schema import COMPLETE, FAILED, RunResult, RunSummary
from harness.results.store import is_run_dir, load_run
from harness.results.sweep_file import locked_sweep
from harness.run.capacity_search import RunOutcome, Search, Settings, search
from harness.run.probe_points import merge_run
from harness.run.slo_answer import METRIC_NAMES, Question, search_record
from harness.run.sweep import SESSIONS, refresh_compare, run_sweep_point, with_load
from harness.telemetry.environment import hardware_fingerprint

log = logging.getLogger("harness")

SLO_KEYS = ("ttft_s", "tpot_s", "e2e_s")


def met_share(summary: RunSummary) -> Optional[float]:
    """Share of the planned requests that completed within every SLO = attainment × completed / planned."""
    planned = summary.workload.get("requests_planned") or summary.requests.get("sent") or 0
    attainment = summary.throughput.get("slo_attainment") or 0.0
    return attainment * summary.requests.get("completed", 0) / planned if planned else None


def probe_config(cfg: RunConfig) -> RunConfig:
    """The config each run of a probe runs with: a plain run's (its config_sha256 is a plain
    run's at that load, which a noise floor is stored under), once, measured afresh."""
    base = copy.deepcopy(cfg)
    base.slo_search = SLOSearchConfig()
    if cfg.resume:
        log.info("slo search: resume=true ignored: every run of a probe is measured afresh")
    if cfg.repeat > 1:
        log.info("slo search: repeat=%d ignored: the search repeats each probe until its verdict is clear", cfg.repeat)
    base.resume, base.repeat = False, 1
    base.sweep.compare_html = False  # refreshed once the probe's runs are merged
    return base


class FloorCache:
    """σ_time per limit from the noise floors under ``noise_dir``, read once per configuration."""

    def __init__(self, noise_dir: Optional[str], attainment: float) -> None:
        self.noise_dir = Path(noise_dir) if noise_dir else None
        self.stat = f"p{attainment * 100:g}"
        self.found: dict[tuple[Optional[str], str], dict[str, float]] = {}

    def sigma_time(self, run: RunResult, limits: list[str]) -> dict[str, float]:
        if self.noise_dir is None:
            return {}
        key = (run.summary.config_sha256, hardware_fingerprint(run.env or {}))
        if key not in self.found:
            floor = noise.load(self.noise_dir, *key)
            sigmas: dict[str, float] = {}
            for limit in limits:
                figure = floor.figures.get(f"{limit}.{self.stat}") if floor else None
                between = figure.between_sessions() if figure else None
                if between is not None:
                    sigmas[limit] = between[0]
            if floor is None:
                log.info("slo search: no noise floor in %s for config %s on this machine", self.noise_dir, key[0])
            self.found[key] = sigmas
        return self.found[key]


def read_outcome(run_dir: Path, slo: dict[str, float], attainment: float, floors: FloorCache) -> RunOutcome:
    """One run folder as the verdict needs it; a run that left no folder failed."""
    if not is_run_dir(run_dir):
        return RunOutcome({}, ok=False, info={"run_dir": str(run_dir), "status": FAILED})
    run = load_run(run_dir, with_workload=False)
    info = {"run_dir": str(run_dir), "status": run.summary.status, "slo_met_share": met_share(run.summary)}
    return RunOutcome(
        run_margins(run, slo, attainment),
        ok=run.summary.status == COMPLETE,
        sigma_time=floors.sigma_time(run, list(slo)),
        info=info,
    )


def margins_text(margins: dict[str, float]) -> str:
    """ "TTFT ×0.82, TPOT ×1.05 of the limit": q / limit per limit."""
    parts = [f"{METRIC_NAMES.get(k, k)} ×{_ratio(d)}" for k, d in margins.items()]
    return ", ".join(parts) + " of the limit" if parts else "no requests"


def _ratio(d: float) -> str:
    return "∞" if math.isinf(d) else f"{math.exp(d):.2f}"


def run_slo_search(cfg: RunConfig, out_dir: Path) -> dict[str, Any]:
    """Probe loads against one engine session; returns the search's record in sweep.json."""
    key = cfg.slo_search.over
    slo = {k: getattr(cfg.slo, k) for k in SLO_KEYS if getattr(cfg.slo, k) is not None}
    question = Question(key, slo, cfg.slo_search.attainment)
    base = probe_config(cfg)
    if key == "rate" and base.workload.concurrency is None:
        log.info("slo search over rate: no workload.concurrency cap: requests in flight are not limited")
    floors = FloorCache(cfg.slo_search.noise_dir, cfg.slo_search.attainment)
    points: dict[int, dict[str, Any]] = {}
    told = 0
    stat = f"p{cfg.slo_search.attainment * 100:g}"

    def run_once(load: float, probe: int, run: int) -> RunOutcome:
        text = f"{load:g}"
        point_dir = out_dir / f"probe-{probe:02d}-{key}={text}"
        run_dir = point_dir / f"run-{run}"
        try:
            run_sweep_point(with_load(base, key, load), run_dir, out_dir, probe, [f"workload.{key}={text}"])
        finally:
            merged = merge_run(out_dir, probe, point_dir, points.get(probe))
            if merged is not None:
                points[probe] = merged
            if cfg.sweep.compare_html:
                refresh_compare(out_dir)
        outcome = read_outcome(run_dir, slo, cfg.slo_search.attainment, floors)
        share = outcome.info.get("slo_met_share")
        share_text = "" if share is None else f"; {share * 100:.1f}% of requests met the SLO"
        print(
            f"probe {probe} run {run}: {key} {text} → {stat} {margins_text(outcome.margins)}"
            f"{share_text}; {outcome.info['status']}",
            flush=True,
        )
        return outcome

    def on_change(state: Search) -> None:
        nonlocal told
        for p in state.probes[told:]:
            bounds = ", ".join(
                f"{METRIC_NAMES.get(b.limit, b.limit)} ×{b.ratios()[1]:.2f}–{b.ratios()[2]:.2f}" for b in p.bounds
            )
            why = f" ({stat} / limit, one-sided bounds: {bounds})" if bounds else ""
            cut = " (cut short by the budget)" if p.cut_short else ""
            print(f"probe {p.index}: {key} {p.load:g} {p.verdict} after {len(p.runs)} runs{cut}{why}", flush=True)
        told = len(state.probes)
        _write(out_dir, state, question, final=False)

    try:
        state = search(Settings.of(cfg.slo_search), run_once, on_change)
    finally:
        SESSIONS.close()
    return _write(out_dir, state, question, final=True)


def _write(out_dir: Path, state: Search, question: Question, final: bool) -> dict[str, Any]:
    record = search_record(state, question, final)
    with locked_sweep(out_dir) as data:
        data["kind"] = "slo_search"
        data["slo_search"] = record
        data[f"slo_max_{question.over}"] = record[f"slo_max_{question.over}"]
    return record
