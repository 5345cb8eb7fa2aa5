"""Speculative decoding in the server (prompt lookup, per request or by
`serve --speculate lookup`): greedy replies are the replies without it, token
for token, for one client and for four at once, whole and streamed; guesses
are counted in /metrics; bad `speculate` / `draft_max` fields are 400s that
name the field."""

from __future__ import annotations

import json
import threading

from test_bitexact import chat, stream_text

# Prompts a reply repeats much of (prompt lookup finds guesses) and one it does not.
PROMPTS = [
    "Repeat exactly, line by line:\nalpha beta gamma\ndelta epsilon zeta\neta theta iota\nkappa lambda mu",
    "Rewrite this list in the same order, one item per line: apples, pears, plums, figs, cherries, grapes, limes.",
    "Write one sentence about the sea.",
]


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
    got: dict[int, str] = {}

    def one(i: int) -> None:
        got[i] = chat(srv, PROMPTS[i % len(PROMPTS)], 80, speculate="lookup")["choices"][0]["message"]["content"]

    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
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
        ({"speculate": "draft"}, "speculate", "'speculate' must be \"lookup\" or \"off\", not 'draft'"),
        ({"speculate": 1}, "speculate", "'speculate' must be \"lookup\" or \"off\", not an integer"),
        ({"speculate": "lookup", "draft_max": 0}, "draft_max", "draft_max"),
        ({"speculate": "lookup", "draft_max": 65}, "draft_max", "draft_max"),
        ({"draft_max": 2}, "draft_max", "speculative decoding, which is off for this request"),
        ({"speculate": "lookup", "draft_max": 8}, "draft_max",
         "'draft_max' is 8, more than the 4 guesses this server verifies per step"),
    ]:
        status, _, out = srv.post("/v1/chat/completions", {"messages": msgs, "max_tokens": 4, **body})
        assert status == 400, (body, out)
        err = json.loads(out)["error"]
        assert err["param"] == param and words in err["message"], (body, err)
