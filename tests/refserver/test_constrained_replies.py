"""The reference server's constrained replies satisfy what they were asked for."""

import json
import re

import pytest

from core.structured import schema_error
from refserver.constrained import constrained_reply, pieces, sample_json, sample_regex

SCHEMAS = [
    {
        "type": "object",
        "properties": {
            "a": {"type": "string", "maxLength": 3},
            "b": {"type": "integer", "minimum": 20},
            "c": {"type": "array", "items": {"enum": ["x", "y"]}, "minItems": 2},
        },
        "required": ["a", "b", "c"],
        "additionalProperties": False,
    },
    {
        "type": "object",
        "properties": {
            "n": {"type": "number", "maximum": 1.5},
            "ok": {"type": "boolean"},
            "z": {"type": "null"},
            "k": {"const": 3},
        },
    },
    {"anyOf": [{"type": "string", "minLength": 12}, {"type": "integer"}]},
]


@pytest.mark.parametrize("schema", SCHEMAS)
def test_generated_json_is_valid(schema):
    for index in range(4):
        assert schema_error(sample_json(schema, index), schema) is None


@pytest.mark.parametrize("pattern", [r"[a-z]+-\d{3}(x|y)?\.json", r"(yes|no)", r"\w+ \s?[A-Z]{2,4}!*", r"a.b"])
def test_generated_strings_match_the_regex(pattern):
    assert re.fullmatch(pattern, sample_regex(pattern))


def test_each_dialects_constraint_is_read():
    schema = SCHEMAS[0]
    for body in (
        {"response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": schema}}},
        {"response_format": {"type": "json_object", "schema": schema}},
    ):
        assert schema_error(json.loads(constrained_reply(body, 1).text), schema) is None
    for body in (
        {"structured_outputs": {"regex": "(yes|no)!"}},
        {"regex": "(yes|no)!"},
        {"response_format": {"type": "regex", "value": "(yes|no)!"}},
    ):
        assert constrained_reply(body, 1).text == "yes!"
    tools = [{"type": "function", "function": {"name": "f", "parameters": schema}}]
    call = constrained_reply({"tools": tools, "tool_choice": "required"}, 2)
    assert call.tool == "f" and schema_error(json.loads(call.text), schema) is None
    assert constrained_reply({"tools": tools, "tool_choice": "auto"}, 2) is None
    assert constrained_reply({"messages": []}, 2) is None
    assert "".join(pieces('{"a": "xy z"}')) == '{"a": "xy z"}'
