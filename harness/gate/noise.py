"""The noise floor of a configuration on a machine, measured by an A/A experiment, and the runs
and requests per run a wanted precision needs.

An A/A experiment runs the same configuration as both arms in k interleaved blocks. Per figure:

    σ_run   = sd(d_j) / √2               the run-to-run sd of ln s (d_j: block j's log-ratio;
                                         Var(d_j) = 2 σ_run² when both arms are the same)
    σ_apart = sd of ln s over all 2k runs   the spread of runs made at different times of the
                                         experiment: the drift between blocks (clocks, neighbours,
                                         thermal state) is in it, not in σ_run. Two runs compared
                                         one against one (compare) were seldom made side by side.
    V_w     = mean over runs of Var*(ln s(run*))   the within-run variance (requests resampled)

Two levels, as in Kalibera and Jones ("Rigorous benchmarking in reasonable time", ISMM 2013):
level 1 the requests of a run, level 2 the runs. With n requests per run (the A/A's),

    T₁² = n · V_w                        the variance one request adds (run stat ~ T₁²/n)
    T₂² = max(σ_run² − V_w, 0)           the variance between runs beyond their requests

(the paper's erratum: T₂² = S₂² − S₁²/r₁). The cheapest split for a fixed precision, with c₁ the
seconds one request costs and c₂ the seconds a run costs before its requests (engine start,
warm-up):

    r₁ = √( (c₂ / c₁) · T₁² / T₂² )      requests per run
    k  = smallest with t(1 − α/2, k−1) · √(2 (T₂² + T₁²/r₁) / k) ≤ ln(1 + h)   blocks, for a
                                         paired interval of half-width h on the ratio

The gate's margin is δ = max(threshold, K · σ_run) with K = 3: a change smaller than three
run-to-run sds cannot be told from noise by a few runs, so it is never called a regression.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

from harness.gate import student_t

K_SIGMA = 3.0
MAX_BLOCKS = 1000
MAX_REQUESTS_PER_RUN = 100_000


@dataclass(frozen=True)
class FigureNoise:
    """One figure's spread in an A/A experiment (logs of the run statistic)."""

    sd_run: float  # σ_run
    within_var: Optional[float]  # V_w (None for a run metric: no requests level)
    blocks: int
    requests_per_run: int
    sd_run_apart: Optional[float] = None  # σ_apart (None in floors stored before it was kept)

    def one_run_each(self) -> tuple[float, int]:
        """The sd of ln s for one run against one run made at any time, and its degrees of freedom."""
        if self.sd_run_apart is not None and self.sd_run_apart > self.sd_run:
            return self.sd_run_apart, 2 * self.blocks - 1
        return self.sd_run, self.blocks - 1

    def between_sessions(self) -> Optional[tuple[float, int]]:
        """σ_time = √max(σ_apart² − σ_run², 0), the spread of runs made apart beyond that of runs
        side by side, with its degrees of freedom; None when the floor kept no σ_apart or finds none."""
        if self.sd_run_apart is None or self.sd_run_apart <= self.sd_run:
            return None
        return math.sqrt(self.sd_run_apart**2 - self.sd_run**2), 2 * self.blocks - 1

    @property
    def t1_sq(self) -> float:
        return (self.within_var or 0.0) * self.requests_per_run

    @property
    def t2_sq(self) -> float:
        return max(self.sd_run**2 - (self.within_var or 0.0), 0.0)


