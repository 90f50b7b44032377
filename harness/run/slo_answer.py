"""The capacity search's answer: one sentence, and its record in sweep.json.

    capacity 3.1–3.6 req/s at p90 TTFT ≤ 500 ms and p90 TPOT ≤ 50 ms (meets at 3.1, cannot
    tell at 3.35, misses at 3.6), 14 runs, 6.0 min

Nothing met: "no load meets …"; nothing missed up to ``high``: "capacity ≥ X …". A cannot-tell
load below the capacity's low end is named (out of order). When the budget ended the search
before the tolerance, the sentence says which budget. A search that did not finish
(interrupted) has no answer: "no answer: the search did not finish (so far: …)".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional

from harness.run.capacity_search import Probe, Search

METRIC_NAMES = {"ttft_s": "TTFT", "tpot_s": "TPOT", "e2e_s": "E2E"}
BUDGET_TEXT = {
    "max_runs": "slo_search.max_runs={max_runs} runs",
    "max_time_s": "slo_search.max_time_s={max_time_s:g} s",
    "max_probes": "slo_search.max_probes={max_probes} loads",
}


@dataclass(frozen=True)
class Question:
    """What the search asks: over which load, for which limits, at which attainment."""

    over: str  # rate | concurrency
    slo: Mapping[str, float]  # metric key → limit (s)
    attainment: float

    @property
    def unit(self) -> str:
        return " req/s" if self.over == "rate" else " concurrent requests"

    def limits_text(self) -> str:
        """ "p90 TTFT ≤ 500 ms and p90 TPOT ≤ 50 ms"."""
        stat = f"p{self.attainment * 100:g}"
        return " and ".join(f"{stat} {METRIC_NAMES.get(k, k)} ≤ {v * 1000:g} ms" for k, v in self.slo.items())


def duration_text(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def answer_text(search: Search, q: Question, final: bool) -> str:
    """The sentence (module doc)."""
    lo, hi = search.capacity_low, search.capacity_high
    evidence = _evidence(search)
    spent = f"{search.runs} runs, {duration_text(search.wall_s)}"
    if lo is None:
        text = f"no load meets {q.limits_text()}" + (f" ({evidence})" if evidence else "")
        if hi is not None and hi > search.settings.low:
            text += f": the capacity is below {hi:g}{q.unit}"
        text += f"; {spent}"
    elif hi is None:
        text = f"capacity ≥ {lo:g}{q.unit} at {q.limits_text()} ({evidence}; none missed), {spent}"
    else:
        text = f"capacity {lo:g}–{hi:g}{q.unit} at {q.limits_text()} ({evidence}), {spent}"
    below = search.out_of_order()
    if below:
        text += f"; out of order: cannot tell at {_and([f'{x:g}' for x in below])}, below {lo:g}"
    if search.stopped_by:
        budget = BUDGET_TEXT[search.stopped_by].format(**vars(search.settings))
        text += f"; the budget ({budget}) ended the search before the tolerance"
    if not final:
        text = f"no answer: the search did not finish (so far: {text})"
    return text


def _evidence(search: Search) -> str:
    """ "meets at 3.1, cannot tell at 3.35, misses at 3.6": the loads that bound the capacity."""
    lo, hi = search.capacity_low, search.capacity_high
    parts = []
    if lo is not None:
        parts.append(f"meets at {lo:g}")
    inside = search.inside()
    if inside:
        cut = {p.load for p in search.probes if p.cut_short}
        parts.append("cannot tell at " + _and([f"{x:g}{' (cut short)' if x in cut else ''}" for x in inside]))
    if hi is not None:
        parts.append(f"misses at {hi:g}")
    return ", ".join(parts)


def _and(items: list[str]) -> str:
    """ "1", "1 and 2", "1, 2 and 3"."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _load(value: Optional[float], integer: bool) -> Optional[float]:
    return int(value) if integer and value is not None else value


def probe_record(p: Probe, key: str, integer: bool) -> dict[str, Any]:
    """A probe in sweep.json: its load, its runs, its verdict and the bounds behind it."""
    shares = [r.info["slo_met_share"] for r in p.runs if r.info.get("slo_met_share") is not None]
    return {
        "probe": p.index,
        key: _load(p.load, integer),
        "verdict": p.verdict,
        "cut_short": p.cut_short,
        "runs": [{**r.info, "ok": r.ok, "log_margins": r.margins} for r in p.runs],
        # q / limit: the geometric mean over the runs and its one-sided bounds
        "limits": {
            b.limit: {
                "q_over_limit": b.ratios()[0],
                "low": b.ratios()[1],
                "high": b.ratios()[2],
                "sigma_time": b.sigma_time,
            }
            for b in p.bounds
        },
        # the per-request joint share (all limits at once, failures as misses), mean over the runs
        "slo_met_share": sum(shares) / len(shares) if shares else None,
    }


def search_record(search: Search, q: Question, final: bool) -> dict[str, Any]:
    """The ``slo_search`` record of sweep.json."""
    integer = search.settings.integer
    lo, hi = _load(search.capacity_low, integer), _load(search.capacity_high, integer)
    return {
        "over": q.over,
        "slo": dict(q.slo),
        "attainment": q.attainment,
        "alpha": search.settings.alpha,
        "probes": [probe_record(p, q.over, integer) for p in search.probes],
        "probing": probe_record(search.current, q.over, integer) if search.current else None,
        "capacity_low": lo if final else None,
        "capacity_high": hi if final else None,
        "inside": [_load(x, integer) for x in search.inside()],
        "out_of_order": [_load(x, integer) for x in search.out_of_order()],
        f"slo_max_{q.over}": lo if final else None,
        "best_so_far": lo,
        "lowest_failing": hi,
        "runs": search.runs,
        "wall_s": round(search.wall_s, 3),
        "stopped_by": search.stopped_by,
        "finished": final,
        "answer_text": answer_text(search, q, final),
    }
