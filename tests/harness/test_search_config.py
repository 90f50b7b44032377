"""search.* (harness/config.py): the space's syntax, the objectives, and the one-line refusals,
checked as the command composes its config (no engine, no Optuna study)."""

import pytest
from conftest import make_config

from core.errors import ConfigError
from harness.config import (
    UNSET,
    Choices,
    Range,
    override_value,
    parse_objective,
    parse_param,
    search_default,
    search_defaults,
)

SYNTAX = "write [a, b, …] (choices) | int:LOW:HIGH[:log|:STEP] | float:LOW:HIGH[:log|:STEP]"


@pytest.mark.parametrize(
    "spec, param",
    [
        ([1, 2], Choices((1, 2))),
        ([None, True, "x", 0.5], Choices((None, True, "x", 0.5))),
        ([True, 1], Choices((True, 1))),  # true is not 1
        ("int:1:8", Range("int", 1, 8)),
        ("int:32:512:log", Range("int", 32, 512, log=True)),
        ("int:0:512:64", Range("int", 0, 512, step=64)),
        ("float:0.1:0.9", Range("float", 0.1, 0.9)),
        ("float:1e-3:1:log", Range("float", 0.001, 1.0, log=True)),
        ("float:0:1:0.25", Range("float", 0.0, 1.0, step=0.25)),
    ],
)
def test_the_space_syntax(spec, param):
    assert parse_param("backend.x", spec) == param


@pytest.mark.parametrize(
    "spec, why",
    [
        ([], "no choices"),
        ([1, 1], "a choice is given twice"),
        ([[1]], "a choice must be null, a boolean, a number or a string"),
        ("int:8:1", "a range needs LOW < HIGH"),
        ("int:1:8:log:2", "a range is KIND:LOW:HIGH, optionally :log or :STEP"),
        ("int:1.5:8", "LOW, HIGH and STEP of the range must be ints"),
        ("float:0:1:log", "a log range needs LOW > 0"),
        ("int:0:8:0", "STEP must be > 0"),
        ("range:1:8", "not a list of choices nor a range"),
        (5, "not a list of choices nor a range"),
    ],
)
def test_a_bad_entry_is_refused_in_one_line(spec, why):
    with pytest.raises(ConfigError) as err:
        parse_param("backend.x", spec)
    assert str(err.value) == f"search.space: backend.x: {why} (got {spec!r}); {SYNTAX}"


def test_contains_and_text():
    r = Range("int", 1, 8, log=True)
    assert r.contains(1) and r.contains(8) and not r.contains(9) and not r.contains(None) and not r.contains(True)
    assert not Range("int", 1, 8).contains(2.5) and Range("float", 1, 8).contains(2.5)
    assert r.text() == "int:1:8:log" and Range("int", 0, 512, step=64).text() == "int:0:512:64"
    c = Choices((None, 1, "a b"))
    assert c.contains(None) and c.contains(1.0) and not c.contains(True) and c.text() == "[null, 1, 'a b']"


def test_objectives():
    assert parse_objective("output_tokens_per_s:max") == ("output_tokens_per_s", "maximize")
    assert parse_objective("ttft_s.p90:min") == ("ttft_s.p90", "minimize")
    assert parse_objective("output_tps.p50") == ("output_tps.p50", None)
    with pytest.raises(ConfigError, match="write FIGURE or FIGURE:max or FIGURE:min"):
        parse_objective("output_tps:up")


def test_override_values_as_hydra_reads_them():
    assert [override_value(v) for v in (None, True, False, 3, 0.5, "fp16", "a b", "null")] == [
        "null",
        "true",
        "false",
        "3",
        "0.5",
        "fp16",
        "'a b'",
        "'null'",
    ]


LLAMA = ("backend=llamacpp", "workload=synthetic", "search.enabled=true")


def test_a_search_config_composes_and_knows_its_defaults():
    cfg = make_config(
        *LLAMA,
        "search.space={backend.n_threads: [1, 2], backend.n_batch: int:32:512:log, workload.concurrency: int:1:8}",
    )
    params = cfg.search.params()
    assert params["backend.n_batch"] == Range("int", 32, 512, log=True)
    # the run's own config is the first trial; its values need not be in the space
    assert search_defaults(cfg, params) == {
        "backend.n_threads": None,
        "backend.n_batch": 512,
        "workload.concurrency": None,
    }
    vllm = make_config("backend=vllm", "workload=synthetic")
    assert search_default(vllm, "backend.engine_args.max_num_batched_tokens") is UNSET  # a free mapping's key


@pytest.mark.parametrize(
    "space, message",
    [
        ("{backend.n_thread: [1, 2]}", "search.space: backend.n_thread: no such setting (backend has api_key_env, "),
        ("{backend: [1]}", "search.space: backend: a section, not a setting"),
        ("{backend.n_batch: [abc]}", "search.space: backend.n_batch: 'abc' does not fit: Value 'abc' of type 'str'"),
        ("{search.trials: [1, 2]}", "search.space: search.trials: not a setting a search can vary"),
        ("{backend.n_batch: int:512:32}", "search.space: backend.n_batch: a range needs LOW < HIGH"),
    ],
)
def test_a_bad_space_is_refused_before_anything_runs(space, message):
    with pytest.raises(ConfigError) as err:
        make_config(*LLAMA, f"search.space={space}")
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ((), "search.space is empty: give the settings to search"),
        (("search.space={backend.n_batch: [64]}", "search.trials=0"), "search.trials must be >= 1 (got 0)"),
        (("search.space={backend.n_batch: [64]}", "search.check_blocks=1"), "search.check_blocks must be >= 2"),
        (("search.space={backend.n_batch: [64]}", "repeat=2"), "search measures each trial once (repeat=1)"),
        (
            ("search.space={backend.n_batch: [64]}", "search.objectives=[output_tps.p50,output_tps.p50:max]"),
            "search.objectives names a figure twice",
        ),
        (("search.space={backend.n_batch: [64]}", "search.objectives=[]"), "search.objectives is empty"),
    ],
)
def test_the_search_settings_are_checked(overrides, message):
    with pytest.raises(ConfigError) as err:
        make_config(*LLAMA, *overrides)
    assert str(err.value).startswith(message)


def test_a_disabled_search_checks_nothing():
    assert make_config("search.space={nonsense: 1}").search.enabled is False
