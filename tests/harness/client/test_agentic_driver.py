"""The driver runs agent jobs in their dependency order (backend=reference, fast): a sub-agent
starts only after its parent's turn has ended, siblings run in parallel, the parent's next
turn waits for all of them, tool gaps are kept, and concurrency counts jobs (an open loop of
jobs capped at 2 in flight)."""

import pandas as pd
import pytest
from conftest import make_config

from harness.run.point import run_benchmark

REF = [
    "model=tiny-random",
    "backend=reference",
    "backend.ttft_ms=5",
    "backend.itl_ms=10",
    "workload=agentic",
    "workload.warmup_requests=0",
    "report=false",
    "machine.enabled=false",
    "server_metrics.enabled=false",
    "workload.system_prompt_len=8",
    "workload.task_len=8",
    "workload.tool_result_len=8",
    "workload.sub_task_len=8",
    "workload.output_len=4",
]


@pytest.fixture(scope="module")
def agentic_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("agentic") / "run"
    cfg = make_config(
        *REF,
        "workload.jobs=3",
        "workload.turns=4",
        "workload.fanout=3",
        "workload.depth=2",
        "workload.sub_turns=3",
        "workload.tool_gap_s=0.05",
        "workload.concurrency=2",
        "workload.rate=50",
        "client.workers=2",
        "slo.job_s=30",
    )
    out = run_benchmark(cfg, run_dir)
    return out, pd.read_parquet(run_dir / "requests.parquet")


@pytest.mark.slow
def test_sub_agents_wait_for_their_parent_and_the_parent_for_them(agentic_run):
    out, df = agentic_run
    assert out.summary.status == "complete" and df.error.isna().all()
    by_id = df.set_index("request_id")
    subs = df[df.parent_request_id.notna()]
    assert len(subs) and set(df.depth) == {0, 1, 2}
    for _, r in subs.iterrows():  # never before the turn it forked after has ended
        assert r.start_s >= by_id.loc[int(r.parent_request_id)].end_s
    firsts = subs[subs.turn == 0]
    for parent_rid, siblings in firsts.groupby("parent_request_id"):
        assert len(siblings) == 3
        assert siblings.start_s.max() < siblings.end_s.min()  # the siblings overlap: in parallel
        parent = by_id.loc[int(parent_rid)]
        following = df[(df.session_id == parent.session_id) & (df.turn == parent.turn + 1)]
        if len(following):  # the parent's next turn starts once every sub-agent's last turn has ended
            ends = df[df.session_id.isin(siblings.session_id)].end_s.max()
            assert following.start_s.iloc[0] >= ends
    for _, turns in df.groupby("session_id"):  # turns in order, the tool gap before tool results
        turns = turns.sort_values("turn")
        assert (turns.start_s.values[1:] >= turns.end_s.values[:-1]).all()


def test_tool_gaps_and_concurrency_count_jobs(agentic_run):
    out, df = agentic_run
    main = df[df.depth == 0].sort_values(["job_id", "turn"])
    for _, turns in main.groupby("job_id"):  # turn 1 follows a tool (0.05 s); turn 2 the sub-agents
        t0, t1 = turns.iloc[0], turns.iloc[1]
        assert t1.start_s - t0.end_s >= 0.05
    spans = df.groupby("job_id").agg(start=("start_s", "min"), end=("end_s", "max"))
    in_flight = max(((spans.start <= t) & (spans.end > t)).sum() for t in spans.start)
    assert in_flight == 2  # two jobs at once, each with its sub-agents in its slot
    jobs = out.summary.jobs
    assert jobs["count"] == 3 and jobs["completed"] == 3 and jobs["job_goodput_share"] == 1.0
    assert out.summary.harness.get("workers", 1) == 1  # agent jobs run in one client process

    # open loop: jobs arrive at the rate, a job's first request has its scheduled time, sub-agents none
    roots = df[(df.depth == 0) & (df.turn == 0)]
    assert roots.scheduled_s.notna().all() and df[df.depth > 0].scheduled_s.isna().all()
