"""Job-level figures of agent jobs (``workload=agentic``): each metric defined once, with its
unit, direction and formula (the class docstring), as in harness/results/metrics.py.

A job's requests are the records with its ``job_id``. A request's dependencies, from its
record: the previous turn of its session; for a sub-agent's first turn, the request its agent
forked after (``parent_request_id``); for the turn after a fork, also the last request of each
sub-agent forked at the previous turn. A job **completed** when it sent every request its plan
holds and each one completed; it **failed** when a request failed; it is **unfinished** when the
run was cut short before it ended (a request cancelled, or planned requests never sent).

The summary's ``jobs`` section (:func:`job_figures`) holds the distributions over completed
jobs of the :data:`JOB_METRICS` with ``per_job``, and the run figures of the others.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Optional, Union

from harness.results import formulas
from harness.results.metrics import Metric
from harness.results.record import RequestRecord

if TYPE_CHECKING:
    from harness.results.kept import KeptRecord

# a request as a record, or as a row of a kept table (a run read back)
Record = Union[RequestRecord, "KeptRecord"]

COMPLETED, FAILED, UNFINISHED = "completed", "failed", "unfinished"


@dataclass
class JobRun:
    """One job as its records tell it."""

    job_id: int
    records: list[Record]
    state: str  # completed | failed | unfinished
    job_s: float
    critical_path: list[Record]

    @property
    def ok(self) -> bool:
        return self.state == COMPLETED

    @property
    def critical_path_s(self) -> float:
        return sum(r.end_s - r.start_s for r in self.critical_path)


class JobMetric(Metric):
    """A job-level figure: per job (``per_job``: its distribution over completed jobs) or for
    the run (one number over every job)."""

    per_job: ClassVar[bool] = True

    @classmethod
    def value(cls, job: JobRun) -> Optional[float]:
        raise NotImplementedError

    @classmethod
    def run_value(cls, jobs: Sequence[JobRun], duration_s: float, slo_job_s: Optional[float]) -> Optional[float]:
        raise NotImplementedError


JOB_METRICS: dict[str, type[JobMetric]] = {}


def register_job(cls: type[JobMetric]) -> type[JobMetric]:
    if cls.key in JOB_METRICS:
        raise ValueError(f"job metric {cls.key} is defined twice")
    JOB_METRICS[cls.key] = cls
    return cls


@register_job
class JobCompletionTime(JobMetric):
    """JCT = end_s of the job's last token − start_s of its first request (first send → last token)."""

    key, label, unit, digits = "job_s", "Job completion time", "s", 2

    @classmethod
    def value(cls, job: JobRun) -> Optional[float]:
        return job.job_s


@register_job
class CriticalPathTime(JobMetric):
    """Critical path = Σ (end_s − start_s) over the chain of dependent requests that ends at the
    job's last token, each step back to the dependency that finished last (tool gaps and the
    harness's turn-around lie between them)."""

    key, label, unit, digits = "critical_path_s", "Critical path (requests)", "s", 2

    @classmethod
    def value(cls, job: JobRun) -> Optional[float]:
        return job.critical_path_s


@register_job
class CriticalPathRequests(JobMetric):
    """Critical path length = the number of requests on the critical path."""

    key, label, unit, digits = "critical_path_requests", "Critical path length", "requests", 1

    @classmethod
    def value(cls, job: JobRun) -> Optional[float]:
        return float(len(job.critical_path))


@register_job
class CriticalPathShare(JobMetric):
    """Critical-path share = critical path time / JCT: the share of the job's time spent in
    requests on its critical path; the rest is tool gaps and turn-around. Lower: the engine
    holds the job up less."""

    key, label, unit, scale, digits = "critical_path_share", "Critical-path share of JCT", "%", 100.0, 1

    @classmethod
    def value(cls, job: JobRun) -> Optional[float]:
        return job.critical_path_s / job.job_s if job.job_s > 0 else None


@register_job
class JobCachedShare(JobMetric):
    """Cached share of a job = Σ cached prompt tokens / Σ prompt tokens over its requests whose
    engine reports cached tokens (None where none does)."""

    key, label, unit, scale, digits = "job_cached_share", "Cached share per job", "%", 100.0, 1
    lower_is_better = False

    @classmethod
    def value(cls, job: JobRun) -> Optional[float]:
        return formulas.cached_share([r.cached_tokens for r in job.records], [r.prompt_tokens for r in job.records])


