"""Structured output and tool calls: what a workload constrains each reply to, and the check of
every reply against it (off the timing path: after the request has ended).

A constraint is one of:

- ``response_format`` ``{"type": "json_schema", "schema": {...}}``: the reply is a JSON value
  valid under the schema;
- ``response_format`` ``{"type": "regex", "pattern": "..."}``: the whole reply matches the
  pattern (Python ``re.fullmatch``);
- ``tools`` (OpenAI tool definitions) with ``tool_choice`` ``"required"``: the reply is at least
  one tool call, each naming a defined tool, its arguments JSON valid under that tool's
  ``parameters``. With ``"auto"`` a reply may call a tool (then its arguments are checked) or
  answer in text (then only ``response_format``, if any, is checked).

Servers return tool calls in their own field (``delta.tool_calls``, collected by the HTTP
client into ``RequestDone.tool_calls``). In-process engines have no tool-call parser: they are
constrained by :func:`tool_call_schema` and reply with one call as the JSON object
``{"name": ..., "arguments": {...}}``, which :func:`check_reply` reads back.

JSON schemas are checked with the ``jsonschema`` package (Draft 2020-12) where it is installed,
else with the small validator below, which knows ``type`` (one or a list), ``enum``, ``const``,
``properties``, ``required``, ``additionalProperties`` (bool or schema), ``items``,
``minItems``/``maxItems``, ``minLength``/``maxLength``, ``pattern``, ``minimum``/``maximum``,
``exclusiveMinimum``/``exclusiveMaximum``, ``anyOf``/``oneOf``/``allOf`` and ignores the rest
(``$ref``, formats…): a reply it passes may still fail the full standard. :func:`validator_name`
says which one ran; the summary keeps it.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional

from core.errors import ConfigError

JSON_SCHEMA, REGEX, TOOL_CALL = "json_schema", "regex", "tool_call"
KINDS = (JSON_SCHEMA, REGEX, TOOL_CALL)  # what a reply is checked as
REQUIRED, AUTO = "required", "auto"  # tool_choice
REASON_CHARS = 200  # a reason longer than this is cut


@dataclass(frozen=True)
class OutputCheck:
    """One reply checked: the kind of constraint, valid or not, and why not (one short line)."""

    kind: str
    valid: bool
    reason: Optional[str] = None


# --- the workload's configuration -----------------------------------------------------------


FORMAT_KEYS = {JSON_SCHEMA: ("type", "schema", "name"), REGEX: ("type", "pattern")}


def normalize_response_format(value: Any, key: str = "workload.response_format") -> Optional[dict[str, Any]]:
    """The configured response format as a plain dict, or None; ConfigError on a bad one."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"{key} must be a mapping {{type: json_schema, schema: {{...}}}} or "
            f"{{type: regex, pattern: '...'}} (got {value!r})"
        )
    kind = value.get("type")
    allowed = FORMAT_KEYS.get(kind)
    # keys of the other type are ignored: a Hydra override of the type merges into the default's keys
    unknown = sorted(str(k) for k in value if allowed is not None and k not in set().union(*FORMAT_KEYS.values()))
    if unknown:
        hint = (
            " (write the schema itself under schema: the harness wraps it as each engine needs)"
            if kind == JSON_SCHEMA and "json_schema" in unknown
            else ""
        )
        raise ConfigError(
            f"{key} has unknown keys {', '.join(unknown)}: a {kind} format takes {', '.join(allowed)}{hint}"
        )
    if kind == JSON_SCHEMA:
        schema = value.get("schema")
        if not isinstance(schema, Mapping) or not schema:
            raise ConfigError(f"{key}.schema must be a non-empty JSON schema object for type json_schema")
        check_schema(dict(schema), f"{key}.schema")
        out = {"type": JSON_SCHEMA, "schema": json.loads(json.dumps(dict(schema)))}
        if value.get("name") is not None:
            out["name"] = str(value["name"])
        return out
    if kind == REGEX:
        pattern = value.get("pattern")
        if not isinstance(pattern, str) or not pattern:
            raise ConfigError(f"{key}.pattern must be a non-empty regular expression for type regex")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ConfigError(f"{key}.pattern is not a valid regular expression ({exc})") from None
        return {"type": REGEX, "pattern": pattern}
    raise ConfigError(f"{key}.type must be json_schema or regex (got {kind!r})")


