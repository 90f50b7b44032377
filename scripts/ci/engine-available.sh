#!/usr/bin/env bash
# Whether an engine can run on this runner: prints it, and writes available=true|false to
# $GITHUB_OUTPUT when that is set. In-process engines are there once their venv is; the
# engines with a server of their own need their binary on PATH, or a container image in
# $HARNESS_CONTAINER_IMAGE (and docker).
#   scripts/ci/engine-available.sh tgi .venv-tgi
set -euo pipefail
engine=${1:?usage: scripts/ci/engine-available.sh ENGINE [VENV]}
venv=${2:-.venv-$engine}
out=${GITHUB_OUTPUT:-/dev/null}

container() { [ -n "${HARNESS_CONTAINER_IMAGE:-}" ] && command -v docker >/dev/null 2>&1; }
case "$engine" in
  tgi) binary=text-generation-launcher ;;
  tensorrt_llm) binary=trtllm-serve ;;
  ollama) binary=ollama ;;
  deepspeed_mii) binary="" ;;
  *) binary="" ;;
esac
available=true
case "$engine" in
  tgi|tensorrt_llm|ollama) command -v "$binary" >/dev/null 2>&1 || container || available=false ;;
  deepspeed_mii) "$venv/bin/python" -c "import mii" 2>/dev/null || container || available=false ;;
esac
echo "available=$available" >> "$out"
if [ "$available" = true ]; then
  echo "$engine: available"
else
  echo "$engine: not on this runner (no ${binary:-mii package}, and no HARNESS_CONTAINER_IMAGE with docker): skipped"
fi
