"""The SLO search's wiring (harness/run/slo_search.py) that needs no engine: a probe's config,
the noise floor's spread between sessions per limit."""

import math
import re

import pandas as pd
import pytest
from conftest import make_config

from core.errors import ConfigError
from harness.config import config_sha256
from harness.gate import noise
from harness.results.schema import RunResult, RunSummary
from harness.run.slo_search import FloorCache, probe_config
from harness.telemetry.environment import hardware_fingerprint

ENV = {"cpu": {"model": "test cpu", "logical_cores": 2}}


def test_a_probe_runs_as_a_plain_run_once():
    search = ("slo_search.enabled=true", "slo.ttft_s=0.5", "slo_search.attainment=0.9", "slo_search.max_runs=12")
    cfg = make_config(*search, "repeat=3", "resume=true")
    base = probe_config(cfg)
    assert base.repeat == 1 and not base.resume and not base.slo_search.enabled
    assert config_sha256(base) == config_sha256(make_config("slo.ttft_s=0.5"))  # a noise floor's config
    assert cfg.slo_search.enabled and cfg.repeat == 3  # the search's own config is left as it was


def test_the_floor_gives_sigma_time_per_limit(tmp_path):
    sha = "a" * 64
    floor = noise.NoiseFloor(
        sha,
        hardware_fingerprint(ENV),
        {
            "ttft_s.p90": noise.FigureNoise(0.02, None, 5, 10, sd_run_apart=0.05),
            "tpot_s.p90": noise.FigureNoise(0.03, None, 5, 10, sd_run_apart=0.02),  # none between sessions
            "ttft_s.p99": noise.FigureNoise(0.02, None, 5, 10, sd_run_apart=0.5),
        },
        cost_run_s=1.0,
        cost_request_s=0.1,
    )
    noise.save(tmp_path, floor)
    run = RunResult(tmp_path, RunSummary(status="complete", config_sha256=sha), pd.DataFrame(), ENV, None, None, None)
    sigmas = FloorCache(str(tmp_path), 0.9).sigma_time(run, ["ttft_s", "tpot_s"])
    assert sigmas == {"ttft_s": pytest.approx(math.sqrt(0.05**2 - 0.02**2))}
    assert FloorCache(None, 0.9).sigma_time(run, ["ttft_s"]) == {}
    other = RunResult(
        tmp_path, RunSummary(status="complete", config_sha256="b" * 64), pd.DataFrame(), ENV, None, None, None
    )
    assert FloorCache(str(tmp_path), 0.9).sigma_time(other, ["ttft_s"]) == {}


@pytest.mark.parametrize(
    "override, message",
    [
        ("slo_search.min_runs=1", "slo_search.min_runs must be >= 2"),
        ("slo_search.max_runs_per_probe=1", "slo_search.max_runs_per_probe must be >= slo_search.min_runs=2"),
        ("slo_search.max_runs=1", "slo_search.max_runs must be >= slo_search.min_runs=2"),
        ("slo_search.max_time_s=0", "slo_search.max_time_s must be > 0"),
        ("slo_search.alpha=0.5", "slo_search.alpha must be in (0, 0.5)"),
    ],
)
def test_the_budget_is_checked(override, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        make_config("slo_search.enabled=true", "slo.ttft_s=0.5", override)
