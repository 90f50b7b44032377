"""The over-saturation stop: the detector on synthetic series, and the driver end to end
with a fake engine that serves one request at a time."""

import asyncio
import math
import re
import time

import numpy as np
import pytest

from core.errors import ConfigError
from core.types import RequestDone, TokenChunk
from harness.client.driver import SATURATED_ERROR, Driver
from harness.client.saturation import SaturationDetector, slope_t
from harness.config import SaturationConfig
from workloads.base import SessionSpec, TurnSpec, WorkloadPlan

# --- the detector on synthetic series ---------------------------------------------------


def feed(detector, backlog, ttft, until_s, step_s=0.25, per_step_ttft=3):
    """Feed backlog(t) and ttft(t) every step up to ``until_s``; returns every non-None check."""
    reasons = []
    for t in np.arange(step_s, until_s + 1e-9, step_s):
        detector.observe_backlog(t, backlog(t))
        for k in range(per_step_ttft):  # a few requests finish per step
            detector.observe_ttft(t - k * step_s / per_step_ttft, ttft(t))
        reason = detector.check(t)
        if reason:
            reasons.append((t, reason))
    return reasons


RNG_SEED = 1234


def noisy(f, sd, seed=RNG_SEED):
    rng = np.random.default_rng(seed)
    return lambda t: f(t) + rng.normal(0.0, sd)


def test_steady_backlog_is_not_saturated():
    det = SaturationDetector(SaturationConfig())
    backlog = noisy(lambda t: 20, 3)
    ttft = noisy(lambda t: 0.5, 0.05, seed=RNG_SEED + 1)
    assert feed(det, lambda t: max(0, round(backlog(t))), ttft, until_s=60) == []


def test_growing_backlog_and_ttft_is_saturated():
    det = SaturationDetector(SaturationConfig())
    backlog = noisy(lambda t: 2 + 4 * t, 2)  # +4 sessions/s
    ttft = noisy(lambda t: 0.2 + 0.4 * t, 0.1, seed=RNG_SEED + 1)  # +0.4 s/s
    reasons = feed(det, lambda t: max(0, round(backlog(t))), ttft, until_s=20)
    assert reasons, "a queue growing for 20 s must be reported"
    first_t, reason = reasons[0]
    assert first_t == pytest.approx(10.0, abs=0.3)  # as soon as min_s allows
    assert reason.startswith("over-saturated: backlog grew from ")
    m = re.search(r"sessions \(\+([\d.]+)/s\) and TTFT from .* \(\+([\d.]+) s/s\) over the last 10 s$", reason)
    assert m, reason
    assert float(m.group(1)) == pytest.approx(4.0, abs=0.3) and float(m.group(2)) == pytest.approx(0.4, abs=0.05)
    assert "\n" not in reason


def test_growing_backlog_with_flat_ttft_is_not_saturated():
    """A burst the engine absorbs: more in flight, but requests start no later."""
    det = SaturationDetector(SaturationConfig())
    backlog = noisy(lambda t: 2 + 4 * t, 2)
    ttft = noisy(lambda t: 0.5, 0.05, seed=RNG_SEED + 1)
    assert feed(det, lambda t: max(0, round(backlog(t))), ttft, until_s=40) == []


def test_growing_ttft_with_steady_backlog_is_not_saturated():
    det = SaturationDetector(SaturationConfig())
    assert feed(det, lambda t: 10, lambda t: 0.1 * t, until_s=40) == []


def test_nothing_before_min_s():
    det = SaturationDetector(SaturationConfig(min_s=30.0))
    reasons = feed(det, lambda t: 5 * t, lambda t: 0.5 * t, until_s=40)
    assert reasons and all(t >= 30.0 for t, _ in reasons)


def test_nothing_below_min_backlog():
    cfg = SaturationConfig(min_s=1.0, min_backlog=50, hold_s=0.0)
    # Perfect lines rising for 12 s: backlog reaches 48, under min_backlog.
    assert feed(SaturationDetector(cfg), lambda t: 4 * t, lambda t: 0.5 * t, until_s=12) == []
    assert feed(SaturationDetector(cfg), lambda t: 4 * t, lambda t: 0.5 * t, until_s=13)[0][0] == 12.5  # 50 ≥ 50


