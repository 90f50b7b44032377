"""Three verdicts, Benjamini–Hochberg, figures and the noise floor's plan."""

import pytest

from harness.gate import intervals, multiple, noise, verdicts
from harness.gate.figures import parse_figure


def _interval(ratio, lo, hi, method=intervals.PAIRED_T):
    return intervals.Interval(method, ratio, lo, hi, lo, hi, 0.05, 5, 5, 0.01)


TTFT = parse_figure("ttft_s.p50")
RATE = parse_figure("output_tokens_per_s")


@pytest.mark.parametrize(
    "ratio,lo,hi,verdict",
    [
        (1.20, 1.10, 1.30, verdicts.REGRESSION),  # worse beyond noise and beyond the margin
        (1.03, 1.01, 1.05, verdicts.PASS),  # worse beyond noise, but shown within the 10 % margin
        (1.00, 0.97, 1.03, verdicts.PASS),
        (1.08, 0.95, 1.21, verdicts.INCONCLUSIVE),
        (1.12, 1.02, 1.22, verdicts.REGRESSION),
        (1.12, 0.99, 1.25, verdicts.INCONCLUSIVE),  # beyond the margin but not beyond noise
    ],
)
def test_three_verdicts_latency(ratio, lo, hi, verdict):
    assert verdicts.decide(TTFT, _interval(ratio, lo, hi), 0.10).verdict == verdict


def test_rates_are_worse_when_lower():
    d = verdicts.decide(RATE, _interval(0.8, 0.75, 0.85), 0.10)
    assert d.verdict == verdicts.REGRESSION and d.worse == pytest.approx(0.25)
    assert verdicts.decide(RATE, _interval(1.3, 1.2, 1.4), 0.10).verdict == verdicts.PASS


def test_within_run_never_decides():
    d = verdicts.decide(TTFT, _interval(1.5, 1.4, 1.6, intervals.WITHIN_RUN), 0.05)
    assert d.verdict == verdicts.INCONCLUSIVE and "noise floor" in d.reason
    assert "INCONCLUSIVE" in d.text()


def test_benjamini_hochberg():
    p = [0.001, 0.2, None, 0.011, 0.04, 0.03]
    assert multiple.benjamini_hochberg(p, 0.05) == [True, False, False, True, True, True]
    assert multiple.benjamini_hochberg([0.001, 0.2, 0.04, 0.03], 0.05) == [True, False, False, False]
    assert multiple.benjamini_hochberg([0.01] * 5, 0.05) == [True] * 5
    assert multiple.benjamini_hochberg([], 0.05) == []


def test_parse_figure():
    assert parse_figure("ttft_s").name == "ttft_s.p50"
    assert parse_figure("tpot_s.median").name == "tpot_s.p50"
    assert parse_figure("output_tokens_per_s").stat is None
    with pytest.raises(ValueError, match="unknown figure"):
        parse_figure("speed")


def test_noise_floor_margin_and_plan(tmp_path):
    fig = noise.figure_noise([0.02, -0.03, 0.01, 0.04, -0.02], [0.0001] * 10, requests_per_run=24)
    assert fig.sd_run > 0 and fig.sd_run_apart is None and fig.one_run_each() == (fig.sd_run, 4)
    floor = noise.NoiseFloor("abc", "hw1", {"ttft_s.p50": fig}, cost_run_s=10.0, cost_request_s=0.5)
    margin, source = floor.margin("ttft_s.p50", 0.01)
    assert margin == pytest.approx(3 * fig.sd_run) and "noise floor" in source
    assert floor.margin("ttft_s.p50", 0.5)[0] == 0.5
    assert floor.margin("tpot_s.p50", 0.05) == (0.05, "threshold 5%")
    path = noise.save(tmp_path, floor)
    again = noise.load(tmp_path, "abc", "hw1")
    assert path.is_file() and again.figures["ttft_s.p50"] == fig
    assert noise.load(tmp_path, "other", "hw1") is None
    p = noise.plan("ttft_s.p50", fig, 0.02, 10.0, 0.5)
    coarse = noise.plan("ttft_s.p50", fig, 0.10, 10.0, 0.5)
    assert p.blocks >= coarse.blocks >= 2 and p.requests_per_run >= 1


def test_the_floor_keeps_the_spread_of_runs_made_apart_for_one_run_against_one():
    # each block's two runs agree, but the machine drifts between blocks (+8 % in the later ones):
    # side by side the runs differ by ~1 %, apart by up to 8 %
    pairs = [(0.00, 0.01), (0.01, 0.00), (0.00, -0.01), (0.08, 0.09), (0.09, 0.08), (0.08, 0.07)]
    fig = noise.figure_noise([b - a for a, b in pairs], [], 24, run_logs=[v for pair in pairs for v in pair])
    assert fig.sd_run < 0.01 < 0.04 < fig.sd_run_apart
    assert fig.one_run_each() == (fig.sd_run_apart, 11)  # 2k − 1 degrees of freedom
    floor = noise.NoiseFloor("abc", "hw1", {"tpot_s.p50": fig}, 10.0, 0.5)
    assert floor.margin("tpot_s.p50", 0.0)[0] == pytest.approx(3 * fig.sd_run)  # the paired gate: side by side
    again = noise.NoiseFloor.from_dict(floor.to_dict())
    assert again.figures["tpot_s.p50"] == fig
    old = floor.to_dict()
    del old["figures"]["tpot_s.p50"]["sd_run_apart"]  # a floor stored before σ_apart was kept
    assert noise.NoiseFloor.from_dict(old).figures["tpot_s.p50"].one_run_each() == (fig.sd_run, 5)
