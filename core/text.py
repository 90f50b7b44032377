"""Text that came from outside (a server's reply, error body or finish reason) made safe to write."""

from __future__ import annotations


def valid_text(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD, so that it encodes as UTF-8.

    JSON lets a server send ``"\\ud800"``; Python then holds a string that no file, tokenizer
    or terminal accepts. Valid text comes back unchanged (and fast: the check is one encode).
    """
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
