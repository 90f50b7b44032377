"""How far one run is from each SLO limit: the log margin d = ln(q / limit).

For an SLO limit L_k on a request metric k (``slo.ttft_s``, ``slo.tpot_s``, ``slo.e2e_s``) and
the attainment a (``slo_search.attainment``), over the N requests of run i::

    q_ik = the ⌈a · N⌉-th smallest value of metric k, a request that failed (or was planned and
           never sent) counting as +∞                      (the inverted-CDF a-quantile)
    d_ik = ln(q_ik / L_k)

so that q_ik ≤ L_k exactly when at least a share a of the requests met the limit: d ≤ 0 is
"meets", for that metric, in that run. A completed request with no value for the metric (a
one-token reply has no TPOT) is left out of that metric's N: per request it has no limit there
(harness/results/formulas.py meets_slo). The requests are those of the steady-state window when
the run has one (as its summary's figures are). A q of +∞ (more than 1 − a of the requests
failed) gives d = +∞. A q of 0 is taken as 1 ns, so that d stays finite.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from harness.results import metrics
from harness.results.schema import RunResult, completed

SMALLEST_S = 1e-9


def attainment_quantile(values: np.ndarray, unfinished: int, attainment: float) -> float:
    """The ⌈a · N⌉-th smallest of ``values`` and ``unfinished`` times +∞ (N: all of them)."""
    n = len(values) + unfinished
    if n == 0:
        return 0.0  # no request has a value for it: nothing misses
    # 1e-9: a · N computed as 9.000000000000002 must not round up to 10
    rank = max(1, math.ceil(attainment * n - 1e-9))
    if rank > len(values):
        return math.inf
    return float(np.partition(np.asarray(values, dtype=float), rank - 1)[rank - 1])


def log_margin(q: float, limit: float) -> float:
    """d = ln(q / limit); +∞ for q = +∞."""
    return math.inf if math.isinf(q) else math.log(max(q, SMALLEST_S) / limit)


def run_margins(run: RunResult, limits: Mapping[str, float], attainment: float) -> dict[str, float]:
    """d per limit (metric key → seconds) of one run folder loaded (module doc)."""
    requests = run.requests
    window = run.summary.window
    if window and len(requests) and "start_s" in requests:
        starts = requests["start_s"].astype(float)
        requests = requests[(starts >= window["start_s"]) & (starts <= window["end_s"])]
        unsent = 0
    else:
        planned = run.summary.workload.get("requests_planned") or 0
        unsent = max(int(planned) - len(requests), 0)
    ok = completed(requests)
    unfinished = len(requests) - len(ok) + unsent
    out = {}
    for key, limit in limits.items():
        values = metrics.REQUEST_METRICS[key].frame_values(ok)
        out[key] = log_margin(attainment_quantile(values, unfinished, attainment), limit)
    return out
