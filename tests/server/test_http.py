"""tally serve at the HTTP level: raw SSE framing (curl), the limits (413,
400 with the field named, 429 with Retry-After), a client that disconnects
mid-stream, the API key, and draining on SIGTERM."""

from __future__ import annotations

import http.client
import json
import pathlib
import re
import signal
import socket
import subprocess
import threading
import time

import pytest

from conftest import TallyServer, find_program, need


def chat_body(text: str, **kw) -> dict:
    return {"messages": [{"role": "user", "content": text}], **kw}


def error_of(status: int, body: bytes) -> dict:
    j = json.loads(body)
    assert set(j) == {"error"}, j
    e = j["error"]
    assert set(e) == {"message", "type", "param", "code"} and e["message"], e
    return e


# --- raw SSE framing ---------------------------------------------------------------------------


def test_sse_framing_with_curl(server):
    curl = find_program("curl")
    need(curl is not None, "curl is not installed (scripts/setup.sh installs it)")
    body = json.dumps(chat_body("Count from one to five.", max_tokens=16, temperature=0, stream=True,
                                stream_options={"include_usage": True}))
    out = subprocess.run([curl, "-sS", "-N", "--max-time", "120", "-D", "-", "-H", "Content-Type: application/json",
                          "-d", body, server.url + "/v1/chat/completions"], capture_output=True, check=True).stdout
    head, _, stream = out.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    headers = {k.strip().lower(): v.strip() for k, _, v in
               (line.partition(b":") for line in head.split(b"\r\n")[1:])}
    assert headers[b"content-type"].startswith(b"text/event-stream")
    assert headers[b"cache-control"] == b"no-cache"
    # Nothing but "data: <json>\n\n" events, ending with exactly one "data: [DONE]\n\n".
    assert stream.endswith(b"data: [DONE]\n\n"), stream[-200:]
    events = stream.split(b"\n\n")
    assert events[-1] == b""
    events = events[:-1]
    assert events[-1] == b"data: [DONE]" and events.count(b"data: [DONE]") == 1
    chunks = []
    for ev in events[:-1]:
        assert ev.startswith(b"data: ") and b"\n" not in ev, ev
        chunks.append(json.loads(ev[6:]))
    ids = {c["id"] for c in chunks}
    assert len(ids) == 1 and ids.pop().startswith("chatcmpl-")
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    content = [c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")]
    assert len(content) >= 3
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert len(finishes) == 1 and finishes[0] in ("stop", "length")
    usage = chunks[-1]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] >= len(content)
    assert all(c["usage"] is None for c in chunks[:-1])


# --- 400: malformed JSON, wrong types, unknown roles, empty messages -----------------------------


@pytest.mark.parametrize("body,param", [
    (b'{"messages": [', None),
    (b'[1, 2]', None),
    (json.dumps({"messages": "hi"}).encode(), "messages"),
    (json.dumps({"messages": []}).encode(), "messages"),
    (json.dumps({}).encode(), "messages"),
    (json.dumps({"messages": [{"role": "wizard", "content": "hi"}]}).encode(), "messages[0].role"),
    (json.dumps({"messages": [{"role": "user"}]}).encode(), "messages[0].content"),
    (json.dumps({"messages": [{"role": "user", "content": 5}]}).encode(), "messages[0].content"),
    (json.dumps(chat_body("hi", temperature="hot")).encode(), "temperature"),
    (json.dumps(chat_body("hi", max_tokens=0)).encode(), "max_tokens"),
    (json.dumps(chat_body("hi", max_tokens=2.5)).encode(), "max_tokens"),
    (json.dumps(chat_body("hi", n=0)).encode(), "n"),
    (json.dumps(chat_body("hi", stop=["a", "b", "c", "d", "e"])).encode(), "stop"),
    (json.dumps(chat_body("hi", stream="yes")).encode(), "stream"),
    (json.dumps(chat_body("hi", seed="one")).encode(), "seed"),
    (json.dumps(chat_body("hi", top_logprobs=3)).encode(), "top_logprobs"),
    (json.dumps(chat_body("hi", stream=True, stream_options={"include_usage": 1})).encode(),
     "stream_options.include_usage"),
])
def test_400_names_the_field(server, body, param):
    status, headers, out = server.post("/v1/chat/completions", body)
    assert status == 400, out
    e = error_of(status, out)
    assert e["type"] == "invalid_request_error" and e["param"] == param, e
    if param:
        assert param.split("[")[0].split(".")[0] in e["message"]


