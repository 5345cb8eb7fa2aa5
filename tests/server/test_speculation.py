"""Speculative decoding in the server (prompt lookup or a draft model, per
request or by `serve --speculate lookup|draft`): greedy replies are the
replies without it, token for token, for one client and for several at once,
whole and streamed, for every draft length; guesses are counted in /metrics;
bad `speculate` / `draft_max` fields are 400s that name the field."""

from __future__ import annotations

import json
import threading

from conftest import need, tally_home
from test_bitexact import chat, stream_text

# Prompts a reply repeats much of (prompt lookup finds guesses) and one it does not.
PROMPTS = [
    "Repeat exactly, line by line:\nalpha beta gamma\ndelta epsilon zeta\neta theta iota\nkappa lambda mu",
    "Rewrite this list in the same order, one item per line: apples, pears, plums, figs, cherries, grapes, limes.",
    "Write one sentence about the sea.",
]


def at_once(n: int, fn) -> list:
    """fn(i) for i in 0..n-1, each on a thread of its own, all at once; the results in order."""
    got: list = [None] * n

    def one(i: int) -> None:
        got[i] = fn(i)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return got


def drafted(srv) -> tuple[float, float]:
    m = srv.metrics()
    return m["tally_speculation_drafted_total"], m["tally_speculation_accepted_total"]


def test_greedy_replies_equal_without_speculation_alone_and_four_at_once(start_server):
    srv = start_server("--parallel", "4", "-c", "4096", "--max-tokens", "96")
    want = {p: chat(srv, p, 80)["choices"][0]["message"]["content"] for p in PROMPTS}
    before = drafted(srv)
    for p in PROMPTS:
        assert chat(srv, p, 80, speculate="lookup")["choices"][0]["message"]["content"] == want[p], p
        assert chat(srv, p, 80, speculate="lookup", draft_max=2)["choices"][0]["message"]["content"] == want[p], p
    after = drafted(srv)
    assert after[0] > before[0], "no guess was verified"
    assert 0 < after[1] - before[1] <= after[0] - before[0]
    # Four clients at once (the step holds several sequences' guesses, or takes fewer).
    got = at_once(4, lambda i: chat(srv, PROMPTS[i % len(PROMPTS)], 80, speculate="lookup")["choices"][0]["message"]["content"])
    for i in range(4):
        assert got[i] == want[PROMPTS[i % len(PROMPTS)]], i


def test_the_servers_default_and_a_request_that_turns_it_off(start_server):
    plain = start_server("--parallel", "2", "-c", "2048")
    want = chat(plain, PROMPTS[0], 80)["choices"][0]["message"]["content"]
    assert drafted(plain) == (0, 0)
    srv = start_server("--parallel", "2", "-c", "2048", "--speculate", "lookup", "--draft-max", "4")
    assert chat(srv, PROMPTS[0], 80)["choices"][0]["message"]["content"] == want
    d = drafted(srv)
    assert d[0] > 0
    assert stream_text(srv, PROMPTS[0], 80) == want
    off = chat(srv, PROMPTS[0], 80, speculate="off")["choices"][0]["message"]["content"]
    assert off == want
    assert drafted(srv)[0] > d[0]  # the stream speculated; the request that said "off" did not
    e = drafted(srv)
    chat(srv, PROMPTS[1], 40, speculate="off")
    assert drafted(srv) == e


def test_bad_speculation_fields_are_400s_naming_the_field(start_server):
    srv = start_server("--parallel", "2", "-c", "2048", "--draft-max", "4")
    msgs = [{"role": "user", "content": "hi"}]
    for body, param, words in [
        ({"speculate": "drafts"}, "speculate", "'speculate' must be \"lookup\", \"draft\" or \"off\", not 'drafts'"),
        ({"speculate": 1}, "speculate", "'speculate' must be \"lookup\", \"draft\" or \"off\", not an integer"),
        ({"speculate": "draft"}, "speculate", "'speculate': 'draft' needs a draft model, and this server has none"),
        ({"speculate": "lookup", "draft_max": 0}, "draft_max", "draft_max"),
        ({"speculate": "lookup", "draft_max": 65}, "draft_max", "draft_max"),
        ({"draft_max": 2}, "draft_max", "speculative decoding, which is off for this request: give 'speculate': 'lookup' or 'draft' too"),
        ({"speculate": "lookup", "draft_max": 8}, "draft_max",
         "'draft_max' is 8, more than the 4 guesses this server verifies per step"),
    ]:
        status, _, out = srv.post("/v1/chat/completions", {"messages": msgs, "max_tokens": 4, **body})
        assert status == 400, (body, out)
        err = json.loads(out)["error"]
        assert err["param"] == param and words in err["message"], (body, err)


