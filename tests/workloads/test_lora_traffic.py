"""workload.lora.adapters: entries checked in one line, sessions assigned by share (seeded)."""

from __future__ import annotations

import pytest

from core.errors import ConfigError
from workloads.base import SessionSpec, TurnSpec, WorkloadConfig, make_plan, seeded_streams
from workloads.lora import LoraSettings, adapter_specs, assign, describe_traffic, quotas, round_robin


def specs(*entries):
    return adapter_specs(LoraSettings(adapters=list(entries)))


def sessions(n):
    return [SessionSpec(i, [TurnSpec("hi", 4, prompt_token_ids=[1, 2, 3])]) for i in range(n)]


def test_entries_are_checked_in_one_line():
    two = specs({"name": "a", "path": "store:adapter-0"}, {"name": "base", "share": 2})
    assert [s.name for s in two] == ["a", "base"]
    assert specs() == []
    bad = [
        ({"name": "a"}, "needs a path"),
        ({"name": "base", "path": "x"}, "takes no path"),
        ({"name": "a b", "path": "x"}, "name must be"),
        ({"name": "a", "path": "x", "share": 0}, "share must be a number > 0"),
        ({"name": "a", "path": "x", "rank": 8}, "unknown keys rank"),
        ("a", "must be a mapping"),
    ]
    for entry, words in bad:
        with pytest.raises(ConfigError, match=words):
            specs(entry)
    with pytest.raises(ConfigError, match="names a more than once"):
        specs({"name": "a", "path": "x"}, {"name": "a", "path": "y"})
    with pytest.raises(ConfigError, match="only 'base'"):
        specs({"name": "base"})


def test_quotas_follow_the_shares_exactly():
    four = specs(*({"name": f"a{i}", "path": f"store:adapter-{i}"} for i in range(4)))
    assert quotas(four, 16) == [4, 4, 4, 4]
    assert quotas(four, 6) == [2, 2, 1, 1]  # largest remainder, ties to the earlier entry
    skewed = specs({"name": "a", "path": "p", "share": 3}, {"name": "base", "share": 1})
    assert quotas(skewed, 10) == [8, 2] and sum(quotas(skewed, 7)) == 7
    huge = specs({"name": "a", "path": "p", "share": 1e308}, {"name": "base", "share": 1e308})  # their sum: inf
    assert quotas(huge, 10) == [5, 5]


def test_assignment_is_seeded_and_by_share():
    two = specs({"name": "a", "path": "p"}, {"name": "b", "path": "q"}, {"name": "base"})
    first, again, other = assign(two, 12, seed=0), assign(two, 12, seed=0), assign(two, 12, seed=1)
    assert first == again and first != other
    assert first.count("a") == first.count("b") == first.count(None) == 4
    assert round_robin(two, 4) == ["a", "b", None, "a"]


def test_the_plan_carries_adapters_and_hashes_them():
    cfg = WorkloadConfig(name="synthetic")
    plain = make_plan(cfg, sessions(6), sessions(2), seeded_streams(0, 1)[0], seed=0).to_json()
    cfg.lora = LoraSettings(adapters=[{"name": "a", "path": "store:adapter-0"}, {"name": "base"}])
    plan = make_plan(cfg, sessions(6), sessions(2), seeded_streams(0, 1)[0], seed=0)
    body = plan.to_json()
    assert [s.adapter for s in plan.sessions].count("a") == 3
    assert [s.adapter for s in plan.warmup] == ["a", None]
    assert body["lora"] == [
        {"name": "a", "path": "store:adapter-0", "share": 1.0},
        {"name": "base", "path": None, "share": 1.0},
    ]
    assert "lora" not in plain and all("adapter" not in s for s in plain["sessions"])  # old hashes unchanged
    assert body["sha256"] != plain["sha256"] and body["prompts_sha256"] != plain["prompts_sha256"]
    cfg.lora.adapters[0]["share"] = 2
    reshared = make_plan(cfg, sessions(6), sessions(2), seeded_streams(0, 1)[0], seed=0).to_json()
    assert reshared["sha256"] != body["sha256"]
    # the summary's few words (summary.workload.lora) tell the two mixes apart
    words = describe_traffic(body["lora"]), describe_traffic(reshared["lora"])
    assert words[0].startswith("a 1, base 1 · ") and words[1].startswith("a 2, base 1 · ")
    assert describe_traffic([]) is None


def test_a_bad_entry_fails_validation():
    cfg = WorkloadConfig(name="synthetic", lora=LoraSettings(adapters=[{"name": "a"}]))
    with pytest.raises(ConfigError, match=r"workload.lora.adapters\[0\] \(a\) needs a path"):
        cfg.validate()
