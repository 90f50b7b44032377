#!/usr/bin/env bash
# The test suite, from a fresh clone: installs what it needs, lints (scripts/lint.sh: ruff, mypy,
# import-linter; any finding fails), then runs pytest with the arguments given, as two pytest
# processes side by side: the engine tests and the rest (scripts/pytest_halves.py says why).
# The edit loop's fast tier, without engines: .venv/bin/python -m pytest -m "not engine and not slow"
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh all
# the report tests open report.html in a real headless Chromium (Debian's package)
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1 \
    && ! command -v google-chrome >/dev/null 2>&1; then
  echo "installing chromium for the report tests (apt-get)…" >&2
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null 2>&1 \
    || echo "warning: could not install chromium: browser tests skip (and fail when CI=true)" >&2
fi
bash scripts/lint.sh
# the harness's own .pyc files, written here once: the suite starts a few hundred Python
# processes, and where PYTHONDONTWRITEBYTECODE is set each would compile every module it imports
"${HARNESS_VENV:-.venv}/bin/python" -m compileall -q -j 0 harness backends workloads core refserver >/dev/null
exec "${HARNESS_VENV:-.venv}/bin/python" scripts/pytest_halves.py "$@"
