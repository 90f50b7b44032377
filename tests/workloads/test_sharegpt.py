"""ShareGPT: single and multi-turn plans from small files the tests write."""

import json

import pytest

from core.errors import ConfigError
from tests.workloads.data_helpers import build, conversation, write_json, write_jsonl
from workloads.datafiles import file_sha256
from workloads.prompts import chat_messages

WORDS = "the quick brown fox jumps over the lazy dog and then runs far away into the green wood".split()


def text(n_words: int, salt: int = 0) -> str:
    return " ".join(WORDS[(i + salt) % len(WORDS)] for i in range(n_words)) + f" ({salt})"


@pytest.fixture()
def records():
    return [
        conversation(text(5 + i, i), text(10 + 3 * i, 100 + i), text(4, 200 + i), text(7, 300 + i), id=f"c{i}")
        for i in range(8)
    ]


def test_single_turn_json_and_jsonl_give_the_same_requests(parts, records, tmp_path):
    a = build(parts, "sharegpt", path=str(write_json(tmp_path / "a.json", records)), num_requests=5)
    b = build(parts, "sharegpt", path=str(write_jsonl(tmp_path / "b.jsonl", records)), num_requests=5)
    assert [s.turns[0].user for s in a.sessions] == [s.turns[0].user for s in b.sessions]
    assert len(a.sessions) == 5 and all(len(s.turns) == 1 for s in a.sessions)
    renderer = parts[0]
    by_id = {r["id"]: r for r in records}
    for s in a.sessions:
        turn = s.turns[0]
        record = by_id[turn.prompt_id]
        assert turn.user == record["conversations"][0]["value"]  # the first human turn
        reply = record["conversations"][1]["value"]
        assert turn.output_len == len(renderer.tokenizer(reply, add_special_tokens=False)["input_ids"])
        assert turn.prompt_token_ids == renderer.render(chat_messages(None, [{"role": "user", "content": turn.user}]))
    assert a.exact_output_len and not a.open_loop


def test_seeded_sampling(parts, records, tmp_path):
    path = str(write_json(tmp_path / "a.json", records))

    def ids(seed):
        return [s.turns[0].prompt_id for s in build(parts, "sharegpt", seed=seed, path=path, num_requests=4).sessions]

    assert ids(1) == ids(1)
    assert ids(1) != ids(2) or ids(1) != ids(3)
    assert len(build(parts, "sharegpt", path=path, num_requests=None).sessions) == len(records)


def test_fixed_and_distributed_output_lengths(parts, records, tmp_path):
    path = str(write_json(tmp_path / "a.json", records))
    fixed = build(parts, "sharegpt", path=path, output_len_source="config", output_len=7)
    assert {s.turns[0].output_len for s in fixed.sessions} == {7}
    spread = build(
        parts,
        "sharegpt",
        path=path,
        output_len_source="config",
        output_len=20,
        output_len_dist="uniform",
        output_len_spread=10,
        num_requests=8,
    )
    lens = [s.turns[0].output_len for s in spread.sessions]
    assert len(set(lens)) > 1 and all(10 <= n <= 30 for n in lens)


def test_filters(parts, records, tmp_path):
    path = str(write_json(tmp_path / "a.json", records))
    plan = build(parts, "sharegpt", path=path, num_requests=None, max_output_len=20)
    assert plan.sessions and all(s.turns[0].output_len <= 20 for s in plan.sessions)
    assert len(plan.sessions) < len(records)
    plan = build(parts, "sharegpt", path=path, num_requests=None, min_prompt_len=40)
    assert all(len(s.turns[0].prompt_token_ids) >= 40 for s in plan.sessions)


def test_multi_turn_with_engine_replies(parts, records, tmp_path):
    plan = build(parts, "sharegpt", path=str(write_json(tmp_path / "a.json", records)), multi_turn=True, sessions=3)
    assert len(plan.sessions) == 3
    for s in plan.sessions:
        assert len(s.turns) == 2
        assert s.turns[0].prompt_token_ids is not None and s.turns[1].prompt_token_ids is None  # rendered at run time
        assert all(t.reply is None for t in s.turns)  # the engine's replies go into the history
        assert [t.prompt_id.split("#")[1] for t in s.turns] == ["0", "1"]


def test_multi_turn_with_dataset_replies(parts, records, tmp_path):
    renderer = parts[0]
    plan = build(
        parts,
        "sharegpt",
        path=str(write_json(tmp_path / "a.json", records)),
        multi_turn=True,
        sessions=2,
        history="dataset",
    )
    for s in plan.sessions:
        first, second = s.turns
        assert first.reply is not None
        history = [
            {"role": "user", "content": first.user},
            {"role": "assistant", "content": first.reply},
            {"role": "user", "content": second.user},
        ]
        assert second.prompt_token_ids == renderer.render(chat_messages(s.system, history))


def test_system_prompt_and_max_turns(parts, tmp_path):
    recs = [conversation("hello there", "hi", "more please", "sure", "last one", "ok", system="Be brief.")]
    plan = build(parts, "sharegpt", path=str(write_json(tmp_path / "a.json", recs)), multi_turn=True, max_turns=2)
    (s,) = plan.sessions
    assert s.system == "Be brief." and [t.user for t in s.turns] == ["hello there", "more please"]


