"""Request fields are honoured or refused, never dropped without a word:
logit_bias (OpenAI's: added to a token's logit; checked against the greedy
choice and the model's own runner-up), the embeddings' encoding_format
(base64 is the float32 bytes of the float answer, bit for bit, as the
official client decodes it) and dimensions, and a 400 naming any field an
endpoint does not take (tools outside chat, a typo)."""

from __future__ import annotations

import base64
import json
import struct
import subprocess
import sys

import openai
import pytest

from conftest import TallyServer


def client(srv: TallyServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="none", max_retries=0, timeout=120)


def post(srv: TallyServer, path: str, body: dict) -> tuple[int, dict]:
    status, _, raw = srv.post(path, json.dumps(body).encode())
    return status, json.loads(raw)


def token_id(srv: TallyServer, text: str) -> int:
    status, j = post(srv, "/tokenize", {"content": text})
    assert status == 200 and len(j["tokens"]) == 1, j
    return j["tokens"][0]


def first_token(srv: TallyServer, **kw) -> dict:
    status, j = post(srv, "/v1/completions", {"prompt": "The capital of France is", "max_tokens": 1,
                                             "temperature": 0, "logprobs": 2, **kw})
    assert status == 200, j
    lp = j["choices"][0]["logprobs"]
    return {"text": j["choices"][0]["text"], "top": lp["top_logprobs"][0]}


def test_logit_bias_moves_the_greedy_choice(server):
    plain = first_token(server)
    best, = [t for t, v in plain["top"].items() if t == plain["text"]]
    runner_up, = [t for t in plain["top"] if t != best]
    # -100 on the model's choice: greedy takes its runner-up, as the model ranked it.
    banned = first_token(server, logit_bias={str(token_id(server, best)): -100})
    assert banned["text"] == runner_up, (plain, banned)
    # +100 on a token the model would not pick: greedy takes it.
    forced = token_id(server, " banana")
    assert first_token(server, logit_bias={str(forced): 100})["text"] == " banana"
    # Chat takes the same field.
    status, j = post(server, "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Say yes."}], "max_tokens": 1, "temperature": 0,
        "logit_bias": {str(forced): 100}})
    assert status == 200 and j["choices"][0]["message"]["content"] == " banana", j
    # A bias of 0 changes nothing.
    assert first_token(server, logit_bias={str(forced): 0})["text"] == plain["text"]


@pytest.mark.parametrize("bias,words", [
    ([1, 2], "must be an object"),
    ({"abc": 1}, "keys must be token ids"),
    ({"-1": 1}, "keys must be token ids"),
    ({"1.5": 1}, "keys must be token ids"),
    ({"99999999": 1}, "keys must be token ids"),
    ({"1": 101}, "between -100 and 100"),
    ({"1": -100.5}, "between -100 and 100"),
    ({"1": "5"}, "values must be numbers"),
    ({"1": None}, "values must be numbers"),
])
def test_an_invalid_logit_bias_is_a_400(server, bias, words):
    for path, body in (("/v1/completions", {"prompt": "hi"}),
                       ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})):
        status, j = post(server, path, {**body, "max_tokens": 1, "logit_bias": bias})
        assert status == 400, j
        assert j["error"]["param"] == "logit_bias" and words in j["error"]["message"], j


def test_base64_embeddings_are_the_float32_bytes(server):
    texts = ["The cat sat on the mat.", "Quarterly revenue grew by four percent."]
    status, floats = post(server, "/v1/embeddings", {"input": texts, "encoding_format": "float"})
    assert status == 200, floats
    status, b64 = post(server, "/v1/embeddings", {"input": texts, "encoding_format": "base64"})
    assert status == 200, b64
    for f, b in zip(floats["data"], b64["data"]):
        raw = base64.b64decode(b["embedding"], validate=True)
        assert len(raw) == 4 * len(f["embedding"])
        assert list(struct.unpack(f"<{len(f['embedding'])}f", raw)) == f["embedding"]
    # The official client asks for base64 unless told otherwise, and decodes it.
    c = client(server)
    default = c.embeddings.create(model="x", input=texts)
    assert [list(d.embedding) for d in default.data] == [d["embedding"] for d in floats["data"]]
    # dimensions: the model's own size is served, no other.
    n = len(floats["data"][0]["embedding"])
    status, j = post(server, "/v1/embeddings", {"input": texts[0], "dimensions": n})
    assert status == 200 and len(j["data"][0]["embedding"]) == n, j
    for bad in (n - 1, n + 1, 0, "256"):
        status, j = post(server, "/v1/embeddings", {"input": texts[0], "dimensions": bad})
        assert status == 400 and j["error"]["param"] == "dimensions", j
    for bad in ("float16", "", 1, ["base64"]):
        status, j = post(server, "/v1/embeddings", {"input": texts[0], "encoding_format": bad})
        assert status == 400 and j["error"]["param"] == "encoding_format", j
    with pytest.raises(openai.BadRequestError) as e:
        c.embeddings.create(model="x", input="hi", dimensions=n // 2)
    assert e.value.status_code == 400


@pytest.mark.parametrize("path,body", [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 1}),
    ("/v1/embeddings", {"input": "hi"}),
])
def test_a_field_the_endpoint_does_not_take_is_a_400(server, path, body):
    # Chat takes tools, but not on smollm2, whose template has none (test_tools.py has the rest).
    no_tools = "does not support tools" if "chat" in path else "tools are taken by chat completions only"
    for field, value, words in (
            ("frobnicate", 1, "'frobnicate' is not a field of this request"),
            ("tools", [{"type": "function", "function": {"name": "f"}}], no_tools),
            ("functions", [{"name": "f"}], "use 'tools'"),
            ("max_token", 5, "'max_token' is not a field"),  # a typo is not ignored
            ("\x1b[2J", 1, "'\\x1b[2J' is not a field")):  # named, escaped
        status, j = post(server, path, {**body, field: value})
        assert status == 400, (field, j)
        assert words in j["error"]["message"], (field, j)
    # Accepted: the default response format, a caller label, and null for a field (as if absent).
    extra = {"user": "someone", "tools": None}
    if path != "/v1/embeddings":
        extra["response_format"] = {"type": "text"}
    status, j = post(server, path, {**body, **extra})
    assert status == 200, j


def test_logits_that_are_not_finite_end_the_choice_not_the_server(start_server, tmp_path):
    # Finite weights that overflow: every output-norm weight is FLT_MAX, so the logits come out NaN.
    from conftest import ROOT, default_model
    broken = tmp_path / "overflow.gguf"
    subprocess.run([sys.executable, str(ROOT / "tests" / "cli" / "gguf_edit.py"), str(default_model()), str(broken),
                    "poke", "output_norm.weight", "0", "ffff7f7f" * 576], check=True)
    srv = start_server("-m", str(broken), "--parallel", "2", "-c", "1024")
    for stream in (False, True):
        status, _, raw = srv.post("/v1/completions", json.dumps({"prompt": "Hello", "max_tokens": 4,
                                                                 "stream": stream}).encode())
        assert status == 200, raw
        if stream:
            events = [json.loads(line[6:]) for line in raw.decode().split("\n\n") if line.startswith("data: {")]
            finishes = [c["finish_reason"] for e in events for c in e["choices"] if c["finish_reason"]]
        else:
            finishes = [c["finish_reason"] for c in json.loads(raw)["choices"]]
        assert finishes == ["error"], raw
    srv.wait_for_log(r"choice 0: the model's logits are not finite", 10)
    status, _, _ = srv.get("/health")
    assert status == 200
    assert srv.wait_idle(timeout=30)["tally_kv_blocks_used"] == 0
