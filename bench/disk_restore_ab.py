#!/usr/bin/env python3
"""Restored time to first token, one tally binary against another (before and after a change to the disk tier).

    python3 bench/disk_restore_ab.py --before OLD/tally --after build/release/tally \\
        --model qwen2.5-coder:1.5b --tokens 8000 --extra 0,16,128 --rounds 4 [--warm]

One folder is written once (`tally run --cache-dir` of the first --tokens
tokens of the repository's docs, by --after). Then per round, for each
prompt (those tokens and --extra more: 0 is the prompt itself, whose last
token is evaluated again; n > 0 are evaluated after the restore), each binary in turn (the order
alternating by round) restores it in a new `tally run` process from a fresh
copy of the folder (so no run sees the blocks another wrote), after `sync`
and either the page cache dropped (the default; needs root) or, with
--warm, the files read once. Prints each run and, per prompt and binary, the
median `prefill_ms` of `run --json` (the load and the prefill of what the
folder lacks) and after / before; checks that both chose the same token.
Standard library only.
"""
import argparse
import json
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile

from bench_common import ROOT


def run(cmd: list[str]) -> dict:
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if p.returncode != 0:
        sys.exit(f"disk_restore_ab: {' '.join(cmd)} exited {p.returncode}: {p.stderr.strip()[-2000:]}")
    return json.loads(p.stdout)


def settle(folder: pathlib.Path, warm: bool) -> None:
    subprocess.run(["sync"], check=True)
    if warm:
        for f in folder.glob("*.kvb"):
            f.read_bytes()
        return
    try:
        pathlib.Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError as e:
        sys.exit(f"disk_restore_ab: cannot drop the page cache ({e}); run as root or give --warm")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", default=str(ROOT / "build/release/tally"))
    ap.add_argument("--model", default="qwen2.5-coder:1.5b")
    ap.add_argument("--tokens", type=int, default=8000)
    ap.add_argument("--extra", default="0,16,128", help="tokens past --tokens, comma-separated (0: the prompt itself)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--warm", action="store_true", help="read the files once instead of dropping the page cache")
    a = ap.parse_args()
    try:
        extra = [int(t) for t in a.extra.split(",")]
    except ValueError:
        ap.error(f"--extra takes whole numbers separated by commas, got {a.extra!r}")
    if a.tokens < 64 or a.rounds < 1 or any(t < 0 for t in extra):
        ap.error("--tokens must be at least 64, --rounds at least 1 and --extra's values at least 0")

    work = pathlib.Path(tempfile.mkdtemp(prefix="tally-restore-ab-"))
    try:
        docs = work / "docs.txt"
        docs.write_text("\n\n".join(p.read_text() for p in sorted((ROOT / "docs").glob("*.md"))))
        ids = run([a.after, "tokenize", "-m", a.model, "--json", "-f", str(docs)])["ids"]
        lengths = [a.tokens + t for t in extra]
        if len(ids) < max(lengths):
            sys.exit(f"disk_restore_ab: the docs hold {len(ids)} tokens, fewer than {max(lengths)}")
        prompts = {}
        for n in lengths:
            out = subprocess.run([a.after, "detokenize", "-m", a.model, *map(str, ids[:n])], capture_output=True,
                                 text=True, timeout=600)
            if out.returncode != 0:
                sys.exit(f"disk_restore_ab: detokenize failed: {out.stderr.strip()}")
            prompts[n] = work / f"prompt{n}.txt"
            prompts[n].write_text(out.stdout.removesuffix("\n"))

        def cmd(binary: str, n: int, folder: pathlib.Path) -> list[str]:
            return [binary, "run", "-m", a.model, "-f", str(prompts[n]), "-n", "1", "--temp", "0", "--json",
                    "-t", str(a.threads), "-c", str(max(lengths) + 256), "--cache-dir", str(folder)]

        written = run(cmd(a.after, lengths[0], work / "kv"))
        print(f"folder written: {written['timings']['prefill_ms']:.0f} ms", file=sys.stderr)
        times: dict[tuple[int, str], list[float]] = {}
        chosen: dict[int, set] = {}
        for r in range(a.rounds):
            order = [("before", a.before), ("after", a.after)]
            if r % 2:
                order.reverse()
            for n in lengths:
                for name, binary in order:
                    folder = work / "copy"
                    shutil.rmtree(folder, ignore_errors=True)
                    shutil.copytree(work / "kv", folder)
                    settle(folder, a.warm)
                    o = run(cmd(binary, n, folder))
                    ms = o["timings"]["prefill_ms"]
                    times.setdefault((n, name), []).append(ms)
                    chosen.setdefault(n, set()).add(tuple(o["token_ids"]))
                    print(f"round {r + 1}, {n} tokens, {name}: {ms:.0f} ms "
                          f"({o['kv']['cached_tokens']['disk']} from disk)", file=sys.stderr)
        for n in lengths:
            if len(chosen[n]) != 1:
                sys.exit(f"disk_restore_ab: the binaries chose different tokens for {n} tokens: {chosen[n]}")
        print(json.dumps({
            "model": a.model, "threads": a.threads, "rounds": a.rounds,
            "page_cache": "warm" if a.warm else "dropped",
            "prompts": [{
                "tokens": n,
                "median_ms": {k: statistics.median(times[(n, k)]) for k in ("before", "after")},
                "after_over_before": statistics.median(times[(n, "after")]) / statistics.median(times[(n, "before")]),
                "runs_ms": {k: times[(n, k)] for k in ("before", "after")},
            } for n in lengths],
        }, indent=1))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