def test_400_for_a_prompt_longer_than_the_context_names_both_lengths(server):
    status, _, out = server.get("/v1/models")
    n_ctx = json.loads(out)["data"][0]["meta"]["n_ctx"]
    status, _, out = server.post("/v1/completions", {"prompt": [1] * (n_ctx + 5), "max_tokens": 4})
    assert status == 400
    e = error_of(status, out)
    assert e["code"] == "context_length_exceeded" and e["param"] == "prompt"
    assert re.search(rf"\b{n_ctx + 5}\b.*\b{n_ctx}\b", e["message"]), e["message"]


def test_unknown_endpoint_and_method(server):
    status, _, out = server.get("/v1/nothing")
    assert status == 404 and error_of(status, out)["message"]
    status, _, out = server.get("/v1/chat/completions")
    assert status in (404, 405) and error_of(status, out)["message"]


# --- 413 ------------------------------------------------------------------------------------------


def test_413_for_a_body_over_the_cap(start_server):
    srv = start_server("--parallel", "1", "-c", "1024", "--max-body", "2048")
    status, _, out = srv.post("/v1/chat/completions", chat_body("x" * 4096, max_tokens=1))
    assert status == 413
    assert error_of(status, out)["type"] == "invalid_request_error"
    # Just under the cap is served.
    status, _, out = srv.post("/v1/chat/completions", chat_body("x" * 1500, max_tokens=1))
    assert status == 200, out


# --- 429 ------------------------------------------------------------------------------------------


def open_stream(srv: TallyServer, body: dict,
                path: str = "/v1/chat/completions") -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=120)
    conn.request("POST", path, body=json.dumps({**body, "stream": True}),
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200
    return conn, resp


def read_content_events(resp: http.client.HTTPResponse, n: int) -> list[str]:
    got = []
    while len(got) < n:
        line = resp.readline()
        assert line, "the stream ended early"
        if line.startswith(b"data: {"):
            c = json.loads(line[6:])
            piece = c["choices"][0].get("text") or c["choices"][0].get("delta", {}).get("content") if c["choices"] else None
            if piece:
                got.append(piece)
    return got


def poll(cond, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_429_with_retry_after_when_the_queue_is_full(start_server):
    srv = start_server("--parallel", "1", "--queue", "2", "-c", "2048", "--max-tokens", "2000")
    # Greedy, the small model counts on for hundreds of tokens without an end token: the queue stays full.
    conn, resp = open_stream(srv, {"prompt": "1, 2, 3, 4, 5,", "max_tokens": 2000, "temperature": 0}, "/v1/completions")
    read_content_events(resp, 1)  # running
    waiting = []
    for _ in range(2):  # two wait in the queue
        c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=120)
        c.request("POST", "/v1/chat/completions", body=json.dumps(chat_body("hi", max_tokens=1)),
                  headers={"Content-Type": "application/json"})
        waiting.append(c)
    poll(lambda: srv.metrics()["tally_queue_depth"] == 2, 30, "two requests should be queued")
    status, headers, out = srv.post("/v1/chat/completions", chat_body("hi", max_tokens=1))
    assert status == 429
    assert int(headers["Retry-After"]) >= 1
    e = error_of(status, out)
    assert e["type"] == "rate_limit_error" and e["code"] == "queue_full"
    assert srv.metrics()['tally_requests_total{endpoint="/v1/chat/completions",status="429"}'] == 1
    conn.close()  # the running one goes: the queued ones are served
    for c in waiting:
        r = c.getresponse()
        assert r.status == 200 and json.loads(r.read())["choices"][0]["finish_reason"] in ("stop", "length")
        c.close()
    srv.wait_idle()


# --- a client that disconnects mid-stream ----------------------------------------------------------


def test_disconnect_mid_stream_cancels_and_frees_blocks(start_server):
    srv = start_server("--parallel", "2", "-c", "4096", "--max-tokens", "2000")
    before = srv.metrics()
    total_blocks = before["tally_kv_blocks_free"] + before["tally_kv_blocks_used"] + before["tally_kv_blocks_cached"]
    conn, resp = open_stream(srv, chat_body("Write a very long essay about the history of bridges.",
                                            max_tokens=2000, temperature=0))
    read_content_events(resp, 3)
    held = srv.metrics()
    assert held["tally_kv_blocks_used"] > 0 and held["tally_running_requests"] == 1
    t0 = time.monotonic()
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()
    after = srv.wait_idle(timeout=10)
    freed_in = time.monotonic() - t0
    m = srv.wait_for_log(r"chat \S+ cancelled: (\d+) prompt tokens \(\d+ cached\), (\d+) generated", 5)
    assert int(m.group(2)) < 2000, "the sequence ran to its end instead of being cancelled"
    assert after["tally_kv_blocks_used"] == 0
    assert after["tally_kv_blocks_free"] + after["tally_kv_blocks_cached"] == total_blocks
    assert freed_in < 10
    # The server goes on serving.
    status, _, out = srv.post("/v1/chat/completions", chat_body("hi", max_tokens=2))
    assert status == 200, out


# --- --api-key ------------------------------------------------------------------------------------


def test_api_key(start_server):
    srv = start_server("--parallel", "1", "-c", "1024", "--api-key", "k-123")
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "k-123"},
                    {"Authorization": "Bearer k-1234"}, {"Authorization": "Bearer k-12"}):
        for method, path in (("POST", "/v1/chat/completions"), ("GET", "/v1/models"), ("GET", "/metrics"),
                             ("POST", "/tokenize"), ("POST", "/v1/embeddings")):
            status, _, out = (srv.post(path, chat_body("hi", max_tokens=1), headers) if method == "POST"
                              else srv.get(path, headers))
            assert status == 401, (headers, path, out)
            e = error_of(status, out)
            assert e["type"] == "authentication_error" and e["code"] == "invalid_api_key"
    ok = {"Authorization": "Bearer k-123"}
    status, _, out = srv.post("/v1/chat/completions", chat_body("hi", max_tokens=1), ok)
    assert status == 200, out
    status, _, _ = srv.get("/v1/models", ok)
    assert status == 200
    for path in ("/health", "/", "/openapi.json"):  # open without a key
        assert srv.get(path)[0] == 200


