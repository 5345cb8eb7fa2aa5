#!/usr/bin/env python3
"""tally serve against llama.cpp's llama-server, same file, same threads, same
number of parallel sequences, same load (bench/load_generator.py: a fixed,
seeded mix of streamed greedy chat requests sharing a system message), at
1, 4, 16 and 32 concurrent clients, the two servers taking turns level by
level; and the time to first token of a request whose 1,000-token system
prompt the server has seen before (warm) against one it has not (cold).

  tally serve -m F -t T --parallel N --port P
  llama-server -m F -t T -tb T -np N --cont-batching -c N*2048 --port Q

Each server is started once, warmed up with one request, and stopped after
its levels. Reported per level: generated tokens/s, time to first token
p50/p99, inter-token latency p50/p99; and per server the warm/cold ratio.

  python3 bench/compare_server.py [--markdown] [--clients 1,4,16,32] [--requests 96]
      [--parallel 8] [--threads 2] [--max-tokens 64] [--model PATH] [--tally PATH] [--llama-bin DIR]

Needs only Python's standard library, a built tally and llama.cpp's tools
(scripts/build_llama_cpp.sh).
"""
import argparse
import http.client
import json
import subprocess
import sys
import time
from pathlib import Path

import load_generator
from bench_common import add_engine_args, free_port, wait_ready


def die(msg):
    print(f"compare_server: error: {msg}", file=sys.stderr)
    sys.exit(1)


def chat(port, messages, max_tokens=8):
    """One streamed request; returns the seconds to its first content chunk."""
    body = json.dumps({"messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    t0 = time.perf_counter()
    c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        die(f"a request was answered {r.status}: {r.read()[:200]!r}")
    first = None
    for line in r:
        line = line.strip()
        if line.startswith(b"data: ") and b'"content"' in line and first is None:
            j = json.loads(line[6:])
            if j["choices"] and j["choices"][0].get("delta", {}).get("content"):
                first = time.perf_counter() - t0
        if line == b"data: [DONE]":
            break
    return first


def warm_cold(port):
    """TTFT with a long system prompt never seen, then with it seen (another question)."""
    system = " ".join(f"Rule {i}: answer in plain words and keep every reply short." for i in range(90))  # ~1,000 tokens
    cold = chat(port, [{"role": "system", "content": system}, {"role": "user", "content": "What is a cache?"}])
    warm = chat(port, [{"role": "system", "content": system}, {"role": "user", "content": "What is a key?"}])
    return cold, warm


def run_server(name, cmd, port, health, levels, args):
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(port, proc, health, "compare_server")
        chat(port, [{"role": "user", "content": "Hello"}])  # warm-up
        cold, warm = warm_cold(port)
        target = load_generator.Target(f"http://127.0.0.1:{port}", "", "", 300)
        mix = load_generator.build_mix(args.requests, args.max_tokens, 0, 0.0)
        results = []
        for c in levels:
            r = load_generator.run_level(target, mix, c, 20)
            results.append(r)
            print(f"{name} {c:>2} clients: {r['tokens_per_s']} tok/s, TTFT p50 {r['ttft_ms']['p50']} p99 "
                  f"{r['ttft_ms']['p99']} ms, ITL p50 {r['itl_ms']['p50']} p99 {r['itl_ms']['p99']} ms, "
                  f"{r['errors']} errors", file=sys.stderr, flush=True)
        return {"cold_s": cold, "warm_s": warm, "levels": results}
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_engine_args(ap)
    ap.add_argument("--parallel", type=int, default=8)
    ap.add_argument("--clients", default="1,4,16,32")
    ap.add_argument("--requests", type=int, default=96)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--json", help="write the raw results here")
    a = ap.parse_args()
    levels = [int(x) for x in a.clients.split(",")]
    server = Path(a.llama_bin) / "llama-server"
    if not server.exists():
        die(f"no llama-server in {a.llama_bin}: run scripts/build_llama_cpp.sh")
    tp, lp = free_port(), free_port()
    out = {
        "tally": run_server("tally", [a.tally, "serve", "-m", a.model, "-t", str(a.threads), "--parallel",
                                       str(a.parallel), "--port", str(tp), "--queue", "256"], tp, "/health", levels, a),
        "llama.cpp": run_server("llama-server", [str(server), "-m", a.model, "-t", str(a.threads), "-tb", str(a.threads),
                                                 "-np", str(a.parallel), "--cont-batching", "-c",
                                                 str(a.parallel * 2048), "--port", str(lp)], lp, "/health", levels, a),
    }
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))
    print(f"{a.threads} threads, {a.parallel} parallel sequences, {a.requests} requests per level "
          f"(max_tokens up to {a.max_tokens}), greedy\n")
    print("| clients | tokens/s tally | tokens/s llama-server | ratio | TTFT p50 / p99 ms tally | TTFT p50 / p99 ms llama-server "
          "| ITL p50 / p99 ms tally | ITL p50 / p99 ms llama-server |")
    print("|---|---|---|---|---|---|---|---|")
    for t, l in zip(out["tally"]["levels"], out["llama.cpp"]["levels"]):
        print(f"| {t['clients']} | {t['tokens_per_s']} | {l['tokens_per_s']} | "
              f"{t['tokens_per_s'] / l['tokens_per_s']:.2f}x | {t['ttft_ms']['p50']} / {t['ttft_ms']['p99']} | "
              f"{l['ttft_ms']['p50']} / {l['ttft_ms']['p99']} | {t['itl_ms']['p50']} / {t['itl_ms']['p99']} | "
              f"{l['itl_ms']['p50']} / {l['itl_ms']['p99']} |")
    print("\n| server | cold TTFT, 1,000-token system prompt | warm TTFT, same system prompt | warm / cold |")
    print("|---|---|---|---|")
    for name in ("tally", "llama.cpp"):
        c, w = out[name]["cold_s"], out[name]["warm_s"]
        print(f"| {name} | {1000 * c:.0f} ms | {1000 * w:.0f} ms | {100 * w / c:.1f}% |")


if __name__ == "__main__":
    main()
