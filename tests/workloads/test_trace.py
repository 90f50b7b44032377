"""Trace replay: Mooncake hash blocks become shared token prefixes; arrivals follow the trace."""

import pytest

from core.errors import ConfigError
from core.sequences import common_prefix
from tests.workloads.data_helpers import build, write_jsonl
from workloads.shared_prefix import theoretical_hit_rate

BLOCK = 16


def mooncake(tmp_path, rows):
    return str(
        write_jsonl(
            tmp_path / "trace.jsonl",
            [
                {"timestamp": ts, "input_length": n_in, "output_length": n_out, "hash_ids": ids}
                for ts, n_in, n_out, ids in rows
            ],
        )
    )


def test_hash_blocks_share_prefixes(parts, tmp_path):
    renderer = parts[0]
    path = mooncake(
        tmp_path,
        [
            (1000, 64, 4, [1, 2, 3, 4]),
            (1500, 64, 5, [1, 2, 7, 8]),
            (2000, 40, 5, [1, 2]),
            (3000, 64, 6, [9, 10, 11, 12]),
        ],
    )
    plan = build(parts, "trace", path=path, block_size=BLOCK)
    a, b, d, c = (s.turns[0] for s in plan.sessions)
    assert [len(t.prompt_token_ids) for t in (a, b, d, c)] == [64, 64, 40, 64]
    assert [t.output_len for t in (a, b, c)] == [4, 5, 6]
    assert (
        a.prompt_token_ids[: common_prefix(a.prompt_token_ids, d.prompt_token_ids)] == d.prompt_token_ids[:-6]
    )  # a prefix of a, then the tail
    head = common_prefix(a.prompt_token_ids, c.prompt_token_ids)  # the chat template's head only
    shared = common_prefix(a.prompt_token_ids, b.prompt_token_ids)
    assert shared == head + 2 * BLOCK  # ids 1, 2 in common, then 3 ≠ 7
    assert a.prompt_token_ids[-5:] == renderer.render([{"role": "user", "content": "x"}])[-5:]  # template tail
    assert theoretical_hit_rate([a.prompt_token_ids, b.prompt_token_ids]) > 0.25
    rates = theoretical_hit_rate([t.prompt_token_ids for t in (a, b, d, c)])
    assert plan.info["theoretical_cache_hit"] == pytest.approx(rates, abs=1e-4)


def test_arrivals_follow_timestamps_scaled(parts, tmp_path):
    path = mooncake(tmp_path, [(5000, 40, 2, [1]), (5250, 40, 2, [2]), (6000, 40, 2, [3])])
    plan = build(parts, "trace", path=path, block_size=BLOCK, time_scale=0.5)
    assert plan.open_loop and plan.concurrency is None
    assert [s.arrival_s for s in plan.sessions] == [0.0, 0.125, 0.5]
    assert build(parts, "trace", path=path, block_size=BLOCK, num_requests=2).num_requests == 2


def test_same_seed_same_blocks_and_workload_json(parts, tmp_path):
    path = mooncake(tmp_path, [(0, 48, 2, [5, 6, 7])])
    one = build(parts, "trace", path=path, block_size=BLOCK).to_json()
    two = build(parts, "trace", path=path, block_size=BLOCK).to_json()
    assert one["sha256"] == two["sha256"] and one["compact"]
    assert one["source"]["format"] == "mooncake" and one["sessions"][0]["turns"][0]["prompt_tokens"] == 48


def test_burstgpt_csv(parts, tmp_path):
    path = tmp_path / "burst.csv"
    path.write_text(
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "5,ChatGPT,50,3,53,Conversation log\n6.5,GPT-4,70,0,70,Conversation log\n8,ChatGPT,45,4,49,API log\n"
    )
    plan = build(parts, "trace", path=str(path), format="burstgpt")
    assert [len(s.turns[0].prompt_token_ids) for s in plan.sessions] == [50, 45]  # 0 response tokens: filtered
    assert [s.arrival_s for s in plan.sessions] == [0.0, 3.0]
    a, b = (s.turns[0].prompt_token_ids for s in plan.sessions)
    assert common_prefix(a, b) < 30  # nothing shared beyond the template head (24) and a marker's start


@pytest.mark.parametrize(
    "fmt, content, fragment",
    [
        ("mooncake", '{"timestamp": 1, "prompt": "x"}\n', "not a Mooncake record"),
        ("burstgpt", '{"timestamp": 1, "input_length": 4, "output_length": 2, "hash_ids": []}\n', "not a BurstGPT CSV"),
        ("mooncake", "Timestamp,Request tokens,Response tokens\n1,2,3\n", "line 1 is not JSON"),
    ],
)
def test_wrong_format(parts, tmp_path, fmt, content, fragment):
    path = tmp_path / "t.txt"
    path.write_text(content)
    with pytest.raises(ConfigError, match=fragment) as err:
        build(parts, "trace", path=str(path), format=fmt, block_size=BLOCK)
    assert "\n" not in str(err.value)


def test_bad_input(parts, tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        build(parts, "trace", path=str(tmp_path / "nope.jsonl"))
    path = mooncake(tmp_path, [(0, 9000, 10, list(range(18)))])
    with pytest.raises(ConfigError, match="more than the model's context of 8192"):
        build(parts, "trace", path=path, max_context=8192)
    with pytest.raises(ConfigError, match="no request left"):
        build(parts, "trace", path=path, max_prompt_len=4000)
    with pytest.raises(ConfigError, match="drop workload.rate"):
        build(parts, "trace", path=path, rate=3.0)
    with pytest.raises(ConfigError, match="workload.format"):
        build(parts, "trace", path=path, format="azure")


@pytest.mark.engine
def test_cli_mooncake_replay_on_llamacpp(tmp_path):
    """End to end: arrivals at the trace's (scaled) timestamps; the shared blocks reach the engine."""
    from tests.workloads.data_helpers import run_e2e

    path = mooncake(tmp_path, [(0, 80, 3, [1, 2, 3]), (400, 80, 3, [1, 2, 4]), (1000, 48, 3, [5, 6])])
    _, _, summary, df = run_e2e(
        tmp_path,
        "workload=trace",
        f"workload.path={path}",
        f"workload.block_size={BLOCK}",
        "workload.time_scale=0.5",
        "backend.batched=true",
        "backend.keep_session_cache=true",
    )
    assert summary["requests"]["completed"] == 3 and summary["workload"]["open_loop"]
    df = df.sort_values("request_id")
    assert list(df.scheduled_s) == [0.0, 0.2, 0.5]
    assert (df.start_s >= df.scheduled_s - 1e-3).all()
    assert list(df.prompt_tokens) == [80, 80, 48]
    assert summary["harness"]["send_lag_s"]["count"] == 3
