"""LoRA adapters as every layer sees them: a name and the files an engine loads.

``workload.lora.adapters`` names the adapters and their share of the traffic
(workloads/lora.py); the model store finds or makes their files (harness/run/adapter_store.py)
and hangs them on the model (``ModelFiles.adapters``), so each engine loads them with the base
model; each request names its adapter (``GenerationRequest.adapter``; None: the base model).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from core.errors import ModelError

# The name of the base model's share in workload.lora.adapters (requests without an adapter)
BASE = "base"


@dataclass(frozen=True)
class LoraAdapter:
    """One adapter's files: a PEFT folder (adapter_config.json + adapter_model.safetensors)
    for engines that load Hugging Face adapters, and/or a GGUF LoRA for llama.cpp."""

    name: str
    source: str  # what the config said: store:adapter-0, or a path
    hf_dir: Optional[Path] = None
    gguf_file: Optional[Path] = None
    rank: Optional[int] = None  # r of adapter_config.json, where known
    alpha: Optional[float] = None

    def require_hf_dir(self) -> Path:
        if self.hf_dir is None:
            raise ModelError(
                f"adapter {self.name} ({self.source}) has no PEFT folder (adapter_config.json): "
                "this engine loads Hugging Face adapters; give a folder, or store:adapter-N"
            )
        return self.hf_dir

    def require_gguf(self) -> Path:
        if self.gguf_file is None:
            raise ModelError(
                f"adapter {self.name} ({self.source}) has no GGUF LoRA file: llama.cpp loads GGUF "
                "adapters; give a .gguf path, or store:adapter-N"
            )
        return self.gguf_file

    def describe(self) -> dict[str, object]:
        return {
            "name": self.name,
            "source": self.source,
            "hf_dir": str(self.hf_dir) if self.hf_dir else None,
            "gguf_file": str(self.gguf_file) if self.gguf_file else None,
            "rank": self.rank,
        }


def max_rank(adapters: list[LoraAdapter], default: int = 8) -> int:
    """The largest rank among the adapters (engines size their LoRA buffers by it)."""
    return max([a.rank for a in adapters if a.rank] or [default])
