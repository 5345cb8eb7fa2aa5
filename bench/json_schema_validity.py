#!/usr/bin/env python3
"""Constrained decoding's validity on the held schemas (bench/schemas/held.json:
50 JSON schemas, each with a prompt): every prompt goes to an OpenAI-compatible
server as a chat request with response_format json_schema (or json_object with
--json-object), greedy, and python-jsonschema judges each reply (a json_object
reply must parse as an object). Prints one line per schema and a summary:
replies that parse, that validate, that finished by themselves (not at the
token limit), completion tokens and their rate (completion tokens over the sum
of the requests' times). Exits 1 if any reply is invalid (a reply cut at
the token limit counts: raise --max-tokens to tell it apart).

By default it starts `tally serve` on MODEL (and stops it); --url uses a server
already running instead (llama-server, for the comparison on the same file:
`llama-server -m FILE --port 8080` then --url http://127.0.0.1:8080).

    usage: bench/json_schema_validity.py [--tally build/release/tally] [-m qwen2.5-coder:1.5b]
               [--url URL] [--json-object] [--max-tokens 384] [--parallel 4] [--only N] [--json]
Needs jsonschema (scripts/setup_test_env.sh's venv has it).
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import pathlib
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import jsonschema

ROOT = pathlib.Path(__file__).resolve().parents[1]
HELD = ROOT / "bench" / "schemas" / "held.json"
SYSTEM = "Answer with JSON only."


def start_tally(binary: str, model: str, parallel: int, ctx: int) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([binary, "serve", "-m", model, "--host", "127.0.0.1", "--port", "0", "--parallel",
                             str(parallel), "-c", str(ctx)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, errors="replace")
    lines: list[str] = []
    found: list[str] = []
    ready = threading.Event()

    def read():
        for line in proc.stderr:
            lines.append(line)
            m = re.search(r"on (http://127\.0\.0\.1:\d+)/", line)
            if m and not found:
                found.append(m.group(1))
                ready.set()
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    if not ready.wait(300) or not found:
        proc.kill()
        sys.exit("json_schema_validity: tally serve did not start:\n" + "".join(lines[-20:]))
    return proc, found[0]


def post(url: str, body: dict, timeout: float = 600) -> tuple[int, dict]:
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def run_one(url: str, case: dict, json_object: bool, max_tokens: int) -> dict:
    fmt = ({"type": "json_object"} if json_object else
           {"type": "json_schema", "json_schema": {"name": case["name"], "schema": case["schema"], "strict": True}})
    body = {"messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": case["prompt"]}],
            "max_tokens": max_tokens, "temperature": 0, "response_format": fmt}
    t0 = time.monotonic()
    status, r = post(url, body)
    seconds = time.monotonic() - t0
    out = {"name": case["name"], "status": status, "seconds": seconds, "parsed": False, "valid": False,
           "finished": False, "tokens": 0, "error": ""}
    if status != 200:
        out["error"] = r.get("error", {}).get("message", str(r))[:200]
        return out
    choice = r["choices"][0]
    text = choice["message"].get("content") or ""
    out["finished"] = choice.get("finish_reason") == "stop"
    out["tokens"] = r.get("usage", {}).get("completion_tokens", 0)
    out["text"] = text
    try:
        value = json.loads(text)
        out["parsed"] = True
    except json.JSONDecodeError as e:
        out["error"] = f"not JSON: {e}"
        return out
    if json_object:
        out["valid"] = isinstance(value, dict)
        if not out["valid"]:
            out["error"] = f"not an object: {type(value).__name__}"
        return out
    try:
        jsonschema.validate(value, case["schema"], format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
        out["valid"] = True
    except jsonschema.ValidationError as e:
        out["error"] = f"invalid at /{'/'.join(map(str, e.absolute_path))}: {e.message}"[:200]
    return out


def run(url: str, cases: list[dict], json_object: bool, max_tokens: int, parallel: int, verbose=True) -> dict:
    with concurrent.futures.ThreadPoolExecutor(parallel) as pool:
        results = list(pool.map(lambda c: run_one(url, c, json_object, max_tokens), cases))
    if verbose:
        for r in results:
            mark = "ok " if r["valid"] else "BAD"
            print(f"{mark} {r['name']:<16} {r['tokens']:>4} tokens {r['seconds']:6.1f} s"
                  f"{'' if r['finished'] else ' (token limit)'}{'  ' + r['error'] if r['error'] else ''}")
    tokens = sum(r["tokens"] for r in results)
    busy = sum(r["seconds"] for r in results)
    return {"mode": "json_object" if json_object else "json_schema", "n": len(results),
            "parsed": sum(r["parsed"] for r in results), "valid": sum(r["valid"] for r in results),
            "finished": sum(r["finished"] for r in results), "completion_tokens": tokens,
            "tokens_per_s_per_request": tokens / busy if busy > 0 else 0.0, "results": results}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tally", default=str(ROOT / "build" / "release" / "tally"))
    ap.add_argument("-m", "--model", default="qwen2.5-coder:1.5b")
    ap.add_argument("--url", help="a running OpenAI-compatible server instead of starting tally serve")
    ap.add_argument("--json-object", action="store_true", help="response_format json_object (replies must parse)")
    ap.add_argument("--max-tokens", type=int, default=384)
    ap.add_argument("--parallel", type=int, default=4, help="requests at once (and tally serve's --parallel)")
    ap.add_argument("--only", type=int, default=0, help="the first N schemas only")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON")
    a = ap.parse_args()
    cases = json.loads(HELD.read_text())["schemas"]
    if a.only:
        cases = cases[:a.only]
    proc = None
    url = a.url
    if not url:
        proc, url = start_tally(a.tally, a.model, a.parallel, 8192)
    try:
        t0 = time.monotonic()
        s = run(url.rstrip("/"), cases, a.json_object, a.max_tokens, a.parallel, verbose=not a.json)
        s["wall_s"] = time.monotonic() - t0
    finally:
        if proc:
            proc.terminate()
            proc.wait(60)
    s["server"] = url if a.url else f"tally serve -m {a.model}"
    if a.json:
        s.pop("results")
        print(json.dumps(s, indent=1))
    else:
        print(f"{s['server']}, {s['mode']}: {s['parsed']}/{s['n']} parse, {s['valid']}/{s['n']} valid, "
              f"{s['finished']}/{s['n']} finished, {s['completion_tokens']} completion tokens, "
              f"{s['tokens_per_s_per_request']:.1f} tok/s per request, {s['wall_s']:.0f} s")
    return 0 if s["valid"] == s["n"] else 1


if __name__ == "__main__":
    sys.exit(main())
