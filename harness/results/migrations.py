"""A summary.json that an older harness wrote, read with its hashes in the current form.

summary.json holds the run's hashes — ``config_sha256`` and the workload's ``sha256`` and
``prompts_sha256`` — in the form of the version it was made with (``hash_version``; the versions
are core/hash_versions.py's). Resume, compare, the gate and the history match runs by these
hashes, so every reader gets them through :func:`current_hashes`, which
harness/results/store.py's ``load_summary`` applies:

- while every version since the run's kept the hashes (so far, all of them), they stand as written;
- after one that changed them, they are hashed again from the run's config.yaml and workload.json,
  migrated (a file that is missing, or a data workload's compact workload.json, which does not
  hold the prompts, leaves the hash as written: it then matches only runs of its own form);
- a run from before version 1 recorded no prompts hash: it is taken from its workload.json.

A summary from a newer harness (a ``hash_version`` this one does not know) is left as it is.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import yaml

from core import hash_versions
from core.hash_versions import UNRECORDED
from harness.results.schema import CONFIG, WORKLOAD
from workloads.base import WorkloadPlan


def current_hashes(summary: dict[str, Any], run_dir: Path) -> dict[str, Any]:
    """``summary`` (summary.json as read from ``run_dir``) with its hashes in the current form;
    changed in place, and returned."""
    made_at = summary.get("hash_version", UNRECORDED)
    if not isinstance(made_at, int) or isinstance(made_at, bool) or made_at > hash_versions.current_version():
        return summary
    workload = summary.get("workload")
    workload = workload if isinstance(workload, dict) else None
    if not hash_versions.keeps_hashes(made_at):
        config_sha = config_hash(Path(run_dir), made_at)
        if config_sha is not None and summary.get("config_sha256"):
            summary["config_sha256"] = config_sha
        plan = _plan(Path(run_dir), made_at)
        if plan is not None and workload is not None:
            workload["sha256"] = WorkloadPlan.content_hash(plan)
            workload["prompts_sha256"] = WorkloadPlan.prompts_hash(plan)
    if made_at < 1 and workload is not None and not workload.get("prompts_sha256"):
        plan = _plan(Path(run_dir), made_at)
        if plan is not None:
            workload["prompts_sha256"] = WorkloadPlan.prompts_hash(plan)
    return summary


def config_hash(run_dir: Path, made_at: int) -> Optional[str]:
    """config_sha256 in the current form, from the run's config.yaml as the version ``made_at``
    wrote it; None without a readable one."""
    try:
        body = yaml.safe_load((run_dir / CONFIG).read_text())
    except (OSError, ValueError, yaml.YAMLError):
        return None
    if not isinstance(body, dict):
        return None
    return hash_versions.config_digest(hash_versions.migrate_config(body, made_at))


def _plan(run_dir: Path, made_at: int) -> Optional[dict[str, Any]]:
    """workload.json in the current form, when it holds the full sessions (not a data
    workload's compact one); None otherwise."""
    try:
        body = json.loads((run_dir / WORKLOAD).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(body, dict) or body.get("compact") or not isinstance(body.get("sessions"), list):
        return None
    return hash_versions.migrate_plan(body, made_at)
