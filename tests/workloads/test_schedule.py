"""Time-shaped load: stages, ramps and timed runs (workloads/schedule.py), and their place in the plan."""

from types import SimpleNamespace as NS

import numpy as np
import pytest

from core.errors import ConfigError
from workloads.arrivals import arrival_registry
from workloads.base import SessionSpec, TurnSpec, WorkloadConfig, make_plan, session_count
from workloads.schedule import load_schedule

POISSON = arrival_registry.create("poisson")


def _counts(arrivals, edges):
    return np.histogram(np.asarray(arrivals), bins=edges)[0]


def _within(count: int, expected: float, z: float = 4.5) -> bool:
    return abs(count - expected) <= z * np.sqrt(expected)  # Poisson: variance = mean


def test_rate_stages_give_each_stage_its_planned_count():
    schedule = load_schedule(
        NS(stages=[{"duration_s": 60, "rate": 1}, {"duration_s": 60, "rate": 2}, {"duration_s": 60, "rate": 4}])
    )
    for seed in range(3):
        arrivals = schedule.arrivals(np.random.default_rng(seed), POISSON, 1.0)
        counts = _counts(arrivals, [0, 60, 120, 180])
        assert all(_within(c, e) for c, e in zip(counts, (60, 120, 240))), counts
        assert arrivals[0] == 0.0 and max(arrivals) < 180


@pytest.mark.parametrize("shape", ["linear", "exponential"])
def test_ramps_follow_their_intensity(shape):
    """Counts in each tenth of the ramp against ∫λ over it; a hold at `to` after the ramp."""
    ramp = {"from": 1.0, "to": 16.0, "duration_s": 100, "shape": shape}
    schedule = load_schedule(NS(ramp=ramp, duration_s=120))
    arrivals = schedule.arrivals(np.random.default_rng(7), POISSON, 1.0)
    edges = np.linspace(0, 100, 11)
    seg = schedule.segments[0]
    lam = (lambda t: 1 + 15 * t / 100) if shape == "linear" else (lambda t: 16 ** (t / 100))
    for (a, b), count in zip(zip(edges[:-1], edges[1:]), _counts(arrivals, edges)):
        grid = np.linspace(a, b, 201)
        expected = float(np.mean(lam(grid)) * (b - a))
        assert _within(count, expected), (a, b, count, expected)
    assert _within(_counts(arrivals, [100, 120])[0], 16 * 20)
    assert seg.integral() == pytest.approx(
        sum(np.mean(lam(np.linspace(a, b, 2001))) * 10 for a, b in zip(edges[:-1], edges[1:])), rel=1e-3
    )


def test_a_constant_process_through_a_ramp_is_the_inverse_of_the_cumulative_intensity():
    schedule = load_schedule(NS(ramp={"from": 0, "to": 10, "duration_s": 10}))  # Λ(t) = t²/2
    arrivals = schedule.arrivals(np.random.default_rng(0), arrival_registry.create("constant"), 1.0)
    assert arrivals == pytest.approx([np.sqrt(2 * k) for k in range(len(arrivals))])
    assert len(arrivals) == 50  # Λ(10) = 50: u = 0…49


def test_closed_loop_stages_and_ramps_step_the_cap():
    stages = load_schedule(NS(stages=[{"duration_s": 2, "concurrency": 1}, {"duration_s": 3, "concurrency": 4}]))
    assert stages.kind == "concurrency" and stages.cap_steps() == [(0.0, 1), (2.0, 4)] and stages.duration_s == 5
    up = load_schedule(NS(ramp={"from": 1, "to": 4, "duration_s": 3, "of": "concurrency"}, duration_s=5))
    assert up.cap_steps() == [(0.0, 1), (1.0, 2), (2.0, 3), (3.0, 4)]
    assert [s["index"] for s in up.to_json()] == [0, 1] and up.to_json()[1]["concurrency"] == 4
    timed = load_schedule(NS(duration_s=10, rate=None, concurrency=3))
    assert timed.cap_steps() == [(0.0, 3)] and timed.sessions_needed(4) >= 3 * 10


