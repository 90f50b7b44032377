"""SLO search: the highest request rate (or concurrency) at which the SLO still holds.

``python -m harness slo_search.enabled=true slo.ttft_s=0.5 slo.tpot_s=0.05 workload=synthetic``

The engine loads once; each probe is a load point of the sweep (its own run folder and an
entry in ``sweep.json``). A probe passes when it completed (an over-saturated point fails)
and the share of the planned requests that completed within every SLO limit is at least
``slo_search.attainment`` — with 0.99, that is p99 TTFT ≤ slo.ttft_s and p99 TPOT ≤
slo.tpot_s at once, failures counting as misses. The load doubles from ``slo_search.low``
until a probe fails (or ``high`` is reached), then bisects between the highest passing and
the lowest failing load until they are within ``tolerance`` (relative; 1 for concurrency).
The answer, ``slo_max_rate`` or ``slo_max_concurrency``, is printed and written to sweep.json.
"""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any, Optional

from harness.config import RunConfig
from harness.results.schema import COMPLETE, RunSummary
from harness.results.store import is_run_dir, load_summary
from harness.results.sweep_file import locked_sweep
from harness.run.sweep import SESSIONS, run_sweep_point, with_load

log = logging.getLogger("harness")


def met_share(summary: RunSummary) -> float:
    """Share of the planned requests that completed within every SLO = attainment × completed / planned."""
    planned = summary.workload.get("requests_planned") or summary.requests.get("sent") or 0
    attainment = summary.throughput.get("slo_attainment") or 0.0
    return attainment * summary.requests.get("completed", 0) / planned if planned else 0.0


def probe_passes(entry: dict[str, Any], attainment: float) -> tuple[bool, Optional[float]]:
    """(passed, mean share meeting the SLO) of a probe's runs."""
    summaries = [RunSummary.from_dict(load_summary(Path(d))) for d in entry.get("run_dirs", []) if is_run_dir(Path(d))]
    if not summaries:
        return False, None
    share = sum(met_share(s) for s in summaries) / len(summaries)
    return all(s.status == COMPLETE for s in summaries) and share >= attainment, share


def run_slo_search(cfg: RunConfig, out_dir: Path) -> dict[str, Any]:
    """Probe loads against one engine session; returns the search's record in sweep.json."""
    search = cfg.slo_search
    key = search.over
    integer = key == "concurrency"
    base = copy.deepcopy(cfg)
    base.slo_search.enabled = False  # each probe is a plain point (its config_sha256 too)
    if key == "rate" and base.workload.concurrency is None:
        log.info("slo search over rate: no workload.concurrency cap: requests in flight are not limited")
    probes: list[dict[str, Any]] = []
    best_pass: Optional[float] = None
    worst_fail: Optional[float] = None

    def probe(value: float) -> bool:
        """Run one probe; sweep.json then has it and the best load so far."""
        nonlocal best_pass, worst_fail
        n = len(probes) + 1
        value = int(round(value)) if integer else round(value, 6)
        text = f"{value:g}"
        entry = run_sweep_point(
            with_load(base, key, value), out_dir / f"probe-{n:02d}-{key}={text}", out_dir, n, [f"workload.{key}={text}"]
        )
        passed, share = probe_passes(entry, search.attainment)
        probes.append({"probe": n, key: value, "passed": passed, "slo_met_share": share, "status": entry["status"]})
        if passed:
            best_pass = value if best_pass is None else max(best_pass, value)
        else:
            worst_fail = value if worst_fail is None else min(worst_fail, value)
        share_text = "-" if share is None else f"{share * 100:.1f}%"
        print(
            f"probe {n}: {key} {text} → {share_text} of requests met the SLO (need {search.attainment * 100:g}%), "
            f"{entry['status']} → {'pass' if passed else 'fail'}",
            flush=True,
        )
        _write_search(out_dir, cfg, probes, best_pass, final=False, worst_fail=worst_fail)
        return passed

    try:
        value = search.low
        while len(probes) < search.max_probes and probe(value):  # grow until a probe fails
            if search.high is not None and value >= search.high:
                break
            value = value * 2 if search.high is None else min(value * 2, search.high)
        while (
            best_pass is not None
            and worst_fail is not None
            and len(probes) < search.max_probes
            and _apart(best_pass, worst_fail, search.tolerance, integer)
        ):
            mid = (best_pass + worst_fail) / 2
            mid = float(int(mid)) if integer else mid
            if mid <= best_pass:
                break
            probe(mid)
    finally:
        SESSIONS.close()
    return _write_search(out_dir, cfg, probes, best_pass, final=True, worst_fail=worst_fail)


def _apart(lo: float, hi: float, tolerance: float, integer: bool) -> bool:
    return hi - lo > 1 if integer else (hi - lo) / hi > tolerance


def _write_search(
    out_dir: Path,
    cfg: RunConfig,
    probes: list[dict[str, Any]],
    best: Optional[float],
    final: bool,
    worst_fail: Optional[float] = None,
) -> dict[str, Any]:
    key = cfg.slo_search.over
    slo = {k: getattr(cfg.slo, k) for k in ("ttft_s", "tpot_s", "e2e_s") if getattr(cfg.slo, k) is not None}
    limits = " and ".join(f"{k.removesuffix('_s').upper()} ≤ {v * 1000:g} ms" for k, v in slo.items())
    unit = " req/s" if key == "rate" else ""
    if best is None:
        answer = f"the SLO ({limits}, {cfg.slo_search.attainment * 100:g}% of requests) does not hold even at {key} {cfg.slo_search.low:g}{unit}"
    else:
        bound = f" (fails at {worst_fail:g}{unit})" if worst_fail is not None else " (the highest load probed)"
        answer = f"slo_max_{key} = {best:g}{unit}: the highest {key} at which {cfg.slo_search.attainment * 100:g}% of requests met {limits}{bound}"
    if not final:  # interrupted, or still probing: no answer yet, only what the probes so far say
        answer = f"no answer: the search did not finish (so far: {answer})"
    record = {
        "over": key,
        "slo": slo,
        "attainment": cfg.slo_search.attainment,
        "probes": probes,
        f"slo_max_{key}": best if final else None,
        "best_so_far": best,
        "lowest_failing": worst_fail,
        "finished": final,
        "answer_text": answer,
    }
    with locked_sweep(out_dir) as data:
        data["kind"] = "slo_search"
        data["slo_search"] = record
        data[f"slo_max_{key}"] = best if final else None
    return record