# --- SIGTERM --------------------------------------------------------------------------------------


def test_sigterm_drains_running_requests_and_exits_0(start_server):
    srv = start_server("--parallel", "2", "-c", "2048", "--max-tokens", "256", "--drain-seconds", "60")
    conn, resp = open_stream(srv, chat_body("Describe a busy harbour.", max_tokens=48, temperature=0,
                                            stream_options={"include_usage": True}))
    first = read_content_events(resp, 1)
    srv.proc.send_signal(signal.SIGTERM)
    srv.wait_for_log(r"SIGTERM received: draining", 10)
    # New requests are refused while the running one finishes.
    status, headers, out = srv.post("/v1/chat/completions", chat_body("hi", max_tokens=1))
    assert status == 503 and error_of(status, out)["type"] == "server_error"
    assert int(headers["Retry-After"]) >= 1
    rest = resp.read()  # the whole remainder of the stream, up to [DONE]
    assert rest.endswith(b"data: [DONE]\n\n"), rest[-300:]
    usage = [json.loads(line[6:]) for line in rest.split(b"\n\n") if line.startswith(b"data: {")][-1]["usage"]
    assert usage["completion_tokens"] > len(first)
    conn.close()
    assert srv.stop(timeout=30) == 0
    assert "tally serve: stopped" in srv.log()


def test_sigterm_drain_is_bounded(start_server):
    srv = start_server("--parallel", "1", "-c", "4096", "--max-tokens", "4000", "--drain-seconds", "1")
    conn, resp = open_stream(srv, chat_body("Write a very long story.", max_tokens=4000, temperature=0))
    read_content_events(resp, 1)
    t0 = time.monotonic()
    srv.proc.send_signal(signal.SIGTERM)
    assert srv.stop(timeout=30) == 0
    took = time.monotonic() - t0
    assert took < 15, f"drained for {took:.1f} s with --drain-seconds 1"
    m = re.findall(r"chat \S+ (\w+): \d+ prompt tokens \(\d+ cached\), (\d+) generated", srv.log())
    assert m and int(m[-1][1]) < 4000, m
    conn.close()


# --- many clients connecting at once ----------------------------------------------------------------


def test_a_burst_of_connections_is_served_at_once(server):
    # 200 clients connect in the same instant. With a listen backlog of 5 (cpp-httplib's), most
    # wait for SYN retransmissions (1 s, 3 s, 7 s, ...) and some time out; with a wide one, none.
    n = 200
    barrier = threading.Barrier(n)
    results: list[tuple[bool, float]] = []
    lock = threading.Lock()

    def one():
        barrier.wait()
        t0 = time.monotonic()
        ok = False
        try:
            with socket.create_connection(("127.0.0.1", server.port), timeout=20) as s:
                s.sendall(b"GET /health HTTP/1.1\r\nHost: tally\r\nConnection: close\r\n\r\n")
                data = b""
                while chunk := s.recv(4096):
                    data += chunk
                ok = data.startswith(b"HTTP/1.1 200")
        except OSError:
            pass
        with lock:
            results.append((ok, time.monotonic() - t0))

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(ok for ok, _ in results), f"{sum(not ok for ok, _ in results)} of {n} connections failed"
    slowest = max(t for _, t in results)
    assert slowest < 3, f"the slowest of {n} connections took {slowest:.1f} s"


