"""LLM inference benchmark harness: one interface, one set of metrics, every engine."""
__version__ = "0.1.0"
