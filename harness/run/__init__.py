"""Running benchmarks: an engine session × a load point → a run folder; sweeps, SLO search, agreement runs."""
