"""Server mode: an engine's own OpenAI-compatible server, launched for the run and stopped after it."""
