"""sweep.json: one entry per point of a sweep, written under a file lock, and read back.

Each entry holds the point's overrides, run folder(s), status, load_s, whether the engine was
reused, and its key figures (mean and 95 % CI across repeats); the file also counts
``engine_loads`` and, for an SLO search, holds the probes and the answer.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

from harness.results import metrics
from harness.results.schema import FAILED, FINISHED, RunSummary
from harness.results.store import is_run_dir, write_json

SWEEP_JSON = "sweep.json"

SKIPPED = "skipped"  # resume: a finished run of the same config exists

# the figures sweep.json keeps per point: (metric key, statistic; None for run metrics)
KEY_FIGURES: tuple[tuple[str, Optional[str]], ...] = (
    ("ttft_s", "p50"),
    ("ttft_s", "p99"),
    ("tpot_s", "p50"),
    ("tpot_s", "p99"),
    ("itl_s", "p99"),
    ("e2e_s", "p50"),
    ("output_tokens_per_s", None),
    ("requests_per_s", None),
    ("goodput_requests_per_s", None),
    ("slo_attainment", None),
)


def figure_name(metric: str, stat: Optional[str]) -> str:
    return f"{metric}.{stat}" if stat else metric


def key_figures(summary: RunSummary) -> dict[str, Optional[float]]:
    """KEY_FIGURES, and the run metrics with a source (GPU) where the run has them."""
    figures = {figure_name(m, s): summary.stat(m, s or "") for m, s in KEY_FIGURES}
    for key, metric in metrics.RUN_METRICS.items():
        if metric.source and summary.stat(key) is not None:
            figures[key] = summary.stat(key)
    return figures


# two-sided 95 % quantiles of Student's t for 1…30 degrees of freedom; 1.96 beyond
_T95 = (
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
)


def mean_ci95(values: Sequence[Optional[float]]) -> dict[str, Any]:
    """Mean of the repeats and its 95 % confidence interval: mean ± t(0.975, n−1) · s / √n."""
    vals = [v for v in values if v is not None and math.isfinite(v)]
    out: dict[str, Any] = {"n": len(vals), "mean": None, "ci_low": None, "ci_high": None, "values": list(values)}
    if not vals:
        return out
    mean = sum(vals) / len(vals)
    out["mean"] = mean
    if len(vals) > 1:
        s = math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1))
        t = _T95[len(vals) - 2] if len(vals) - 1 <= len(_T95) else 1.96
        half = t * s / math.sqrt(len(vals))
        out["ci_low"], out["ci_high"] = mean - half, mean + half
    return out


def stage_figures(stage: dict[str, Any]) -> dict[str, Optional[float]]:
    """KEY_FIGURES of one stage of a summary's ``stages`` (its own latency and throughput)."""
    out: dict[str, Optional[float]] = {}
    for metric, stat in KEY_FIGURES:
        if stat:
            value = ((stage.get("latency") or {}).get(metric) or {}).get(stat)
        else:
            value = (stage.get("throughput") or {}).get(metric)
        out[figure_name(metric, stat)] = value if isinstance(value, (int, float)) and math.isfinite(value) else None
    return out


def stage_load(stage: dict[str, Any]) -> str:
    """A stage's load in words: '2 req/s', 'concurrency 8', a ramp '1→8 req/s'."""
    for key, unit in (("rate", " req/s"), ("concurrency", "")):
        value = stage.get(key)
        prefix = "concurrency " if key == "concurrency" else ""
        if isinstance(value, dict):
            return f"{prefix}{value.get('from'):g}→{value.get('to'):g}{unit}"
        if isinstance(value, (int, float)):
            return f"{prefix}{value:g}{unit}"
    return "-"


