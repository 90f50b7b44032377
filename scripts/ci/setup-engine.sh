#!/usr/bin/env bash
# A virtual environment for one engine, .venv-<engine> (engines pin different torch versions,
# so each gets its own); then scripts/ci/engine_available.py says whether it can run here.
#   scripts/ci/setup-engine.sh vllm
set -euo pipefail
cd "$(dirname "$0")/../.."
engine=${1:?usage: scripts/ci/setup-engine.sh ENGINE}
venv=${HARNESS_VENV:-.venv-$engine}

# the engine's pip extra where pyproject.toml has one (vllm, sglang, llamacpp, …); engines with a
# server of their own (tgi, ollama, …) need only the harness
extras=""
grep -q "^$engine = \[" pyproject.toml && extras="$engine"
HARNESS_VENV="$venv" scripts/setup.sh "$extras"
if command -v nvidia-smi >/dev/null 2>&1; then
  # NVML: GPU memory, power, energy; with uv where scripts/setup.sh installed it into the venv
  if [ -x "$venv/bin/uv" ]; then
    "$venv/bin/uv" pip install --quiet --python "$venv/bin/python" -e ".[gpu]"
  else
    "$venv/bin/python" -m pip install --quiet -e ".[gpu]"
  fi
fi
"$venv/bin/python" scripts/ci/engine_available.py "$engine"
