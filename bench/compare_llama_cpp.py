#!/usr/bin/env python3
"""Side-by-side speed of tally and llama.cpp (through llama-cpp-python) on the
same GGUF, same threads, same prompt: prefill tokens/s, decode tokens/s and peak
RSS. Runs alternate A/B/A/B so that drift of a noisy machine hits both; the
table reports medians and the tally/llama.cpp ratio.

  python bench/compare_llama_cpp.py [--model PATH] [--tally build/release/tally]
      [--threads 1,2] [--prompt-tokens 128] [--gen-tokens 64] [--reps 3] [--markdown]

Needs llama-cpp-python in the Python that runs it (see scripts/requirements-fixtures.txt).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = Path(os.environ.get("TALLY_HOME", Path.home() / ".cache/tally")) / "models/SmolLM2-135M-Instruct.Q4_1.gguf"

LLAMA_RUNNER = textwrap.dedent("""
    import json, sys, time
    from llama_cpp import Llama
    model, threads, ctx, ids_json, n_gen = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
    ids = json.load(open(ids_json))
    t0 = time.perf_counter()
    llm = Llama(model_path=model, n_ctx=ctx, n_threads=threads, n_threads_batch=threads, n_batch=ctx, n_ubatch=512,
                logits_all=False, verbose=False)
    load = time.perf_counter() - t0
    t0 = time.perf_counter(); llm.eval(ids); prefill = time.perf_counter() - t0
    import numpy as np
    tok = int(np.argmax(llm.scores[llm.n_tokens - 1])); steps = 0
    t0 = time.perf_counter()
    for _ in range(n_gen - 1):
        llm.eval([tok]); steps += 1
        tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
    decode = time.perf_counter() - t0
    print(json.dumps({"load_ms": load * 1e3, "prefill_tps": len(ids) / prefill, "decode_tps": steps / decode}))
""")


def measure(cmd):
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out = proc.stdout.read()
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])} failed: {err.strip()[:500]}")
    return out, usage.ru_maxrss / 1024.0


def prompt_of(tally, model, n_tokens):
    text = (ROOT / "tests/fixtures/text/pride_and_prejudice_ch1.txt").read_text()
    ids = json.loads(subprocess.check_output([tally, "tokenize", "-m", model, "--json", text]))["ids"]
    while len(ids) < n_tokens:
        ids = ids + ids
    ids = ids[:n_tokens]
    return ids, subprocess.check_output([tally, "detokenize", "-m", model] + [str(i) for i in ids], text=True)[:-1]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(DEFAULT_MODEL))
    ap.add_argument("--tally", default=str(ROOT / "build/release/tally"))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--gen-tokens", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()

    ids, text = prompt_of(a.tally, a.model, a.prompt_tokens)
    ctx = a.prompt_tokens + a.gen_tokens + 16
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(ids, f)
        ids_path = f.name
    rows = []
    for t in [int(x) for x in a.threads.split(",")]:
        res = {"tally": [], "llama.cpp": []}
        for _ in range(a.reps):
            out, rss = measure([a.tally, "run", "-m", a.model, "-p", text, "-n", str(a.gen_tokens), "--temp", "0",
                                "-t", str(t), "-c", str(ctx), "--json"])
            j = json.loads(out)
            if j["prompt_tokens"] != len(ids):
                print(f"note: tally tokenized the prompt to {j['prompt_tokens']} tokens", file=sys.stderr)
            res["tally"].append((j["timings"]["prefill_tps"], j["timings"]["decode_tps"], rss))
            out, rss = measure([sys.executable, "-c", LLAMA_RUNNER, a.model, str(t), str(ctx), ids_path,
                                str(a.gen_tokens)])
            j = json.loads(out)
            res["llama.cpp"].append((j["prefill_tps"], j["decode_tps"], rss))
        med = {k: [statistics.median(x[i] for x in v) for i in range(3)] for k, v in res.items()}
        rows.append((t, med))
    os.unlink(ids_path)

    hdr = (f"prompt {a.prompt_tokens} tokens, {a.gen_tokens} generated, greedy, medians of {a.reps} "
           f"interleaved runs; RSS of the llama.cpp column includes the Python interpreter")
    if a.markdown:
        print(hdr + "\n")
        print("| threads | engine | prefill tok/s | decode tok/s | peak RSS MiB |")
        print("|---|---|---|---|---|")
    for t, med in rows:
        for eng in ("tally", "llama.cpp"):
            p, d, r = med[eng]
            if a.markdown:
                print(f"| {t} | {eng} | {p:.1f} | {d:.1f} | {r:.0f} |")
            else:
                print(f"threads {t} {eng:>9}: prefill {p:8.1f} tok/s  decode {d:7.1f} tok/s  peak RSS {r:6.0f} MiB")
        rp = med["tally"][0] / med["llama.cpp"][0]
        rd = med["tally"][1] / med["llama.cpp"][1]
        if a.markdown:
            print(f"| {t} | ratio tally/llama.cpp | {rp:.2f}x | {rd:.2f}x | |")
        else:
            print(f"threads {t}     ratio: prefill {rp:.2f}x  decode {rd:.2f}x")
    if not a.markdown:
        print(hdr)


if __name__ == "__main__":
    main()
