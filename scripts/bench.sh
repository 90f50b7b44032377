#!/usr/bin/env bash
# The default benchmark, from a fresh clone: installs what it needs, then runs
# `python -m harness` with any arguments given (e.g. workload=synthetic).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec "${HARNESS_VENV:-.venv}/bin/python" -m harness "$@"
