"""LoRA traffic on a real engine here (transformers with peft), end to end, and the refusals."""

from __future__ import annotations

import dataclasses
import json

import pytest
from conftest import make_config
from engine_helpers import ask, collect, make_backend, request, require_package

from core.errors import ConfigError
from harness.results.store import load_requests
from harness.run.adapter_store import store_adapter
from harness.run.point import run_benchmark

ADAPTERS = (
    'workload.lora.adapters=[{name: a0, path: "store:adapter-0"}, {name: a1, path: "store:adapter-1"}, {name: base}]'
)
RUN = (
    "model=tiny-random",
    "workload=synthetic",
    "workload.num_requests=6",
    "workload.input_len=40",
    "workload.output_len=6",
    "workload.warmup_requests=3",
)


@pytest.mark.engine
def test_transformers_serves_two_adapters_and_the_base_model(tiny_model, real_tokenizer):
    model = dataclasses.replace(tiny_model, adapters=[store_adapter(tiny_model, i, f"a{i}") for i in range(2)])
    backend = make_backend("transformers", model, load=False)
    backend.check_adapters(model.adapters)
    backend.load()
    try:  # a0 twice: switching back gives the same reply again (greedy)
        replies = replies_per_adapter(backend, ask(real_tokenizer, "Tell me about the sea."))
    finally:
        backend.close()
    assert replies["a0"][0] == replies["a0"][1]  # greedy
    assert len({tuple(replies["a0"][0]), tuple(replies["a1"][0]), tuple(replies[None][0])}) == 3


@pytest.mark.engine
def test_a_run_records_and_sums_up_each_adapter(tmp_path):
    outcome = run_benchmark(make_config(*RUN, ADAPTERS), tmp_path)
    df = load_requests(tmp_path)
    assert df.error.isna().all() and sorted(df.adapter.fillna("base")) == ["a0", "a0", "a1", "a1", "base", "base"]
    ad = outcome.summary.adapters
    assert list(ad) == ["a0", "a1", "base"] and all(a["completed"] == 2 for a in ad.values())
    workload = json.loads((tmp_path / "workload.json").read_text())
    assert [e["name"] for e in workload["lora"]] == ["a0", "a1", "base"]
    assert outcome.summary.model["adapters"][0]["source"] == "store:adapter-0"


def test_the_reference_server_serves_adapters_by_name(tmp_path):
    outcome = run_benchmark(
        make_config(
            *RUN,
            ADAPTERS,
            "backend=reference",
            "backend.ttft_ms=1",
            "backend.itl_ms=1",
            "backend.count_prompt_tokens=false",
        ),
        tmp_path,
    )
    assert outcome.summary.requests["failed"] == 0 and set(outcome.summary.adapters) == {"a0", "a1", "base"}


@pytest.mark.parametrize(
    "overrides,words",
    [
        (("backend.batching=continuous",), "backend.batching=continuous mixes requests of different LoRA adapters"),
        (("backend=mlx",), "backend mlx .* does not serve LoRA adapters"),
    ],
)
def test_engines_without_lora_refuse_before_any_request(tmp_path, overrides, words):
    if "backend=mlx" in overrides:
        require_package("mlx_lm")  # the run checks that the engine is installed before its LoRA support
    with pytest.raises(ConfigError, match=words):
        run_benchmark(make_config(*RUN, ADAPTERS, *overrides), tmp_path)
    assert not (tmp_path / "requests.parquet").exists()


def replies_per_adapter(backend, ids, names=("a0", None, "a1", "a0")):
    import asyncio

    async def each():
        out = {}
        for name in names:
            req = request(0, ids, 8)
            req.adapter = name
            chunks, done = await collect(backend, req)
            assert done.finish_reason == "length"
            out.setdefault(name, []).append([t for c in chunks for t in c.token_ids])
        return out

    return asyncio.run(each())


@pytest.mark.engine
def test_llama_cpp_switches_gguf_adapters_per_request(real_model, real_tokenizer):
    """The store's GGUF LoRAs load in llama.cpp (names, shapes and alpha as it expects them) and change its output."""
    model = dataclasses.replace(real_model, adapters=[store_adapter(real_model, i, f"a{i}") for i in range(2)])
    backend = make_backend("llamacpp", model, load=False, n_ctx=512)
    backend.check_adapters(model.adapters)
    backend.load()
    try:
        replies = replies_per_adapter(backend, ask(real_tokenizer, "Tell me about the sea."))
    finally:
        backend.close()
    assert replies["a0"][0] == replies["a0"][1]
    assert len({tuple(replies["a0"][0]), tuple(replies["a1"][0]), tuple(replies[None][0])}) == 3
    with pytest.raises(ConfigError, match="backend.batched=true decodes every sequence in one context"):
        make_backend("llamacpp", model, load=False, batched=True).check_adapters(model.adapters)
