"""The history of runs: one immutable Parquet file per run (and per A/B decision) in a
partitioned folder, read with DuckDB; change points and the nightly alert rule over it.

- :mod:`harness.history.record` — a run folder → one flat row (keys and figures)
- :mod:`harness.history.store` — :func:`~harness.history.store.add_run`, ``add_decision``: the files
- :mod:`harness.history.query` — DuckDB over the files → pandas
- :mod:`harness.history.changepoints` — E-divisive means with a permutation test
- :mod:`harness.history.alerts` — two consecutive bad runs after a change point
- :mod:`harness.history.analysis` — each point × figure: series, change points, alert
- :mod:`harness.history.trend` — trend.html
- :mod:`harness.history.cli` — ``python -m harness.history add | list | trend | check``

docs/history.md describes the layout, the keys, the method and the rule.
"""