@register_job
class JobThroughput(JobMetric):
    """Jobs/s = completed jobs / T."""

    key, label, unit, digits = "jobs_per_s", "Job throughput", "jobs/s", 3
    lower_is_better, per_job = False, False

    @classmethod
    def run_value(cls, jobs: Sequence[JobRun], duration_s: float, slo_job_s: Optional[float]) -> Optional[float]:
        return sum(j.ok for j in jobs) / duration_s if duration_s > 0 else None


@register_job
class JobGoodputShare(JobMetric):
    """Job goodput share = jobs completed with JCT ≤ slo.job_s / jobs (None without slo.job_s)."""

    key, label, unit, scale, digits = "job_goodput_share", "Jobs within slo.job_s", "%", 100.0, 1
    lower_is_better, per_job = False, False

    @classmethod
    def run_value(cls, jobs: Sequence[JobRun], duration_s: float, slo_job_s: Optional[float]) -> Optional[float]:
        if slo_job_s is None or not jobs:
            return None
        return sum(j.ok and j.job_s <= slo_job_s for j in jobs) / len(jobs)


@register_job
class JobGoodput(JobMetric):
    """Job goodput = jobs completed with JCT ≤ slo.job_s / T (None without slo.job_s)."""

    key, label, unit, digits = "job_goodput_per_s", "Job goodput", "jobs/s", 3
    lower_is_better, per_job = False, False

    @classmethod
    def run_value(cls, jobs: Sequence[JobRun], duration_s: float, slo_job_s: Optional[float]) -> Optional[float]:
        if slo_job_s is None or duration_s <= 0:
            return None
        return sum(j.ok and j.job_s <= slo_job_s for j in jobs) / duration_s


def critical_path(records: Sequence[Record]) -> list[Record]:
    """The chain of dependent requests that ends at the job's last token, first request first:
    from the last-ending request, step back to the dependency that finished last."""
    if not records:
        return []
    by_turn = {(r.session_id, r.turn): r for r in records}
    by_id = {r.request_id: r for r in records}
    last_of: dict[int, Record] = {}  # each session's last request
    forked: dict[int, list[int]] = defaultdict(list)  # request id → the sessions forked after it
    for r in records:
        if r.session_id not in last_of or r.turn > last_of[r.session_id].turn:
            last_of[r.session_id] = r
        if r.parent_request_id is not None and r.turn == 0:
            forked[r.parent_request_id].append(r.session_id)
    path = [max(records, key=lambda r: r.end_s)]
    while True:
        r = path[-1]
        if r.turn == 0:
            dependencies = [by_id[r.parent_request_id]] if r.parent_request_id in by_id else []
        else:
            previous = by_turn.get((r.session_id, r.turn - 1))
            children = forked.get(previous.request_id, []) if previous is not None else []
            dependencies = [] if previous is None else [previous, *(last_of[s] for s in children)]
        if not dependencies:
            return path[::-1]
        path.append(max(dependencies, key=lambda d: d.end_s))


def job_runs(records: Sequence[Record], planned: Optional[Mapping[int, int]] = None) -> list[JobRun]:
    """Every job with a record, in job order; ``planned``: each job's number of requests in the
    plan (without it, a job whose requests all completed counts as completed)."""
    by_job: dict[int, list[Record]] = defaultdict(list)
    for r in records:
        if r.job_id is not None:
            by_job[int(r.job_id)].append(r)
    out = []
    for job_id in sorted(by_job):
        rs = by_job[job_id]
        if any(not r.ok and not r.cancelled for r in rs):
            state = FAILED
        elif any(r.cancelled for r in rs) or len(rs) < (planned or {}).get(job_id, 0):
            state = UNFINISHED
        else:
            state = COMPLETED
        job_s = max(r.end_s for r in rs) - min(r.start_s for r in rs)
        out.append(JobRun(job_id, rs, state, job_s, critical_path(rs) if state == COMPLETED else []))
    return out