def test_workload_json_is_compact_and_hashes_the_data(parts, records, tmp_path):
    path = write_json(tmp_path / "a.json", records)
    body = build(parts, "sharegpt", path=str(path), num_requests=4).to_json()
    assert body["compact"] and body["source"]["sha256"] == file_sha256(path)
    turn = body["sessions"][0]["turns"][0]
    assert set(turn) >= {"prompt_id", "prompt_tokens", "output_len"} and "prompt_token_ids" not in turn
    # the same prompts from a file that differs elsewhere: another hash, so compare refuses them
    other = write_json(tmp_path / "b.json", records + [conversation("x", "y")])
    body2 = build(parts, "sharegpt", path=str(other), num_requests=4).to_json()
    if [s["turns"][0]["prompt_id"] for s in body2["sessions"]] == [
        s["turns"][0]["prompt_id"] for s in body["sessions"]
    ]:
        assert body2["sha256"] != body["sha256"]
    assert body2["prompts_sha256"] != body["prompts_sha256"] or body2["sha256"] != body["sha256"]


def test_hashes_differ_only_by_data_file(parts, records, tmp_path):
    a = write_json(tmp_path / "a.json", records)
    b = tmp_path / "b.json"
    b.write_text(json.dumps(records, indent=1))  # same records, other bytes
    ha = build(parts, "sharegpt", path=str(a), num_requests=3).to_json()
    hb = build(parts, "sharegpt", path=str(b), num_requests=3).to_json()
    assert ha["sessions"] == hb["sessions"] and ha["sha256"] != hb["sha256"]


@pytest.mark.parametrize(
    "content, fragment",
    [
        (None, "no such file"),
        ("not json at all", "line 1 is not JSON"),
        ('[{"text": "hi"}]', "no 'conversations' list"),
        ("[]", "holds no records"),
        (
            '[{"conversations": []}, {"conversations": [{"from": "gpt", "value": "hi"}, {"from": "human", "value": " "}]}]',
            "none of its 2 conversations has a user message with text; ShareGPT wants",
        ),
    ],
)
def test_bad_files_get_one_line(parts, tmp_path, content, fragment):
    path = tmp_path / "data.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError, match=fragment) as err:
        build(parts, "sharegpt", path=str(path))
    assert "\n" not in str(err.value)


def test_empty_after_filters_and_too_long_for_the_context(parts, records, tmp_path):
    path = str(write_json(tmp_path / "a.json", records))
    with pytest.raises(ConfigError, match="no request left after the filters"):
        build(parts, "sharegpt", path=path, min_prompt_len=100000)
    with pytest.raises(ConfigError, match="more than the model's context of 60.*max_prompt_len"):
        build(parts, "sharegpt", path=path, num_requests=None, max_context=60)
    kept = build(parts, "sharegpt", path=path, max_context=60, max_prompt_len=40, max_output_len=20, num_requests=None)
    assert all(len(s.turns[0].prompt_token_ids) + s.turns[0].output_len <= 60 for s in kept.sessions)


def test_needs_a_path():
    from workloads import workload_registry

    with pytest.raises(ConfigError, match="workload.path"):
        workload_registry.get("sharegpt").config_cls().validate()


def test_hf_dataset_reads_the_hub_cache_offline(parts, records, tmp_path, monkeypatch):
    """The hub loader, as far as no network allows: a file laid out in the hub's cache."""
    repo_dir = tmp_path / "hub" / "datasets--someone--sharegpt-mini"
    commit = "0123456789abcdef0123456789abcdef01234567"
    (repo_dir / "refs").mkdir(parents=True)
    (repo_dir / "refs" / "main").write_text(commit)
    snapshot = repo_dir / "snapshots" / commit
    snapshot.mkdir(parents=True)
    write_json(snapshot / "data.json", records)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants as hub_constants

    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    plan = build(parts, "sharegpt", hf_dataset="someone/sharegpt-mini:data.json", num_requests=3)
    assert len(plan.sessions) == 3 and plan.source["path"] == "someone/sharegpt-mini:data.json"
    with pytest.raises(ConfigError, match="could not get the file"):
        build(parts, "sharegpt", hf_dataset="someone/sharegpt-mini:missing.json")
    with pytest.raises(ConfigError, match="owner/name:file"):
        build(parts, "sharegpt", hf_dataset="no-colon")


@pytest.mark.engine
def test_cli_multi_turn_run_on_llamacpp(tmp_path, records):
    """End to end: three turns of two conversations; the history re-sent grows and the cache serves it."""
    from tests.workloads.data_helpers import run_e2e

    path = write_json(tmp_path / "sg.json", records)
    proc, run_dir, summary, df = run_e2e(
        tmp_path,
        "workload=sharegpt",
        f"workload.path={path}",
        "workload.multi_turn=true",
        "workload.sessions=2",
        "workload.output_len_source=config",
        "workload.output_len=4",
        "backend.keep_session_cache=true",
    )
    assert summary["requests"] == {"sent": 4, "completed": 4, "failed": 0}
    assert summary["workload"]["data"]["sha256"] == file_sha256(path)
    by_turn = df.groupby("turn")["prompt_tokens"].mean()
    assert by_turn[1] > by_turn[0]  # the history is re-sent
    assert df[df.turn == 1].cached_tokens.min() > 0 and "per turn:" in proc.stdout
    workload = json.loads((run_dir / "workload.json").read_text())
    assert workload["compact"] and workload["sha256"] == summary["workload"]["sha256"]


@pytest.mark.slow
def test_cli_missing_file_is_one_line(tmp_path):
    from conftest import run_harness_cli

    proc = run_harness_cli(
        "workload=sharegpt",
        f"workload.path={tmp_path}/none.json",
        "model=tiny-random",
        f"output_root={tmp_path}",
        cwd=tmp_path,
    )
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    assert proc.returncode != 0 and len(lines) == 1 and "no such file" in lines[0], proc.stderr
