"""A probe of the SLO search as one point of sweep.json, whatever number of runs it took.

Each run of a probe is run as a point of its own (:func:`harness.run.sweep.run_sweep_point`,
into ``probe-NN-<load>/run-K``), which writes its entry under the probe's index; this merges it
with the probe's earlier runs, as a repeated point's runs are: every run folder listed, the
figures mean and 95 % CI over the runs, the engine's load time summed, the worst status.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from harness.results.schema import FINISHED, SATURATED, RunSummary
from harness.results.store import is_run_dir, load_summary
from harness.results.sweep_file import combine_repeats, read_sweep, record_point


def merge_run(
    sweep_dir: Path, index: int, point_dir: Path, earlier: Optional[dict[str, Any]]
) -> Optional[dict[str, Any]]:
    """The probe's entry with its latest run added, recorded in sweep.json; None when the run
    left no entry (sweep.json could not be written)."""
    try:
        latest = next(p for p in read_sweep(sweep_dir).get("points", []) if p.get("index") == index)
    except (OSError, ValueError, StopIteration):
        return earlier
    entry = dict(latest, run_dir=str(point_dir))
    if earlier is not None:
        entries = [earlier, latest]
        worst = next((e for e in entries if e["status"] not in FINISHED), None)
        if worst is None:
            worst = next((e for e in entries if e["status"] == SATURATED), latest)
        run_dirs = [*earlier["run_dirs"], *latest["run_dirs"]]
        summaries = [RunSummary.from_dict(load_summary(Path(d))) for d in run_dirs if is_run_dir(Path(d))]
        entry.update(
            run_dirs=run_dirs,
            load_s=earlier["load_s"] + latest["load_s"],
            engine_reused=earlier["engine_reused"],
            prefix_cache_reset=earlier["prefix_cache_reset"],
            status=worst["status"],
            error=worst.get("error"),
            figures=combine_repeats(summaries) if summaries else latest.get("figures", {}),
        )
    record_point(sweep_dir, entry)
    return entry