def normalize_tools(value: Any, key: str = "workload.tools") -> Optional[list[dict[str, Any]]]:
    """OpenAI-style tool definitions as plain dicts ({type: function, function: {name, description,
    parameters}}), or None; ConfigError on a bad one."""
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or not value:
        raise ConfigError(
            f"{key} must be a non-empty list of tool definitions "
            "[{type: function, function: {name, parameters}}] (or null)"
        )
    tools, names = [], set()
    for i, raw in enumerate(value):
        tool = json.loads(json.dumps(dict(raw))) if isinstance(raw, Mapping) else None
        function = tool.get("function") if tool else None
        if not tool or tool.get("type", "function") != "function" or not isinstance(function, dict):
            raise ConfigError(f"{key}[{i}] must be {{type: function, function: {{name, parameters}}}} (got {raw!r})")
        name = function.get("name")
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name):
            raise ConfigError(f"{key}[{i}].function.name must be 1-64 letters, digits, _ or - (got {name!r})")
        if name in names:
            raise ConfigError(f"{key} defines the tool {name!r} twice")
        names.add(name)
        params = function.setdefault("parameters", {"type": "object", "properties": {}})
        if not isinstance(params, dict):
            raise ConfigError(f"{key}[{i}].function.parameters must be a JSON schema object")
        check_schema(params, f"{key}[{i}].function.parameters")
        tool["type"] = "function"
        tools.append(tool)
    return tools


def check_tool_choice_share(share: Any, tools: Optional[list[Any]]) -> None:
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 1:
        raise ConfigError(f"workload.tool_choice_share must be a share in [0, 1] (got {share!r})")
    if share > 0 and not tools:
        raise ConfigError("workload.tool_choice_share asks for tool calls but workload.tools is empty: define tools")


def check_schema(schema: dict[str, Any], key: str) -> None:
    """A schema the checker can use: the jsonschema package's own check where installed."""
    validator = _jsonschema_validator()
    if validator is not None:
        try:
            validator.check_schema(schema)
        except Exception as exc:  # noqa: BLE001 - jsonschema.SchemaError, one line
            raise ConfigError(f"{key} is not a valid JSON schema: {str(exc).splitlines()[0]}") from None


def tool_choice_for(index: int, share: float) -> str:
    """``"required"`` for request ``index`` (0, 1, … in plan order) when it is one of the share
    that must call a tool, else ``"auto"``: request i is required iff ⌊(i+1)·s⌋ > ⌊i·s⌋, which
    spreads the required ones evenly (s = 0.5: every second request; s = 1: all)."""
    if share <= 0:
        return AUTO
    return REQUIRED if math.floor((index + 1) * share + 1e-9) > math.floor(index * share + 1e-9) else AUTO


def constraint_kind(response_format: Optional[dict[str, Any]], tool_choice: Optional[str]) -> Optional[str]:
    """What a request's reply is constrained to (the kind it is checked as), or None."""
    if tool_choice == REQUIRED:
        return TOOL_CALL
    if response_format is not None:
        return response_format["type"]
    return None


