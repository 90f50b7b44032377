"""The verdict words of compare's differences, from a ratio's interval (harness/gate/intervals.py).

Each side of a comparison is one run or several (repeats of a point, or the blocks of
``harness.ab``); the interval of s(B)/s(A) comes from the runs (a two-level bootstrap: runs,
then requests within runs). One run against one run gives a within-run interval only: it lacks
the noise between runs, so it claims no difference either way ("within-run only") unless the
noise floor of the configuration on this machine is known (``harness.ab --aa``), which widens it.

- faster / slower: the 95 % interval of the ratio excludes 1, by the side that is better
  (latencies: lower is better; rates: higher);
- no significant difference: the interval contains 1.
"""

from __future__ import annotations

from harness.gate.intervals import Interval

FASTER = "faster"
SLOWER = "slower"
NO_DIFFERENCE = "no significant difference"
WITHIN_RUN_ONLY = "within-run only"
NOT_ENOUGH_DATA = "not enough data"
# a side that would be faster but kept its reply constraint (workload.response_format, tools) less
# often than the baseline: speed bought with invalid replies is not faster
NOT_FASTER = "not faster"


def invalid_verdict(valid_share: float) -> str:
    return f"{NOT_FASTER}: only {valid_share * 100:.0f} % of its replies were valid"


MIN_SAMPLES = 3  # fewer values in any run of either side: no interval
DEFAULT_RESAMPLES = 2000
CONFIDENCE = 0.95


def verdict(interval: Interval, lower_is_better: bool = True) -> str:
    if not interval.decides:
        return WITHIN_RUN_ONLY
    if interval.low <= 1 <= interval.high:
        return NO_DIFFERENCE
    improved = interval.ratio < 1 if lower_is_better else interval.ratio > 1
    return FASTER if improved else SLOWER
