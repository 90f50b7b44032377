"""JSONL: one request a line, prompts or messages, output lengths and timestamps."""

import pytest

from core.errors import ConfigError
from tests.workloads.data_helpers import build, write_jsonl
from workloads.prompts import chat_messages


def test_prompts_messages_and_output_lengths(parts, tmp_path):
    renderer = parts[0]
    path = write_jsonl(
        tmp_path / "r.jsonl",
        [
            {"prompt": "What is a fox?", "output_len": 5},
            {
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "Hi"},
                    {"role": "assistant", "content": "Hello!"},
                    {"role": "user", "content": "Name a colour."},
                ]
            },
        ],
    )
    plan = build(parts, "jsonl", path=str(path), output_len=9)
    first, second = plan.sessions
    assert first.turns[0].user == "What is a fox?" and first.turns[0].output_len == 5
    assert second.system == "Be brief." and second.turns[0].output_len == 9
    assert second.history == [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]
    expected = renderer.render(
        chat_messages("Be brief.", second.history + [{"role": "user", "content": "Name a colour."}])
    )
    assert second.turns[0].prompt_token_ids == expected
    assert not plan.open_loop and [t.prompt_id for s in plan.sessions for t in s.turns] == ["1", "2"]


def test_timestamps_become_open_loop_arrivals(parts, tmp_path):
    path = write_jsonl(
        tmp_path / "r.jsonl", [{"prompt": f"question {i}", "timestamp": 100 + 0.5 * i} for i in range(4)]
    )
    plan = build(parts, "jsonl", path=str(path), time_scale=2.0)
    assert plan.open_loop and [s.arrival_s for s in plan.sessions] == [0.0, 1.0, 2.0, 3.0]
    plain = build(parts, "jsonl", path=str(path), use_timestamps=False)
    assert not plain.open_loop
    with pytest.raises(ConfigError, match="drop workload.rate"):
        build(parts, "jsonl", path=str(path), rate=2.0)


def test_first_n_and_filters(parts, tmp_path):
    path = write_jsonl(tmp_path / "r.jsonl", [{"prompt": "word " * (i * 20 + 1), "output_len": 4} for i in range(5)])
    assert len(build(parts, "jsonl", path=str(path), num_requests=2).sessions) == 2
    short = build(parts, "jsonl", path=str(path), max_prompt_len=80)
    assert all(len(s.turns[0].prompt_token_ids) <= 80 for s in short.sessions) and len(short.sessions) < 5


@pytest.mark.parametrize(
    "lines, fragment",
    [
        ([{"text": "hi"}], "exactly one of 'prompt' or 'messages'"),
        ([{"messages": [{"role": "assistant", "content": "x"}]}], "ending with the user's"),
        ([{"prompt": "a", "output_len": 0}], "output_len must be a whole number"),
        ([{"prompt": "a", "timestamp": 1}, {"prompt": "b"}], "no numeric 'timestamp'"),
    ],
)
def test_wrong_format(parts, tmp_path, lines, fragment):
    with pytest.raises(ConfigError, match=fragment) as err:
        build(parts, "jsonl", path=str(write_jsonl(tmp_path / "r.jsonl", lines)))
    assert "\n" not in str(err.value)


def test_missing_empty_and_too_long(parts, tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        build(parts, "jsonl", path=str(tmp_path / "none.jsonl"))
    path = write_jsonl(tmp_path / "r.jsonl", [{"prompt": "word " * 200, "output_len": 4}])
    with pytest.raises(ConfigError, match="no request left"):
        build(parts, "jsonl", path=str(path), max_prompt_len=50)
    with pytest.raises(ConfigError, match="more than the model's context of 100"):
        build(parts, "jsonl", path=str(path), max_context=100)


@pytest.mark.engine
def test_cli_run_on_llamacpp(tmp_path):
    from tests.workloads.data_helpers import run_e2e

    path = write_jsonl(
        tmp_path / "r.jsonl",
        [
            {"prompt": "Name a fruit.", "output_len": 3},
            {"messages": [{"role": "user", "content": "Name a colour."}], "output_len": 5},
        ],
    )
    _, _, summary, df = run_e2e(tmp_path, "workload=jsonl", f"workload.path={path}")
    assert summary["requests"]["completed"] == 2 and not summary["workload"]["open_loop"]
    assert sorted(df.output_tokens) == [3, 5]
