"""Tool calls through the official `openai` client against tally serve with
qwen2.5-coder:0.5b (its template shows tools in Hermes form, <tool_call>{...}
</tool_call>; the 0.5B model writes the bare JSON object): the full loop (the
model calls a function, the test answers in a `tool` message, the model
replies in text), streamed and not; tool_choice "none"; "required" and a named
function, decoded under a grammar, yield a call whose arguments validate
(python jsonschema); a call cut short, returned as text with tally_warning;
and the 400s of malformed tools, tool_choice and messages, and of tools on a
model whose template does not show them (smollm2:135m)."""

from __future__ import annotations

import json

import openai
import pytest

from conftest import TallyServer, need, tally_home

QWEN = tally_home() / "models" / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The city name"}},
            "required": ["city"],
        },
    },
}
ASK = [{"role": "user", "content": "What is the weather like in Paris right now?"}]
RESULT = '{"city": "Paris", "temperature_c": 18, "sky": "clear"}'


@pytest.fixture(scope="module")
def qwen(request):
    need(QWEN.exists(), f"qwen2.5-coder:0.5b is not installed at {QWEN} (tally pull qwen2.5-coder:0.5b)")
    s = TallyServer("-m", str(QWEN), "--parallel", "2", "-c", "4096", "--max-tokens", "256")
    request.module.tally_shared_server = s
    yield s
    try:
        assert s.stop() == 0, f"tally serve exited {s.returncode}:\n{s.log()[-3000:]}"
    finally:
        s.kill()


def client(srv: TallyServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0, timeout=300)


def create(srv, **kw):
    return client(srv).chat.completions.create(**{"model": "m", "temperature": 0, "max_tokens": 96, **kw})


def stream(srv, **kw):
    """The streamed reply reassembled: (content, {index: call}, finish_reason, warnings)."""
    content, calls, finish, warnings = "", {}, [], []
    for chunk in create(srv, stream=True, **kw):
        for ch in chunk.choices:
            d = ch.delta
            content += d.content or ""
            for tc in d.tool_calls or []:
                if tc.index not in calls:
                    # A call's first delta carries its id, type and name.
                    assert tc.id and tc.id.startswith("call_") and tc.type == "function" and tc.function.name, tc
                    calls[tc.index] = {"id": tc.id, "name": tc.function.name, "arguments": "", "fragments": 0}
                else:
                    assert tc.id is None and not tc.function.name, tc
                calls[tc.index]["arguments"] += tc.function.arguments or ""
                calls[tc.index]["fragments"] += 1 if tc.function.arguments else 0
            if ch.finish_reason:
                finish.append(ch.finish_reason)
                if getattr(ch, "tally_warning", None):
                    warnings.append(ch.tally_warning)
    return content, calls, finish, warnings


def check_call(call_name: str, arguments: str):
    assert call_name == "get_weather"
    args = json.loads(arguments)
    assert "paris" in args["city"].lower(), args


def test_tool_loop(qwen):
    r = create(qwen, messages=ASK, tools=[WEATHER])
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls", ch
    assert ch.message.content is None
    assert len(ch.message.tool_calls) == 1
    call = ch.message.tool_calls[0]
    assert call.type == "function" and call.id.startswith("call_") and len(call.id) > 10
    check_call(call.function.name, call.function.arguments)
    # The result goes back in a tool message; the model answers in text.
    messages = ASK + [ch.message.model_dump(exclude_none=True),
                      {"role": "tool", "tool_call_id": call.id, "content": RESULT}]
    r2 = create(qwen, messages=messages, tools=[WEATHER])
    ch2 = r2.choices[0]
    assert ch2.finish_reason == "stop", ch2
    assert not ch2.message.tool_calls
    assert "18" in ch2.message.content, ch2.message.content
    # The second prompt holds the call and its result: more tokens than the first.
    assert r2.usage.prompt_tokens > r.usage.prompt_tokens + 20