def test_slowly_rising_ttft_is_not_saturated():
    """TTFT rising steadily but slower than min_ttft_slope_s (0.2 s/s) is not a runaway queue."""
    det = SaturationDetector(SaturationConfig())
    assert feed(det, lambda t: 4 + t, lambda t: 0.2 + 0.05 * t, until_s=40) == []
    det = SaturationDetector(SaturationConfig(min_ttft_slope_s=0.0))
    assert feed(det, lambda t: 4 + t, lambda t: 0.2 + 0.05 * t, until_s=40)  # without the floor


def test_a_burst_the_engine_works_off_is_not_saturated():
    """Backlog +40 and TTFT +3 s over 3 s, worked off over the next 3 s: the rule holds, but
    for less than hold_s (5 s). Without the hold it would stop the point."""

    def burst(height):
        return lambda t: height * max(0.0, 1 - abs(t - 23) / 3)

    backlog, ttft = (lambda t: 5 + burst(40)(t)), (lambda t: 0.3 + burst(3.0)(t))
    assert feed(SaturationDetector(SaturationConfig()), backlog, ttft, until_s=60) == []
    assert feed(SaturationDetector(SaturationConfig(hold_s=0.0)), backlog, ttft, until_s=60)
    # The same rise kept up is reported once the rule has held for hold_s.
    reasons = feed(
        SaturationDetector(SaturationConfig()),
        lambda t: 5 + 10 * max(0.0, t - 20),
        lambda t: 0.3 + 0.5 * max(0.0, t - 20),
        until_s=40,
    )
    assert reasons and 25.0 <= reasons[0][0] <= 30.0  # the fit needs a few s of the ramp, then hold_s


def test_too_few_ttft_samples_is_not_saturated():
    det = SaturationDetector(SaturationConfig())
    assert feed(det, lambda t: 5 * t, lambda t: t, until_s=30, per_step_ttft=0) == []


def test_slope_t_statistic():
    t = np.arange(10.0)
    a, b, tau = slope_t(t, 3 + 2 * t)
    assert (a, b, tau) == (pytest.approx(3), pytest.approx(2), math.inf)
    assert slope_t(t, np.full(10, 7.0))[2] == 0.0
    y = 1 + 0.5 * t + np.array([0.3, -0.2, 0.1, -0.4, 0.2, 0.0, -0.1, 0.3, -0.3, 0.1])
    _, b, tau = slope_t(t, y)
    # Textbook: SE(b) = sqrt(SSE / (n - 2) / Sxx)
    resid = y - np.polyval(np.polyfit(t, y, 1), t)
    se = math.sqrt((resid @ resid) / 8 / ((t - t.mean()) @ (t - t.mean())))
    assert tau == pytest.approx(b / se)


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("window_s", -1, "saturation.window_s must be > 0 (got -1)"),
        ("window_s", float("nan"), "saturation.window_s must be > 0 (got nan)"),
        ("min_s", -0.5, "saturation.min_s must be >= 0 (got -0.5)"),
        ("min_s", float("nan"), "saturation.min_s must be >= 0 (got nan)"),
        ("sample_interval_s", 0, "saturation.sample_interval_s must be > 0 and <= window_s / 5 (2) (got 0)"),
        ("sample_interval_s", 5.0, "saturation.sample_interval_s must be > 0 and <= window_s / 5 (2) (got 5.0)"),
        ("min_backlog", -1, "saturation.min_backlog must be >= 0 (got -1)"),
        ("min_t", float("nan"), "saturation.min_t must be > 0 (got nan)"),
        ("min_ttft_slope_s", -0.1, "saturation.min_ttft_slope_s must be >= 0 (got -0.1)"),
        ("hold_s", float("inf"), "saturation.hold_s must be >= 0 (got inf)"),
        ("enabled", "yes", "saturation.enabled must be true or false (got 'yes')"),
    ],
)
def test_validate_errors_are_one_line(field, value, message):
    SaturationConfig().validate()  # the defaults are valid
    cfg = SaturationConfig(**{field: value})
    with pytest.raises(ConfigError) as err:
        cfg.validate()
    assert str(err.value) == message


# --- the driver end to end --------------------------------------------------------------

SERVICE_S = 0.05  # the fake engine's capacity: 20 requests/s


