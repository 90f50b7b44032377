"""Where a model's files are, and where the harness caches what it builds."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from core.errors import ModelError


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
            raise ModelError(
                f"model {self.name} has no GGUF file: pass model.path=/path/to/model.gguf"
            )
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
        }
