"""Real engines decode under a reply constraint on the real SmolLM2 model: llama.cpp in-process
(a GBNF grammar from the JSON schema; JSON mode: the grammar of any object), llama.cpp's
llama-server (response_format over HTTP, JSON mode passed through) and vLLM in-process (its
structured outputs, json_object for JSON mode); engines without constrained decoding refuse in one line."""

import json

import pytest
from engine_helpers import collect, loaded_backend, make_backend, require_llama_server

from backends.engines.llamacpp import LlamaCppConfig
from backends.factory import create_backend
from core.errors import ConfigError
from core.structured import check_reply, normalize_tools
from core.types import GenerationRequest, SamplingParams
from workloads.base import WorkloadPlan
from workloads.prompts import PromptRenderer

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        "colour": {"type": "string", "enum": ["red", "green", "blue"]},
        "legs": {"type": "integer", "minimum": 0, "maximum": 8},
    },
    "required": ["name", "colour", "legs"],
    "additionalProperties": False,
}
FORMAT = {"type": "json_schema", "schema": SCHEMA}
JSON_MODE = {"type": "json_object"}  # OpenAI's JSON mode: any JSON object
TOOLS = normalize_tools(
    [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string", "maxLength": 20}},
                    "required": ["city"],
                    "additionalProperties": False,
                },
            },
        }
    ]
)
PROMPT = "Describe an animal as a JSON object with its name, colour and number of legs."


def constrained(i: int, renderer: PromptRenderer, **kw) -> GenerationRequest:
    messages = [{"role": "user", "content": PROMPT}]
    return GenerationRequest(
        request_id=i,
        prompt_token_ids=renderer.render(messages),
        max_new_tokens=60,
        exact_output_len=False,
        sampling=SamplingParams(),
        messages=messages,
        **kw,
    )


JSON_MODE_PROMPT = "Give a JSON object with two keys: city and country, for the capital of France."


def json_mode(i: int, renderer: PromptRenderer) -> GenerationRequest:
    """A request in JSON mode: any object, so no schema bounds its length, and the small model loops
    under some prompts (the animal's above: "Lion-Lion-…" in a string, in vLLM, until the limit);
    this prompt's object closes (19 tokens in vLLM, greedy)."""
    messages = [{"role": "user", "content": JSON_MODE_PROMPT}]
    return GenerationRequest(
        request_id=i,
        prompt_token_ids=renderer.render(messages),
        max_new_tokens=200,
        exact_output_len=False,
        sampling=SamplingParams(),
        messages=messages,
        response_format=JSON_MODE,
    )


def check(done, chunks, renderer: PromptRenderer, request: GenerationRequest):
    ids = [t for c in chunks for t in c.token_ids]
    text = done.text if done.text is not None else renderer.decode(ids)
    return check_reply(
        text, done.tool_calls, request.response_format, request.tools, request.tool_choice, done.finish_reason
    ), text


@pytest.fixture(scope="module")
def renderer(real_tokenizer):
    return PromptRenderer(real_tokenizer)


@pytest.mark.parametrize("batched", [False, True], ids=["plain", "batched"])
@pytest.mark.engine
def test_llamacpp_inprocess_replies_valid_json_and_tool_calls(real_model, renderer, batched):
    backend = make_backend("llamacpp", real_model, load=False, n_ctx=512, batched=batched, max_batch_size=2)
    with loaded_backend(backend) as run:
        schema_request = constrained(0, renderer, response_format=FORMAT)
        tool_request = constrained(1, renderer, tools=TOOLS, tool_choice="required")
        for request in (schema_request, tool_request, json_mode(3, renderer)):
            chunks, done = run(collect(backend, request))
            result, text = check(done, chunks, renderer, request)
            assert result.valid, (result, text)
            assert done.finish_reason == "stop"  # the grammar ended the reply, not the limit
        assert isinstance(json.loads(text), dict)
        free_chunks, _ = run(collect(backend, constrained(2, renderer)))  # the next request is free again
        assert free_chunks


def test_llamacpp_refuses_a_regex_and_transformers_any_constraint_in_one_line(real_model):
    plan = WorkloadPlan(
        "x",
        [],
        [],
        exact_output_len=False,
        concurrency=None,
        open_loop=False,
        structured={"response_format": {"type": "regex", "pattern": "a+"}, "tools": None, "tool_choice_share": 0.0},
    )
    with pytest.raises(ConfigError, match="takes no regular expression"):
        make_backend("llamacpp", real_model, load=False).check_workload(plan)
    with pytest.raises(ConfigError, match="backend=transformers in-process has no constrained decoding"):
        make_backend("transformers", real_model, load=False).check_workload(plan)


@pytest.mark.engine
def test_llama_server_replies_valid_json_over_http(real_model, renderer, tmp_path):
    require_llama_server()
    cfg = LlamaCppConfig(mode="server", server="llama-server", n_ctx=512, max_batch_size=2, startup_timeout_s=120)
    cfg.validate()
    backend = create_backend(cfg, real_model)
    backend.run_dir = tmp_path
    with loaded_backend(backend) as run:
        request = constrained(0, renderer, response_format=FORMAT)
        chunks, done = run(collect(backend, request))
        result, text = check(done, chunks, renderer, request)
        assert result.valid, (result, text)
        assert done.engine_stats["output_tokens"] >= len(chunks) > 5  # usage counts the constrained reply
        request = json_mode(1, renderer)  # passed through as it is
        chunks, done = run(collect(backend, request))
        result, text = check(done, chunks, renderer, request)
        assert result.valid and result.kind == "json_object", (result, text)


@pytest.mark.engine
def test_vllm_inprocess_replies_valid_json_and_regex(vllm_inprocess, renderer):
    backend = vllm_inprocess.backend
    run = vllm_inprocess.run
    for request in (
        constrained(0, renderer, response_format=FORMAT),
        constrained(1, renderer, response_format={"type": "regex", "pattern": "(yes|no), [a-z]{3,10}"}),
        json_mode(3, renderer),
        constrained(2, renderer, tools=TOOLS, tool_choice="required"),
    ):
        chunks, done = run(collect(backend, request))
        result, text = check(done, chunks, renderer, request)
        assert result.valid, (result, text)
    assert json.loads(text)["name"] == "get_weather"
