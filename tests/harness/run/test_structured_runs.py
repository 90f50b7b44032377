"""Structured output end to end against the reference server: replies under a JSON schema, a regex
and required tool calls are checked and counted; a lying engine's replies are caught, and compare
never calls it faster."""

import json
import shutil

import pandas as pd
import pytest
from conftest import make_config, shared_session

from core.errors import ConfigError
from harness.reports.compare.cli import main as compare_main
from harness.reports.console import format_summary
from harness.results.schema import RunSummary
from harness.run.point import run_benchmark, run_point

REF = [
    "backend=reference",
    "backend.count_prompt_tokens=false",
    "backend.ttft_ms=20",
    "backend.itl_ms=1",
    "model=tiny-random",
    "workload=structured",
    "workload.instruction=null",
    "workload.input_len=40",
    "workload.num_requests=6",
    "workload.concurrency=3",
    "report=false",
]
TOOLS = (
    "workload.tools=[{type: function, function: {name: get_weather, parameters: {type: object, "
    "properties: {city: {type: string, maxLength: 20}, days: {type: integer, minimum: 1}}, "
    "required: [city, days]}}}]"
)


@pytest.fixture(scope="module")
def honest(tmp_path_factory):
    """One reference server that answers under every constraint, shared by the runs of this module."""
    yield from shared_session(tmp_path_factory, *REF)


def summary_of(run) -> dict:
    return json.loads((run / "summary.json").read_text())


def test_honest_replies_are_all_valid_and_counted(honest, tmp_path):
    run_point(honest, make_config(*REF), tmp_path / "run")
    s = summary_of(tmp_path / "run")
    assert s["structured"]["checked"] == 6 and s["structured"]["valid_share"] == 1.0
    assert s["structured"]["by_kind"] == {"json_schema": {"checked": 6, "valid": 6, "valid_share": 1.0}}
    assert s["throughput"]["valid_output_share"] == 1.0
    assert s["workload"]["constraint"].startswith("json_schema ")
    df = pd.read_parquet(tmp_path / "run" / "requests.parquet")
    assert df["output_valid"].tolist() == [True] * 6 and set(df["output_check"]) == {"json_schema"}
    assert all(isinstance(json.loads(t), dict) for t in df["output_text"])
    assert "structured output: 6 of 6 checked replies valid (100.0 %; json_schema 6/6)" in format_summary(
        RunSummary.from_dict(s)
    )
    workload = json.loads((tmp_path / "run" / "workload.json").read_text())
    assert workload["structured"]["response_format"]["type"] == "json_schema"


def test_regex_and_tool_calls_over_http(honest, tmp_path):
    regex = "workload.response_format={type: regex, pattern: '(yes|no), [a-z]{2,8}\\.'}"
    run_point(honest, make_config(*REF, regex), tmp_path / "regex")
    assert summary_of(tmp_path / "regex")["structured"]["by_kind"]["regex"]["valid"] == 6
    run_point(
        honest,
        make_config(*REF, "workload.response_format=null", TOOLS, "workload.tool_choice_share=0.5"),
        tmp_path / "tools",
    )
    s = summary_of(tmp_path / "tools")
    assert s["structured"]["by_kind"] == {"tool_call": {"checked": 3, "valid": 3, "valid_share": 1.0}}
    df = pd.read_parquet(tmp_path / "tools" / "requests.parquet").sort_values("request_id")
    called = df[df["output_check"] == "tool_call"]
    assert called["request_id"].tolist() == [1, 3, 5] and set(called["finish_reason"]) == {"tool_calls"}
    calls = [json.loads(c) for c in called["tool_calls"]]
    assert all(c[0]["name"] == "get_weather" and json.loads(c[0]["arguments"])["days"] >= 1 for c in calls)
    # the arguments' pieces are the reply's output tokens, as the server's usage counts them
    assert (called["output_tokens"] == called["engine_stats"].map(lambda e: json.loads(e)["streamed_tokens"])).all()
    assert called["output_tokens"].min() > 5 and called["ttft_s"].notna().all()
    assert df[df["output_check"].isna()]["tool_calls"].tolist() == ["[]"] * 3  # auto: answered in text


def test_json_mode_replies_are_checked_as_json_objects(honest, tmp_path):
    """workload.response_format.type=json_object: OpenAI's JSON mode; any JSON object is valid."""
    run_point(honest, make_config(*REF, "workload.response_format.type=json_object"), tmp_path / "json")
    s = summary_of(tmp_path / "json")
    assert s["structured"]["by_kind"] == {"json_object": {"checked": 6, "valid": 6, "valid_share": 1.0}}
    assert s["workload"]["constraint"].startswith("json_object ")
    assert json.loads((tmp_path / "json" / "workload.json").read_text())["structured"]["response_format"] == {
        "type": "json_object"
    }


@pytest.mark.slow
def test_a_lying_engine_is_caught_and_never_faster(honest, tmp_path, capsys):
    session, honest, liar = honest, tmp_path / "honest", tmp_path / "liar"
    run_point(session, make_config(*REF), honest)  # TTFT 20 ms
    run_benchmark(make_config(*REF, "backend.ignore_constraints=true", "backend.ttft_ms=2"), liar)
    s = summary_of(liar)
    assert s["structured"]["valid"] == 0 and s["throughput"]["valid_output_share"] == 0.0
    assert any("6 of 6 checked replies broke their constraint" in w for w in s["warnings"])
    df = pd.read_parquet(liar / "requests.parquet")
    assert df["output_valid"].tolist() == [False] * 6 and df["output_invalid_reason"].str.contains("JSON").all()
    # repeats of each side (copies: no noise between runs), so the interval decides: the liar's
    # TTFT is far lower, yet compare calls it not faster
    for i in (1, 2):
        shutil.copytree(honest, tmp_path / f"honest{i}")
        shutil.copytree(liar, tmp_path / f"liar{i}")
    paths = [
        str(honest),
        str(tmp_path / "honest1"),
        str(tmp_path / "honest2"),
        str(liar),
        str(tmp_path / "liar1"),
        str(tmp_path / "liar2"),
    ]
    assert compare_main([*paths, "--out", str(tmp_path / "cmp")]) == 0
    out = capsys.readouterr().out
    assert "not faster: only 0 % of its replies were valid" in out
    assert "not faster: only 0 % of its replies were valid" in (tmp_path / "cmp" / "compare.html").read_text()


def test_different_constraints_do_not_compare_and_bad_ones_are_refused(honest, tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    run_point(honest, make_config(*REF, "workload.num_requests=3"), a)
    other = "workload.response_format.schema.required=[title]"
    run_point(honest, make_config(*REF, "workload.num_requests=3", other), b)
    assert summary_of(a)["workload"]["sha256"] != summary_of(b)["workload"]["sha256"]
    compare_main([str(a), str(b), "--out", str(tmp_path / "cmp")])
    said = capsys.readouterr()
    assert "different reply constraint (response_format, tools)" in " ".join((said.out + said.err).split())
    with pytest.raises(ConfigError, match="exact_output_len=false"):
        make_config(*REF, "workload.exact_output_len=true")
    with pytest.raises(ConfigError, match="tool_choice_share"):
        make_config(*REF, "workload.tool_choice_share=0.5")
    with pytest.raises(ConfigError, match="no constrained decoding"):
        run_benchmark(
            make_config(
                "backend=transformers",
                "model=tiny-random",
                "workload=structured",
                "workload.input_len=120",
                "report=false",
            ),
            tmp_path / "tf",
        )
