"""Open-loop arrival processes, registered by name: when each session starts.

Gaps between arrivals are drawn from Gamma(shape b, scale 1 / (rate * b)): the mean gap is
1 / rate; b = 1 is a Poisson process, larger b is more regular, smaller b is burstier.
"""

from __future__ import annotations

import numpy as np

from core.registry import Registry


class ArrivalProcess:
    registry_name: str

    def gaps(self, rng: np.random.Generator, n: int, rate: float, burstiness: float) -> np.ndarray:
        raise NotImplementedError

    def offsets(self, rng: np.random.Generator, n: int, rate: float, burstiness: float) -> list[float]:
        """Start times (s) of n sessions; the first starts at 0."""
        if n == 0:
            return []
        gaps = self.gaps(rng, n - 1, rate, burstiness)
        return [0.0] + np.cumsum(gaps).tolist()


arrival_registry: Registry[ArrivalProcess] = Registry("arrival process")


@arrival_registry.register("poisson")
class PoissonArrivals(ArrivalProcess):
    def gaps(self, rng, n, rate, burstiness):
        return rng.exponential(1.0 / rate, size=n)


@arrival_registry.register("gamma")
class GammaArrivals(ArrivalProcess):
    def gaps(self, rng, n, rate, burstiness):
        return rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=n)


@arrival_registry.register("constant")
class ConstantArrivals(ArrivalProcess):
    def gaps(self, rng, n, rate, burstiness):
        return np.full(n, 1.0 / rate)
