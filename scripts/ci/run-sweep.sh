#!/usr/bin/env bash
# One engine's benchmark sweep: python -m harness -m preset=<preset> backend=<engine> into <out>.
# Extra arguments, and the words of $HARNESS_OVERRIDES, are Hydra overrides (model=…,
# workload.concurrency=…); $HARNESS_CONTAINER_IMAGE adds backend.container.image. The exit
# code is the harness's: 0, or 1 when a point failed (the points that ran are kept either way).
#   scripts/ci/run-sweep.sh vllm nightly results/ci/vllm model.path=/models/Qwen2.5-0.5B-Instruct
set -euo pipefail
cd "$(dirname "$0")/../.."
engine=${1:?usage: scripts/ci/run-sweep.sh ENGINE PRESET OUT_DIR [OVERRIDES…]}
preset=${2:?preset (conf/preset/<name>.yaml)}
out=${3:?output folder}
shift 3
python=${HARNESS_PYTHON:-.venv-$engine/bin/python}
[ -f "conf/preset/$preset.yaml" ] || { echo "error: no preset '$preset' in conf/preset/" >&2; exit 2; }
read -ra overrides <<< "${HARNESS_OVERRIDES:-}"
# an engine run from its image (the server presets' container form)
[ -n "${HARNESS_CONTAINER_IMAGE:-}" ] && overrides+=("backend.container.image=$HARNESS_CONTAINER_IMAGE")
mkdir -p "$(dirname "$out")"
set +e
"$python" -m harness -m "preset=$preset" "backend=$engine" "hydra.sweep.dir=$out" progress=false "${overrides[@]}" "$@"
code=$?
set -e
echo "sweep of $engine ($preset) ended with exit code $code: $out"
exit $code
