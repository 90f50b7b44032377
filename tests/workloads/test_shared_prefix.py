"""Shared-prefix groups, and prompts built for a target theoretical prefix-cache hit rate."""

import pytest

from core.errors import ConfigError
from tests.workloads.data_helpers import build
from workloads.shared_prefix import theoretical_hit_rate


def test_theoretical_hit_rate():
    assert theoretical_hit_rate([[1, 2, 3, 4], [1, 2, 5, 6], [1, 2, 3, 9], [7]]) == pytest.approx((0 + 2 + 3 + 0) / 13)
    assert theoretical_hit_rate([]) == 0.0


def test_groups_share_their_system_prompt(parts):
    plan = build(parts, "shared_prefix", num_groups=3, prompts_per_group=4, system_prompt_len=64, question_len=16)
    assert plan.num_requests == 12
    systems = {s.system for s in plan.sessions}
    assert len(systems) == 3
    groups = [s.turns[0].prompt_id.split("p")[0] for s in plan.sessions]
    assert groups != sorted(groups)  # shuffled across groups
    rate = plan.info["theoretical_cache_hit"]
    assert 0.4 < rate < 0.75  # about (P-1)/P × system share of the prompt
    assert rate == pytest.approx(theoretical_hit_rate([s.turns[0].prompt_token_ids for s in plan.sessions]), abs=1e-4)


@pytest.mark.parametrize("target", [0.0, 0.5, 0.9])
def test_target_cache_hit(parts, target):
    plan = build(
        parts,
        "shared_prefix",
        num_groups=2,
        prompts_per_group=16,
        system_prompt_len=200,
        question_len=56,
        target_cache_hit=target,
    )
    info = plan.info
    lengths = {len(s.turns[0].prompt_token_ids) for s in plan.sessions}
    assert max(lengths) - min(lengths) < 12  # the prompt's length stays; only the split moves
    measured = theoretical_hit_rate([s.turns[0].prompt_token_ids for s in plan.sessions])
    assert info["theoretical_cache_hit"] == pytest.approx(measured, abs=1e-4)
    # the chat template's own shared tokens set a small floor above 0
    assert info["theoretical_cache_hit"] == pytest.approx(target, abs=0.04 if target == 0 else 0.01)
    assert info["system_prompt_len"] + info["question_len"] == 256 and info["system_prompt_len"] >= 0


def test_unreachable_target_and_multi_turn(parts):
    with pytest.raises(ConfigError, match="out of reach.*prompts_per_group"):
        build(parts, "shared_prefix", prompts_per_group=2, target_cache_hit=0.9)
    with pytest.raises(ConfigError, match="turns=1"):
        build(parts, "shared_prefix", turns=2, target_cache_hit=0.5)
    with pytest.raises(ConfigError, match=r"\[0, 1\]"):
        build(parts, "shared_prefix", target_cache_hit=1.5)
    plan = build(parts, "shared_prefix", num_groups=2, prompts_per_group=2, turns=3, question_len=8)
    assert all(len(s.turns) == 3 and s.turns[1].prompt_token_ids is None for s in plan.sessions)
    assert "theoretical_cache_hit" not in plan.info


@pytest.mark.engine
def test_cli_run_on_llamacpp_shows_three_rates(tmp_path):
    from tests.workloads.data_helpers import run_e2e

    proc, _, summary, df = run_e2e(
        tmp_path,
        "workload=shared_prefix",
        "workload.num_groups=1",
        "workload.prompts_per_group=3",
        "workload.system_prompt_len=48",
        "workload.question_len=16",
        "workload.target_cache_hit=0.5",
        "workload.output_len=2",
        "backend.batched=true",
        "backend.keep_session_cache=true",
    )
    wl = summary["workload"]
    assert wl["target_cache_hit"] == 0.5 and abs(wl["theoretical_cache_hit"] - 0.5) < 0.02
    assert summary["requests"]["completed"] == 3
    assert "prefix-cache hit rate: target 50.0% · theoretical" in proc.stdout
    assert summary["prefix_cache"]["reported_by_engine"] and df.cached_tokens.sum() > 0