def qwen(size: str):
    return tally_home() / "models" / f"qwen2.5-coder-{size}-instruct-q4_k_m.gguf"


def post_text(srv, text: str, max_tokens: int, **kw) -> str:
    """The reply's text, streamed when kw says stream."""
    if not kw.get("stream"):
        return chat(srv, text, max_tokens, **kw)["choices"][0]["message"]["content"]
    status, _, out = srv.post("/v1/chat/completions", {"messages": [{"role": "user", "content": text}],
                                                       "max_tokens": max_tokens, "temperature": 0, **kw})
    assert status == 200, out
    return "".join(ch["delta"].get("content") or "" for ev in out.split(b"\n\n") if ev.startswith(b"data: {")
                   for ch in json.loads(ev[6:])["choices"])


# A code edit (the reply repeats the function) and an open prompt.
EDIT = ("Add a docstring to this function and change nothing else.\n\n"
        "def area(width, height):\n    if width < 0 or height < 0:\n        raise ValueError('negative size')\n"
        "    return width * height\n")
OPEN = "Name three uses of a hash table, one line each."


def test_a_draft_model_gives_the_greedy_replies_without_it_for_every_draft_length_and_at_once(start_server):
    need(qwen("1.5b").exists() and qwen("0.5b").exists(),
         "qwen2.5-coder:1.5b and :0.5b are not installed (tally pull qwen2.5-coder:1.5b qwen2.5-coder:0.5b)")
    # The draft is loaded but off by default: the same server gives the replies without speculation.
    srv = start_server("-m", str(qwen("1.5b")), "--draft", str(qwen("0.5b")), "--speculate", "off",
                       "--parallel", "3", "-c", "4096", "--max-tokens", "160")
    srv.wait_for_log(r"draft model qwen2\.5-coder-0\.5b.*speculation by default: off", 30)
    want = {p: post_text(srv, p, 40) for p in (EDIT, OPEN)}
    whole_edit = post_text(srv, EDIT, 160)
    assert drafted(srv) == (0, 0)
    # A reply of 40 tokens may not repay the draft's prefill of its prompt (then none is drafted);
    # the whole edit does, and its guesses are mostly kept.
    assert post_text(srv, EDIT, 160, speculate="draft") == whole_edit
    d = drafted(srv)
    assert d[0] > 0 and 0 < d[1] <= d[0], d
    for k in (1, 2, 3, 5, 8):
        assert post_text(srv, EDIT, 40, speculate="draft", draft_max=k) == want[EDIT], k
    assert post_text(srv, OPEN, 40, speculate="draft") == want[OPEN]
    assert post_text(srv, EDIT, 40, speculate="draft", stream=True) == want[EDIT]
    # Three clients at once (a step of several sequences takes no drafted guesses; the last one left may).
    prompts = [EDIT, OPEN, EDIT]
    got = at_once(3, lambda i: post_text(srv, prompts[i], 40, speculate="draft"))
    for i in range(3):
        assert got[i] == want[prompts[i]], i
    # Sampling with a draft: its distribution is handed on as q (runtime tests check the rule); here it answers.
    status, _, out = srv.post("/v1/chat/completions", {"messages": [{"role": "user", "content": OPEN}], "max_tokens": 24,
                                                       "temperature": 0.8, "seed": 7, "speculate": "draft"})
    assert status == 200 and json.loads(out)["choices"][0]["message"]["content"], out
