"""Token-length distributions: fixed, uniform (mean ± spread) or normal (sd = spread)."""

from __future__ import annotations

import numpy as np


def sample_lengths(
    rng: np.random.Generator, n: int, mean: int, dist: str, spread: float, minimum: int = 1
) -> list[int]:
    if dist == "fixed" or spread == 0:
        values = np.full(n, float(mean))
    elif dist == "uniform":
        values = rng.uniform(mean - spread, mean + spread, size=n)
    elif dist == "normal":
        values = rng.normal(mean, spread, size=n)
    else:
        raise ValueError(f"unknown length distribution {dist!r}")
    return [max(minimum, int(round(v))) for v in values]