class OneAtATime:
    """Serves one request at a time, SERVICE_S each; one token, then done."""

    engine_name = engine_version = "fake"

    def __init__(self):
        self.lock = None
        self.sent = 0

    async def stream(self, request):
        self.sent += 1
        if self.lock is None:
            self.lock = asyncio.Lock()
        async with self.lock:
            await asyncio.sleep(SERVICE_S)
        yield TokenChunk([7], time.perf_counter())
        yield RequestDone("length", text="x")


class NoRenderer:
    """Prompts are fixed ids and replies come as text: nothing to render or decode."""

    def render(self, messages):
        raise AssertionError("prompts are given as ids")

    def decode(self, ids):
        return ""


def open_loop_plan(rate, n, concurrency=None):
    sessions = [SessionSpec(i, [TurnSpec("q", 1, prompt_token_ids=[1, 2, 3])], arrival_s=i / rate) for i in range(n)]
    return WorkloadPlan("synthetic", sessions, [], exact_output_len=True, concurrency=concurrency, open_loop=True)


FAST = SaturationConfig(min_s=1.0, window_s=1.0, sample_interval_s=0.05, hold_s=0.25)


def drive(plan, open_loop=True, cfg=FAST, detector=None):
    backend, records = OneAtATime(), []
    detector = detector or SaturationDetector(cfg)
    driver = Driver(backend, NoRenderer(), plan, on_record=records.append, saturation=detector)
    t = time.perf_counter()
    duration = asyncio.run(driver.run(plan.sessions, open_loop))
    return driver, backend, records, duration, time.perf_counter() - t


@pytest.mark.parametrize("concurrency", [None, 4])
def test_open_loop_past_capacity_is_stopped(concurrency):
    # 200 sessions/s for 10 s against an engine that serves 20/s: unstopped, ~100 s.
    n = 2000
    driver, backend, records, duration, wall = drive(open_loop_plan(200.0, n, concurrency))
    assert driver.saturated and driver.saturated.startswith("over-saturated: backlog grew")
    assert duration < 3.0 and wall < 4.0  # stopped soon after min_s = 1 s
    assert backend.sent < n / 5  # nothing was sent after the stop
    assert len(records) == backend.sent  # every request sent has its record
    cancelled = [r for r in records if not r.ok]
    assert cancelled and all(r.error == SATURATED_ERROR for r in cancelled)
    assert len(cancelled) == (backend.sent - sum(r.ok for r in records))
    if concurrency:
        assert len(cancelled) <= concurrency  # the rest waited for the cap and were never sent
    assert sum(r.ok for r in records) >= 10  # what completed before the stop stays measured


@pytest.mark.slow
def test_open_loop_under_capacity_is_not_stopped():
    n = 15  # 5 sessions/s for 3 s against 20/s of capacity
    cfg = SaturationConfig(min_s=0.5, window_s=0.5, sample_interval_s=0.05, hold_s=0.0)
    driver, backend, records, duration, _ = drive(open_loop_plan(5.0, n), cfg=cfg)
    assert driver.saturated is None
    assert len(records) == n and all(r.ok for r in records)
    assert duration == pytest.approx((n - 1) / 5.0 + SERVICE_S, abs=0.5)


def test_closed_loop_ignores_the_detector():
    det = SaturationDetector(FAST)
    plan = open_loop_plan(200.0, 5, concurrency=1)
    driver, backend, records, _, _ = drive(plan, open_loop=False, detector=det)
    assert driver.saturated is None and len(records) == 5 and all(r.ok for r in records)
    assert not det._backlog and not det._ttft  # no monitor ran, no TTFT was observed


def test_interrupt_keeps_its_own_error_text():
    """Ctrl-C (the run task cancelled) still records 'the run was interrupted'."""
    plan = open_loop_plan(200.0, 2000)
    backend, records = OneAtATime(), []
    driver = Driver(
        backend,
        NoRenderer(),
        plan,
        records.append,
        saturation=SaturationDetector(SaturationConfig(min_s=60.0, window_s=1.0, sample_interval_s=0.05)),
    )

    async def interrupt():
        task = asyncio.create_task(driver.run(plan.sessions, True))
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(interrupt())
    failed = [r for r in records if not r.ok]
    assert failed and {r.error for r in failed} == {"cancelled: the run was interrupted"}
    assert driver.saturated is None
