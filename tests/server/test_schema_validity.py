"""The held schemas (bench/schemas/held.json, 50 schemas x prompts) through
tally serve on qwen2.5-coder:0.5b, judged by python-jsonschema
(bench/json_schema_validity.py): every reply that ends by itself validates
(with json_object: parses as an object), and nearly all end by themselves
before the token limit (a reply cut there is not whole, whatever the
grammar; the 0.5B model writes long lists for a few prompts). Greedy: about
two minutes on two cores. The bench runs the same on qwen2.5-coder:1.5b,
where every reply must validate."""

from __future__ import annotations

import importlib.util
import json
import pathlib

import pytest

from conftest import ROOT, TallyServer, need, tally_home

MODEL = tally_home() / "models" / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"


def bench():
    spec = importlib.util.spec_from_file_location("json_schema_validity", ROOT / "bench" / "json_schema_validity.py")
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


@pytest.fixture(scope="module")
def qwen(request):
    need(MODEL.exists(), f"qwen2.5-coder:0.5b is not installed at {MODEL} (tally pull qwen2.5-coder:0.5b)")
    s = TallyServer("-m", str(MODEL), "--parallel", "4", "-c", "8192")
    request.module.tally_shared_server = s
    yield s
    try:
        assert s.stop() == 0, s.log()[-3000:]
    finally:
        s.kill()


def invalid(summary: dict) -> list[str]:
    """The replies that ended by themselves and are not valid: the grammar's failures."""
    return [f"{r['name']}: {r['error']} {r.get('text', '')[:300]!r}" for r in summary["results"]
            if r["finished"] and not r["valid"]]


def test_every_held_schema_reply_validates(qwen):
    b = bench()
    cases = json.loads(b.HELD.read_text())["schemas"]
    assert len(cases) == 50
    s = b.run(qwen.url, cases, json_object=False, max_tokens=384, parallel=4, verbose=False)
    assert not invalid(s), "\n".join(invalid(s))
    assert s["finished"] >= 48, [r["name"] for r in s["results"] if not r["finished"]]
    assert all(r["status"] == 200 for r in s["results"]), [r["error"] for r in s["results"] if r["status"] != 200]


def test_every_json_object_reply_parses(qwen):
    b = bench()
    cases = json.loads(b.HELD.read_text())["schemas"][:20]
    s = b.run(qwen.url, cases, json_object=True, max_tokens=256, parallel=4, verbose=False)
    assert not invalid(s), "\n".join(invalid(s))
    assert s["finished"] >= 14, [r["name"] for r in s["results"] if not r["finished"]]
