"""The client's event loops: asyncio's own, or uvloop's (``client.event_loop``)."""

from __future__ import annotations

import asyncio

from core.errors import ConfigError


def new_loop(kind: str) -> asyncio.AbstractEventLoop:
    """A new event loop of ``client.event_loop``'s kind."""
    if kind == "uvloop":
        try:
            import uvloop
        except ImportError:
            raise ConfigError(
                "client.event_loop=uvloop needs uvloop, which is not installed: "
                "pip install -e '.[client]' (or pip install uvloop)"
            ) from None
        return uvloop.new_event_loop()
    return asyncio.new_event_loop()
