#!/usr/bin/env bash
# Lint, format, types and the layers, in that order; the first that fails stops the script.
#   ruff check, ruff format --check, mypy, lint-imports (their settings: pyproject.toml)
# The tools come from the harness's virtual environment (HARNESS_VENV, default .venv), which
# scripts/setup.sh fills with the test extra. Each tool's time goes to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${HARNESS_VENV:-.venv}/bin"
# lint-imports imports nothing, but finds the packages on the path: this checkout's first
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

run() {
  local start end
  echo "[lint] $*" >&2
  start=$(date +%s%N)
  "$BIN/$1" "${@:2}"
  end=$(date +%s%N)
  printf '[lint] %s: %d.%d s\n' "$*" $(( (end - start) / 1000000000 )) $(( (end - start) / 100000000 % 10 )) >&2
}

run ruff check .
run ruff format --check .
run mypy
run lint-imports