def tool_call_schema(tools: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The JSON schema an in-process engine decodes a required tool call under:
    ``{"name": <a tool>, "arguments": <its parameters>}``, one branch per tool."""
    branches = [
        {
            "type": "object",
            "properties": {"name": {"const": t["function"]["name"]}, "arguments": t["function"]["parameters"]},
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for t in tools
    ]
    return branches[0] if len(branches) == 1 else {"anyOf": branches}


def decoding_constraint(
    response_format: Optional[dict[str, Any]], tools: Optional[Sequence[dict[str, Any]]], tool_choice: Optional[str]
) -> Optional[tuple[str, Any]]:
    """What an in-process engine constrains decoding to: ("json_schema", schema) or
    ("regex", pattern); a required tool call is a JSON schema (:func:`tool_call_schema`). None:
    free text (no constraint, or tools with ``auto``, which an engine without a tool parser
    answers in text)."""
    if tool_choice == REQUIRED and tools:
        return JSON_SCHEMA, tool_call_schema(tools)
    if response_format is None:
        return None
    if response_format["type"] == JSON_SCHEMA:
        return JSON_SCHEMA, response_format["schema"]
    return REGEX, response_format["pattern"]


def describe_constraint(structured: Optional[dict[str, Any]]) -> Optional[str]:
    """A workload's reply constraint in a few words, with a fingerprint of its schema, pattern and
    tools (the first 12 hex digits of their sha256), so two runs under different constraints are
    told apart at a glance: ``json_schema 3f2a…``, ``tools get_weather, 50 % required 9c1d…``."""
    if not structured:
        return None
    digest = hashlib.sha256(json.dumps(structured, sort_keys=True).encode()).hexdigest()[:12]
    parts = []
    fmt = structured.get("response_format")
    if fmt is not None:
        parts.append(fmt["type"])
    tools = structured.get("tools")
    if tools:
        names = ", ".join(t["function"]["name"] for t in tools)
        parts.append(f"tools {names} ({structured.get('tool_choice_share', 0) * 100:g} % required)")
    return f"{' + '.join(parts)} {digest}"


# --- the check of one reply -------------------------------------------------------------------


def check_reply(
    text: Optional[str],
    tool_calls: Optional[list[dict[str, Any]]],
    response_format: Optional[dict[str, Any]],
    tools: Optional[Sequence[dict[str, Any]]],
    tool_choice: Optional[str],
    finish_reason: Optional[str] = None,
) -> Optional[OutputCheck]:
    """Check one completed reply against its request's constraint; None when it had none.

    ``tool_calls``: the server's calls ([{name, arguments}], arguments a JSON string), or None
    where the engine has no tool-call field (in-process: the text is the call)."""
    cut = " (cut at the output limit)" if finish_reason == "length" else ""
    text = text or ""
    if tools and (tool_choice == REQUIRED or tool_calls):
        if tool_calls is None and tool_choice == REQUIRED:
            tool_calls = tool_calls_from_text(text)
            if tool_calls is None:
                return OutputCheck(
                    TOOL_CALL, False, _short(f"no tool call: the reply is not a JSON object {{name, arguments}}{cut}")
                )
        if not tool_calls:
            return OutputCheck(TOOL_CALL, False, "no tool call: the request required one")
        for call in tool_calls:
            reason = tool_call_error(call, tools)
            if reason:
                return OutputCheck(TOOL_CALL, False, _short(reason + cut))
        return OutputCheck(TOOL_CALL, True)
    if response_format is None:
        return None
    kind = response_format["type"]
    if kind == REGEX:
        if re.fullmatch(response_format["pattern"], text, flags=re.DOTALL) is None:
            return OutputCheck(REGEX, False, _short(f"does not match the pattern{cut}: {text[:60]!r}"))
        return OutputCheck(REGEX, True)
    try:
        value = json.loads(text)
    except ValueError as exc:
        return OutputCheck(JSON_SCHEMA, False, _short(f"not JSON{cut}: {exc}"))
    reason = schema_error(value, response_format["schema"])
    return OutputCheck(JSON_SCHEMA, reason is None, _short(reason) if reason else None)


def tool_call_error(call: dict[str, Any], tools: Sequence[dict[str, Any]]) -> Optional[str]:
    """Why a tool call is invalid (unknown tool, arguments not JSON or not valid), or None."""
    by_name = {t["function"]["name"]: t["function"] for t in tools}
    name = call.get("name")
    if name not in by_name:
        return f"a call to an unknown tool {str(name)[:40]!r}"
    arguments = call.get("arguments")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else None
        except ValueError as exc:
            return f"the arguments of {name} are not JSON: {exc}"
    if arguments is None:
        return f"the call to {name} has no arguments"
    reason = schema_error(arguments, by_name[name].get("parameters") or {})
    return f"the arguments of {name}: {reason}" if reason else None


def tool_calls_from_text(text: str) -> Optional[list[dict[str, Any]]]:
    """An in-process reply read as a tool call: ``{"name": ..., "arguments": {...}}`` (or a list
    of them) → [{name, arguments}]; None when the text is not that."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    calls = value if isinstance(value, list) else [value]
    if not calls or not all(isinstance(c, dict) and "name" in c for c in calls):
        return None
    return [{"name": c.get("name"), "arguments": c.get("arguments")} for c in calls]


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 1] + "…"


# --- JSON schema validation -----------------------------------------------------------------

