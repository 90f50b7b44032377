"""The model store's LoRA adapters: seeded PEFT folders, and GGUF LoRAs for llama.cpp."""

from __future__ import annotations

import pytest

from core.environ import environment_kept
from core.errors import ConfigError
from harness.run.adapter_store import build_peft_adapter, resolve_adapter, store_adapter
from workloads.lora import AdapterSpec


def tensors(folder):
    from safetensors.numpy import load_file

    return load_file(str(folder / "adapter_model.safetensors"))


@pytest.mark.slow
def test_store_adapters_are_seeded_with_random_b(tiny_model, tmp_path):
    a0, a1 = store_adapter(tiny_model, 0), store_adapter(tiny_model, 1)
    assert a0.source == "store:adapter-0" and a0.rank == 8 and a0.gguf_file is None  # tiny-random has no GGUF
    t0, t1 = tensors(a0.hf_dir), tensors(a1.hf_dir)
    q_a = next(k for k in t0 if "layers.0.self_attn.q_proj.lora_A" in k)
    q_b, v_b = q_a.replace("lora_A", "lora_B"), next(k for k in t0 if "layers.0.self_attn.v_proj.lora_B" in k)
    assert t0[q_a].shape == (8, 128) and t0[q_b].shape == (128, 8) and t0[v_b].shape == (64, 8)  # r × in, out × r
    assert len(t0) == 2 * 2 * 2  # 2 layers × q, v × A, B
    assert (t0[q_b] != 0).any() and (t0[q_b] != t1[q_b]).any()
    build_peft_adapter(tiny_model.hf_dir, tmp_path / "again", seed=0)  # the same seed, the same weights
    again = tensors(tmp_path / "again")
    assert all((again[k] == t0[k]).all() for k in t0)
    assert store_adapter(tiny_model, 0).hf_dir == a0.hf_dir  # cached


def test_paths_and_bad_names(tiny_model, tmp_path):
    a0 = store_adapter(tiny_model, 0)
    local = resolve_adapter(AdapterSpec("mine", str(a0.hf_dir), 1.0), tiny_model)
    assert local.hf_dir == a0.hf_dir.resolve() and local.rank == 8
    with pytest.raises(ConfigError, match="unknown store adapter 'store:adapter-x'"):
        resolve_adapter(AdapterSpec("a", "store:adapter-x", 1.0), tiny_model)
    with pytest.raises(ConfigError, match="does not exist"):
        resolve_adapter(AdapterSpec("a", str(tmp_path / "nope"), 1.0), tiny_model)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="no adapter_config.json and no .gguf"):
        resolve_adapter(AdapterSpec("a", str(tmp_path / "empty"), 1.0), tiny_model)


def test_the_gguf_lora_has_llama_cpps_names_and_shapes(real_model):
    with environment_kept():  # as the harness imports it: gguf's import can set LD_LIBRARY_PATH
        import gguf

    adapter = store_adapter(real_model, 0)
    reader = gguf.GGUFReader(str(adapter.gguf_file))
    text = {
        k: bytes(f.parts[f.data[0]]).decode()
        for k, f in reader.fields.items()
        if k in ("general.type", "adapter.type", "general.architecture")
    }
    assert text == {"general.type": "adapter", "adapter.type": "lora", "general.architecture": "llama"}
    assert float(reader.fields["adapter.lora.alpha"].parts[-1][0]) == 32.0
    shapes = {t.name: tuple(int(n) for n in t.shape) for t in reader.tensors}  # ggml order: ne0 first
    assert len(shapes) == 30 * 2 * 2
    assert shapes["blk.0.attn_q.weight.lora_a"] == (576, 8) and shapes["blk.0.attn_q.weight.lora_b"] == (8, 576)
    assert shapes["blk.29.attn_v.weight.lora_b"] == (8, 192)
