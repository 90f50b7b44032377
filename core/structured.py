"""Structured output and tool calls: what a workload constrains each reply to, and the check of
every reply against it (off the timing path: after the request has ended).

A constraint is one of:

- ``response_format`` ``{"type": "json_schema", "schema": {...}}``: the reply is a JSON value
  valid under the schema;
- ``response_format`` ``{"type": "json_object"}`` (OpenAI's JSON mode): the reply parses as a
  JSON object — any object: no schema says which keys (engines constrain decoding to the grammar
  of a JSON object, :data:`ANY_OBJECT`);
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

JSON schemas are checked with the ``jsonschema`` package, by the full standard of the draft a
schema declares in ``$schema`` (Draft 2020-12 when it declares none). ``format`` is an annotation
there, as the standard has it by default: a reply is not failed on it. A ``$ref`` is resolved
within the schema only; nothing is fetched. :func:`validator_name` says which version ran; the
summary keeps it.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional

from core.errors import ConfigError

JSON_SCHEMA, JSON_OBJECT, REGEX, TOOL_CALL = "json_schema", "json_object", "regex", "tool_call"
KINDS = (JSON_SCHEMA, JSON_OBJECT, REGEX, TOOL_CALL)  # what a reply is checked as
ANY_OBJECT: dict[str, Any] = {"type": "object"}  # JSON mode as a schema, for an engine that takes only schemas
REQUIRED, AUTO = "required", "auto"  # tool_choice
REASON_CHARS = 200  # a reason longer than this is cut


@dataclass(frozen=True)
class OutputCheck:
    """One reply checked: the kind of constraint, valid or not, and why not (one short line)."""

    kind: str
    valid: bool
    reason: Optional[str] = None


# --- the workload's configuration -----------------------------------------------------------


FORMAT_KEYS = {JSON_SCHEMA: ("type", "schema", "name"), JSON_OBJECT: ("type",), REGEX: ("type", "pattern")}


def normalize_response_format(value: Any, key: str = "workload.response_format") -> Optional[dict[str, Any]]:
    """The configured response format as a plain dict, or None; ConfigError on a bad one."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"{key} must be a mapping {{type: json_schema, schema: {{...}}}}, {{type: json_object}} or "
            f"{{type: regex, pattern: '...'}} (got {value!r})"
        )
    kind = value.get("type")
    allowed = FORMAT_KEYS.get(kind) if isinstance(kind, str) else None
    # keys of the other type are ignored: a Hydra override of the type merges into the default's keys
    unknown = sorted(str(k) for k in value if allowed is not None and k not in set().union(*FORMAT_KEYS.values()))
    if allowed is not None and unknown:
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
    if kind == JSON_OBJECT:  # JSON mode: any object; a schema or pattern merged from a default is unused
        return {"type": JSON_OBJECT}
    if kind == REGEX:
        pattern = value.get("pattern")
        if not isinstance(pattern, str) or not pattern:
            raise ConfigError(f"{key}.pattern must be a non-empty regular expression for type regex")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ConfigError(f"{key}.pattern is not a valid regular expression ({exc})") from None
        return {"type": REGEX, "pattern": pattern}
    raise ConfigError(f"{key}.type must be json_schema, json_object or regex (got {kind!r})")


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
    """A valid schema under its draft's metaschema (``$schema``, else Draft 2020-12); ConfigError
    in one line, with where in the schema the fault is."""
    from jsonschema import Draft202012Validator, SchemaError
    from jsonschema.validators import validator_for

    try:
        validator_for(schema, default=Draft202012Validator).check_schema(schema)
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.path)
        raise ConfigError(
            f"{key} is not a valid JSON schema: {'at /' + where + ': ' if where else ''}{exc.message}"
        ) from None


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
    """What an in-process engine constrains decoding to: ("json_schema", schema),
    ("json_object", :data:`ANY_OBJECT`) — an engine with a JSON mode of its own uses that, any
    other the schema — or ("regex", pattern); a required tool call is a JSON schema
    (:func:`tool_call_schema`). None: free text (no constraint, or tools with ``auto``, which an
    engine without a tool parser answers in text)."""
    if tool_choice == REQUIRED and tools:
        return JSON_SCHEMA, tool_call_schema(tools)
    if response_format is None:
        return None
    if response_format["type"] == JSON_SCHEMA:
        return JSON_SCHEMA, response_format["schema"]
    if response_format["type"] == JSON_OBJECT:
        return JSON_OBJECT, dict(ANY_OBJECT)
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
        return OutputCheck(kind, False, _short(f"not JSON{cut}: {exc}"))
    if kind == JSON_OBJECT:  # JSON mode: valid when it is a JSON object, whatever its keys
        if not isinstance(value, dict):
            return OutputCheck(JSON_OBJECT, False, _short(f"JSON, but not an object: {type(value).__name__}{cut}"))
        return OutputCheck(JSON_OBJECT, True)
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
# jsonschema is imported where it is used: importing it costs about 50 ms of every process's start
# here, and most runs check no schema.


@functools.lru_cache(maxsize=64)
def _validator(schema_json: str) -> Any:
    """The validator of one schema (given as canonical JSON, so it can key the cache): the draft the
    schema declares in ``$schema``, else Draft 2020-12. A workload has a handful of schemas and
    thousands of replies, so each is built once."""
    from jsonschema import Draft202012Validator
    from jsonschema.validators import validator_for

    schema = json.loads(schema_json)
    return validator_for(schema, default=Draft202012Validator)(schema)


def _validator_of(schema: Any) -> Any:
    return _validator(json.dumps(schema, sort_keys=True))


def validator_name() -> str:
    """Which JSON schema validator checks replies here."""
    try:
        return f"jsonschema {importlib.metadata.version('jsonschema')}"
    except importlib.metadata.PackageNotFoundError:  # importable, but not installed as a distribution
        return "jsonschema"


def schema_error(value: Any, schema: Any) -> Optional[str]:
    """Why ``value`` is not valid under ``schema`` (one line, with the path), or None."""
    from jsonschema.exceptions import best_match
    from referencing.exceptions import Unresolvable  # jsonschema's own dependency

    try:
        error = best_match(_validator_of(schema).iter_errors(value))
    except Unresolvable as exc:  # a $ref outside the schema: nothing is fetched
        return f"the schema's reference cannot be resolved ({exc})"
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path)
    return f"{'at /' + where + ': ' if where else ''}{error.message}"
