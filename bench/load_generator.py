#!/usr/bin/env python3
"""Load generator for any OpenAI-compatible chat server (tally serve, llama-server, ...).

Sends a fixed mix of streamed chat requests (the mix depends on --seed only,
not on the number of clients) from N concurrent clients and reports, per
concurrency level: throughput (generated tokens/s, requests/s), time to first
token p50/p99 and inter-token latency p50/p99.

    python3 bench/load_generator.py --base-url http://127.0.0.1:8080 \\
        --clients 1,4,16,32 --requests 200 --max-tokens 64 [--json]

The mix: every request shares one system message (so a prefix cache can
help, as it does for real traffic), then a user message of one of three
lengths (a short question, a paragraph, a long passage), greedy
(temperature 0) with max_tokens drawn between max(1, M/4) and M. A fraction
of the requests (--cancel-fraction) is cancelled mid-stream: the client reads
one to three content chunks and closes the connection. With --tasks FILE
(bench/speculative_tasks.json) the user messages are that file's prompts of
one kind instead (code edits by default, which speculative decoding speeds
up), without the system message.

A 429 answer is retried after its Retry-After (at most --retries times) and
counted as "rejected_429"; a 429 without Retry-After is an error. Errors are
everything else that is not a complete stream: a status other than 200 or
429, a connection that fails or times out, a malformed event, a stream
without a finish_reason or without "data: [DONE]". Exit status: 0 when no
level had an error, 1 otherwise, 2 for bad arguments.

Standard library only (http.client and threads), so that the measurement
does not depend on a client library's own buffering.
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import socket
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass, field

SYSTEM = ("You are a concise assistant. Answer in plain sentences, without lists or headings, "
          "and say so when you do not know.")

SHORT = [
    "What is a KV cache?",
    "Name three primary colours.",
    "How many legs does a spider have?",
    "What is the capital of France?",
    "Why is the sky blue?",
    "What does a compiler do?",
]

PARAGRAPH_TOPICS = ["a lighthouse keeper", "a bakery at dawn", "a train crossing mountains", "a small robot",
                    "a library after closing time", "a fishing village in winter"]

SENTENCES = [
    "The river bends twice before it reaches the old mill.",
    "Every morning the market opens with the sound of carts on stone.",
    "Nobody remembered who had planted the first row of olive trees.",
    "The engineers measured the bridge again after the storm.",
    "A quiet wind carried the smell of bread through the narrow streets.",
    "The museum kept its oldest maps in a room without windows.",
    "Children raced paper boats along the gutter after the rain.",
    "The observatory's telescope had not moved in forty years.",
]


def build_mix(n: int, max_tokens: int, seed: int, cancel_fraction: float, tasks: list[str] | None = None) -> list[dict]:
    """The request list: a pure function of its arguments. With tasks, each
    request is one of them as the user's message, without a system message."""
    rng = random.Random(seed)
    mix = []
    for i in range(n):
        kind = "task" if tasks else rng.choice(["short", "short", "paragraph", "long"])
        if tasks:
            user = rng.choice(tasks)
        elif kind == "short":
            user = rng.choice(SHORT)
        elif kind == "paragraph":
            user = f"Write a short paragraph about {rng.choice(PARAGRAPH_TOPICS)}."
        else:
            passage = " ".join(rng.choice(SENTENCES) for _ in range(rng.randint(12, 24)))
            user = f"Summarize this passage in one sentence.\n\n{passage}"
        mix.append({
            "index": i,
            "kind": kind,
            "messages": ([] if tasks else [{"role": "system", "content": SYSTEM}]) + [{"role": "user", "content": user}],
            "max_tokens": rng.randint(max(1, max_tokens // 4), max_tokens),
            "cancel_after": rng.randint(1, 3) if rng.random() < cancel_fraction else 0,
        })
    return mix


@dataclass
class Outcome:
    status: str = "ok"          # ok | cancelled | error
    error: str = ""
    rejected_429: int = 0
    ttft_s: float | None = None
    itl_s: list[float] = field(default_factory=list)
    completion_tokens: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0


class Target:
    def __init__(self, base_url: str, api_key: str, model: str, timeout: float):
        u = urllib.parse.urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"--base-url must be http(s)://HOST[:PORT][/PATH], got {base_url!r}")
        self.https = u.scheme == "https"
        self.host = u.hostname
        self.port = u.port or (443 if self.https else 80)
        path = u.path.rstrip("/")
        # Accept both http://host:port and http://host:port/v1.
        self.path = (path if path.endswith("/v1") else path + "/v1") + "/chat/completions"
        self.api_key = api_key
        self.model = model
        self.timeout = timeout

    def connect(self) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        return cls(self.host, self.port, timeout=self.timeout)


def one_request(t: Target, req: dict, retries: int) -> Outcome:
    out = Outcome()
    body = {"messages": req["messages"], "max_tokens": req["max_tokens"], "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    if t.model:
        body["model"] = t.model
    data = json.dumps(body).encode()
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    if t.api_key:
        headers["Authorization"] = f"Bearer {t.api_key}"
    for attempt in range(retries + 1):
        conn = t.connect()
        phase = "sending the request"
        try:
            t0 = time.perf_counter()
            conn.request("POST", t.path, body=data, headers=headers)
            phase = "waiting for the response"
            resp = conn.getresponse()
            phase = "reading the response"
            if resp.status == 429:
                out.rejected_429 += 1
                retry_after = resp.getheader("Retry-After")
                resp.read()
                if retry_after is None or not retry_after.strip().isdigit():
                    out.status, out.error = "error", f"429 without a Retry-After of whole seconds ({retry_after!r})"
                    return out
                if attempt == retries:
                    out.status, out.error = "error", f"429 still after {retries} retries"
                    return out
                time.sleep(int(retry_after))  # what the server asked for
                continue
            if resp.status != 200:
                out.status, out.error = "error", f"HTTP {resp.status}: {resp.read()[:300]!r}"
                return out
            ctype = resp.getheader("Content-Type", "")
            if not ctype.startswith("text/event-stream"):
                out.status, out.error = "error", f"Content-Type {ctype!r}, not text/event-stream"
                return out
            phase = "reading the stream"
            return read_stream(resp, conn, req, t0, out)
        except (OSError, http.client.HTTPException) as e:
            out.status, out.error = "error", f"{type(e).__name__} {phase}: {e}"
            return out
        finally:
            conn.close()
    return out


def read_stream(resp, conn, req: dict, t0: float, out: Outcome) -> Outcome:
    last = None
    chunks = 0
    finished = done = False
    pending = b""
    while True:
        line = resp.readline()
        if not line:
            break
        pending += line
        if not pending.endswith(b"\n"):
            continue  # a line split across reads
        line, pending = pending.rstrip(b"\r\n"), b""
        if not line or line.startswith(b":"):
            continue  # the blank line closing an event, or a comment
        if not line.startswith(b"data: "):
            if line.startswith((b"event:", b"id:", b"retry:")):
                continue
            out.status, out.error = "error", f"not an SSE data line: {line[:200]!r}"
            return out
        payload = line[6:]
        if payload == b"[DONE]":
            done = True
            continue
        if done:
            out.status, out.error = "error", "an event after data: [DONE]"
            return out
        try:
            c = json.loads(payload)
        except ValueError:
            out.status, out.error = "error", f"an event that is not JSON: {payload[:200]!r}"
            return out
        if "error" in c:
            out.status, out.error = "error", f"error event: {json.dumps(c['error'])[:300]}"
            return out
        if c.get("usage"):
            u = c["usage"]
            out.completion_tokens = int(u.get("completion_tokens", 0))
            out.prompt_tokens = int(u.get("prompt_tokens", 0))
            out.cached_tokens = int((u.get("prompt_tokens_details") or {}).get("cached_tokens", 0) or 0)
        for ch in c.get("choices", []):
            content = (ch.get("delta") or {}).get("content")
            if content:
                now = time.perf_counter()
                if last is None:
                    out.ttft_s = now - t0
                else:
                    out.itl_s.append(now - last)
                last = now
                chunks += 1
                if req["cancel_after"] and chunks >= req["cancel_after"]:
                    # Cancel: drop the connection mid-stream (what a closed browser tab does).
                    try:
                        conn.sock.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    out.status = "cancelled"
                    out.completion_tokens = chunks
                    return out
            if ch.get("finish_reason"):
                finished = True
    # A reply shorter than the chunks to cancel after simply completes.
    if not done:
        out.status, out.error = "error", "the stream ended without data: [DONE]"
    elif not finished:
        out.status, out.error = "error", "the stream had no finish_reason"
    elif out.completion_tokens == 0:
        out.completion_tokens = chunks  # a server that sends no usage: count content chunks
    return out


def percentile(xs: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in [0, 100]); None for no data."""
    if not xs:
        return None
    s = sorted(xs)
    k = max(0, min(len(s) - 1, int(-(-q * len(s) // 100)) - 1))
    return s[k]


def run_level(t: Target, mix: list[dict], clients: int, retries: int) -> dict:
    outcomes: list[Outcome | None] = [None] * len(mix)
    next_i = 0
    lock = threading.Lock()

    def worker():
        nonlocal next_i
        while True:
            with lock:
                if next_i >= len(mix):
                    return
                i = next_i
                next_i += 1
            try:
                outcomes[i] = one_request(t, mix[i], retries)
            except Exception as e:  # a bug here must show up as an error, not a hang
                outcomes[i] = Outcome(status="error", error=f"{type(e).__name__}: {e}")

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(clients)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.perf_counter() - t0

    done = [o for o in outcomes if o is not None]
    errors = [o for o in done if o.status == "error"]
    ttft = [o.ttft_s for o in done if o.ttft_s is not None]
    itl = [x for o in done for x in o.itl_s]
    tokens = sum(o.completion_tokens for o in done if o.status != "error")
    ms = lambda v: None if v is None else round(v * 1000, 2)
    return {
        "clients": clients,
        "requests": len(mix),
        "ok": sum(o.status == "ok" for o in done),
        "cancelled": sum(o.status == "cancelled" for o in done),
        "errors": len(errors),
        "error_samples": sorted({o.error for o in errors})[:10],
        "rejected_429": sum(o.rejected_429 for o in done),
        "wall_s": round(wall, 3),
        "completion_tokens": tokens,
        "prompt_tokens": sum(o.prompt_tokens for o in done),
        "cached_tokens": sum(o.cached_tokens for o in done),
        "tokens_per_s": round(tokens / wall, 2) if wall > 0 else None,
        "requests_per_s": round(len(mix) / wall, 3) if wall > 0 else None,
        "ttft_ms": {"p50": ms(percentile(ttft, 50)), "p99": ms(percentile(ttft, 99))},
        "itl_ms": {"p50": ms(percentile(itl, 50)), "p99": ms(percentile(itl, 99))},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:8080 (with or without /v1)")
    ap.add_argument("--clients", default="32", help="concurrent clients; a comma list runs each level in turn")
    ap.add_argument("--requests", type=int, default=200, help="requests per level")
    ap.add_argument("--max-tokens", type=int, default=32, help="largest max_tokens of a request")
    ap.add_argument("--seed", type=int, default=0, help="the mix's seed")
    ap.add_argument("--cancel-fraction", type=float, default=0.0, help="share of requests cancelled mid-stream")
    ap.add_argument("--retries", type=int, default=20, help="retries of a request answered 429")
    ap.add_argument("--timeout", type=float, default=300, help="socket timeout of one request, seconds")
    ap.add_argument("--model", default="", help="the request's model field (some servers need it)")
    ap.add_argument("--api-key", default="", help="sent as Authorization: Bearer KEY")
    ap.add_argument("--tasks", help="a JSON file of {kind: [{'prompt': ...}]} (bench/speculative_tasks.json): "
                    "requests are its prompts of --task-kind instead of the chat mix")
    ap.add_argument("--task-kind", default="code-edit", help="which kind of --tasks' prompts (default: code-edit)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    a = ap.parse_args(argv)
    try:
        levels = [int(x) for x in a.clients.split(",") if x.strip()]
        if not levels or min(levels) < 1:
            raise ValueError
    except ValueError:
        ap.error(f"--clients must be positive whole numbers separated by commas, got {a.clients!r}")
    if a.requests < 1 or a.max_tokens < 1 or a.retries < 0 or a.timeout <= 0:
        ap.error("--requests and --max-tokens must be >= 1, --retries >= 0, --timeout > 0")
    if not 0 <= a.cancel_fraction <= 1:
        ap.error(f"--cancel-fraction must be in [0, 1], got {a.cancel_fraction}")
    try:
        t = Target(a.base_url, a.api_key, a.model, a.timeout)
    except ValueError as e:
        ap.error(str(e))

    tasks = None
    if a.tasks:
        try:
            tasks = [t["prompt"] for t in json.loads(open(a.tasks, encoding="utf-8").read())[a.task_kind]]
        except (OSError, ValueError, KeyError, TypeError) as e:
            ap.error(f"--tasks {a.tasks}: no list of prompts of kind '{a.task_kind}' ({e})")
        if not tasks:
            ap.error(f"--tasks {a.tasks}: no prompts of kind '{a.task_kind}'")
    mix = build_mix(a.requests, a.max_tokens, a.seed, a.cancel_fraction, tasks)
    results = []
    for c in levels:
        r = run_level(t, mix, c, a.retries)
        results.append(r)
        if not a.json:
            print(f"{c:>3} clients: {r['ok']} ok, {r['cancelled']} cancelled, {r['errors']} errors, "
                  f"{r['rejected_429']} answers 429 | {r['tokens_per_s']} tokens/s, {r['requests_per_s']} requests/s | "
                  f"TTFT p50 {r['ttft_ms']['p50']} ms p99 {r['ttft_ms']['p99']} ms | "
                  f"ITL p50 {r['itl_ms']['p50']} ms p99 {r['itl_ms']['p99']} ms | {r['wall_s']} s", flush=True)
            for e in r["error_samples"]:
                print(f"    error: {e}", flush=True)
    if a.json:
        print(json.dumps({"base_url": a.base_url, "requests": a.requests, "max_tokens": a.max_tokens, "seed": a.seed,
                          "cancel_fraction": a.cancel_fraction, "levels": results}, indent=1))
    return 1 if any(r["errors"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
