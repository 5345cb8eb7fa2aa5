#!/usr/bin/env python3
"""Side-by-side speed of tally and llama.cpp (through llama-cpp-python) on the
same GGUF, same threads, same tokens, in one run. Three tests, as in the
targets of docs/performance.md:

  pp512        prefill of 512 tokens into an empty cache
  tg128 @ 0    128 decode steps right after a 1-token prompt
  tg64 @ 2048  64 decode steps after a 2048-token prefill

Engines alternate A/B/A/B so that drift of a noisy machine hits both; the
table reports medians and the tally/llama.cpp ratio, plus peak RSS.

  python bench/compare_llama_cpp.py [--model PATH] [--tally build/release/tally]
      [--threads 1,2] [--reps 3] [--markdown]

Needs llama-cpp-python in the Python that runs it (scripts/requirements-fixtures.txt).
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
TESTS = [("pp512", 512, 1), ("tg128 @ 0", 1, 128), ("tg64 @ 2048", 2048, 64)]  # name, prompt, generated

LLAMA_RUNNER = textwrap.dedent("""
    import json, sys, time
    import numpy as np
    from llama_cpp import Llama
    model, threads, ctx, ids_json, n_gen = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
    ids = json.load(open(ids_json))
    t0 = time.perf_counter()
    llm = Llama(model_path=model, n_ctx=ctx, n_threads=threads, n_threads_batch=threads, n_batch=ctx, n_ubatch=512,
                logits_all=False, verbose=False)
    load = time.perf_counter() - t0
    t0 = time.perf_counter(); llm.eval(ids); prefill = time.perf_counter() - t0
    tok = int(np.argmax(llm.scores[llm.n_tokens - 1])); steps = 0
    t0 = time.perf_counter()
    for _ in range(n_gen):
        llm.eval([tok]); steps += 1
        tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
    decode = time.perf_counter() - t0
    print(json.dumps({"load_ms": load * 1e3, "prefill_tps": len(ids) / prefill, "decode_tps": steps / decode if steps else 0}))
""")


def prompt_ids(tally, model, n_tokens):
    text = (ROOT / "tests/fixtures/text/pride_and_prejudice_ch1.txt").read_text()
    ids = json.loads(subprocess.check_output([tally, "tokenize", "-m", model, "--json", text]))["ids"]
    while len(ids) < n_tokens:
        ids = ids + ids
    return ids[:n_tokens]


def run_tally(tally, model, ids, n_gen, threads, ctx):
    # The ids go in as text; detokenize + tokenize round-trips this English text exactly.
    text = subprocess.check_output([tally, "detokenize", "-m", model] + [str(i) for i in ids], text=True)[:-1]
    out = measure_rss([tally, "run", "-m", model, "-p", text, "-n", str(n_gen + 1), "--temp", "0", "--ignore-eos",
                       "-t", str(threads), "-c", str(ctx), "--batch", "512", "--json"])
    j = json.loads(out[0])
    return j["timings"]["prefill_tps"], j["timings"]["decode_tps"], out[1], j["prompt_tokens"]


def run_llama(model, ids, n_gen, threads, ctx, ids_path):
    with open(ids_path, "w") as f:
        json.dump(ids, f)
    out = measure_rss([sys.executable, "-c", LLAMA_RUNNER, model, str(threads), str(ctx), ids_path, str(n_gen)])
    j = json.loads(out[0])
    return j["prefill_tps"], j["decode_tps"], out[1], len(ids)


def measure_rss(cmd):
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out = proc.stdout.read()
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])} failed: {err.strip()[:500]}")
    return out, usage.ru_maxrss / 1024.0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(DEFAULT_MODEL))
    ap.add_argument("--tally", default=str(ROOT / "build/release/tally"))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()

    ids_path = tempfile.mktemp(suffix=".json")
    rows = []
    for t in [int(x) for x in a.threads.split(",")]:
        for name, n_prompt, n_gen in TESTS:
            ids = prompt_ids(a.tally, a.model, n_prompt)
            ctx = n_prompt + n_gen + 16
            res = {"tally": [], "llama.cpp": []}
            for _ in range(a.reps):
                res["tally"].append(run_tally(a.tally, a.model, ids, n_gen, t, ctx))
                res["llama.cpp"].append(run_llama(a.model, ids, n_gen, t, ctx, ids_path))
            pick = 0 if name.startswith("pp") else 1
            med = {k: (statistics.median(r[pick] for r in v), max(r[2] for r in v), v[0][3]) for k, v in res.items()}
            rows.append((t, name, med))
            print(f"threads {t} {name:>12}: tally {med['tally'][0]:7.1f} tok/s, llama.cpp {med['llama.cpp'][0]:7.1f} "
                      f"tok/s, ratio {med['tally'][0] / med['llama.cpp'][0]:.2f}x; peak RSS {med['tally'][1]:.0f} / "
                      f"{med['llama.cpp'][1]:.0f} MiB", file=sys.stderr if a.markdown else sys.stdout, flush=True)
    if os.path.exists(ids_path):
        os.unlink(ids_path)
    if a.markdown:
        print(f"medians of {a.reps} interleaved runs per cell; tokens/s; peak RSS of the llama.cpp process "
              "includes the Python interpreter\n")
        print("| threads | test | tally | llama.cpp | ratio | tally RSS MiB | llama.cpp RSS MiB |")
        print("|---|---|---|---|---|---|---|")
        for t, name, med in rows:
            print(f"| {t} | {name} | {med['tally'][0]:.1f} | {med['llama.cpp'][0]:.1f} | "
                  f"{med['tally'][0] / med['llama.cpp'][0]:.2f}x | {med['tally'][1]:.0f} | {med['llama.cpp'][1]:.0f} |")


if __name__ == "__main__":
    main()
