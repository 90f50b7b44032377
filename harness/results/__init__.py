"""Results: request records, metric formulas and definitions, the run folder's schema and store, summaries."""
