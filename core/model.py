"""Where a model's files are, and where the harness caches what it builds."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from core.errors import ModelError
from core.lora import LoraAdapter


def cache_root() -> Path:
    if os.environ.get("HARNESS_CACHE_DIR"):
        return Path(os.environ["HARNESS_CACHE_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "harness"


@dataclass
class ModelFiles:
    """Where a model's files are: an HF folder, a GGUF file, or both."""

    name: str
    source: str
    hf_dir: Optional[Path] = None
    gguf_file: Optional[Path] = None
    # GGUF → HF folder, for engines that load HF (the model store passes its cached converter)
    derive_hf_dir: Optional[Callable[[Path], Path]] = field(default=None, repr=False, compare=False)
    # LoRA adapters the engine loads beside the model (workload.lora.adapters; core/lora.py)
    adapters: list[LoraAdapter] = field(default_factory=list)

    def require_hf_dir(self) -> Path:
        """The HF folder, derived from the GGUF (and cached) when only a GGUF was given."""
        if self.hf_dir is None:
            if self.gguf_file is None:
                raise ModelError(f"model {self.name} has neither an HF folder nor a GGUF file")
            if self.derive_hf_dir is None:
                raise ModelError(f"model {self.name} is a GGUF file and no converter to an HF folder was given")
            self.hf_dir = self.derive_hf_dir(self.gguf_file)
        return self.hf_dir

    def require_gguf(self) -> Path:
        if self.gguf_file is None:
            raise ModelError(f"model {self.name} has no GGUF file: pass model.path=/path/to/model.gguf")
        return self.gguf_file

    def hf_config(self) -> dict[str, Any]:
        return json.loads((self.require_hf_dir() / "config.json").read_text())

    def parameter_count(self) -> Optional[int]:
        """Parameters in the HF folder's safetensors, read from their headers (no weights loaded)."""
        if self.hf_dir is None:
            return None
        total = 0
        for path in sorted(self.hf_dir.glob("*.safetensors")):
            with open(path, "rb") as f:
                size = int.from_bytes(f.read(8), "little")
                header = json.loads(f.read(size))
            for name, tensor in header.items():
                if name != "__metadata__":
                    count = 1
                    for dim in tensor["shape"]:
                        count *= dim
                    total += count
        return total or None

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "source": self.source,
            "hf_dir": str(self.hf_dir) if self.hf_dir else None,
            "gguf_file": str(self.gguf_file) if self.gguf_file else None,
            **({"adapters": [a.describe() for a in self.adapters]} if self.adapters else {}),
        }


# --- numerics: what precision a model's files hold -------------------------------------------

# llama.cpp's LLAMA_FTYPE_* (general.file_type in a GGUF header): the common ones
GGUF_FILE_TYPES = {
    0: "F32",
    1: "F16",
    2: "Q4_0",
    3: "Q4_1",
    7: "Q8_0",
    8: "Q5_0",
    9: "Q5_1",
    10: "Q2_K",
    11: "Q3_K_S",
    12: "Q3_K_M",
    13: "Q3_K_L",
    14: "Q4_K_S",
    15: "Q4_K_M",
    16: "Q5_K_S",
    17: "Q5_K_M",
    18: "Q6_K",
    32: "BF16",
}
_GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def gguf_quantization(path: Path) -> Optional[str]:
    """``GGUF Q4_1``: the file type in a GGUF header (its key-value section only, not the
    tensors, so a large file reads in milliseconds); None when it is not stated or unreadable."""
    import struct

    def read(f, fmt: str):
        size = struct.calcsize(fmt)
        data = f.read(size)
        if len(data) != size:
            raise ValueError("truncated")
        return struct.unpack(fmt, data)[0]

    def skip(f, vtype: int) -> None:
        if vtype == 8:
            f.seek(read(f, "<Q"), 1)
        elif vtype == 9:
            item, count = read(f, "<I"), read(f, "<Q")
            if item in _GGUF_SCALARS:
                f.seek(struct.calcsize(_GGUF_SCALARS[item]) * count, 1)
            else:
                for _ in range(count):
                    skip(f, item)
        elif vtype in _GGUF_SCALARS:
            read(f, _GGUF_SCALARS[vtype])
        else:
            raise ValueError(f"unknown GGUF value type {vtype}")

    try:
        with open(path, "rb") as f:
            if f.read(4) != b"GGUF":
                return None
            version = read(f, "<I")
            if version < 2:
                return None
            read(f, "<Q")  # tensors
            for _ in range(read(f, "<Q")):
                key = f.read(read(f, "<Q")).decode("utf-8", "replace")
                vtype = read(f, "<I")
                if key == "general.file_type" and vtype in _GGUF_SCALARS:
                    value = int(read(f, _GGUF_SCALARS[vtype]))
                    return f"GGUF {GGUF_FILE_TYPES.get(value, f'file type {value}')}"
                skip(f, vtype)
    except (OSError, ValueError, struct.error):
        return None
    return None


def hf_dtype(hf_dir: Optional[Path]) -> Optional[str]:
    """The dtype an HF folder's config.json declares for its weights (``bfloat16``), or None."""
    if hf_dir is None:
        return None
    try:
        config = json.loads((Path(hf_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    dtype = config.get("dtype") or config.get("torch_dtype") or config.get("text_config", {}).get("dtype")
    quant = config.get("quantization_config") or config.get("quantization")
    return str(dtype).removeprefix("torch.") if dtype else ("quantized" if quant else None)