_JSONSCHEMA: Any = None  # the jsonschema validator class once looked up; False: not installed


def _jsonschema_validator() -> Any:
    global _JSONSCHEMA
    if _JSONSCHEMA is None:
        try:
            import jsonschema  # optional: the built-in subset below stands in without it

            _JSONSCHEMA = jsonschema.Draft202012Validator
        except ImportError:
            _JSONSCHEMA = False
    return _JSONSCHEMA or None


def validator_name() -> str:
    """Which JSON schema validator checks replies here."""
    validator = _jsonschema_validator()
    if validator is None:
        return "built-in subset (core/structured.py)"
    try:
        return f"jsonschema {importlib.metadata.version('jsonschema')}"
    except importlib.metadata.PackageNotFoundError:  # importable, but not installed as a distribution
        return "jsonschema"


def schema_error(value: Any, schema: dict[str, Any]) -> Optional[str]:
    """Why ``value`` is not valid under ``schema`` (one line, with the path), or None."""
    validator = _jsonschema_validator()
    if validator is not None:
        error = next(iter(sorted(validator(schema).iter_errors(value), key=lambda e: list(e.path))), None)
        if error is None:
            return None
        where = "/".join(str(p) for p in error.absolute_path)
        return f"{'at /' + where + ': ' if where else ''}{error.message}"
    return subset_error(value, schema, "")


_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool) or (isinstance(v, float) and v.is_integer()),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def subset_error(value: Any, schema: Any, path: str = "") -> Optional[str]:
    """The built-in validator (the subset in the module's docstring): the first error, or None."""
    if schema is True or not isinstance(schema, dict):
        return None if schema is not False else f"at {path or '/'}: no value is allowed here"
    at = f"at {path or '/'}: "
    types = schema.get("type")
    if types is not None:
        names = types if isinstance(types, list) else [types]
        if not any(_TYPES.get(t, lambda v: True)(value) for t in names):
            return f"{at}{json.dumps(value)[:40]} is not of type {' or '.join(names)}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{at}{json.dumps(value)[:40]} is not one of {schema['enum']}"
    if "const" in schema and value != schema["const"]:
        return f"{at}{json.dumps(value)[:40]} is not {json.dumps(schema['const'])}"
    for word in ("allOf", "anyOf", "oneOf"):
        if word in schema:
            errors = [subset_error(value, s, path) for s in schema[word]]
            passed = sum(e is None for e in errors)
            if word == "allOf" and passed < len(errors):
                return next(e for e in errors if e)
            if word == "anyOf" and not passed:
                return f"{at}valid under none of anyOf ({errors[0]})"
            if word == "oneOf" and passed != 1:
                return f"{at}valid under {passed} of oneOf, not exactly one"
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for name in schema.get("required") or ():
            if name not in value:
                return f"{at}{name!r} is a required property"
        extra = schema.get("additionalProperties", True)
        for name, item in value.items():
            if name in props:
                error = subset_error(item, props[name], f"{path}/{name}")
            elif extra is False:
                error = f"{at}additional property {name!r} is not allowed"
            else:
                error = subset_error(item, extra, f"{path}/{name}")
            if error:
                return error
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0) or len(value) > schema.get("maxItems", math.inf):
            return f"{at}{len(value)} items, outside [{schema.get('minItems', 0)}, {schema.get('maxItems', '∞')}]"
        if "items" in schema:
            for i, item in enumerate(value):
                error = subset_error(item, schema["items"], f"{path}/{i}")
                if error:
                    return error
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0) or len(value) > schema.get("maxLength", math.inf):
            return (
                f"{at}a string of {len(value)} characters, outside [{schema.get('minLength', 0)}, "
                f"{schema.get('maxLength', '∞')}]"
            )
        if "pattern" in schema and re.search(schema["pattern"], value) is None:
            return f"{at}{value[:40]!r} does not match {schema['pattern']!r}"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value < schema.get("minimum", -math.inf) or value > schema.get("maximum", math.inf):
            return f"{at}{value} is outside [{schema.get('minimum', '-∞')}, {schema.get('maximum', '∞')}]"
        if value <= schema.get("exclusiveMinimum", -math.inf) or value >= schema.get("exclusiveMaximum", math.inf):
            return f"{at}{value} is outside the exclusive bounds"
    return None
