"""Structured output in server mode: each preset's body for a JSON schema, a regex and tools, its
refusals in one line, and each dialect's constrained reply from the reference server checked."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from reference_fixtures import chat_request, collect, run

from backends.base import BackendConfig
from backends.preset import StructuredDialect
from backends.server.backend import ServerBackend
from backends.server.presets import (
    llama_server_preset,
    llamacpp_preset,
    mlx_preset,
    sglang_preset,
    tgi_preset,
    vllm_preset,
)
from backends.server.standalone import EngineServerConfig
from core.errors import ConfigError
from core.structured import check_reply, normalize_tools

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 10}, "n": {"type": "integer"}},
    "required": ["city", "n"],
}
FORMAT = {"type": "json_schema", "schema": SCHEMA}
REGEX = {"type": "regex", "pattern": "(yes|no)-[0-9]{2}"}
JSON_MODE = {"type": "json_object"}
TOOLS = normalize_tools([{"type": "function", "function": {"name": "lookup", "parameters": SCHEMA}}])


def constrained(i: int = 0, **kw):
    request = chat_request(i, 40, exact=False)
    for key, value in kw.items():
        setattr(request, key, value)
    return request


def with_gguf(model):
    """The presets of llama.cpp's servers name a GGUF (the reference server stands in: never read)."""
    return model if model.gguf_file is not None else dataclasses.replace(model, gguf_file=Path("/models/m.gguf"))


class Plan:
    def __init__(self, response_format=None, tools=None, share=0.0):
        self.structured = (
            {"response_format": response_format, "tools": tools, "tool_choice_share": share}
            if response_format or tools
            else None
        )


def test_each_preset_builds_its_engines_body(tiny_model):
    tiny_model = with_gguf(tiny_model)
    cfg = BackendConfig(name="x", mode="server")
    schema_body = {"type": "json_schema", "json_schema": {"name": "reply", "schema": SCHEMA}}
    vllm = ServerBackend(cfg, tiny_model, vllm_preset(cfg, tiny_model))
    assert vllm.extra_body(constrained(response_format=FORMAT))["response_format"] == schema_body
    assert vllm.extra_body(constrained(response_format=REGEX))["structured_outputs"] == {"regex": REGEX["pattern"]}
    body = vllm.extra_body(constrained(tools=TOOLS, tool_choice="required"))
    assert body["tools"] == TOOLS and body["tool_choice"] == "required" and body["return_token_ids"] is True
    assert "response_format" not in vllm.extra_body(constrained())  # free text: nothing added
    sglang = ServerBackend(cfg, tiny_model, sglang_preset(cfg, tiny_model))
    assert sglang.extra_body(constrained(response_format=REGEX))["regex"] == REGEX["pattern"]
    tgi = EngineServerConfig(name="tgi", mode="server")
    assert ServerBackend(tgi, tiny_model, tgi_preset(tgi, tiny_model)).extra_body(constrained(response_format=REGEX))[
        "response_format"
    ] == {"type": "regex", "value": REGEX["pattern"]}
    python_server = llamacpp_preset(cfg, tiny_model, eog_ids=[0])
    assert ServerBackend(cfg, tiny_model, python_server).extra_body(constrained(response_format=FORMAT))[
        "response_format"
    ] == {"type": "json_object", "schema": SCHEMA}
    server = ServerBackend(cfg, tiny_model, llama_server_preset(cfg, tiny_model, binary="llama-server"))
    assert server.extra_body(constrained(response_format=FORMAT))["response_format"] == schema_body
    # JSON mode: OpenAI's form, passed through; TGI's grammar of any object
    for backend in (vllm, sglang, server, ServerBackend(cfg, tiny_model, python_server)):
        assert backend.extra_body(constrained(response_format=JSON_MODE))["response_format"] == JSON_MODE
    assert ServerBackend(tgi, tiny_model, tgi_preset(tgi, tiny_model)).extra_body(
        constrained(response_format=JSON_MODE)
    )["response_format"] == {"type": "json", "value": {"type": "object"}}


