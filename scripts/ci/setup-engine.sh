#!/usr/bin/env bash
# A virtual environment for one engine, .venv-<engine> (engines pin different torch versions,
# so each gets its own); then scripts/ci/engine-available.sh says whether it can run here.
#   scripts/ci/setup-engine.sh vllm
set -euo pipefail
cd "$(dirname "$0")/../.."
engine=${1:?usage: scripts/ci/setup-engine.sh ENGINE}
venv=${HARNESS_VENV:-.venv-$engine}

case "$engine" in
  transformers|reference) extras="" ;;
  vllm|sglang) extras="$engine" ;;
  llamacpp) extras="llamacpp"; command -v nvidia-smi >/dev/null 2>&1 && export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_CUDA=on}" ;;
  tgi|tensorrt_llm|deepspeed_mii|ollama) extras="" ;;  # a server of their own: the harness only
  *) echo "error: unknown engine '$engine'" >&2; exit 2 ;;
esac
HARNESS_VENV="$venv" scripts/setup.sh "$extras"
if command -v nvidia-smi >/dev/null 2>&1; then
  "$venv/bin/python" -m pip install --quiet -e ".[gpu]"  # NVML: GPU memory, power, energy
fi
scripts/ci/engine-available.sh "$engine" "$venv"
