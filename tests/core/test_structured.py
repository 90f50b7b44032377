"""The reply checks of structured output (core/structured.py): schemas, regexes, tool calls."""

import json

import pytest

from core.errors import ConfigError
from core.structured import (
    OutputCheck,
    check_reply,
    decoding_constraint,
    describe_constraint,
    normalize_response_format,
    normalize_tools,
    schema_error,
    tool_call_schema,
    tool_choice_for,
)

SCHEMA = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "minLength": 1, "maxLength": 12},
        "topic": {"enum": ["science", "other"]},
        "score": {"type": "integer", "minimum": 1, "maximum": 5},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
        "formal": {"type": "boolean"},
    },
    "required": ["title", "topic", "score"],
    "additionalProperties": False,
}
FORMAT = {"type": "json_schema", "schema": SCHEMA}
TOOLS = normalize_tools(
    [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            },
        }
    ]
)

BAD = [
    ({"title": "x", "topic": "science"}, "'score' is a required property"),
    ({"title": "x", "topic": "art", "score": 2}, "is not one of"),
    ({"title": "x", "topic": "other", "score": 9}, "9"),
    ({"title": "", "topic": "other", "score": 2}, "title"),
    ({"title": "x", "topic": "other", "score": 2, "extra": 1}, "extra"),
    ({"title": "x", "topic": "other", "score": 2.5}, "2.5"),
    ({"title": "x", "topic": "other", "score": 2, "tags": ["a", "b", "c"]}, "tags"),
    ({"title": "x", "topic": "other", "score": 2, "formal": "yes"}, "formal"),
    ([1, 2], "object"),
]


@pytest.mark.parametrize("value,words", BAD)
def test_the_validator_finds_what_breaks_a_schema(value, words):
    error = schema_error(value, SCHEMA)
    assert error is not None and words in error


def test_valid_values_pass():
    for value in (
        {"title": "x", "topic": "other", "score": 3},
        {"title": "abc", "topic": "science", "score": 1, "tags": ["a"], "formal": True},
    ):
        assert schema_error(value, SCHEMA) is None
    assert schema_error(3, {"anyOf": [{"type": "string"}, {"type": "integer"}]}) is None
    assert schema_error(3.5, {"oneOf": [{"type": "string"}, {"type": "integer"}]}) is not None


