"""How a failing request misbehaves (``--error-kind``): one way each, run by the fault-injection suite."""
from __future__ import annotations

# --error-kind: how a failing request misbehaves (the fault-injection suite runs each)
FAULTS: dict[str, str] = {
    "status": "HTTP 500 at once",
    "drop": "the connection closes half-way through the stream",
    "stall": "half-way through, no byte ever again, the connection open",
    "no-done": "finish_reason and usage sent, then the connection stays open without [DONE]",
    "finish-reason-object": "finish_reason is a JSON object, not a string",
    "negative-usage": "usage.completion_tokens is negative",
    "absurd-usage": "usage.completion_tokens is 10^15",
    "fractional-usage": "usage.prompt_tokens is 3.5",
    "bad-unicode": "HTTP 500 whose JSON error body holds a lone surrogate (\\ud800)",
    "surrogate-text": "a token's text holds a lone surrogate (\\ud800)",
    "huge-event": "half-way through, one event of --fault-size-mib MiB",
    "huge-error-body": "HTTP 500 with a body of --fault-size-mib MiB",
    "bad-json": "half-way through, an event that is not JSON",
    "wrong-types": "half-way through, delta.content is a number",
    "error-event": "half-way through, an error event (as vLLM sends on an engine error)",
    "not-sse": "HTTP 200 with an HTML page instead of an event stream",
    "byte-drip": "every event written one byte at a time",
    "redirect": "/v1/models and the completions answer 307 to the same server under another origin (localhost)",
}

MID_STREAM_FAULTS = {"drop", "stall", "huge-event", "bad-json", "wrong-types", "error-event"}
