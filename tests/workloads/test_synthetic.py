"""Synthetic prompts: exact lengths after the chat template, seeded, readable."""

import numpy as np
import pytest

from core.errors import ConfigError
from workloads import workload_registry
from workloads.base import WARMUP_OUTPUT_TOKENS
from workloads.prompts import chat_messages


def build(parts, seed=0, **overrides):
    entry = workload_registry.get("synthetic")
    return entry.cls(entry.config_cls(**overrides)).build(*parts, seed)


@pytest.mark.parametrize("dist,spread", [("fixed", 0), ("uniform", 60), ("normal", 40)])
def test_prompt_lengths_are_exact_after_the_template(parts, dist, spread):
    renderer, _ = parts
    plan = build(parts, num_requests=12, input_len=200, input_len_dist=dist, input_len_spread=spread, warmup_requests=0)
    lengths = []
    for session in plan.sessions:
        turn = session.turns[0]
        rerendered = renderer.render(chat_messages(None, [{"role": "user", "content": turn.user}]))
        assert rerendered == turn.prompt_token_ids  # the text re-encodes to the same ids
        lengths.append(len(turn.prompt_token_ids))
    if dist == "fixed":
        assert lengths == [200] * 12
    else:
        assert len(set(lengths)) > 1 and 80 < np.mean(lengths) < 320


def test_the_same_seed_gives_the_same_workload(parts):
    a = build(parts, num_requests=5).to_json()
    b = build(parts, num_requests=5).to_json()
    c = build(parts, seed=1, num_requests=5).to_json()
    assert a == b
    assert a["sha256"] != c["sha256"]


def test_prompts_are_readable_text(parts):
    plan = build(parts, num_requests=4, input_len=120)
    for session in plan.sessions:
        text = session.turns[0].user
        words = text.split()
        assert len(words) > 40
        letters = sum(ch.isalpha() or ch.isspace() for ch in text) / len(text)
        assert letters > 0.9, text


def test_too_short_input_is_a_config_error(parts):
    with pytest.raises(ConfigError, match="use at least"):
        build(parts, input_len=5)


def test_open_loop_arrivals(parts):
    plan = build(parts, num_requests=200, input_len=60, rate=4.0, warmup_requests=0)
    offsets = [s.arrival_s for s in plan.sessions]
    assert offsets[0] == 0.0 and offsets == sorted(offsets)
    assert np.mean(np.diff(offsets)) == pytest.approx(0.25, rel=0.2)
    assert plan.open_loop


def test_a_request_longer_than_the_context_is_refused_before_fitting(parts, monkeypatch):
    renderer, _ = parts
    monkeypatch.setattr(renderer, "max_context", 256)
    with pytest.raises(
        ConfigError,
        match=r"a request of 250 prompt \+ 32 output tokens needs more than the model's "
        r"context of 256 tokens",
    ):
        build(parts, num_requests=2, input_len=250, output_len=32)
    build(parts, num_requests=2, input_len=200, output_len=56, warmup_requests=0)  # exactly the context: fine


def test_warmup_is_separate_from_measured_requests(parts):
    plan = build(parts, num_requests=3, warmup_requests=2)
    assert len(plan.warmup) == 2 and plan.num_requests == 3
    measured = {s.turns[0].user for s in plan.sessions}
    assert not measured & {s.turns[0].user for s in plan.warmup}


def test_warmup_output_is_capped_and_measured_output_is_not(parts):
    plan = build(parts, num_requests=2, output_len=300, warmup_requests=1)
    assert [s.turns[0].output_len for s in plan.warmup] == [WARMUP_OUTPUT_TOKENS]
    assert [s.turns[0].output_len for s in plan.sessions] == [300, 300]