def test_tool_loop_streamed(qwen):
    whole = create(qwen, messages=ASK, tools=[WEATHER]).choices[0]
    content, calls, finish, warnings = stream(qwen, messages=ASK, tools=[WEATHER])
    assert finish == ["tool_calls"] and not warnings
    assert content == ""
    assert list(calls) == [0]
    check_call(calls[0]["name"], calls[0]["arguments"])
    # The streamed call is the whole answer's (ids aside).
    assert json.loads(calls[0]["arguments"]) == json.loads(whole.message.tool_calls[0].function.arguments)
    messages = ASK + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": calls[0]["id"], "type": "function",
         "function": {"name": calls[0]["name"], "arguments": calls[0]["arguments"]}}]},
        {"role": "tool", "tool_call_id": calls[0]["id"], "content": RESULT}]
    text, calls2, finish2, _ = stream(qwen, messages=messages, tools=[WEATHER])
    assert finish2 == ["stop"] and not calls2
    assert "18" in text
    assert text == create(qwen, messages=messages, tools=[WEATHER]).choices[0].message.content


def test_tool_choice_none_returns_text(qwen):
    # The tools stay in the prompt; the reply is not parsed into calls.
    r = create(qwen, messages=ASK, tools=[WEATHER], tool_choice="none")
    ch = r.choices[0]
    assert ch.finish_reason == "stop" and not ch.message.tool_calls
    assert "get_weather" in ch.message.content and "Paris" in ch.message.content


def test_required_yields_a_call_whose_arguments_validate(qwen):
    import jsonschema
    add = {"type": "function", "function": {
        "name": "add", "description": "Adds two integers",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                       "required": ["a", "b"], "additionalProperties": False}}}
    hello = [{"role": "user", "content": "Say hello to me in French."}]
    # Unconstrained, the model answers this in text ...
    free = create(qwen, messages=hello, tools=[WEATHER, add]).choices[0]
    assert free.finish_reason == "stop" and not free.message.tool_calls, free
    # ... required, it must call one of the tools, with arguments valid against its parameters.
    for stream_it in (False, True):
        if stream_it:
            content, calls, finish, warnings = stream(qwen, messages=hello, tools=[WEATHER, add],
                                                      tool_choice="required")
            # A required call streams as the model writes it: its arguments in several fragments.
            assert content == "" and all(c["fragments"] > 1 for c in calls.values()), calls
            calls = [(c["name"], c["arguments"]) for c in calls.values()]
        else:
            ch = create(qwen, messages=hello, tools=[WEATHER, add], tool_choice="required").choices[0]
            finish, warnings = [ch.finish_reason], []
            calls = [(c.function.name, c.function.arguments) for c in ch.message.tool_calls or []]
        assert finish == ["tool_calls"] and not warnings and len(calls) == 1, (finish, calls)
        name, args = calls[0]
        tool = {"get_weather": WEATHER, "add": add}[name]
        jsonschema.validate(json.loads(args), tool["function"]["parameters"])
    # A named function: that one, even where the model would call another.
    ch = create(qwen, messages=ASK, tools=[WEATHER, add],
                tool_choice={"type": "function", "function": {"name": "add"}}).choices[0]
    assert ch.finish_reason == "tool_calls" and [c.function.name for c in ch.message.tool_calls] == ["add"]
    jsonschema.validate(json.loads(ch.message.tool_calls[0].function.arguments), add["function"]["parameters"])


def test_named_tool_choice(qwen):
    r = create(qwen, messages=ASK, tools=[WEATHER],
               tool_choice={"type": "function", "function": {"name": "get_weather"}})
    ch = r.choices[0]
    assert ch.finish_reason == "tool_calls"
    check_call(ch.message.tool_calls[0].function.name, ch.message.tool_calls[0].function.arguments)