def test_servers_refuse_what_they_cannot_constrain_in_one_line(tiny_model):
    tiny_model = with_gguf(tiny_model)
    cfg = BackendConfig(name="x", mode="server")
    mlx = ServerBackend(cfg, tiny_model, mlx_preset(cfg, tiny_model, eog_ids=[0]))
    mlx.check_workload(Plan())  # no constraint: nothing to refuse
    with pytest.raises(ConfigError, match="the mlx server has no constrained decoding"):
        mlx.check_workload(Plan(FORMAT))
    python_server = ServerBackend(cfg, tiny_model, llamacpp_preset(cfg, tiny_model, eog_ids=[0]))
    python_server.check_workload(Plan(FORMAT))
    with pytest.raises(ConfigError, match="takes no regular expression"):
        python_server.check_workload(Plan(REGEX))
    with pytest.raises(ConfigError, match="takes no tool definitions"):
        python_server.check_workload(Plan(None, TOOLS, 1.0))
    vllm = ServerBackend(cfg, tiny_model, vllm_preset(cfg, tiny_model))
    vllm.check_workload(Plan(REGEX, TOOLS, 1.0))
    with pytest.raises(ConfigError, match="tool_choice auto only with --enable-auto-tool-choice"):
        vllm.check_workload(Plan(None, TOOLS, 0.5))
    assert StructuredDialect(auto_tools_flag="--x").refusal(Plan(None, TOOLS, 0.5).structured, "e", ["--x"]) is None


@pytest.mark.parametrize(
    "preset_fn,dialect,request_kw",
    [
        (vllm_preset, "openai", {"response_format": REGEX}),
        (vllm_preset, "openai", {"tools": TOOLS, "tool_choice": "required"}),
        (tgi_preset, "tgi", {"response_format": REGEX}),
        (llamacpp_preset, "llamacpp", {"response_format": FORMAT}),
        (llamacpp_preset, "llamacpp", {"response_format": JSON_MODE}),
        (llama_server_preset, "llama-server", {"response_format": JSON_MODE}),
        (tgi_preset, "tgi", {"response_format": JSON_MODE}),
        (llama_server_preset, "llama-server", {"tools": TOOLS, "tool_choice": "required"}),
    ],
    ids=[
        "vllm-regex",
        "vllm-tools",
        "tgi-regex",
        "llama-cpp-python-json",
        "llama-cpp-python-json-mode",
        "llama-server-json-mode",
        "tgi-json-mode",
        "llama-server-tools",
    ],
)
def test_each_dialects_constrained_reply_is_valid(tmp_path, tiny_model, preset_fn, dialect, request_kw):
    tiny_model = with_gguf(tiny_model)
    cfg = (EngineServerConfig if preset_fn is tgi_preset else BackendConfig)(
        name=dialect,
        mode="server",
        startup_timeout_s=60,
        server_command=[
            "{python}",
            "-m",
            "refserver",
            "--port",
            "{port}",
            "--dialect",
            dialect,
            "--ttft-ms",
            "1",
            "--itl-ms",
            "1",
            "--model-name",
            "tgi" if preset_fn is tgi_preset else tiny_model.name,
        ],
    )
    if preset_fn is llama_server_preset:
        preset = preset_fn(cfg, tiny_model, binary="llama-server")
    else:
        preset = preset_fn(cfg, tiny_model, eog_ids=[0]) if preset_fn is llamacpp_preset else preset_fn(cfg, tiny_model)
    backend = ServerBackend(cfg, tiny_model, preset)
    backend.run_dir = tmp_path
    backend.load()
    try:
        request = constrained(**request_kw)
        chunks, done = run(collect(backend.stream(request)))
    finally:
        backend.close()
    result = check_reply(
        done.text, done.tool_calls, request.response_format, request.tools, request.tool_choice, done.finish_reason
    )
    assert result is not None and result.valid, (result, done.text, done.tool_calls)
    assert len(chunks) > 1 and done.engine_stats["output_tokens"] >= len(chunks) // 2  # the pieces are output tokens
