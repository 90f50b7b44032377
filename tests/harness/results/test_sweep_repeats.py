"""A point's figures over its repeats: mean and 95 % CI, a repeat cut short left out."""

from __future__ import annotations

import pytest

from harness.results.schema import RunSummary
from harness.results.sweep_file import combine_repeats


def _summary(status: str, ttft_p50: float) -> RunSummary:
    return RunSummary(status=status, latency={"ttft_s": {"p50": ttft_p50}}, throughput={"output_tokens_per_s": 100.0})


def test_an_interrupted_repeat_does_not_weigh_as_a_whole_one():
    figures = combine_repeats([_summary("complete", 0.2), _summary("interrupted", 0.9), _summary("complete", 0.4)])
    assert figures["ttft_s.p50"]["mean"] == pytest.approx(0.3) and figures["ttft_s.p50"]["n"] == 2


def test_with_no_finished_repeat_the_partial_ones_are_all_there_is():
    figures = combine_repeats([_summary("interrupted", 0.2), _summary("failed", 0.4)])
    assert figures["ttft_s.p50"]["mean"] == pytest.approx(0.3)
