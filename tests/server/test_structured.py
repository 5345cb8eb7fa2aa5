"""Structured output through the official `openai` client: response_format
json_object (the reply parses as a JSON object) and json_schema (the reply
validates against the schema, python-jsonschema judging), streamed and not,
with n > 1, on /v1/completions too; the client's own `parse` with a Pydantic
model; and a 400 naming the field and the schema's JSON pointer for each
schema tally cannot enforce."""

from __future__ import annotations

import json
from typing import Literal

import jsonschema
import openai
import pydantic
import pytest

from conftest import TallyServer

FORMAT_CHECKER = jsonschema.Draft202012Validator.FORMAT_CHECKER

PET = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 12},
        "species": {"enum": ["cat", "dog", "bird"]},
        "age": {"type": "integer", "minimum": 0, "maximum": 30},
        "vaccinated": {"type": "boolean"},
        "toys": {"type": "array", "items": {"type": "string", "maxLength": 10}, "maxItems": 3},
    },
    "required": ["name", "species", "age", "vaccinated", "toys"],
    "additionalProperties": False,
}


def client(srv: TallyServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0, timeout=300)


def ask(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def schema_format(schema: dict, name: str = "answer") -> dict:
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


def validate(text: str, schema: dict) -> dict:
    value = json.loads(text)
    jsonschema.validate(value, schema, format_checker=FORMAT_CHECKER)
    return value


def test_json_object_replies_parse_as_objects(server):
    c = client(server)
    # (smollm2:135m answers some prompts, "hello" for one, with JSON that repeats itself to the token limit:
    # a cut reply is not whole, so these are prompts it finishes.)
    for prompt in ("Describe a city as JSON.", "Give me a JSON object with your favourite colour."):
        r = c.chat.completions.create(model="x", messages=ask(prompt), max_tokens=200, temperature=0,
                                      response_format={"type": "json_object"})
        ch = r.choices[0]
        assert ch.finish_reason == "stop", ch.message.content
        assert isinstance(json.loads(ch.message.content), dict), ch.message.content


def test_json_schema_replies_validate_streamed_and_not(server):
    c = client(server)
    r = c.chat.completions.create(model="x", messages=ask("Describe a pet as JSON."), max_tokens=200, temperature=0,
                                  response_format=schema_format(PET))
    assert r.choices[0].finish_reason == "stop"
    whole = r.choices[0].message.content
    assert list(validate(whole, PET)) == list(PET["properties"])  # in the schema's order, not sorted
    stream = c.chat.completions.create(model="x", messages=ask("Describe a pet as JSON."), max_tokens=200,
                                       temperature=0, response_format=schema_format(PET), stream=True)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == whole  # greedy: the same reply, in pieces


def test_every_sampled_choice_validates(server):
    r = client(server).chat.completions.create(model="x", messages=ask("Describe a pet as JSON."), max_tokens=200,
                                               temperature=1.0, seed=11, n=3, response_format=schema_format(PET))
    assert len(r.choices) == 3
    for ch in r.choices:
        assert ch.finish_reason == "stop", ch.message.content
        validate(ch.message.content, PET)


def test_completions_take_a_response_format_too(server):
    r = client(server).completions.create(model="x", prompt="A pet, as JSON: ", max_tokens=200, temperature=0,
                                          extra_body={"response_format": schema_format(PET)})
    assert r.choices[0].finish_reason == "stop"
    validate(r.choices[0].text, PET)


class Weather(pydantic.BaseModel):
    city: str = pydantic.Field(max_length=20)
    temperature_c: int = pydantic.Field(ge=-60, le=60)
    conditions: Literal["sunny", "cloudy", "rain", "snow"]


def test_the_clients_parse_returns_a_pydantic_object(server):
    c = client(server)
    parse = c.chat.completions.parse if hasattr(c.chat.completions, "parse") else c.beta.chat.completions.parse
    r = parse(model="x", messages=ask("What is the weather in Paris?"), response_format=Weather, max_tokens=200,
              temperature=0)
    w = r.choices[0].message.parsed
    assert isinstance(w, Weather), r.choices[0].message.content
    assert -60 <= w.temperature_c <= 60 and len(w.city) <= 20


def post_error(server, body: dict, path: str = "/v1/chat/completions") -> dict:
    status, _, out = server.post(path, body)
    assert status == 400, out
    return json.loads(out)["error"]


@pytest.mark.parametrize("schema,pointer", [
    ({"type": "object", "properties": {"x": {"type": "object", "patternProperties": {"a": {}}}}},
     "/properties/x/patternProperties"),
    ({"type": "array", "uniqueItems": True}, "/uniqueItems"),
    ({"type": "string", "format": "ipv4"}, "/format"),
    ({"enum": []}, "/enum"),
    ({"type": "array", "items": {"type": "integer"}, "minItems": 4, "maxItems": 2}, "/maxItems"),
    ({"not": {}}, "/not"),
    ({"type": []}, "/type"),
    ({"type": "text"}, "/type"),
    ({"$ref": "#/$defs/nowhere"}, "/$ref"),
    ("a string", "not a schema"),
])
def test_a_schema_tally_cannot_enforce_is_a_400_naming_its_pointer(server, schema, pointer):
    e = post_error(server, {"messages": ask("hi"), "max_tokens": 1, "response_format": schema_format(schema)})
    assert e["param"] == "response_format.json_schema.schema", e
    assert pointer in e["message"] and "\n" not in e["message"], e
    with pytest.raises(openai.BadRequestError):
        client(server).chat.completions.create(model="x", messages=ask("hi"), max_tokens=1,
                                               response_format=schema_format(schema))


@pytest.mark.parametrize("fmt,param", [
    ({"type": "xml"}, "response_format.type"),
    ("json", "response_format"),
    ({"type": "json_object", "schema": {}}, "response_format.schema"),
    ({"type": "json_schema"}, "response_format.json_schema"),
    ({"type": "json_schema", "json_schema": {"schema": {"type": "object"}}}, "response_format.json_schema.name"),
    ({"type": "json_schema", "json_schema": {"name": "a b", "schema": {}}}, "response_format.json_schema.name"),
    ({"type": "json_schema", "json_schema": {"name": "a"}}, "response_format.json_schema.schema"),
    ({"type": "json_schema", "json_schema": {"name": "a", "schema": {}, "strict": "yes"}},
     "response_format.json_schema.strict"),
    ({"type": "json_schema", "json_schema": {"name": "a", "schema": {}, "extra": 1}},
     "response_format.json_schema.extra"),
])
def test_a_malformed_response_format_is_a_400_naming_the_field(server, fmt, param):
    for path, body in (("/v1/chat/completions", {"messages": ask("hi")}), ("/v1/completions", {"prompt": "hi"})):
        e = post_error(server, {**body, "max_tokens": 1, "response_format": fmt}, path)
        assert e["param"] == param, e
        assert e["message"].startswith(f"'{param}"), e


def test_embeddings_take_no_response_format(server):
    e = post_error(server, {"input": "hi", "response_format": {"type": "json_object"}}, "/v1/embeddings")
    assert e["param"] == "response_format", e
