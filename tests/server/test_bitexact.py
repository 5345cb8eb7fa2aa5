"""Greedy chat over HTTP is `tally run --chat` greedy, bit for bit; the same
request twice is a prefix-cache hit the second time, with the same text; a
reply sliding past the context (`serve --sinks`) is `tally run --stream`'s."""

from __future__ import annotations

import json
import math
import struct
import subprocess
import threading
import uuid

import pytest

from conftest import default_model, tally_bin

PROMPTS = [
    "What is a KV cache?",
    "Give me three tips for a good night's sleep.",
]


def chat(srv, text: str, max_tokens: int, **kw) -> dict:
    status, _, out = srv.post("/v1/chat/completions", {"messages": [{"role": "user", "content": text}],
                                                       "max_tokens": max_tokens, "temperature": 0, **kw})
    assert status == 200, out
    return json.loads(out)


def stream_text(srv, text: str, max_tokens: int) -> str:
    status, _, out = srv.post("/v1/chat/completions", {"messages": [{"role": "user", "content": text}],
                                                       "max_tokens": max_tokens, "temperature": 0, "stream": True})
    assert status == 200, out
    parts = []
    for ev in out.split(b"\n\n"):
        if ev.startswith(b"data: {"):
            c = json.loads(ev[6:])
            parts += [ch["delta"].get("content") or "" for ch in c["choices"]]
    return "".join(parts)


@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_chat_equals_tally_run(server, prompt):
    n = 48
    run = subprocess.run([tally_bin(), "run", "-m", str(default_model()), "--chat", "-p", prompt, "-n", str(n),
                          "--temp", "0", "--json"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    want = json.loads(run.stdout)
    got = chat(server, prompt, n, logprobs=True)
    assert got["usage"]["prompt_tokens"] == want["prompt_tokens"]
    assert got["choices"][0]["message"]["content"] == want["text"]
    assert got["usage"]["completion_tokens"] == want["generated_tokens"]
    # Token by token: the pieces of the chosen tokens are the run's tokens' pieces.
    status, _, out = server.post("/detokenize", {"tokens": want["token_ids"]})
    assert json.loads(out)["content"] == want["text"]
    assert len(got["choices"][0]["logprobs"]["content"]) == len(want["token_ids"])
    assert got["choices"][0]["finish_reason"] == ("length" if want["generated_tokens"] == n else "stop")
    # Streamed, the same text.
    assert stream_text(server, prompt, n) == want["text"]


def test_same_request_twice_is_a_prefix_cache_hit(server):
    # A prompt no earlier request shared past the chat template's opening.
    prompt = f"Request {uuid.uuid4().hex}: explain in two sentences why the sky looks blue."
    first = chat(server, prompt, 24)
    second = chat(server, prompt, 24)
    p = first["usage"]["prompt_tokens"]
    assert second["usage"]["prompt_tokens"] == p
    c1 = first["usage"]["prompt_tokens_details"]["cached_tokens"]
    c2 = second["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert c2 > 0 and c2 > c1, (c1, c2)
    # All but the last block boundary of the prompt comes from the cache (blocks of 32 positions).
    assert c2 >= p - 32, (p, c2)
    assert second["choices"][0]["message"]["content"] == first["choices"][0]["message"]["content"]


def test_a_reply_past_the_context_slides_as_run_stream_does(start_server):
    """serve --sinks 4 with a 256-position context: a 400-token greedy completion slides its window
    (StreamingLLM) instead of ending at the context, token for token as `tally run --stream` does."""
    srv = start_server("--parallel", "2", "-c", "256", "--sinks", "4", "--max-tokens", "400")
    prompt, n = "1, 2, 3, 4, 5,", 400
    run = subprocess.run([tally_bin(), "run", "-m", str(default_model()), "-p", prompt, "-n", str(n), "--temp", "0",
                          "--stream", "--sinks", "4", "-c", "256", "--json"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    want = json.loads(run.stdout)
    assert want["generated_tokens"] == n and want["prompt_tokens"] + n > 256  # it did slide
    status, _, out = srv.post("/v1/completions", {"prompt": prompt, "max_tokens": n, "temperature": 0})
    assert status == 200, out
    got = json.loads(out)
    assert got["choices"][0]["text"] == want["text"]
    assert got["usage"]["completion_tokens"] == n and got["choices"][0]["finish_reason"] == "length"
    # Without --sinks the same request ends at the context.
    plain = start_server("--parallel", "2", "-c", "256", "--max-tokens", "400")
    status, _, out = plain.post("/v1/completions", {"prompt": prompt, "max_tokens": n, "temperature": 0})
    assert status == 200, out
    capped = json.loads(out)
    assert capped["usage"]["completion_tokens"] == 256 - want["prompt_tokens"]
    assert want["text"].startswith(capped["choices"][0]["text"])


def _f32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


def test_embeddings_are_tally_embeds_normalized_and_run_beside_a_stream(server):
    """/v1/embeddings is computed by the engine thread: each vector is `tally embed`'s mean-pooled last
    hidden state, normalized as the server normalizes (double sum, float quotient), bit for bit, and a
    stream running at the same time still ends with [DONE]."""
    texts = ["The cat sat on the mat.", "Quarterly revenue grew by four percent."]
    streamed: dict = {}

    def stream():
        streamed["text"] = stream_text(server, "Count from one to twenty.", 48)

    t = threading.Thread(target=stream)
    t.start()
    status, _, out = server.post("/v1/embeddings", {"input": texts, "model": "x"})
    t.join(120)
    assert status == 200, out
    got = [d["embedding"] for d in json.loads(out)["data"]]
    for text, vec in zip(texts, got):
        run = subprocess.run([tally_bin(), "embed", "-m", str(default_model()), "-p", text, "--json"],
                             capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr
        raw = json.loads(run.stdout)["embedding"]
        norm = math.sqrt(sum(x * x for x in raw))
        assert vec == [_f32(x / norm) for x in raw]
    assert streamed.get("text")
