"""The reference server: an OpenAI-compatible server that streams tokens on a known schedule."""
