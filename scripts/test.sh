#!/usr/bin/env bash
# The test suite, from a fresh clone: installs what it needs, then runs pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh all
exec "${HARNESS_VENV:-.venv}/bin/python" -m pytest "$@"
