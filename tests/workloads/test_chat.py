"""Chat sessions: turns, a shared system prompt, think time."""

import pytest

from core.errors import ConfigError
from workloads import workload_registry


def build(parts, seed=0, **overrides):
    entry = workload_registry.get("chat")
    cfg = entry.config_cls(**overrides)
    cfg.validate()
    return entry.cls(cfg).build(*parts, seed)


def test_sessions_and_turns(parts):
    plan = build(parts, sessions=3, turns=4, think_time_s=0.5)
    assert len(plan.sessions) == 3 and plan.num_requests == 12
    for s in plan.sessions:
        assert [t.think_time_s for t in s.turns] == [0.0, 0.5, 0.5, 0.5]
        assert all(t.prompt_token_ids is None for t in s.turns)  # rendered with the history at run time
        assert s.system is None
    assert not plan.exact_output_len


def test_shared_system_prompt(parts):
    renderer, corpus = parts
    plan = build(parts, sessions=3, system_prompt_len=200)
    systems = {s.system for s in plan.sessions}
    assert len(systems) == 1
    assert 180 < len(renderer.tokenizer(systems.pop())["input_ids"]) < 230


def test_conflicting_system_prompt_settings(parts):
    with pytest.raises(ConfigError):
        build(parts, system_prompt="hi", system_prompt_len=10)
