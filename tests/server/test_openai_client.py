"""The official `openai` Python package against a live tally serve: what a
client of OpenAI's API sees (objects, streaming, n, stop, seed, embeddings)
and the exception types it raises for 400, 401 and 429."""

from __future__ import annotations

import math
import threading
import time

import openai
import pytest

from conftest import TallyServer


def client(srv: TallyServer, key: str = "none") -> openai.OpenAI:
    # max_retries=0: a 429 must reach the test, not be retried by the client.
    return openai.OpenAI(base_url=srv.url + "/v1", api_key=key, max_retries=0, timeout=120)


def model_id(srv: TallyServer) -> str:
    return client(srv).models.list().data[0].id


def ask(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def test_models_lists_the_loaded_model(server):
    models = client(server).models.list().data
    assert len(models) == 1
    assert models[0].object == "model" and models[0].id


def test_chat_completion(server):
    c = client(server)
    r = c.chat.completions.create(model=model_id(server), messages=ask("What is the capital of France?"),
                                  max_tokens=24, temperature=0)
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")
    assert len(r.choices) == 1
    ch = r.choices[0]
    assert ch.index == 0 and ch.message.role == "assistant"
    assert ch.message.content.strip()
    assert ch.finish_reason in ("stop", "length")
    assert r.usage.prompt_tokens > 0 and 0 < r.usage.completion_tokens <= 24
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    if ch.finish_reason == "length":
        assert r.usage.completion_tokens == 24


def test_stream_equals_the_whole_answer(server):
    c = client(server)
    kw = dict(model=model_id(server), messages=ask("Name three rivers of Europe."), max_tokens=40, temperature=0)
    whole = c.chat.completions.create(**kw)
    chunks = list(c.chat.completions.create(**kw, stream=True, stream_options={"include_usage": True}))
    assert all(k.object == "chat.completion.chunk" for k in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(k.choices[0].delta.content or "" for k in chunks if k.choices)
    finish = [k.choices[0].finish_reason for k in chunks if k.choices and k.choices[0].finish_reason]
    content_chunks = [k for k in chunks if k.choices and k.choices[0].delta.content]
    assert len(content_chunks) > 3, "the reply came in one piece, not streamed token by token"
    assert text == whole.choices[0].message.content
    assert finish == [whole.choices[0].finish_reason]
    usage = chunks[-1].usage
    assert chunks[-1].choices == [] and usage is not None
    assert usage.completion_tokens == whole.usage.completion_tokens
    assert usage.prompt_tokens == whole.usage.prompt_tokens


def test_n2_choices_are_the_seeded_single_runs(server):
    c = client(server)
    kw = dict(model=model_id(server), messages=ask("Write one sentence about the sea."), max_tokens=24,
              temperature=1.0)
    two = c.chat.completions.create(**kw, n=2, seed=41)
    assert [ch.index for ch in two.choices] == [0, 1]
    assert all(ch.message.content for ch in two.choices)
    # Choice i is sampled with seed + i: each equals a one-choice request with that seed.
    ones = [c.chat.completions.create(**kw, seed=41 + i) for i in range(2)]
    for i, one in enumerate(ones):
        assert one.choices[0].message.content == two.choices[i].message.content
    assert two.usage.completion_tokens == sum(one.usage.completion_tokens for one in ones)
    assert two.usage.prompt_tokens == ones[0].usage.prompt_tokens


def test_stop_cuts_before_the_stop_string(server):
    c = client(server)
    kw = dict(model=model_id(server), messages=ask("Describe a lighthouse in two sentences."), max_tokens=48,
              temperature=0)
    full = c.chat.completions.create(**kw).choices[0].message.content
    words = [w for w in full.split() if len(w) >= 4 and w.isalpha()]
    assert len(words) >= 3, full
    stop = words[2]  # a word well inside the reply
    cut = c.chat.completions.create(**kw, stop=[stop, "zzzz-never"]).choices[0]
    assert cut.finish_reason == "stop"
    assert cut.message.content == full[: full.index(stop)]
    # Streamed, the held-back prefix of a stop string never leaks out either.
    streamed = "".join(k.choices[0].delta.content or "" for k in
                       c.chat.completions.create(**kw, stop=stop, stream=True) if k.choices)
    assert streamed == cut.message.content


def test_seed_reproduces_a_sampled_reply(server):
    c = client(server)
    kw = dict(model=model_id(server), messages=ask("Write a short poem about autumn leaves."), max_tokens=32,
              temperature=1.0, top_p=0.95)
    a = c.chat.completions.create(**kw, seed=1234).choices[0].message.content
    b = c.chat.completions.create(**kw, seed=1234).choices[0].message.content
    other = c.chat.completions.create(**kw, seed=98765).choices[0].message.content
    assert a == b
    assert a != other, "another seed gave the same sampled text: the seed is not used"


def test_logprobs(server):
    c = client(server)
    r = c.chat.completions.create(model=model_id(server), messages=ask("Say hello."), max_tokens=8, temperature=0,
                                  logprobs=True, top_logprobs=3)
    lp = r.choices[0].logprobs.content
    assert len(lp) == r.usage.completion_tokens
    for t in lp:
        assert len(t.top_logprobs) == 3 and t.logprob <= 0
        # Greedy: the chosen token is the most likely one.
        assert t.top_logprobs[0].token == t.token and math.isclose(t.top_logprobs[0].logprob, t.logprob)
    assert "".join(t.token for t in lp) == r.choices[0].message.content


def test_text_completion(server):
    r = client(server).completions.create(model=model_id(server), prompt="The capital of France is", max_tokens=8,
                                          temperature=0)
    assert r.object == "text_completion" and r.choices[0].text
    assert r.usage.completion_tokens <= 8


def test_embeddings(server):
    c = client(server)
    texts = ["The cat sat on the mat.", "The cat sat on the mat.", "Quarterly revenue grew by four percent."]
    r = c.embeddings.create(model=model_id(server), input=texts)
    assert [d.index for d in r.data] == [0, 1, 2]
    vecs = [d.embedding for d in r.data]
    assert len({len(v) for v in vecs}) == 1 and len(vecs[0]) >= 64
    for v in vecs:
        assert math.isclose(math.sqrt(sum(x * x for x in v)), 1.0, rel_tol=1e-4)
    dot = lambda a, b: sum(x * y for x, y in zip(a, b))
    assert vecs[0] == vecs[1]
    assert dot(vecs[0], vecs[2]) < 0.999
    assert r.usage.prompt_tokens > 0
    one = c.embeddings.create(model=model_id(server), input=texts[0])
    assert one.data[0].embedding == vecs[0]


def test_400_is_bad_request_error_naming_the_field(server):
    c = client(server)
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model="x", messages=ask("hi"), temperature=7)
    assert e.value.status_code == 400 and e.value.param == "temperature"
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model="x", messages=[{"role": "wizard", "content": "hi"}])
    assert e.value.param == "messages[0].role"
    with pytest.raises(openai.BadRequestError) as e:
        c.chat.completions.create(model="x", messages=[])
    assert e.value.param == "messages"


