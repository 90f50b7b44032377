"""An incremental parser for server-sent events (the ``text/event-stream`` format).

Follows the WHATWG rules that matter to an OpenAI-compatible stream:

- lines end in ``\\r\\n``, ``\\n`` or ``\\r``; a line ending may be split between reads, and
  so may a multi-byte UTF-8 character;
- a line starting with ``:`` is a comment (``: keepalive 12/80``, ``: ping - …``): skipped;
- ``data:`` lines accumulate; several of them in one event are joined with ``\\n``;
- a blank line ends the event; an event without data is not dispatched;
- one space after the colon is dropped; ``event:`` and ``id:`` are kept, ``retry:`` ignored.

Feed it bytes as they arrive; it returns the events completed so far.
"""
from __future__ import annotations

import codecs
import re
from dataclasses import dataclass
from typing import Optional

_LINE_END = re.compile(r"\r\n|\r|\n")


@dataclass(slots=True)
class SSEEvent:
    data: str
    event: Optional[str] = None
    id: Optional[str] = None


class SSEParser:
    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""  # an unfinished line (may end in a lone \r awaiting its \n)
        self._data: list[str] = []
        self._event: Optional[str] = None
        self._id: Optional[str] = None

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """The events completed by ``chunk`` (possibly none)."""
        text = self._pending + self._decoder.decode(chunk)
        held = ""
        if text.endswith("\r"):  # may be the first half of \r\n: decide on the next read
            text, held = text[:-1], "\r"
        lines = _LINE_END.split(text)
        self._pending = lines.pop() + held
        events: list[SSEEvent] = []
        for line in lines:
            event = self._line(line)
            if event is not None:
                events.append(event)
        return events

    def close(self) -> list[SSEEvent]:
        """End of stream: an event left without its blank line is dispatched too (lenient)."""
        events: list[SSEEvent] = []
        tail = self._pending + self._decoder.decode(b"", final=True)
        self._pending = ""
        for line in _LINE_END.split(tail):
            if line:
                event = self._line(line)
                if event is not None:
                    events.append(event)
        event = self._line("")
        if event is not None:
            events.append(event)
        return events

    def _line(self, line: str) -> Optional[SSEEvent]:
        if not line:
            return self._dispatch()
        if line[0] == ":":
            return None  # comment / keep-alive
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self._id = value
        return None  # "retry" and unknown fields are ignored

    def _dispatch(self) -> Optional[SSEEvent]:
        if not self._data:
            self._event = None
            return None
        event = SSEEvent("\n".join(self._data), self._event, self._id)
        self._data = []
        self._event = None
        return event