def job_figures(
    records: Sequence[Record],
    duration_s: float,
    slo_job_s: Optional[float],
    planned: Optional[Mapping[int, int]] = None,
) -> Optional[dict[str, Any]]:
    """The summary's ``jobs`` section; None for a run without agent jobs. ``planned``: each
    job's number of requests in the plan.

    Distributions (count, mean, p50, p90…) over completed jobs of each per-job metric; the run
    metrics; and by depth (as a string key): requests and the cached share (Σ cached / Σ prompt
    over the completed requests at that depth whose engine reports it)."""
    jobs = job_runs(records, planned)
    if not jobs:
        return None
    done = [j for j in jobs if j.ok]
    out: dict[str, Any] = {
        "count": len(jobs),
        "completed": len(done),
        "failed": sum(j.state == FAILED for j in jobs),
        "unfinished": sum(j.state == UNFINISHED for j in jobs),
        "slo_job_s": slo_job_s,
    }
    for key, metric in JOB_METRICS.items():
        if metric.per_job:
            out[key] = formulas.distribution([v for v in (metric.value(j) for j in done) if v is not None])
        else:
            out[key] = metric.run_value(jobs, duration_s, slo_job_s)
    by_depth: dict[int, list[Record]] = defaultdict(list)
    for r in records:
        if r.job_id is not None and r.ok:
            by_depth[int(r.depth or 0)].append(r)
    out["by_depth"] = {
        str(d): {
            "requests": len(rs),
            "prompt_tokens_mean": sum(r.prompt_tokens for r in rs) / len(rs),
            "cached_share": formulas.cached_share([r.cached_tokens for r in rs], [r.prompt_tokens for r in rs]),
        }
        for d, rs in sorted(by_depth.items())
    }
    out["reported_by_engine"] = any(r.cached_tokens is not None for r in records if r.job_id is not None)
    return out


def job_table(jobs: Optional[dict[str, Any]]) -> list[tuple[str, str]]:
    """(figure, value as shown) rows of the summary's ``jobs`` section, for the console and report."""
    if not jobs:
        return []
    unfinished = f", {jobs['unfinished']} unfinished (the run was cut short)" if jobs.get("unfinished") else ""
    rows = [("jobs completed", f"{jobs.get('completed', 0)}/{jobs.get('count', 0)}{unfinished}")]
    for key, metric in JOB_METRICS.items():
        value = jobs.get(key)
        if metric.per_job:
            d = value or {}
            if d.get("count"):
                shown = ", ".join(
                    f"{stat} {metric.show(d[stat]):.{metric.digits}f}"
                    for stat in ("p50", "p90", "mean")
                    if d.get(stat) is not None
                )
                rows.append((f"{metric.label} ({metric.unit})", shown))
        elif value is not None:
            slo = jobs.get("slo_job_s")
            label = metric.label.replace("slo.job_s", f"slo.job_s={slo:g} s") if slo else metric.label
            rows.append((f"{label} ({metric.unit})", f"{metric.show(value):.{metric.digits}f}"))
    for depth, d in (jobs.get("by_depth") or {}).items():
        share = d.get("cached_share")
        cached = f", cached {share * 100:.1f}%" if share is not None else ", cached: not reported by the engine"
        prompt = d.get("prompt_tokens_mean") or 0
        rows.append((f"depth {depth}", f"{d.get('requests', 0)} requests, prompt {prompt:.0f} tokens (mean){cached}"))
    return rows


def jobs_line(jobs: Optional[dict[str, Any]]) -> Optional[str]:
    """One console line of the job figures (None without agent jobs)."""
    if not jobs:
        return None
    parts = [f"{jobs.get('completed', 0)}/{jobs.get('count', 0)} completed"]
    jct = jobs.get("job_s") or {}
    if jct.get("count"):
        parts.append(f"JCT p50 {jct['p50']:.2f} s, p90 {jct['p90']:.2f} s")
    length, share = jobs.get("critical_path_requests") or {}, jobs.get("critical_path_share") or {}
    if length.get("count"):
        parts.append(f"critical path {length['mean']:.1f} requests, {share.get('mean', 0) * 100:.0f}% of JCT (mean)")
    if jobs.get("job_goodput_share") is not None:
        parts.append(
            f"{jobs['job_goodput_share'] * 100:.0f}% within slo.job_s={jobs.get('slo_job_s'):g} s "
            f"({jobs.get('job_goodput_per_s') or 0:.3f} jobs/s)"
        )
    depths = [
        f"{d} {v['cached_share'] * 100:.0f}%"
        for d, v in (jobs.get("by_depth") or {}).items()
        if v.get("cached_share") is not None
    ]
    if depths:
        parts.append("cached by depth: " + ", ".join(depths))
    return "jobs: " + " · ".join(parts)
