"""A closed-loop concurrency schedule is followed, and a timed closed loop starts nothing after
its end: against the reference server (backend=reference), through a whole run."""

import asyncio

import pandas as pd
import pytest
from conftest import make_config

from harness.client.driver import ScheduledCap
from harness.run.point import run_benchmark

FAST = [
    "model=tiny-random",
    "backend=reference",
    "backend.ttft_ms=5",
    "backend.itl_ms=15",
    "workload=synthetic",
    "workload.input_len=48",
    "workload.output_len=6",
    "workload.warmup_requests=0",
    "report=false",
    "machine.enabled=false",
    "server_metrics.enabled=false",
]


def _in_flight_max(df: pd.DataFrame, lo: float, hi: float) -> int:
    """The most requests in flight at any send in [lo, hi)."""
    starts = df[(df.start_s >= lo) & (df.start_s < hi)].start_s
    return max((((df.start_s <= t) & (df.end_s > t)).sum() for t in starts), default=0)


@pytest.mark.slow
def test_a_closed_loop_follows_its_concurrency_stages(tmp_path):
    cfg = make_config(*FAST, "workload.stages=[{duration_s: 1.0, concurrency: 1}, {duration_s: 1.0, concurrency: 3}]")
    out = run_benchmark(cfg, tmp_path / "run")
    df = pd.read_parquet(tmp_path / "run" / "requests.parquet")
    assert out.summary.status == "complete" and df.error.isna().all()
    assert _in_flight_max(df, 0.0, 0.95) == 1  # ~0.1 s a request: about 10 one at a time
    assert _in_flight_max(df, 1.05, 2.0) == 3
    assert df.start_s.max() < 2.0 + 0.05  # nothing starts after the end; those in flight finish
    assert set(df.stage) == {0, 1} and (df.stage == (df.start_s >= 1.0).astype(int)).all()
    # sessions start in plan order, with no gap, whatever the cap does (a slot below the peak waits)
    assert list(df.sort_values("start_s").request_id) == list(range(len(df)))
    stages = out.summary.stages
    assert [s["concurrency"] for s in stages] == [1, 3]
    assert stages[1]["throughput"]["mean_concurrency"] == pytest.approx(3, abs=0.6)
    assert sum(s["requests"]["sent"] for s in stages) == len(df)


def test_the_cap_lets_in_flight_sessions_finish_when_it_drops_and_closes_at_the_end():
    async def scenario():
        cap = ScheduledCap([(0.0, 3), (0.05, 1)], end_s=0.15)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        follower = asyncio.create_task(cap.follow(__import__("time").perf_counter(), spin=False))
        seen, started = [], []

        async def session(i):
            async with cap:
                if cap.closed:
                    return
                started.append(round(loop.time() - t0, 2))
                seen.append(cap.in_flight)
                await asyncio.sleep(0.06)  # the first three end after the drop at 0.05 s

        await asyncio.gather(*(session(i) for i in range(12)))
        await follower
        return cap, seen, started

    cap, seen, started = asyncio.run(scenario())
    assert max(seen[:3]) == 3 and all(n == 1 for n in seen[3:])  # after the drop, one at a time
    assert len(started) < 12 and max(started) < 0.17  # the rest never started: the cap closed at 0.15 s
    assert [limit for _, limit in cap.changes] == [3, 1]
