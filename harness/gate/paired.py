"""Interleaved blocks of runs → a decision per figure, and an A/A experiment → a noise floor.

A block is one run of arm A and one of arm B, in random order, on one machine. Blocks with a
failed or tainted run are left out (and counted). Per figure: the paired t-interval on the
blocks' log-ratios (:mod:`harness.gate.intervals`), at the level α / looks when the decision
is looked at several times (Bonferroni over the planned looks, so stopping early keeps α);
Benjamini–Hochberg over the figures decides "worse beyond noise"; the margin is the threshold
raised to the noise floor where one is stored (:mod:`harness.gate.noise`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np

from harness.gate import intervals, multiple, noise, verdicts
from harness.gate.bootstrap import resampled_stat
from harness.gate.figures import Figure
from harness.results.schema import RunResult
from harness.results.store import NewerSummary, load_run
from harness.telemetry.environment import hardware_fingerprint

WITHIN_RESAMPLES = 300


@dataclass
class BlockRuns:
    """One block's runs as loaded (None: the run failed or left no folder)."""

    index: int
    a: Optional[RunResult]
    b: Optional[RunResult]

    def problem(self) -> Optional[str]:
        """Why the block is left out of the decision, or None."""
        for arm, run in (("A", self.a), ("B", self.b)):
            if run is None:
                return f"block {self.index}: run {arm} failed"
            if not run.summary.finished:
                return f"block {self.index}: run {arm} ended {run.summary.status}"
            taint = getattr(run.summary, "taint", None)
            if taint:
                return f"block {self.index}: run {arm} tainted: {'; '.join(taint)}"
        return None

    def runs(self) -> tuple[RunResult, RunResult]:
        """(A, B) of a block with both runs (every block :func:`usable` keeps)."""
        if self.a is None or self.b is None:
            raise ValueError(f"block {self.index} lacks a run")
        return self.a, self.b


@dataclass
class Evaluation:
    decisions: list[verdicts.Decision]
    blocks_used: int
    left_out: list[str] = field(default_factory=list)
    noise_floor: Optional[noise.NoiseFloor] = None  # the stored floor the margins used

    @property
    def verdict(self) -> str:
        """regression when any figure regressed; pass when all passed; else inconclusive."""
        found = [d.verdict for d in self.decisions]
        if verdicts.REGRESSION in found:
            return verdicts.REGRESSION
        if found and all(v == verdicts.PASS for v in found):
            return verdicts.PASS
        return verdicts.INCONCLUSIVE


def load_block(index: int, a_dir: Optional[Path], b_dir: Optional[Path]) -> BlockRuns:
    return BlockRuns(index, _load(a_dir), _load(b_dir))


def _load(run_dir: Optional[Path]) -> Optional[RunResult]:
    if run_dir is None:
        return None
    try:
        return load_run(run_dir, with_workload=False)
    except NewerSummary:  # not damaged: written by a newer harness, which this one does not read
        raise
    except Exception:  # noqa: BLE001 - a damaged run folder is a failed run
        return None


def usable(blocks: Sequence[BlockRuns]) -> tuple[list[BlockRuns], list[str]]:
    good, left_out = [], []
    for block in blocks:
        problem = block.problem()
        (left_out.append(problem) if problem else good.append(block))
    return good, left_out


def config_key(run: RunResult) -> tuple[Optional[str], str]:
    """(configuration hash, hardware fingerprint): what a noise floor is stored under."""
    return run.summary.config_sha256, hardware_fingerprint(run.env or {})


def evaluate(
    blocks: Sequence[BlockRuns],
    figures: Sequence[Figure],
    threshold: float,
    alpha: float = 0.05,
    looks: int = 1,
    noise_dir: Optional[Path] = None,
    engine: str = "fresh",
) -> Evaluation:
    """Each figure's decision over the usable blocks (module doc); ``engine``: the runs' kind
    ("fresh" engines, or one "held" per arm), whose noise floor sets the margins."""
    good, left_out = usable(blocks)
    runs = [b.runs() for b in good]
    floor = noise.load(noise_dir, *config_key(runs[0][0]), engine) if runs and noise_dir else None
    alpha_look = alpha / max(1, looks)
    found: list[tuple[Figure, intervals.Interval]] = []
    for figure in figures:
        values = [(figure.of(a.summary), figure.of(b.summary)) for a, b in runs]
        pairs = [(x, y) for x, y in values if x is not None and y is not None]
        if len(pairs) >= 2:
            found.append((figure, intervals.paired_t([x for x, _ in pairs], [y for _, y in pairs], alpha_look)))
    p_worse = [_p_worse(f, i) for f, i in found]
    significant = multiple.benjamini_hochberg(p_worse, alpha_look) if found else []
    decisions = []
    for (figure, interval), worse in zip(found, significant):
        margin, source = (
            floor.margin(figure.name, threshold) if floor else (threshold, f"threshold {threshold * 100:g}%")
        )
        decisions.append(verdicts.decide(figure, interval, margin, source, worse_significant=worse))
    return Evaluation(decisions, len(good), left_out, floor)


def _p_worse(figure: Figure, interval: intervals.Interval) -> Optional[float]:
    p = interval.p_greater
    if p is None:
        return None
    return p if figure.lower_is_better else 1 - p


def measure_noise_floor(
    blocks: Sequence[BlockRuns],
    figures: Sequence[Figure],
    run_wall_s: Sequence[float],
    source: str = "",
    engine: str = "fresh",
) -> noise.NoiseFloor:
    """An A/A experiment's blocks → the noise floor of its configuration on this machine."""
    good, _ = usable(blocks)
    if len(good) < 2:
        raise ValueError(f"a noise floor needs at least 2 usable A/A blocks (got {len(good)})")
    rng = np.random.default_rng(0)
    result: dict[str, noise.FigureNoise] = {}
    pairs = [b.runs() for b in good]
    runs = [r for pair in pairs for r in pair]
    for figure in figures:
        values = [(figure.of(a.summary), figure.of(b.summary)) for a, b in pairs]
        ratios = [math.log(y / x) for x, y in values if x and y]
        if len(ratios) < 2:
            continue
        within = []
        if figure.stat_fn is not None:
            for run in runs:
                x = figure.request_values(run)
                if x is not None and x.size >= 2 and np.all(x > 0):
                    within.append(float(np.var(np.log(resampled_stat(x, figure.stat_fn, WITHIN_RESAMPLES, rng)))))
        completed = [r.summary.requests.get("completed", 0) for r in runs]
        run_logs = [math.log(v) for pair in values for v in pair if v]
        result[figure.name] = noise.figure_noise(ratios, within, int(round(sum(completed) / len(completed))), run_logs)
    durations = [r.summary.duration_s for r in runs]
    requests = [max(1, r.summary.requests.get("completed", 0)) for r in runs]
    cost_run = max(0.0, float(np.mean(run_wall_s)) - float(np.mean(durations))) if run_wall_s else 0.0
    cost_request = float(np.mean([d / n for d, n in zip(durations, requests)]))
    config_sha, hardware = config_key(pairs[0][0])
    return noise.NoiseFloor(
        config_sha or "unknown", hardware, result, cost_run, cost_request, source=source, engine=engine
    )