# Replies the hand-written subset validator (gone) passed, as it ignored these keywords, and the full
# standard rejects.
FULL_STANDARD = [
    ({"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, [1, 1], "non-unique"),
    ({"type": "integer", "multipleOf": 5}, 12, "multiple of 5"),
    ({"not": {"type": "string"}}, "text", "should not be valid"),
    (
        {"$defs": {"city": {"type": "string", "minLength": 2}}, "properties": {"city": {"$ref": "#/$defs/city"}}},
        {"city": "X"},
        "at /city",
    ),
    ({"type": "object", "patternProperties": {"^n_": {"type": "number"}}}, {"n_a": "one"}, "at /n_a"),
    ({"type": "object", "minProperties": 2}, {"a": 1}, "enough properties"),
    ({"type": "array", "prefixItems": [{"type": "string"}]}, [1], "at /0"),
    ({"type": "array", "contains": {"const": "ok"}}, ["no"], "contain"),
]


@pytest.mark.parametrize("schema,value,words", FULL_STANDARD)
def test_replies_are_judged_by_the_full_standard(schema, value, words):
    error = schema_error(value, schema)
    assert error is not None and words in error
    reply = check_reply(json.dumps(value), None, {"type": "json_schema", "schema": schema}, None, None)
    assert reply.kind == "json_schema" and not reply.valid and words in reply.reason


def test_the_draft_a_schema_declares_is_the_one_used():
    # Draft 7's items as a list is a tuple (the first item an integer); Draft 2020-12 has prefixItems
    # for that, and its items as a list is not a schema at all
    draft7 = {"$schema": "http://json-schema.org/draft-07/schema#", "items": [{"type": "integer"}]}
    assert schema_error(["a"], draft7) is not None and schema_error([1, "a"], draft7) is None
    assert normalize_response_format({"type": "json_schema", "schema": draft7})["schema"] == draft7
    with pytest.raises(ConfigError, match="not a valid JSON schema"):
        normalize_response_format({"type": "json_schema", "schema": {"items": [{"type": "integer"}]}})


def test_a_reference_outside_the_schema_is_not_fetched():
    error = schema_error(1, {"$ref": "https://example.com/schema.json"})
    assert error is not None and "cannot be resolved" in error


def test_a_reply_is_checked_against_its_response_format():
    assert check_reply('{"title": "x", "topic": "other", "score": 3}', None, FORMAT, None, None) == OutputCheck(
        "json_schema", True
    )
    cut = check_reply('{"title": "x", "to', None, FORMAT, None, None, finish_reason="length")
    assert not cut.valid and "not JSON (cut at the output limit)" in cut.reason
    wrong = check_reply('{"title": "x", "topic": "other"}', None, FORMAT, None, None)
    assert wrong.kind == "json_schema" and not wrong.valid and "score" in wrong.reason
    regex = {"type": "regex", "pattern": r"(yes|no), [a-z]+\."}
    assert check_reply("yes, fine.", None, regex, None, None).valid
    assert not check_reply("yes, fine. And more", None, regex, None, None).valid  # the whole reply must match
    assert check_reply("free text", None, None, None, None) is None  # nothing to check


def test_json_mode_is_any_json_object():
    """response_format {type: json_object}: valid when the reply parses as a JSON object."""
    mode = normalize_response_format({"type": "json_object", "schema": {"type": "string"}, "pattern": None})
    assert mode == {"type": "json_object"}  # a default's schema or pattern merged in is not part of it
    assert check_reply('{"any": ["keys", 1]}', None, mode, None, None) == OutputCheck("json_object", True)
    assert check_reply("{}", None, mode, None, None).valid
    array = check_reply("[1, 2]", None, mode, None, None)
    assert array.kind == "json_object" and not array.valid and "not an object: list" in array.reason
    cut = check_reply('{"a": ', None, mode, None, None, finish_reason="length")
    assert not cut.valid and "not JSON (cut at the output limit)" in cut.reason
    assert decoding_constraint(mode, None, None) == ("json_object", {"type": "object"})
    assert describe_constraint({"response_format": mode, "tools": None}).startswith("json_object ")


def test_tool_calls_are_checked_by_name_and_arguments():
    ok = [{"name": "get_weather", "arguments": '{"city": "Paris"}'}]
    assert check_reply("", ok, None, TOOLS, "required") == OutputCheck("tool_call", True)
    assert "required one" in check_reply("sunny", [], None, TOOLS, "required").reason
    assert "unknown tool" in check_reply("", [{"name": "nope", "arguments": "{}"}], None, TOOLS, "required").reason
    assert "not JSON" in check_reply("", [{"name": "get_weather", "arguments": '{"ci'}], None, TOOLS, "required").reason
    assert "city" in check_reply("", [{"name": "get_weather", "arguments": "{}"}], None, TOOLS, "required").reason
    # an engine without a tool-call field (in-process) answers with the call as its text
    assert check_reply('{"name": "get_weather", "arguments": {"city": "Oslo"}}', None, None, TOOLS, "required").valid
    assert not check_reply("It is sunny.", None, None, TOOLS, "required").valid
    # auto: a text answer is not checked (without response_format); a call made is
    assert check_reply("It is sunny.", [], None, TOOLS, "auto") is None
    assert not check_reply("", [{"name": "get_weather", "arguments": "{}"}], None, TOOLS, "auto").valid


def test_the_tool_call_schema_accepts_exactly_the_calls():
    schema = tool_call_schema(TOOLS)
    assert schema_error({"name": "get_weather", "arguments": {"city": "Rome"}}, schema) is None
    assert schema_error({"name": "other", "arguments": {"city": "Rome"}}, schema) is not None
    two = normalize_tools(
        [
            *TOOLS,
            {
                "type": "function",
                "function": {
                    "name": "add",
                    "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                },
            },
        ]
    )
    assert schema_error({"name": "add", "arguments": {"a": 1}}, tool_call_schema(two)) is None
    assert decoding_constraint(None, TOOLS, "required") == ("json_schema", schema)
    assert decoding_constraint(None, TOOLS, "auto") is None
    assert decoding_constraint({"type": "regex", "pattern": "a+"}, None, None) == ("regex", "a+")


def test_the_required_share_is_spread_evenly():
    assert [tool_choice_for(i, 0.5) for i in range(4)] == ["auto", "required", "auto", "required"]
    assert [tool_choice_for(i, 0.25) for i in range(8)].count("required") == 2
    assert {tool_choice_for(i, 1.0) for i in range(5)} == {"required"}
    assert {tool_choice_for(i, 0.0) for i in range(5)} == {"auto"}


@pytest.mark.parametrize(
    "value,words",
    [
        ({"type": "xml"}, "json_schema, json_object or regex"),
        ({"type": "json_schema"}, "schema"),
        ({"type": "regex", "pattern": "("}, "not a valid regular expression"),
        ("json", "mapping"),
        (
            {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "object"}}},
            "unknown keys json_schema: a json_schema format takes type, schema, name .write the schema itself under schema",
        ),
        (
            {"type": "regex", "pattern": "a+", "flags": "i", "schema": {}},
            "unknown keys flags: a regex format takes type, pattern$",
        ),
    ],
)
def test_a_bad_response_format_is_one_line(value, words):
    with pytest.raises(ConfigError, match=words):
        normalize_response_format(value)


@pytest.mark.parametrize(
    "schema,words",
    [
        (
            {"type": "strin"},
            r"^workload.response_format.schema is not a valid JSON schema: at /type: 'strin' is not valid",
        ),
        (
            {"properties": {"a": {"minLength": -1}}},
            "^workload.response_format.schema is not a valid JSON schema: at /properties/a/minLength: -1 is less than",
        ),
    ],
)
def test_an_invalid_schema_is_refused_in_one_line(schema, words):
    with pytest.raises(ConfigError, match=words) as refused:
        normalize_response_format({"type": "json_schema", "schema": schema})
    assert "\n" not in str(refused.value)
    with pytest.raises(ConfigError, match="workload.tools.0..function.parameters is not a valid JSON schema"):
        normalize_tools([{"function": {"name": "f", "parameters": schema}}])


def test_bad_tools_are_one_line():
    with pytest.raises(ConfigError, match="name"):
        normalize_tools([{"type": "function", "function": {"name": "has space"}}])
    with pytest.raises(ConfigError, match="twice"):
        normalize_tools([TOOLS[0], TOOLS[0]])
    assert normalize_tools([{"function": {"name": "f"}}])[0]["function"]["parameters"]["type"] == "object"


def test_the_constraint_is_described_with_a_fingerprint():
    a = describe_constraint({"response_format": FORMAT, "tools": None, "tool_choice_share": 0.0})
    b = describe_constraint(
        {
            "response_format": {**FORMAT, "schema": {**SCHEMA, "required": ["title"]}},
            "tools": None,
            "tool_choice_share": 0.0,
        }
    )
    assert a.startswith("json_schema ") and a != b
    tools = describe_constraint({"response_format": None, "tools": TOOLS, "tool_choice_share": 0.5})
    assert tools.startswith("tools get_weather (50 % required)")
    assert json.dumps(FORMAT)  # plain data throughout
