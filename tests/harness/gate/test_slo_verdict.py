"""A load's verdict against the SLO (harness/gate/slo_verdict.py) and the log margins it rests
on (harness/gate/slo_margins.py)."""

import math

import numpy as np
import pandas as pd
import pytest

from harness.gate.slo_margins import attainment_quantile, log_margin, run_margins
from harness.gate.slo_verdict import CANNOT_TELL, MEETS, MISSES, limit_bounds, verdict
from harness.results.schema import RunResult, RunSummary


def test_the_quantile_meets_the_limit_exactly_when_the_share_does():
    values = np.arange(1.0, 11.0)  # 1 … 10
    assert attainment_quantile(values, 0, 0.9) == 9.0  # 9 of 10 are ≤ 9
    assert attainment_quantile(values, 0, 0.7) == 7.0  # 0.7 · 10 is 7.000000000000001 in floats
    assert attainment_quantile(values, 1, 0.9) == 10.0  # 11 requests: ⌈9.9⌉ = the 10th smallest
    assert attainment_quantile(values, 2, 0.9) == math.inf  # 12: the 11th is a failure
    assert attainment_quantile(np.empty(0), 0, 0.9) == 0.0
    rng = np.random.default_rng(0)
    for _ in range(50):
        v, failed, a, limit = rng.exponential(1.0, 40), int(rng.integers(0, 5)), 0.85, 1.2
        share = (v <= limit).sum() / (len(v) + failed)
        assert (attainment_quantile(v, failed, a) <= limit) == (share >= a)


def test_log_margin():
    assert log_margin(0.25, 0.5) == pytest.approx(math.log(0.5))
    assert log_margin(math.inf, 0.5) == math.inf
    assert math.isfinite(log_margin(0.0, 0.5))


def test_bounds_are_the_one_sided_t_bounds_of_the_mean():
    d = [-0.2, -0.1, -0.15]
    b = limit_bounds("ttft_s", d, alpha=0.05)
    se = np.std(d, ddof=1) / math.sqrt(3)
    assert b.mean == pytest.approx(-0.15)
    assert b.high == pytest.approx(-0.15 + 2.919986 * se, rel=1e-5)  # t(0.95, 2)
    assert b.low == pytest.approx(-0.15 - 2.919986 * se, rel=1e-5)
    widened = limit_bounds("ttft_s", d, alpha=0.05, sigma_time=0.1)
    assert widened.high == pytest.approx(-0.15 + 2.919986 * math.sqrt(se**2 + 0.01), rel=1e-5)
    assert widened.ratios()[0] == pytest.approx(math.exp(-0.15))
    with pytest.raises(ValueError):
        limit_bounds("ttft_s", [0.1], alpha=0.05)


def test_meets_misses_or_cannot_tell():
    clearly_under = limit_bounds("ttft_s", [-0.30, -0.32, -0.28], 0.05)
    clearly_over = limit_bounds("tpot_s", [0.30, 0.32, 0.28], 0.05)
    straddles = limit_bounds("tpot_s", [-0.05, 0.04, 0.01], 0.05)
    assert verdict([clearly_under]) == MEETS
    assert verdict([clearly_under, clearly_over]) == MISSES  # one limit over is enough
    assert verdict([clearly_under, straddles]) == CANNOT_TELL  # every limit must be under
    assert verdict([straddles, clearly_over]) == MISSES
    # time's noise does not average out: a floor's spread between sessions can leave it unclear
    assert verdict([limit_bounds("ttft_s", [-0.30, -0.32, -0.28], 0.05, sigma_time=0.2)]) == CANNOT_TELL


def test_a_run_with_too_many_failures_misses():
    b = limit_bounds("e2e_s", [-1.0, math.inf], 0.05)
    assert b.low == math.inf and verdict([b]) == MISSES


def test_run_margins_count_failures_and_leave_out_what_has_no_value():
    """9 requests completed, 1 failed: the p90 of TTFT is the 9th of 10; TPOT has no value for a
    one-token reply, so its population is the 8 with one and the failure."""
    rows = [{"ttft_s": 0.1 * (i + 1), "tpot_s": 0.01, "e2e_s": 1.0, "error": None, "start_s": i} for i in range(9)]
    rows[0]["tpot_s"] = None
    rows.append({"ttft_s": None, "tpot_s": None, "e2e_s": None, "error": "boom", "start_s": 9})
    summary = RunSummary(status="complete", workload={"requests_planned": 10})
    run = RunResult(None, summary, pd.DataFrame(rows), {}, None, None, None)
    d = run_margins(run, {"ttft_s": 0.9, "tpot_s": 0.02}, attainment=0.9)
    assert d["ttft_s"] == pytest.approx(0.0)  # q = 0.9 s (9th of 10), the limit
    assert d["tpot_s"] == math.inf  # ⌈0.9 · 9⌉ = 9th of 9: the failure
    assert run_margins(run, {"tpot_s": 0.02}, attainment=0.8)["tpot_s"] == pytest.approx(math.log(0.5))  # 8th: 0.01
    windowed = RunSummary(status="complete", window={"start_s": 0, "end_s": 4})
    run = RunResult(None, windowed, pd.DataFrame(rows), {}, None, None, None)
    assert run_margins(run, {"ttft_s": 0.45}, attainment=0.8)["ttft_s"] == pytest.approx(math.log(0.4 / 0.45))
