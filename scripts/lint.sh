#!/usr/bin/env bash
# Lint, format, types, the layers and the docs site, in that order; the first that fails stops the script.
#   ruff check, ruff format --check, mypy, lint-imports (their settings: pyproject.toml), and
#   mkdocs build --strict (mkdocs.yml: a broken link, a missing page or a stale anchor fails)
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
# the site is built into a temporary folder, so the checkout keeps no site/ behind
site=$(mktemp -d)
trap 'rm -rf "$site"' EXIT
NO_MKDOCS_2_WARNING=1 run python -m mkdocs build --strict --site-dir "$site"
