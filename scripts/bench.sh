#!/usr/bin/env bash
# The default benchmark, from a fresh clone: installs what it needs, then runs
# `python -m harness` with any arguments given (e.g. workload=synthetic).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
scripts/setup.sh --run-only
echo "[bench] set-up: $(( $(date +%s) - start )) s; now the run (the model, then its requests)" >&2
# The default engine (transformers) at its best: its own continuous batching serves the chat
# workload's concurrent sessions together, where serial (backend.batching=serial, the config's
# default) makes each wait for the one before. Any backend= or backend.batching= given wins.
args=("$@")
if ! printf '%s\n' "$@" | grep -qE '^(\+|~)?backend(=|\.batching=)'; then
  args=(backend.batching=continuous "${args[@]}")
fi
exec "${HARNESS_VENV:-.venv}/bin/python" -m harness "${args[@]}"