def test_400_for_a_prompt_longer_than_the_context(server):
    n_ctx = client(server).models.list().data[0].model_extra["meta"]["n_ctx"]
    with pytest.raises(openai.BadRequestError) as e:
        client(server).completions.create(model="x", prompt=[1] * (n_ctx + 10), max_tokens=4)
    assert e.value.code == "context_length_exceeded" and e.value.param == "prompt"
    assert str(n_ctx + 10) in e.value.message and str(n_ctx) in e.value.message


def test_401_is_authentication_error(start_server, tmp_path):
    key_file = tmp_path / "key"
    key_file.write_text("s3cret-key\n")
    srv = start_server("--parallel", "1", "-c", "1024", "--api-key-file", str(key_file))
    with pytest.raises(openai.AuthenticationError) as e:
        client(srv, "wrong-key").models.list()
    assert e.value.status_code == 401 and e.value.code == "invalid_api_key"
    r = client(srv, "s3cret-key").chat.completions.create(model="x", messages=ask("hi"), max_tokens=2)
    assert r.choices[0].message.content is not None


def test_429_is_rate_limit_error(start_server):
    srv = start_server("--parallel", "1", "--queue", "1", "-c", "2048", "--max-tokens", "2000")
    c = client(srv)
    # One request running, one waiting: the queue is full.
    running = c.chat.completions.create(model="x", messages=ask("Tell me a long story."), max_tokens=2000,
                                        temperature=0, stream=True)
    deadline = time.monotonic() + 30
    while (m := srv.metrics())["tally_running_requests"] < 1 or m["tally_queue_depth"] > 0:  # poll: admitted
        assert time.monotonic() < deadline, "the first request was never admitted"
        time.sleep(0.02)
    waiting_done = threading.Event()

    def wait_in_queue():
        try:
            client(srv).chat.completions.create(model="x", messages=ask("hi"), max_tokens=1)
        finally:
            waiting_done.set()

    t = threading.Thread(target=wait_in_queue, daemon=True)
    t.start()
    deadline = time.monotonic() + 30
    while srv.metrics()["tally_queue_depth"] < 1:  # poll until the second one waits
        assert time.monotonic() < deadline, "the second request never queued"
        time.sleep(0.02)
    with pytest.raises(openai.RateLimitError) as e:
        c.chat.completions.create(model="x", messages=ask("hi"), max_tokens=1)
    assert e.value.status_code == 429
    assert int(e.value.response.headers["Retry-After"]) >= 1
    running.close()  # cancels the long one: the queued one runs and ends
    assert waiting_done.wait(60)
    t.join()
    srv.wait_idle()
