#!/usr/bin/env bash
# A pull request's gate: the base commit against the head commit on this one runner, in
# interleaved blocks (python -m harness.ab), three verdicts: regression (exit 1), pass, or
# inconclusive (never fails). Extra arguments and the words of $HARNESS_OVERRIDES are Hydra
# overrides common to both arms; $NOISE_DIR holds the noise floors (python -m harness.ab --aa).
#   scripts/ci/ab-gate.sh vllm base head results/ab/vllm model=smollm2-135m
# Environment: HARNESS_PYTHON (default .venv-ENGINE/bin/python), AB_BLOCKS (5), AB_MAX_BLOCKS
# (10), BENCH_REGRESSION_PCT (5), NOISE_DIR (noise), GITHUB_STEP_SUMMARY (the decision, appended).
set -euo pipefail
engine=${1:?usage: scripts/ci/ab-gate.sh ENGINE BASE_CHECKOUT HEAD_CHECKOUT OUT_DIR [OVERRIDES…]}
base=${2:?checkout of the base commit}
head=${3:?checkout of the head commit}
out=${4:?output folder}
shift 4
python=${HARNESS_PYTHON:-.venv-$engine/bin/python}
read -ra overrides <<< "${HARNESS_OVERRIDES:-}"
summary=()
[ -n "${GITHUB_STEP_SUMMARY:-}" ] && summary=(--markdown "$GITHUB_STEP_SUMMARY")
mkdir -p "$(dirname "$out")"
set +e
"$python" -m harness.ab --a-cwd "$base" --b-cwd "$head" --blocks "${AB_BLOCKS:-5}" --max-blocks "${AB_MAX_BLOCKS:-10}" \
  --threshold "${BENCH_REGRESSION_PCT:-5}" --noise-dir "${NOISE_DIR:-noise}" --out "$out" "${summary[@]}" \
  -- "backend=$engine" "${overrides[@]}" "$@"
code=$?
set -e
echo "A/B gate of $engine (base $base, head $head) ended with exit code $code: $out"
exit $code
