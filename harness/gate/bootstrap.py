"""Bootstrap resampling of per-request values: the statistic of R resamples of one run.

A statistic is ``median``, ``mean`` or a percentile ``pNN`` (``p50`` is the median), computed
row-wise on a (R, n) array of resampled values.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

StatFunction = Callable[[np.ndarray], np.ndarray]


def stat_function(stat: str) -> StatFunction:
    """``median`` | ``mean`` | ``pNN`` → a function of a (R, n) array giving R values (row-wise)."""
    if stat == "median":
        return lambda a: np.median(a, axis=-1)
    if stat == "mean":
        return lambda a: np.mean(a, axis=-1)
    if stat.startswith("p") and stat[1:].replace(".", "", 1).isdigit() and 0 <= float(stat[1:]) <= 100:
        q = float(stat[1:])
        return lambda a: np.percentile(a, q, axis=-1)
    raise ValueError(f"unknown statistic '{stat}': use median, mean or pNN (e.g. p90)")


def clean(values: Sequence[float]) -> np.ndarray:
    """The finite values as a float array (None and NaN dropped)."""
    arr = np.asarray([v for v in values if v is not None], dtype=float)
    return arr[np.isfinite(arr)]


def resampled_stat(
    x: np.ndarray, fn: StatFunction, resamples: int, rng: np.random.Generator, max_cells: int = 4_000_000
) -> np.ndarray:
    """s(x*) for ``resamples`` bootstrap resamples of x, in blocks of at most max_cells values."""
    out = np.empty(resamples)
    block = max(1, max_cells // max(1, x.size))
    for start in range(0, resamples, block):
        stop = min(resamples, start + block)
        idx = rng.integers(0, x.size, size=(stop - start, x.size))
        out[start:stop] = fn(x[idx])
    return out
