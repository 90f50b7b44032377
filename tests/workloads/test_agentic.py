"""workload=agentic: the generated job trees (shape, prefix sharing, determinism), the agent
trace format and the Weka converter, and one real run (llama.cpp) end to end."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from core.errors import ConfigError
from tests.workloads.data_helpers import build, run_e2e, write_jsonl
from workloads.agentic import fork_points
from workloads.weka_trace import weka_lines

ROOT = Path(__file__).resolve().parents[2]
SMALL = dict(
    jobs=2,
    turns=4,
    system_prompt_len=16,
    task_len=12,
    tool_result_len=10,
    sub_task_len=8,
    sub_turns=2,
    output_len=6,
    fanout=2,
    depth=1,
    fork_every=2,
)


def _by_id(plan):
    return {s.session_id: s for s in plan.sessions}


def test_fork_points():
    assert fork_points(4, 2) == {1}  # after call 1 (call 3 is the last: nothing follows it)
    assert fork_points(5, 2) == {1, 3}
    assert fork_points(2, 2) == set() and fork_points(3, 1) == {0, 1}


def test_the_tree_has_the_configured_shape(parts):
    plan = build(parts, "agentic", **SMALL)
    roots = [s for s in plan.sessions if s.parent is None]
    assert [r.job_id for r in roots] == [0, 1] and all(r.depth == 0 and len(r.turns) == 4 for r in roots)
    subs = [s for s in plan.sessions if s.parent is not None]
    assert len(subs) == 4 and all(s.depth == 1 and len(s.turns) == 2 for s in subs)
    sessions = _by_id(plan)
    for s in subs:  # forked after the main loop's call 1, in its own job
        parent = sessions[s.parent[0]]
        assert s.parent[1] == 1 and parent.job_id == s.job_id and parent.depth == 0
    assert plan.info["jobs"] == 2 and plan.info["agents"] == 6 and plan.info["max_depth"] == 1
    assert plan.info["tree"].startswith("2 jobs, 6 agents, depth 1 · ")
    wider = build(parts, "agentic", **{**SMALL, "fanout": 3})
    assert wider.info["tree"].startswith("2 jobs, 8 agents, depth 1 · ")
    gaps = build(parts, "agentic", **{**SMALL, "tool_gap_s": 0.5})  # the same shape, other tool gaps
    assert gaps.info["tree"].split(" · ")[1] != plan.info["tree"].split(" · ")[1]
    assert plan.num_requests == 2 * 4 + 4 * 2
    # a job's sessions are together, the main loop first
    assert [s.job_id for s in plan.sessions] == [0, 0, 0, 1, 1, 1]
    # the call after a fork sends the sub-agents' results, with no tool gap
    assert all(r.turns[2].user.startswith("Sub-agent results:") for r in roots)


def test_depth_two_forks_inside_sub_agents(parts):
    plan = build(parts, "agentic", **{**SMALL, "jobs": 1, "depth": 2, "sub_turns": 3, "fanout": 2})
    depths = sorted(s.depth for s in plan.sessions)
    assert depths == [0, 1, 1, 2, 2, 2, 2]
    assert plan.info["max_depth"] == 2


def test_every_prompt_extends_what_it_depends_on(parts):
    plan = build(parts, "agentic", **SMALL, tool_gap_s=0.5)
    sessions = _by_id(plan)

    def extends(longer, shorter):
        return len(longer) > len(shorter) and longer[: len(shorter) - 2] == shorter[: len(shorter) - 2]

    for s in plan.sessions:
        ids = [t.prompt_token_ids for t in s.turns]
        assert all(ids) and all(extends(b, a) for a, b in zip(ids, ids[1:]))  # the context grows
        if s.parent is not None:  # a sub-agent starts from its parent's context at the fork
            fork = sessions[s.parent[0]].turns[s.parent[1]].prompt_token_ids
            assert extends(ids[0], fork)
            assert s.turns[0].think_time_s == 0
        else:
            assert [t.think_time_s for t in s.turns] == [0.0, 0.5, 0.0, 0.5]  # no gap after the fork
    # every agent shares the system prompt; the theoretical hit rate counts the tree's sharing
    assert len({s.system for s in plan.sessions}) == 1
    assert plan.info["theoretical_cache_hit"] > 0.5


def test_the_plan_is_the_same_for_the_same_seed(parts):
    a, b = (
        build(parts, "agentic", **SMALL, tool_gap_s=0.2, tool_gap_dist="exponential"),
        build(parts, "agentic", **SMALL, tool_gap_s=0.2, tool_gap_dist="exponential"),
    )
    c = build(parts, "agentic", seed=1, **SMALL, tool_gap_s=0.2, tool_gap_dist="exponential")
    assert a.to_json()["sha256"] == b.to_json()["sha256"] != c.to_json()["sha256"]
    body = a.to_json()["sessions"][1]
    assert body["job_id"] == 0 and body["depth"] == 1 and list(body["parent"]) == [0, 1]
    # workloads without jobs keep their hashes: the new fields are left out while unset
    chat = build(parts, "chat", sessions=1, turns=1, user_len=8, output_len=4)
    assert "job_id" not in chat.to_json()["sessions"][0]


def test_bad_knobs_are_one_line(parts):
    with pytest.raises(ConfigError, match="tool_gap_dist"):
        build(parts, "agentic", tool_gap_dist="pareto")
    with pytest.raises(ConfigError, match="fanout"):
        build(parts, "agentic", fanout=0)
    with pytest.raises(ConfigError, match="context"):
        build(parts, "agentic", max_context=40, **SMALL)
    with pytest.raises(ConfigError, match=r"workload.depth=3 needs sub-agents that fork.*sub_turns \(2\) more than 2"):
        build(parts, "agentic", depth=3)
    with pytest.raises(ConfigError, match="make jobs of over 100,000 calls each"):
        build(parts, "agentic", depth=50, fanout=10, sub_turns=6)


TRACE = [
    {
        "job_id": "a",
        "call_id": "m0",
        "parent_call_id": None,
        "start_s": 0.0,
        "text": "Fix the bug in parser.py",
        "output_length": 5,
    },
    {"job_id": "a", "call_id": "m1", "parent_call_id": "m0", "new_tokens": 20, "output_length": 5, "tool_gap_s": 0.2},
    {"job_id": "a", "call_id": "s0", "agent_id": "helper", "parent_call_id": "m1", "new_tokens": 8, "output_length": 4},
    {"job_id": "a", "call_id": "s1", "agent_id": "helper", "input_length": 400, "output_length": 4},
    {"job_id": "a", "call_id": "m2", "input_length": 300, "output_length": 5},
    {"job_id": "b", "call_id": "m0", "start_s": 1.5, "token_ids": [9906, 1917], "output_length": 3},
]


def test_an_agent_trace_replays_as_its_tree(parts, tmp_path):
    path = write_jsonl(tmp_path / "agent.jsonl", TRACE)
    plan = build(parts, "agentic", trace_path=str(path), time_scale=2.0)
    assert plan.open_loop and [s.arrival_s for s in plan.sessions if s.parent is None] == [0.0, 3.0]
    main, helper, other = plan.sessions
    assert (helper.parent, helper.depth, helper.job_id) == ((main.session_id, 1), 1, 0)
    assert main.turns[0].user == "Fix the bug in parser.py" and main.turns[1].think_time_s == pytest.approx(0.4)
    assert len(helper.turns[1].prompt_token_ids) == 400 and len(main.turns[2].prompt_token_ids) == 300
    assert [t.prompt_id for t in main.turns] == ["m0", "m1", "m2"]
    assert other.turns[0].user == parts[0].decode([9906, 1917])
    assert plan.source["format"] == "agentic-jsonl" and plan.source["records"] == 6


@pytest.mark.parametrize(
    "line, message",
    [
        (
            {
                "job_id": "a",
                "call_id": "x",
                "parent_call_id": "nope",
                "agent_id": "s",
                "new_tokens": 3,
                "output_length": 2,
            },
            "parent_call_id 'nope' is not a call",
        ),
        ({"job_id": "a", "call_id": "x", "new_tokens": 3, "text": "hi", "output_length": 2}, "exactly one of"),
        ({"job_id": "a", "call_id": "m0", "new_tokens": 3, "output_length": 2}, "appears twice"),
        (
            {
                "job_id": "z",
                "call_id": "x",
                "agent_id": "s",
                "parent_call_id": "m0",
                "new_tokens": 3,
                "output_length": 2,
            },
            "not a call of job 'z'",
        ),
        ({"job_id": "a", "call_id": "x", "new_tokens": 3}, "output_length"),
    ],
)
def test_a_bad_trace_line_is_named(parts, tmp_path, line, message):
    path = write_jsonl(tmp_path / "bad.jsonl", [TRACE[0], line])
    with pytest.raises(ConfigError, match=message) as err:
        build(parts, "agentic", trace_path=str(path))
    assert "line 2" in str(err.value)


WEKA = {
    "id": "trace_0001",
    "block_size": 64,
    "requests": [
        {"t": 0.0, "type": "n", "in": 300, "out": 6, "hash_ids": [1, 2, 3]},
        {"t": 4.0, "type": "s", "in": 340, "out": 5, "hash_ids": [1, 2, 3, 4], "think_time": 1.25},
        {
            "type": "subagent",
            "requests": [
                {"t": 0.0, "type": "n", "in": 420, "out": 4},
                {"t": 1.0, "type": "n", "in": 460, "out": 4, "think_time": 0.5},
            ],
        },
        {"type": "subagent"},  # no requests list: skipped
        {"t": 9.0, "type": "n", "in": 520, "out": 6},
    ],
}


def test_weka_converter_round_trip(parts, tmp_path):
    converted = weka_lines(WEKA)
    assert converted.skipped == 1 and len(converted.lines) == 5
    main = [line for line in converted.lines if line["agent_id"] == "main"]
    sub = [line for line in converted.lines if line["agent_id"] != "main"]
    assert [line["input_length"] for line in main] == [300, 340, 520] and main[1]["tool_gap_s"] == 1.25
    assert sub[0]["parent_call_id"] == main[1]["call_id"] and sub[1]["tool_gap_s"] == 0.5
    # the script writes the same lines, and workload=agentic reads them back as one job of two agents
    src = tmp_path / "weka"
    src.mkdir()
    (src / "trace_0001.json").write_text(json.dumps(WEKA))
    out = tmp_path / "agent.jsonl"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "convert_weka_trace.py"), str(src), "-o", str(out)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert [json.loads(x) for x in out.read_text().splitlines()] == converted.lines
    plan = build(parts, "agentic", trace_path=str(out), concurrency=1)
    assert not plan.open_loop and len(plan.sessions) == 2 and plan.num_requests == 5
    main_s, sub_s = plan.sessions
    assert sub_s.parent == (main_s.session_id, 1)
    assert [len(t.prompt_token_ids) for t in main_s.turns] == [300, 340, 520]
    assert [len(t.prompt_token_ids) for t in sub_s.turns] == [420, 460]


@pytest.mark.engine
def test_an_agentic_run_on_llamacpp_end_to_end(tmp_path):
    """A real engine: the job tree's requests in their order, with job figures in the summary."""
    proc, run_dir, summary, rows = run_e2e(
        tmp_path,
        "workload=agentic",
        "workload.jobs=1",
        "workload.turns=3",
        "workload.system_prompt_len=8",
        "workload.task_len=8",
        "workload.tool_result_len=8",
        "workload.sub_task_len=8",
        "workload.output_len=3",
        "workload.sub_turns=1",
        "backend.keep_session_cache=true",
        "slo.job_s=600",
    )
    # main 0 → main 1 → 2 sub-agents of one call → main 2
    assert summary["requests"]["failed"] == 0 and len(rows) == 3 + 2
    jobs = summary["jobs"]
    assert jobs["count"] == 1 and jobs["completed"] == 1 and jobs["job_goodput_share"] == 1.0
    assert jobs["job_s"]["count"] == 1 and jobs["job_s"]["p50"] > 0
    assert jobs["critical_path_requests"]["mean"] == 4
    assert set(jobs["by_depth"]) == {"0", "1"} and jobs["reported_by_engine"]
    # llama.cpp's session cache: main call 1 reuses call 0's prefix (call 2 follows other sessions)
    assert jobs["by_depth"]["0"]["cached_share"] > 0
    assert set(rows.depth) == {0, 1} and set(rows.job_id) == {0}
    assert "jobs: 1/1 completed" in proc.stdout