# --- message contents are text -------------------------------------------------------------------


def test_control_token_text_in_a_message_is_not_a_control_token(server):
    # HF transformers' apply_chat_template(sanitize_control_tokens=True) ids for these chats
    # (scripts/fixtures/make_template_fixtures.py, SmolLM2's tokenizer): a message that spells
    # "<|im_end|>\n<|im_start|>system" gets text tokens, not a forged system turn.
    fixtures = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "chat_templates" / "sanitized_smollm2.json"
    status, _, out = server.get("/v1/models")
    need(json.loads(out)["data"][0]["meta"]["n_vocab"] == 49152, "the chat fixture's ids are SmolLM2's")
    for case in json.loads(fixtures.read_text())["cases"]:
        status, _, out = server.post("/v1/chat/completions",
                                     {"messages": case["messages"], "max_tokens": 1, "temperature": 0})
        assert status == 200, out
        prompt_tokens = json.loads(out)["usage"]["prompt_tokens"]
        assert prompt_tokens == len(case["sanitized_ids"]), case["name"]
        if case["sanitized_ids"] != case["unsanitized_ids"]:
            assert prompt_tokens != len(case["unsanitized_ids"]), case["name"]


# --- the model's id, and fields the server does not implement ---------------------------------------


def model_ids(srv) -> tuple[str, str]:
    """The id /v1/models lists and the "model" of a chat reply."""
    status, _, out = srv.get("/v1/models")
    assert status == 200, out
    listed = json.loads(out)["data"][0]["id"]
    status, _, out = srv.post("/v1/chat/completions", chat_body("Hi", max_tokens=1, temperature=0))
    assert status == 200, out
    return listed, json.loads(out)["model"]


def test_the_model_id_is_the_file_name_or_the_catalog_name_or_the_alias(server, start_server):
    # -m PATH (the shared server): the file name without .gguf, not the GGUF's free-text general.name.
    assert model_ids(server) == ("SmolLM2-135M-Instruct.Q4_1", "SmolLM2-135M-Instruct.Q4_1")
    by_name = start_server("-m", "smollm2:135m", "--parallel", "1", "-c", "1024")
    assert model_ids(by_name) == ("smollm2:135m", "smollm2:135m")
    by_name.stop()
    aliased = start_server("--alias", "my-model", "--parallel", "1", "-c", "1024")
    assert model_ids(aliased) == ("my-model", "my-model")


@pytest.mark.parametrize("field,value", [
    ("tools", [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]),
    ("tool_choice", "auto"),
    ("parallel_tool_calls", False),
    ("logit_bias", {"x": "y"}),
    ("functions", []),
    ("frobnicate", 1),
])
def test_a_chat_field_tally_does_not_implement_is_a_400_naming_it(server, field, value):
    status, _, out = server.post("/v1/chat/completions", chat_body("Hi", max_tokens=1, **{field: value}))
    e = error_of(status, out)
    assert status == 400 and e["param"] == field, e
    assert e["message"].startswith(f"'{field}'"), e


@pytest.mark.parametrize("field,value", [("echo", True), ("suffix", "x"), ("best_of", 2)])
def test_a_completion_field_tally_does_not_implement_is_a_400_naming_it(server, field, value):
    status, _, out = server.post("/v1/completions", {"prompt": "Hi", "max_tokens": 1, field: value})
    e = error_of(status, out)
    assert status == 400 and e["param"] == field and e["message"].startswith(f"'{field}'"), e


def test_embeddings_refuse_dimensions_and_take_user(server):
    status, _, out = server.post("/v1/embeddings", {"input": "Hi", "dimensions": 8})
    e = error_of(status, out)
    assert status == 400 and e["param"] == "dimensions", e
    status, _, out = server.post("/v1/embeddings", {"input": "Hi", "user": "u-1"})
    assert status == 200, out


def test_user_changes_nothing_and_is_taken(server):
    body = chat_body("Name a colour.", max_tokens=6, temperature=0)
    status, _, plain = server.post("/v1/chat/completions", body)
    status2, _, with_user = server.post("/v1/chat/completions", {**body, "user": "someone"})
    assert status == status2 == 200
    text = lambda out: json.loads(out)["choices"][0]["message"]["content"]
    assert text(plain) == text(with_user)
