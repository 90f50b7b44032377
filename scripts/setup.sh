#!/usr/bin/env bash
# Creates .venv (if missing) and installs the harness with the transformers engine and the
# test tools. Idempotent: a second run only checks. Usage: scripts/setup.sh [extra …]
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${HARNESS_VENV:-.venv}
extras="transformers,test${1:+,$1}"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
fi
constraints=()
if ! command -v nvidia-smi >/dev/null 2>&1; then
  constraints=(-c scripts/constraints-cpu.txt)
fi
stamp="$VENV/.harness-installed-$(cat pyproject.toml scripts/constraints-cpu.txt | sha256sum | cut -c1-16)-$extras"
if [ ! -f "$stamp" ]; then
  "$VENV/bin/python" -m pip install --quiet "${constraints[@]}" -e ".[$extras]"
  rm -f "$VENV"/.harness-installed-*
  touch "$stamp"
fi
