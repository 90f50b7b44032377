"""Replies under a constraint: the reference server's structured output and tool calls.

A request constrains its reply by ``response_format`` (``{"type": "json_schema", "json_schema":
{"schema": ...}}``, OpenAI's form; ``{"type": "json_object", "schema": ...}``, llama-cpp-python's;
``{"type": "regex", "value": ...}``, TGI's; ``{"type": "json_object"}`` alone, OpenAI's JSON
mode: any JSON object, here ``{"answer": <a word>}``), by a regex in ``structured_outputs.regex`` (vLLM)
or ``regex`` (SGLang), or by ``tools`` with ``tool_choice`` ``"required"`` (or naming one
function). The server then replies with a value that satisfies it, from a simple generator:

- JSON schema: objects (every property, in order), strings (a word, within minLength/maxLength),
  integers and numbers (within minimum/maximum), booleans, null, arrays (minItems items, at least
  one), ``enum`` and ``const`` (the first choice), ``anyOf``/``oneOf`` (the first branch), a list of
  types (the first); nothing else (``$ref``, formats, patterns) is honoured;
- regex: a string the pattern matches, from Python's own parse of it (literals, classes, ``.``,
  repeats at their least count but one for ``+``, the first branch of an alternation);
- a tool call: the first required (or named) tool, its arguments generated from its ``parameters``,
  streamed as OpenAI's ``delta.tool_calls`` (the name first, then the arguments in pieces) and
  finished with ``tool_calls``.

The reply is cut into pieces (a word, a run of spaces, or one punctuation character each), one
token each: ``usage.completion_tokens`` counts them. ``--ignore-constraints`` makes a lying engine:
it reads none of this and answers in plain words, so the harness must catch every such reply.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from typing import Any, Optional

if sys.version_info >= (3, 11):  # the parser moved (the old names warn of their deprecation)
    import re._constants as sre_constants
    import re._parser as sre_parse
else:  # pragma: no cover - Python 3.10
    import sre_constants
    import sre_parse

WORDS = ("alpha", "beta", "gamma", "delta", "omega", "river", "stone", "cloud")
_PIECE = re.compile(r"\w+|\s+|[^\w\s]", re.UNICODE)


@dataclass
class ConstrainedReply:
    """The text of a constrained reply, in token-sized pieces; ``tool`` names the function of a
    tool call (then the pieces are its arguments)."""

    pieces: list[str]
    tool: Optional[str] = None

    @property
    def text(self) -> str:
        return "".join(self.pieces)


def constrained_reply(body: dict[str, Any], index: int) -> Optional[ConstrainedReply]:
    """The reply a request's constraint asks for, or None when it has none."""
    tool = _required_tool(body)
    if tool is not None:
        args = sample_json(tool.get("parameters") or {"type": "object"}, index)
        return ConstrainedReply(pieces(json.dumps(args)), tool=str(tool.get("name")))
    fmt = body.get("response_format")
    if isinstance(fmt, dict):
        kind = fmt.get("type")
        if kind == "json_schema" and isinstance(fmt.get("json_schema"), dict):
            return ConstrainedReply(pieces(json.dumps(sample_json(fmt["json_schema"].get("schema") or {}, index))))
        if kind in ("json_object", "json") and isinstance(fmt.get("schema") or fmt.get("value"), dict):
            return ConstrainedReply(pieces(json.dumps(sample_json(fmt.get("schema") or fmt.get("value"), index))))
        if kind == "json_object":
            return ConstrainedReply(pieces(json.dumps({"answer": WORDS[index % len(WORDS)]})))
        regex = fmt.get("value") or fmt.get("pattern")
        if kind == "regex" and isinstance(regex, str):
            return ConstrainedReply(pieces(sample_regex(regex)))
    outputs = body.get("structured_outputs")
    pattern = outputs.get("regex") if isinstance(outputs, dict) else body.get("regex")
    if isinstance(pattern, str):
        return ConstrainedReply(pieces(sample_regex(pattern)))
    return None


