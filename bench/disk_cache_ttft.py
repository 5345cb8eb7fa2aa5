#!/usr/bin/env python3
"""Time to the first token of a long prompt with the prefix cache's disk tier.

    python3 bench/disk_cache_ttft.py --tally build/release/tally --model qwen2.5-coder:1.5b \\
        --tokens 8000 --threads 2 --reps 3

Per repetition, interleaved, each a new `tally run` process (-n 1, greedy):
  cold        no --cache-dir: the whole prompt prefilled
  writing     --cache-dir on an empty folder: prefilled, every full block written
  restored    --cache-dir again: the prefix loaded from the folder, the rest
              prefilled (the page cache dropped first when this user may:
              /proc/sys/vm/drop_caches; the output says whether it was)
The prompt is the repository's docs, cut to --tokens tokens with the model's
tokenizer. Prints each figure's median (prefill_ms of `run --json`, which
counts loading from disk), restored / cold, and the folder's size; checks
that the three runs chose the same token. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]


def run(cmd: list[str]) -> dict:
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if p.returncode != 0:
        sys.exit(f"disk_cache_ttft: {' '.join(cmd)} exited {p.returncode}: {p.stderr.strip()[-2000:]}")
    return json.loads(p.stdout)


def drop_page_cache() -> bool:
    try:
        subprocess.run(["sync"], check=True)
        pathlib.Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tally", default=str(ROOT / "build/release/tally"))
    ap.add_argument("--model", default="qwen2.5-coder:1.5b")
    ap.add_argument("--tokens", type=int, default=8000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--cache-type", default="f16")
    a = ap.parse_args()
    if a.tokens < 64 or a.reps < 1:
        ap.error("--tokens must be at least 64 and --reps at least 1")

    work = pathlib.Path(tempfile.mkdtemp(prefix="tally-ttft-"))
    docs = work / "docs.txt"
    docs.write_text("\n\n".join(p.read_text() for p in sorted((ROOT / "docs").glob("*.md"))))
    ids = run([a.tally, "tokenize", "-m", a.model, "--json", "-f", str(docs)])["ids"]
    if len(ids) < a.tokens:
        sys.exit(f"disk_cache_ttft: the docs hold {len(ids)} tokens, fewer than --tokens {a.tokens}")
    out = subprocess.run([a.tally, "detokenize", "-m", a.model, *map(str, ids[: a.tokens])], capture_output=True,
                         text=True, timeout=600)
    if out.returncode != 0:
        sys.exit(f"disk_cache_ttft: detokenize failed: {out.stderr.strip()}")
    prompt = work / "prompt.txt"
    prompt.write_text(out.stdout)
    folder = work / "kv"
    base = [a.tally, "run", "-m", a.model, "-f", str(prompt), "-n", "1", "--temp", "0", "--json", "-t",
            str(a.threads), "-c", str(a.tokens + 256), "--cache-type", a.cache_type]
    times: dict[str, list[float]] = {"cold": [], "writing": [], "restored": []}
    dropped = []
    folder_bytes = 0
    restored_tokens = 0
    try:
        for rep in range(a.reps):
            cold = run(base)
            shutil.rmtree(folder, ignore_errors=True)
            writing = run([*base, "--cache-dir", str(folder)])
            folder_bytes = sum(f.stat().st_size for f in folder.glob("*.kvb"))
            dropped.append(drop_page_cache())
            restored = run([*base, "--cache-dir", str(folder)])
            restored_tokens = restored["kv"]["cached_tokens"]["disk"]
            if not (cold["token_ids"] == writing["token_ids"] == restored["token_ids"]):
                sys.exit(f"disk_cache_ttft: the runs chose different tokens: {cold['token_ids']} "
                         f"{writing['token_ids']} {restored['token_ids']}")
            for k, r in (("cold", cold), ("writing", writing), ("restored", restored)):
                times[k].append(r["timings"]["prefill_ms"])
            print(f"rep {rep + 1}: " + ", ".join(f"{k} {v[-1]:.0f} ms" for k, v in times.items()), file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(json.dumps({
        "model": a.model, "prompt_tokens": a.tokens, "threads": a.threads, "cache_type": a.cache_type,
        "reps": a.reps, "median_prefill_ms": med,
        "restored_over_cold": med["restored"] / med["cold"],
        "writing_over_cold": med["writing"] / med["cold"],
        "restored_tokens_from_disk": restored_tokens, "folder_bytes": folder_bytes,
        "page_cache_dropped": all(dropped),
    }, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
