"""LLM inference benchmark harness: one interface, one set of metrics, every engine.

The packages, from the top down (each imports only those below it: the import-linter
contracts in pyproject.toml and tests/test_layers.py keep it so):

- ``harness.cli`` (``python -m harness``) and the entry modules ``harness.compare``,
  ``harness.report``, ``harness.agree`` and ``harness.reference_server``;
- ``harness.run`` — an engine session × a load point → a run folder; sweeps, SLO search, agree;
- ``harness.reports`` — pages and text rendered from run folders: report, console, compare;
- ``harness.client`` — the measuring client: driver, worker processes, pacing, saturation;
- ``harness.results`` — records, metric formulas and definitions, the run folder's schema and store;
- ``harness.telemetry`` — memory, GPUs, processes, Prometheus, the environment;
- ``harness.config`` — the run's configuration;
- ``backends`` (engines behind one interface), ``workloads``, then ``core`` and ``refserver``.
"""

import importlib.metadata

try:
    __version__ = importlib.metadata.version("llm-harness")
except importlib.metadata.PackageNotFoundError:  # a checkout that is not installed
    __version__ = "unknown"