@dataclass
class NoiseFloor:
    """noise.json: an A/A experiment's result for one configuration on one machine."""

    config_sha256: str
    hardware: str
    figures: dict[str, FigureNoise]
    cost_run_s: float  # c₂: a run's seconds outside its requests
    cost_request_s: float  # c₁: the seconds per request of the measured phase
    created_at: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    source: str = ""  # the A/A experiment's folder
    # "fresh": each run loaded its engine; "held": the runs shared one engine kept loaded
    # (harness.ab --keep-loaded), whose run-to-run noise is smaller, so it is stored apart
    engine: str = "fresh"

    def margin(self, figure: str, threshold: float, k: float = K_SIGMA) -> tuple[float, str]:
        """δ = max(threshold, k · σ_run), and what set it."""
        noise = self.figures.get(figure)
        if noise is None or k * noise.sd_run <= threshold:
            return threshold, f"threshold {threshold * 100:g}%"
        return k * noise.sd_run, f"{k:g} × noise floor {noise.sd_run * 100:.1f}% (A/A of {noise.blocks} blocks)"

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["figures"] = {k: asdict(v) for k, v in self.figures.items()}
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NoiseFloor:
        figures = {k: FigureNoise(**v) for k, v in (data.get("figures") or {}).items()}
        return cls(**{**data, "figures": figures})


@dataclass(frozen=True)
class RepetitionPlan:
    figure: str
    requests_per_run: int
    blocks: int
    precision: float  # h


def figure_noise(
    block_log_ratios: list[float],
    within_vars: list[float],
    requests_per_run: int,
    run_logs: Optional[list[float]] = None,
) -> FigureNoise:
    """σ_run from the A/A blocks' log-ratios, V_w the mean of the runs' within-run variances,
    σ_apart from every run's ln s (``run_logs``, both arms)."""
    k = len(block_log_ratios)
    if k < 2:
        raise ValueError("a noise floor needs at least 2 A/A blocks")
    within = sum(within_vars) / len(within_vars) if within_vars else None
    apart = _sd(run_logs) if run_logs is not None and len(run_logs) >= 3 else None
    return FigureNoise(_sd(block_log_ratios) / math.sqrt(2), within, k, requests_per_run, apart)


def _sd(values: list[float]) -> float:
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def plan(
    figure: str, noise: FigureNoise, precision: float, cost_run_s: float, cost_request_s: float, alpha: float = 0.05
) -> RepetitionPlan:
    """Requests per run and blocks for a paired interval of half-width ``precision`` (module doc)."""
    if precision <= 0:
        raise ValueError(f"the precision must be > 0 (got {precision})")
    t1, t2 = noise.t1_sq, noise.t2_sq
    if t1 <= 0 or t2 <= 0 or cost_request_s <= 0:
        # one level carries no variance of its own: any split of the same requests does as well,
        # so keep the A/A's runs and add blocks
        best = float(noise.requests_per_run)
    else:
        best = math.sqrt(max(cost_run_s, 0.0) / cost_request_s * t1 / t2)
    r1 = int(min(MAX_REQUESTS_PER_RUN, max(1, math.ceil(best))))
    var_run = t2 + t1 / r1
    target = math.log1p(precision)
    for k in range(2, MAX_BLOCKS + 1):
        if student_t.quantile(1 - alpha / 2, k - 1) * math.sqrt(2 * var_run / k) <= target:
            return RepetitionPlan(figure, r1, k, precision)
    return RepetitionPlan(figure, r1, MAX_BLOCKS, precision)


def floor_path(folder: Path, config_sha256: str, hardware: str, engine: str = "fresh") -> Path:
    suffix = "" if engine == "fresh" else f".{engine}"
    return Path(folder) / hardware / f"{config_sha256}{suffix}.json"


def save(folder: Path, floor: NoiseFloor) -> Path:
    """Written atomically (a temp file renamed), so a reader never sees half a file."""
    path = floor_path(folder, floor.config_sha256, floor.hardware, floor.engine)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(floor.to_dict(), indent=2) + "\n")
    os.replace(tmp, path)
    return path


def load(
    folder: Optional[Path], config_sha256: Optional[str], hardware: Optional[str], engine: str = "fresh"
) -> Optional[NoiseFloor]:
    """The stored floor of this configuration on this machine (runs of ``engine``), or None."""
    if folder is None or not config_sha256 or not hardware:
        return None
    path = floor_path(folder, config_sha256, hardware, engine)
    try:
        return NoiseFloor.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None
