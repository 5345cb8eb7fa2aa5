#!/usr/bin/env python3
"""Many sequences at once: tally against llama.cpp's own llama-batched-bench
on the same file, threads, prompt length, generated tokens and sequence
counts, the two tools run in turn (A/B/A/B) for --reps rounds; medians.

  llama-batched-bench -m F -t T -c C -b 2048 -ub 512 -npp P -ntg G -npl N
  tally bench -m F -t T -p P -n G --parallel N --no-probe --json

Both prefill N different prompts of P tokens together, then decode G tokens
for each of the N sequences, all N in every step (llama-batched-bench without
-pps: no shared prompt; tally with its prefix cache off). Reported: prefill
tokens/s of the N prompts (llama.cpp's S_PP), aggregate decode tokens/s
(S_TG), and tally's decode at N = 16 against its own 512-token prefill rate
in the same run (`tally bench -p 512 -n 0`).

  python3 bench/compare_batched.py [--markdown] [--threads 2] [--npl 1,2,4,8,16,32]
      [--npp 128] [--ntg 64] [--reps 3] [--model PATH] [--tally PATH] [--llama-bin DIR]

Needs only Python's standard library, a built tally and llama.cpp's tools
(scripts/build_llama_cpp.sh).
"""
import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from bench_common import add_engine_args


def die(msg):
    print(f"compare_batched: error: {msg}", file=sys.stderr)
    sys.exit(1)


def ints(text):
    return [int(x) for x in text.split(",") if x.strip()]


def llama_batched(bin_dir, model, threads, npp, ntg, npl):
    ctx = npl * (npp + ntg) + 64
    cmd = [str(bin_dir / "llama-batched-bench"), "-m", str(model), "-t", str(threads), "-tb", str(threads), "-c",
           str(ctx), "-b", "2048", "-ub", "512", "-npp", str(npp), "-ntg", str(ntg), "-npl", str(npl),
           "--output-format", "jsonl"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        die(f"llama-batched-bench failed: {out.stderr.strip().splitlines()[-1] if out.stderr.strip() else out.returncode}")
    for line in out.stdout.splitlines():
        line = line.strip()
        if line.startswith("{") and '"speed_tg"' in line:
            j = json.loads(line)
            return j["speed_pp"], j["speed_tg"]
    die("llama-batched-bench printed no jsonl result line")


def tally_parallel(tally, model, threads, npp, ntg, npl):
    out = subprocess.run([str(tally), "bench", "-m", str(model), "-t", str(threads), "-p", str(npp), "-n", str(ntg),
                          "--parallel", str(npl), "-r", "1", "--no-probe", "--json"], capture_output=True, text=True)
    if out.returncode != 0:
        die(f"tally bench --parallel failed: {out.stderr.strip()}")
    r = json.loads(out.stdout)["parallel_results"][0]
    return r["prefill_tps"], r["decode_tps"]


def tally_prefill(tally, model, threads):
    out = subprocess.run([str(tally), "bench", "-m", str(model), "-t", str(threads), "-p", "512", "-n", "0", "-r", "1",
                          "--no-probe", "--json"], capture_output=True, text=True)
    if out.returncode != 0:
        die(f"tally bench failed: {out.stderr.strip()}")
    return json.loads(out.stdout)["results"][0]["tps_mean"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_engine_args(ap)
    ap.add_argument("--npl", type=ints, default=[1, 2, 4, 8, 16, 32])
    ap.add_argument("--npp", type=int, default=128)
    ap.add_argument("--ntg", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()
    bin_dir = Path(a.llama_bin)
    if not (bin_dir / "llama-batched-bench").exists():
        die(f"no llama-batched-bench in {bin_dir}: run scripts/build_llama_cpp.sh")
    rows = []
    prefill512 = []
    for n in a.npl:
        t_pp, t_tg, l_pp, l_tg = [], [], [], []
        for _ in range(a.reps):
            pp, tg = tally_parallel(a.tally, a.model, a.threads, a.npp, a.ntg, n)
            t_pp.append(pp), t_tg.append(tg)
            pp, tg = llama_batched(bin_dir, a.model, a.threads, a.npp, a.ntg, n)
            l_pp.append(pp), l_tg.append(tg)
            if n == 16:
                prefill512.append(tally_prefill(a.tally, a.model, a.threads))
        m = statistics.median
        rows.append((n, m(t_pp), m(l_pp), m(t_tg), m(l_tg)))
        print(f"N={n}: prefill {m(t_pp):.1f} / {m(l_pp):.1f} tok/s, decode {m(t_tg):.1f} / {m(l_tg):.1f} tok/s "
              f"(tally / llama.cpp)", file=sys.stderr, flush=True)
    print(f"{a.threads} threads, prompts of {a.npp} tokens, {a.ntg} generated each; medians of {a.reps} interleaved runs\n")
    print("| sequences | prefill tally | prefill llama.cpp | ratio | decode tally (all) | decode llama.cpp (all) | ratio |")
    print("|---|---|---|---|---|---|---|")
    for n, tpp, lpp, ttg, ltg in rows:
        print(f"| {n} | {tpp:.1f} | {lpp:.1f} | {tpp / lpp:.2f}x | {ttg:.1f} | {ltg:.1f} | {ttg / ltg:.2f}x |")
    if prefill512:
        p = statistics.median(prefill512)
        tg16 = next(r[3] for r in rows if r[0] == 16)
        print(f"\ntally's aggregate decode at 16 sequences: {tg16:.1f} tok/s = {100 * tg16 / p:.0f}% of its own "
              f"512-token prefill rate ({p:.1f} tok/s) in the same run")


if __name__ == "__main__":
    main()
