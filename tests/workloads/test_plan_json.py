"""workload.json streamed a session at a time: the same hashes as the whole document's canonical
JSON, a file that parses whole, and a plan whose prompts share one int object per token id."""

import hashlib
import json

import pytest

from workloads import workload_registry
from workloads.base import WorkloadPlan, session_json


def build(parts, name, **overrides):
    entry = workload_registry.get(name)
    return entry.cls(entry.config_cls(**overrides)).build(*parts, 0)


def whole_document_hashes(plan: WorkloadPlan) -> tuple[str, str]:
    """The hashes as they were first defined: json.dumps of one dict holding every session."""
    head = json.loads(json.dumps({k: v for k, v in plan.to_json().items() if k not in ("sessions", "warmup")}))
    sessions = [session_json(s) for s in plan.sessions]
    measured = {k: head[k] for k in ("name", "exact_output_len", "sampling")}
    for key in ("lora", "structured"):
        if head.get(key):
            measured[key] = head[key]
    prompts = dict(measured, sessions=[{k: v for k, v in s.items() if k != "arrival_s"} for s in sessions])
    if head.get("schedule"):
        measured["schedule"] = head["schedule"]
    content = dict(measured, sessions=sessions)
    return tuple(hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest() for d in (content, prompts))


@pytest.mark.parametrize(
    "name,overrides",
    [
        ("synthetic", {"num_requests": 6, "input_len": 40}),
        (
            "synthetic",
            {
                "num_requests": 6,
                "input_len": 40,
                "stages": [{"duration_s": 2, "rate": 2}, {"duration_s": 2, "rate": 4}],
            },
        ),
        ("synthetic", {"num_requests": 0, "input_len": 40, "rate": 4.0, "duration_s": 0.01}),  # no session at all
        ("chat", {"sessions": 3, "turns": 2}),
        ("agentic", {}),
    ],
)
def test_streamed_hashes_are_the_whole_documents(parts, name, overrides):
    plan = build(parts, name, **overrides)
    body = plan.to_json()
    assert (body["sha256"], body["prompts_sha256"]) == whole_document_hashes(plan)
    assert plan.hashes() == {"sha256": body["sha256"], "prompts_sha256": body["prompts_sha256"]}
    assert body["sessions"] == [json.loads(json.dumps(session_json(s))) for s in plan.sessions]
    assert len(body["warmup"]) == len(plan.warmup)
    assert WorkloadPlan.content_hash(body) == body["sha256"]  # an older run's workload.json, hashed again


def test_the_file_is_one_session_a_line(parts):
    plan = build(parts, "synthetic", num_requests=4, input_len=40)
    text = "".join(plan.json_chunks())
    assert text.endswith("\n}\n") and json.loads(text) == plan.to_json()
    lines = text.splitlines()
    assert sum(line.startswith('    {"session_id"') for line in lines) == len(plan.sessions) + len(plan.warmup)


def test_prompts_share_one_int_per_token_id(parts):
    plan = build(parts, "synthetic", num_requests=4, input_len=40, warmup_requests=0)
    a, b = (s.turns[0].prompt_token_ids for s in plan.sessions[:2])
    common = set(a) & set(b)
    assert common and all(x is y for x in a for y in b if x == y)
