import numpy as np
import pytest

from core.errors import ConfigError
from workloads.arrivals import arrival_registry


@pytest.mark.parametrize("name,burstiness", [("poisson", 1.0), ("gamma", 0.5), ("gamma", 4.0), ("constant", 1.0)])
def test_mean_gap_is_one_over_rate(name, burstiness):
    offsets = arrival_registry.create(name).offsets(np.random.default_rng(0), 4000, 10.0, burstiness)
    gaps = np.diff(offsets)
    assert gaps.mean() == pytest.approx(0.1, rel=0.05)
    if name == "gamma":  # coefficient of variation is 1/sqrt(shape)
        assert gaps.std() / gaps.mean() == pytest.approx(1 / np.sqrt(burstiness), rel=0.1)


def test_unknown_arrival_names_the_choices():
    with pytest.raises(ConfigError, match="constant, gamma, poisson"):
        arrival_registry.get("weibull")