@pytest.mark.parametrize(
    "settings,match",
    [
        (dict(stages=[{"duration_s": 1, "rate": 1, "concurrency": 2}]), r"workload.stages\[0\] needs a rate"),
        (
            dict(stages=[{"duration_s": 1, "rate": 1}, {"duration_s": 1, "concurrency": 2}]),
            "mixes rate and concurrency",
        ),
        (dict(stages=[{"duration_s": -1, "rate": 1}]), r"workload.stages\[0\].duration_s must be > 0"),
        (dict(stages=[{"duration_s": 1, "rate": 1}], duration_s=5), "drop workload.duration_s"),
        (dict(stages=[{"duration_s": 1, "rate": 1}], rate=2.0), "drop workload.rate"),
        (dict(stages=[{"duration_s": 1, "rte": 1}]), "unknown keys rte"),
        (dict(stages=[]), "non-empty list"),
        (dict(duration_s=-3), "workload.duration_s must be > 0"),
        (dict(ramp={"from": 0, "to": 4, "duration_s": 10, "shape": "exponential"}), r"workload.ramp.from must be > 0"),
        (dict(ramp={"from": 1, "to": 4, "duration_s": 10, "shape": "cubic"}), "linear or exponential"),
        (dict(ramp={"from": 1, "to": 4, "duration_s": 10}, duration_s=5), "shorter than workload.ramp.duration_s"),
        (dict(ramp={"from": 1.5, "to": 4, "duration_s": 10, "of": "concurrency"}), "whole number"),
        (dict(ramp={"from": 1, "to": 2, "duration_s": 1}, stages=[{"duration_s": 1, "rate": 1}]), "not both"),
    ],
)
def test_bad_schedules_are_one_config_error_naming_the_key(settings, match):
    cfg = WorkloadConfig(**settings)
    with pytest.raises(ConfigError, match=match):
        cfg.validate()


def test_a_window_longer_than_the_run_is_refused():
    with pytest.raises(ConfigError, match="warmup_s"):
        WorkloadConfig(rate=1.0, duration_s=10, warmup_s=6, cooldown_s=4).validate()
    with pytest.raises(ConfigError, match="workload.cooldown_s must be >= 0"):
        WorkloadConfig(cooldown_s=-1).validate()


def _sessions(n):
    return [SessionSpec(i, [TurnSpec("x", 4)]) for i in range(n)]


def test_the_plan_holds_one_session_per_arrival_and_hashes_the_schedule():
    cfg = WorkloadConfig(name="synthetic", stages=[{"duration_s": 5, "rate": 2}, {"duration_s": 5, "rate": 4}])
    rng = np.random.default_rng(3)
    n = session_count(cfg, 16, rng)
    plan = make_plan(cfg, _sessions(n + 5), [], rng)
    assert plan.open_loop and len(plan.sessions) == n  # the extra sessions were dropped
    assert all(0 <= s.arrival_s < 10 for s in plan.sessions)
    body = plan.to_json()
    assert body["schedule"]["kind"] == "rate" and len(body["schedule"]["stages"]) == 2
    other = WorkloadConfig(name="synthetic", stages=[{"duration_s": 5, "rate": 2}, {"duration_s": 5, "rate": 4.5}])
    rng = np.random.default_rng(3)
    plan2 = make_plan(other, _sessions(session_count(other, 16, rng)), [], rng)
    assert plan2.to_json()["sha256"] != body["sha256"]


def test_runs_of_a_count_keep_their_plan_and_hash():
    plan = make_plan(WorkloadConfig(name="synthetic", rate=2.0), _sessions(4), [], np.random.default_rng(0))
    assert plan.schedule is None and "schedule" not in plan.to_json()
    closed = make_plan(WorkloadConfig(name="synthetic", concurrency=2), _sessions(4), [], np.random.default_rng(0))
    assert not closed.open_loop and closed.concurrency == 2 and closed.schedule is None


def test_a_closed_loop_schedule_sets_the_peak_cap():
    cfg = WorkloadConfig(name="chat", concurrency=4, ramp={"from": 1, "to": 6, "duration_s": 2, "of": "concurrency"})
    assert session_count(cfg, 4) >= 6 * 2
    plan = make_plan(cfg, _sessions(8), [], np.random.default_rng(0))
    assert not plan.open_loop and plan.concurrency == 6 and plan.schedule.kind == "concurrency"