def test_cut_call_is_text_with_a_warning(qwen):
    # A stop string ends the reply inside the call's JSON: it cannot parse.
    r = create(qwen, messages=ASK, tools=[WEATHER], stop=["Paris"])
    ch = r.choices[0]
    assert ch.finish_reason == "stop" and not ch.message.tool_calls
    assert ch.message.content.startswith('{"name": "get_weather"')
    assert ch.model_extra["tally_warning"], ch
    content, calls, finish, warnings = stream(qwen, messages=ASK, tools=[WEATHER], stop=["Paris"])
    assert not calls and finish == ["stop"] and content == ch.message.content
    assert warnings == [ch.model_extra["tally_warning"]]
    # Cut by max_tokens: "length", the text, a warning.
    r = create(qwen, messages=ASK, tools=[WEATHER], max_tokens=6)
    ch = r.choices[0]
    assert ch.finish_reason == "length" and not ch.message.tool_calls and ch.model_extra["tally_warning"]


def bad(srv, body, param, words):
    status, _, raw = srv.post("/v1/chat/completions", {"messages": ASK, "max_tokens": 4, **body})
    assert status == 400, raw
    err = json.loads(raw)["error"]
    assert err["param"] == param, err
    for w in words:
        assert w in err["message"], err


def test_bad_tools_are_400(qwen):
    fn = WEATHER["function"]
    bad(qwen, {"tools": [{"type": "function", "function": {"parameters": fn["parameters"]}}]},
        "tools[0].function.name", ["required"])
    bad(qwen, {"tools": [{"type": "function", "function": {"name": "get weather"}}]},
        "tools[0].function.name", ["letters, digits"])
    bad(qwen, {"tools": [{"type": "function", "function": {"name": "x" * 65}}]}, "tools[0].function.name", ["1 to 64"])
    bad(qwen, {"tools": [{"type": "retrieval", "function": fn}]}, "tools[0].type", ["function"])
    bad(qwen, {"tools": [WEATHER, {"type": "function", "function": {"name": "f", "parameters": [1]}}]},
        "tools[1].function.parameters", ["JSON schema object"])
    bad(qwen, {"tools": [WEATHER, WEATHER]}, "tools[1].function.name", ["two tools"])
    bad(qwen, {"tools": {"get_weather": fn}}, "tools", ["list"])
    bad(qwen, {"tools": []}, "tools", ["at least one"])
    bad(qwen, {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "get_time"}}},
        "tool_choice.function.name", ["get_time", "not one of"])
    bad(qwen, {"tools": [WEATHER], "tool_choice": "always"}, "tool_choice", ["auto", "required"])
    bad(qwen, {"tool_choice": "required"}, "tool_choice", ["needs 'tools'"])
    bad(qwen, {"tool_choice": "auto"}, "tool_choice", ["needs 'tools'"])
    bad(qwen, {"parallel_tool_calls": False}, "parallel_tool_calls", ["needs 'tools'"])
    bad(qwen, {"tools": [WEATHER], "parallel_tool_calls": "yes"}, "parallel_tool_calls", ["true or false"])
    bad(qwen, {"functions": [fn]}, "functions", ["use 'tools'"])


def test_bad_tool_messages_are_400(qwen):
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    bad(qwen, {"messages": ASK + [{"role": "assistant", "tool_calls": [call]}, {"role": "tool", "content": RESULT}]},
        "messages[2].tool_call_id", ["required"])
    bad(qwen, {"messages": ASK + [{"role": "assistant", "tool_calls": [{**call, "function": {"name": "f"}}]}]},
        "messages[1].tool_calls[0].function.arguments", ["required"])
    bad(qwen, {"messages": ASK + [{"role": "assistant", "tool_calls": [{k: v for k, v in call.items() if k != "id"}]}]},
        "messages[1].tool_calls[0].id", ["required"])
    bad(qwen, {"messages": ASK + [{"role": "assistant", "content": None}]}, "messages[1].content", ["required"])
    bad(qwen, {"messages": [{"role": "robot", "content": "hi"}]}, "messages[0].role", ["tool"])


def test_tools_on_a_template_without_them_are_400(start_server):
    s = start_server("--parallel", "1", "-c", "1024")  # smollm2:135m: its template has no tools
    bad(s, {"tools": [WEATHER]}, "tools", ["does not support tools"])
    bad(s, {"messages": ASK + [{"role": "tool", "tool_call_id": "call_1", "content": RESULT}]},
        "messages[1].role", ["does not support tools"])
