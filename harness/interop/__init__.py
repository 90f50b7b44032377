"""Working with the other benchmark tools: import their files, export llm-d reports, and cross-check
them against the harness on one server (the commands behind ``python -m harness.import``,
``harness.export`` and ``harness.crosscheck``)."""