def combine_stages(summaries: Sequence[RunSummary]) -> list[dict[str, Any]]:
    """A time-shaped point's stages (the first run's schedule), each with its KEY_FIGURES: a
    single run's values, or mean and 95 % CI over the repeats; [] for a point without stages."""
    stages = (summaries[0].stages or []) if summaries else []
    out = []
    for stage in stages:
        per_run = [
            stage_figures(st) for s in summaries for st in (s.stages or []) if st.get("index") == stage.get("index")
        ]
        figures = (
            per_run[0]
            if len(per_run) == 1
            else {
                name: mean_ci95([f.get(name) for f in per_run]) for name in dict.fromkeys(n for f in per_run for n in f)
            }
        )
        out.append(
            {
                "index": stage.get("index"),
                "start_s": stage.get("start_s"),
                "end_s": stage.get("end_s"),
                "load": stage_load(stage),
                "figures": figures,
            }
        )
    return out


def combine_repeats(summaries: Sequence[RunSummary]) -> dict[str, Any]:
    """A point's figures: the value of a single run, or mean and 95 % CI over its repeats; a
    repeat cut short (interrupted, failed) is left out when another one finished, so a partial
    run does not weigh as a whole one (its folder and summary stay listed in ``run_dirs``)."""
    finished = [s for s in summaries if s.status in FINISHED]
    per_run = [key_figures(s) for s in (finished or summaries)]
    if len(per_run) == 1:
        return per_run[0]
    names = list(dict.fromkeys(name for f in per_run for name in f))
    return {name: mean_ci95([f.get(name) for f in per_run]) for name in names}


@contextlib.contextmanager
def locked_sweep(sweep_dir: Path) -> Iterator[dict[str, Any]]:
    """sweep.json read, handed out for changes and written back, under a file lock (points
    run by a launcher in other processes update it too)."""
    sweep_dir.mkdir(parents=True, exist_ok=True)
    with open(sweep_dir / (SWEEP_JSON + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            path = sweep_dir / SWEEP_JSON
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError):
                data = {"sweep_dir": str(sweep_dir), "started_at": _now(), "engine_loads": 0, "points": []}
            yield data
            data["updated_at"] = _now()
            data["points"].sort(key=lambda p: p.get("index", 0))
            write_json(path, data)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def record_point(sweep_dir: Path, entry: dict[str, Any]) -> None:
    with locked_sweep(sweep_dir) as data:
        data["points"] = [p for p in data["points"] if p.get("index") != entry["index"]] + [entry]


def count_engine_load(sweep_dir: Path) -> None:
    with locked_sweep(sweep_dir) as data:
        data["engine_loads"] = data.get("engine_loads", 0) + 1


def read_sweep(sweep_dir: Path) -> dict[str, Any]:
    return json.loads((Path(sweep_dir) / SWEEP_JSON).read_text())


def point_run_dirs(sweep: dict[str, Any]) -> list[Path]:
    """Every finished run folder of a sweep's points (all repeats), in point order."""
    out = []
    for point in sweep.get("points", []):
        for d in point.get("run_dirs") or []:
            if is_run_dir(Path(d)):
                out.append(Path(d))
    return out


def new_entry(index: int, overrides: Sequence[str], run_dir: Path, **fields: Any) -> dict[str, Any]:
    """A point's entry in sweep.json, as it stands before the point has run (failed until it does)."""
    return {
        "index": index,
        "overrides": list(overrides),
        "run_dir": str(run_dir),
        "run_dirs": [],
        "status": FAILED,
        "error": None,
        "load_s": 0.0,
        "engine_reused": False,
        "prefix_cache_reset": None,
        "figures": {},
        **fields,
    }


def varying_overrides(overrides: Sequence[Sequence[str]]) -> list[list[str]]:
    """Each point's overrides less those every point shares (what the sweep varies)."""
    common = set.intersection(*(set(o) for o in overrides)) if overrides else set()
    return [[o for o in point if o not in common] for point in overrides]


def _now() -> str:
    return datetime.now(timezone.utc).astimezone().isoformat(timespec="seconds")
