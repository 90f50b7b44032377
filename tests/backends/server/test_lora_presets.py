"""LoRA adapters in server mode: each preset's arguments and request field, spoken to a
reference server that serves the adapters (refserver --lora-modules) and refuses unknown ones."""

from __future__ import annotations

import dataclasses
import json
import urllib.request
from pathlib import Path

import pytest
from reference_fixtures import chat_request, collect, run

from backends.base import BackendConfig
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
from core.lora import LoraAdapter


def with_adapters(model):
    adapters = [
        LoraAdapter(
            f"a{i}", f"store:adapter-{i}", hf_dir=Path(f"/lora/a{i}"), gguf_file=Path(f"/lora/a{i}.gguf"), rank=8
        )
        for i in range(2)
    ]
    return dataclasses.replace(model, adapters=adapters, gguf_file=Path("/lora/model.gguf"))  # llama-server's is named


def adapter_request(i, adapter):
    request = chat_request(i, 3)
    request.adapter = adapter
    return request


def test_each_preset_launches_the_adapters_and_names_them_per_request(tiny_model):
    model = with_adapters(tiny_model)
    cfg = BackendConfig(name="x", mode="server")
    vllm = vllm_preset(cfg, model)
    assert vllm.lora and vllm.command[vllm.command.index("--lora-modules") + 1 :][:2] == ["a0=/lora/a0", "a1=/lora/a1"]
    assert {"--enable-lora", "--max-loras", "--max-lora-rank"} <= set(vllm.command)
    assert vllm.extra_body(adapter_request(0, "a1"))["model"] == "a1"
    assert "model" not in vllm.extra_body(adapter_request(0, None))
    sglang = sglang_preset(cfg, model)
    assert "--lora-paths" in sglang.command and sglang.extra_body(adapter_request(0, "a0"))["lora_path"] == "a0"
    server = llama_server_preset(cfg, model, binary="llama-server")
    assert server.command.count("--lora") == 2 and "--lora-init-without-apply" in server.command
    assert server.extra_body(adapter_request(0, "a1"))["lora"] == [{"id": 1, "scale": 1.0}]
    assert server.extra_body(adapter_request(0, None))["lora"] == []
    tgi = tgi_preset(EngineServerConfig(name="tgi", mode="server"), model)
    assert tgi.env["LORA_ADAPTERS"] == "a0=/lora/a0,a1=/lora/a1"
    assert tgi.extra_body(adapter_request(0, "a0")) == {"model": "a0"}
    plain = vllm_preset(cfg, tiny_model)  # no adapters: the command is what it was
    assert "--enable-lora" not in plain.command


@pytest.mark.parametrize(
    "preset_fn,dialect",
    [(vllm_preset, "openai"), (sglang_preset, "sglang"), (llama_server_preset, "llama-server"), (tgi_preset, "tgi")],
)
def test_adapters_reach_a_server_that_serves_them(tmp_path, tiny_model, preset_fn, dialect):
    model = with_adapters(tiny_model)
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
            "tgi" if preset_fn is tgi_preset else model.name,
            "--lora-modules",
            "a0=/lora/a0",
            "a1",
        ],
    )
    preset = preset_fn(cfg, model, binary="llama-server") if preset_fn is llama_server_preset else preset_fn(cfg, model)
    backend = ServerBackend(cfg, model, preset)
    backend.check_adapters(model.adapters)
    backend.run_dir = tmp_path
    backend.load()
    try:

        async def each():
            return [
                await collect(backend.stream(adapter_request(i, name))) for i, name in enumerate(["a0", "a1", None])
            ]

        results = run(each())
        with urllib.request.urlopen(f"{backend.server.url_root}/reference/requests") as r:
            received = [e for e in json.loads(r.read()) if e["path"].endswith("completions")]
        unknown = {
            "openai": {"model": "zz"},
            "sglang": {"lora_path": "zz"},
            "tgi": {"model": "zz"},
            "llama-server": {"lora": [{"id": 5, "scale": 1.0}]},
        }[dialect]
        base = adapter_request(9, None)
        with pytest.raises(Exception, match="404"):
            run(collect(backend.client.stream(base, {**backend.extra_body(base), **unknown})))
    finally:
        backend.close()
    assert all(done is not None and done.finish_reason == "length" for _, done in results)
    assert [e["adapter"] for e in received] == ["a0", "a1", None]


def test_servers_without_per_request_adapters_refuse_in_one_line(tiny_model):
    model = with_adapters(tiny_model)
    cfg = BackendConfig(name="llamacpp", mode="server")
    with pytest.raises(ConfigError, match="llama_cpp.server applies one adapter.*backend.server=llama-server"):
        ServerBackend(cfg, model, llamacpp_preset(cfg, model, eog_ids=[0])).check_adapters(model.adapters)
    mlx = BackendConfig(name="mlx", mode="server")
    with pytest.raises(ConfigError, match="the mlx server does not serve LoRA adapters"):
        ServerBackend(mlx, model, mlx_preset(mlx, model, eog_ids=[0])).check_adapters(model.adapters)
