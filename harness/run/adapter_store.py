"""LoRA adapters for ``workload.lora.adapters``: found on disk, or made by the store.

``store:adapter-N`` is a seeded, freshly initialised LoRA for the run's model (no hub, no
training: speed is measured, not quality), built once into the cache
(``<cache>/adapters/<model>-<key>/adapter-N-r8-a32/``, key: a hash of the model's config.json):

- ``hf/``: a PEFT folder — ``LoraConfig(r=8, lora_alpha=32, target_modules=[q_proj, v_proj],
  init_lora_weights=False)`` on the model's architecture, ``torch.manual_seed(N)`` before
  ``get_peft_model``, then ``save_pretrained``. ``init_lora_weights=False`` keeps the layers'
  own random init, so B is not zero and the adapter changes the output (ΔW = (α/r)·B·A).
- ``adapter.gguf`` (models with a GGUF): the same weights as a llama.cpp LoRA, written with the
  ``gguf`` package as llama.cpp's convert_lora_to_gguf.py writes them: ``general.type=adapter``,
  ``adapter.type=lora``, ``adapter.lora.alpha``, tensors ``blk.N.attn_q.weight.lora_a``
  (ggml shape [n_in, r]: PyTorch's A, r × n_in) and ``.lora_b`` ([r, n_out]: B, n_out × r),
  with B of q permuted as the converter permutes q_proj's rows for llama.cpp's rotary layout.

A ``path`` is a PEFT folder (adapter_config.json), a GGUF LoRA file, or a folder with both.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from core.environ import environment_kept
from core.errors import ConfigError, ModelError
from core.lora import LoraAdapter
from core.model import ModelFiles, cache_root
from harness.run.model_store import locked_folder
from workloads.lora import STORE_PREFIX, AdapterSpec, is_store_path

if TYPE_CHECKING:
    import numpy as np

STORE_ADAPTER = re.compile(r"^store:adapter-(\d+)$")
RANK = 8
ALPHA = 32.0  # ΔW = (α/r)·B·A: 4× the layers' random init, enough to change a real model's greedy reply
TARGETS = ("q_proj", "v_proj")
# HF module → llama.cpp tensor (the llama architecture's names)
GGUF_NAMES = {"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v", "o_proj": "attn_output"}


def resolve_adapters(specs: list[AdapterSpec], model: ModelFiles) -> list[LoraAdapter]:
    """The adapters of ``workload.lora.adapters`` (the base model's share left out), their
    files found or built; one ConfigError/ModelError line for a bad one."""
    return [resolve_adapter(s, model) for s in specs if not s.is_base]


def resolve_adapter(spec: AdapterSpec, model: ModelFiles) -> LoraAdapter:
    assert spec.path is not None
    if is_store_path(spec.path):
        match = STORE_ADAPTER.match(spec.path)
        if match is None:
            raise ConfigError(
                f"adapter {spec.name}: unknown store adapter {spec.path!r}: use {STORE_PREFIX}adapter-N "
                "(N = 0, 1, 2 …: a seeded adapter made for the model)"
            )
        return store_adapter(model, int(match.group(1)), spec.name)
    return local_adapter(spec.name, Path(spec.path).expanduser())


def local_adapter(name: str, path: Path) -> LoraAdapter:
    if not path.exists():
        raise ConfigError(f"adapter {name}: {path} does not exist; give a PEFT folder, a GGUF LoRA, or store:adapter-N")
    if path.is_file():
        if path.suffix != ".gguf":
            raise ConfigError(f"adapter {name}: {path} is a file but not a .gguf; give a GGUF LoRA or a PEFT folder")
        return LoraAdapter(name, str(path), gguf_file=path.resolve())
    hf = path if (path / "adapter_config.json").is_file() else None
    ggufs = sorted(path.glob("*.gguf"))
    if hf is None and not ggufs:
        raise ConfigError(f"adapter {name}: {path} has no adapter_config.json and no .gguf file")
    rank, alpha = _rank_alpha(hf) if hf is not None else (None, None)
    return LoraAdapter(
        name,
        str(path),
        hf_dir=hf.resolve() if hf else None,
        gguf_file=ggufs[0].resolve() if len(ggufs) == 1 else None,
        rank=rank,
        alpha=alpha,
    )


def store_adapter(model: ModelFiles, index: int, name: Optional[str] = None) -> LoraAdapter:
    """``store:adapter-<index>`` for ``model``: built once (seed ``index``), then read from the cache."""
    hf_dir = model.require_hf_dir()
    key = hashlib.sha256((hf_dir / "config.json").read_bytes()).hexdigest()[:12]
    folder = cache_root() / "adapters" / f"{model.name}-{key}" / f"adapter-{index}-r{RANK}-a{ALPHA:g}"
    folder.mkdir(parents=True, exist_ok=True)
    with locked_folder(folder):
        if not (folder / "hf" / ".ready").is_file():
            build_peft_adapter(hf_dir, folder / "hf", seed=index)
        gguf = folder / "adapter.gguf"
        if model.gguf_file is not None and not gguf.with_suffix(".ready").is_file():
            write_gguf_lora(folder / "hf", model.gguf_file, gguf)
            gguf.with_suffix(".ready").write_text("{}\n")
    return LoraAdapter(
        name or f"adapter-{index}",
        f"{STORE_PREFIX}adapter-{index}",
        hf_dir=folder / "hf",
        gguf_file=gguf if model.gguf_file is not None else None,
        rank=RANK,
        alpha=ALPHA,
    )


def build_peft_adapter(base_hf: Path, out: Path, seed: int) -> None:
    """A PEFT LoRA for the model in ``base_hf`` with random A and B (seeded); see the module doc."""
    try:
        import torch
        from peft import LoraConfig, get_peft_model
        from transformers import AutoConfig, AutoModelForCausalLM
    except ImportError as exc:
        raise ModelError(
            f"making a store adapter needs torch, transformers and peft ({exc.name} is missing): "
            "pip install -e '.[transformers]'"
        ) from None
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    config = AutoConfig.from_pretrained(base_hf)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)  # shapes only: its weights are not saved
    torch.manual_seed(seed)
    lora = LoraConfig(
        r=RANK,
        lora_alpha=ALPHA,
        target_modules=list(TARGETS),
        lora_dropout=0.0,
        bias="none",
        init_lora_weights=False,
        task_type="CAUSAL_LM",
    )
    peft_model = get_peft_model(model, lora)
    peft_model.peft_config["default"].base_model_name_or_path = str(base_hf)
    peft_model.save_pretrained(tmp)
    (tmp / ".ready").write_text(json.dumps({"seed": seed, "base": str(base_hf)}) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    tmp.replace(out)


def write_gguf_lora(peft_dir: Path, base_gguf: Path, out: Path) -> None:
    """The PEFT adapter in ``peft_dir`` as a llama.cpp GGUF LoRA for the model ``base_gguf``."""
    import numpy as np

    with environment_kept():  # gguf's import can set LD_LIBRARY_PATH (through opencv), which engines would inherit
        import gguf
    from safetensors.numpy import load_file

    reader = gguf.GGUFReader(str(base_gguf))
    arch = _gguf_string(reader, "general.architecture") or "llama"
    n_head = _gguf_int(reader, f"{arch}.attention.head_count")
    config = json.loads((peft_dir / "adapter_config.json").read_text())
    alpha = float(config.get("lora_alpha") or config.get("r") or RANK)
    tensors = load_file(str(peft_dir / "adapter_model.safetensors"))
    pattern = re.compile(r"layers\.(\d+)\.self_attn\.(\w+)\.lora_([AB])\.weight$")
    pairs: dict[str, dict[str, np.ndarray]] = {}
    for key, value in tensors.items():
        match = pattern.search(key)
        if match is None or match.group(2) not in GGUF_NAMES:
            raise ModelError(
                f"adapter {peft_dir}: tensor {key} has no llama.cpp name (LoRA on attention projections only)"
            )
        layer, module, which = match.groups()
        array = value.astype(np.float32)
        if which == "B" and module in ("q_proj", "k_proj") and n_head:
            heads = n_head if module == "q_proj" else _gguf_int(reader, f"{arch}.attention.head_count_kv") or n_head
            array = _permute_rows(array, heads)
        pairs.setdefault(f"blk.{layer}.{GGUF_NAMES[module]}.weight", {})[which] = array
    tmp = out.with_name(out.name + ".partial")
    writer = gguf.GGUFWriter(str(tmp), arch)
    writer.add_string("general.type", "adapter")
    writer.add_string("adapter.type", "lora")
    writer.add_float32("adapter.lora.alpha", alpha)
    for name in sorted(pairs, key=_tensor_order):
        writer.add_tensor(f"{name}.lora_a", np.ascontiguousarray(pairs[name]["A"]))  # r × n_in → ggml [n_in, r]
        writer.add_tensor(f"{name}.lora_b", np.ascontiguousarray(pairs[name]["B"]))  # n_out × r → ggml [r, n_out]
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp.replace(out)


def _permute_rows(weights: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's converter's permute of q/k rows (HF rotary halves → interleaved pairs)."""
    return (
        weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def _tensor_order(name: str) -> tuple[int, str]:
    return int(name.split(".")[1]), name


def _gguf_field(reader, key: str):
    field = reader.fields.get(key)
    return None if field is None or not field.data else field.parts[field.data[0]]


def _gguf_string(reader, key: str) -> Optional[str]:
    part = _gguf_field(reader, key)
    return bytes(part).decode("utf-8") if part is not None else None


def _gguf_int(reader, key: str) -> Optional[int]:
    part = _gguf_field(reader, key)
    return int(part[0]) if part is not None else None


def _rank_alpha(hf: Path) -> tuple[Optional[int], Optional[float]]:
    try:
        config = json.loads((hf / "adapter_config.json").read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"adapter {hf}: adapter_config.json is unreadable ({exc})") from None
    rank = config.get("r")
    alpha = config.get("lora_alpha")
    return (int(rank) if isinstance(rank, int) else None, float(alpha) if isinstance(alpha, (int, float)) else None)