def _required_tool(body: dict[str, Any]) -> Optional[dict[str, Any]]:
    """The function a request must call: the named one, or the first with ``required``."""
    functions = [t.get("function") for t in body.get("tools") or () if isinstance(t, dict)]
    tools = [f for f in functions if isinstance(f, dict)]
    choice = body.get("tool_choice")
    if not tools:
        return None
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        return next((t for t in tools if t.get("name") == name), None)
    return tools[0] if choice == "required" else None


def pieces(text: str) -> list[str]:
    """Token-sized pieces of ``text`` (their concatenation is the text)."""
    return _PIECE.findall(text) or [text]


def sample_json(schema: Any, index: int = 0) -> Any:
    """A value valid under ``schema`` (the subset in the module's docstring)."""
    if not isinstance(schema, dict):
        return None
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for word in ("anyOf", "oneOf"):
        if schema.get(word):
            return sample_json(schema[word][0], index)
    if schema.get("allOf"):
        merged: dict[str, Any] = {}
        for part in schema["allOf"]:
            merged.update(part if isinstance(part, dict) else {})
        return sample_json(merged, index)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = kind[0] if kind else None
    if kind is None:
        kind = "object" if "properties" in schema else "array" if "items" in schema else "string"
    if kind == "object":
        props = (schema.get("properties") or {}).items()
        return {name: sample_json(sub, index + i) for i, (name, sub) in enumerate(props)}
    if kind == "array":
        count = max(1, int(schema.get("minItems", 1)))
        count = min(count, int(schema.get("maxItems", count)))
        return [sample_json(schema.get("items") or {}, index + i) for i in range(count)]
    if kind == "string":
        text = WORDS[index % len(WORDS)]
        low, high = int(schema.get("minLength", 0)), schema.get("maxLength")
        text = text + "x" * max(0, low - len(text))
        return text[: int(high)] if high is not None else text
    if kind in ("integer", "number"):
        minimum, maximum = schema.get("minimum"), schema.get("maximum")
        value = 7 + index % 5
        if minimum is not None:
            value = max(value, minimum if kind == "number" else int(-(-minimum // 1)))
        if maximum is not None:
            value = min(value, maximum if kind == "number" else int(maximum // 1))
        return int(value) if kind == "integer" else value
    if kind == "boolean":
        return index % 2 == 0
    return None


def sample_regex(pattern: str) -> str:
    """A string that ``pattern`` matches as a whole (the subset in the module's docstring)."""
    return _emit(sre_parse.parse(pattern))


def _emit(parsed: Any) -> str:
    out = []
    c = sre_constants
    for op, arg in parsed:
        if op is c.LITERAL:
            out.append(chr(arg))
        elif op is c.ANY:
            out.append("a")
        elif op is c.IN:
            out.append(_class_char(arg))
        elif op in (c.MAX_REPEAT, c.MIN_REPEAT) or op is getattr(c, "POSSESSIVE_REPEAT", None):
            low, _high, item = arg
            out.append(_emit(item) * max(low, 1 if low == 0 and _high == c.MAXREPEAT else low))
        elif op is c.SUBPATTERN:
            out.append(_emit(arg[-1]))
        elif op is c.BRANCH:
            out.append(_emit(arg[1][0]))
        elif op in (c.AT, c.ASSERT, c.ASSERT_NOT):
            continue
        elif op is c.GROUPREF:
            continue
        else:
            out.append("a")
    return "".join(out)


def _class_char(items: Any) -> str:
    c = sre_constants
    for op, arg in items:
        if op is c.NEGATE:
            return "~"
        if op is c.LITERAL:
            return chr(arg)
        if op is c.RANGE:
            return chr(arg[0])
        if op is c.CATEGORY:
            return {c.CATEGORY_DIGIT: "7", c.CATEGORY_SPACE: " ", c.CATEGORY_WORD: "w"}.get(arg, "a")
    return "a"
