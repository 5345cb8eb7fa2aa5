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
that the three runs chose the same token.

Beside it, llama.cpp's llama-server (--llama-bin; left out when it is not
built) restores the same prompt through its manual slot files
(--slot-save-path): once, a cold /completion of the prompt (n_predict 1) and
POST /slots/0?action=save; then per repetition, a new llama-server process
(the page cache dropped first, as for tally), POST /slots/0?action=restore
and the same /completion, which evaluates what the restored slot lacks.
Its restored time is restore_ms + that completion's prompt_ms (its own
timings), and the wall time of the two requests is reported too. With
--llama-fa on,off (the default) each setting has its own slot file and
processes every repetition, and the output gives each and the better of the
two (by the median restored time). Standard library only.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from bench_common import ROOT, TALLY_HOME, free_port, model_path, wait_ready


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


def post(port: int, path: str, body: dict) -> dict:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    out = r.read()
    if r.status != 200:
        sys.exit(f"disk_cache_ttft: llama-server answered {path} with {r.status}: {out[:300]!r}")
    return json.loads(out)


class LlamaServer:
    """One llama-server process with a slot folder, for the slot save/restore comparison."""

    def __init__(self, a, gguf: pathlib.Path, slots: pathlib.Path, fa: str):
        self.port = free_port()
        exe = pathlib.Path(a.llama_bin) / "llama-server"
        cmd = [str(exe), "-m", str(gguf), "-t", str(a.threads), "-tb", str(a.threads), "-np", "1",
               "-c", str(a.tokens + 256), "-fa", fa, "--slot-save-path", str(slots) + "/",
               "--port", str(self.port)]
        if a.cache_type != "f16":
            cmd += ["-ctk", a.cache_type, "-ctv", a.cache_type]
        env = {**os.environ, "LD_LIBRARY_PATH": str(a.llama_bin)}
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        wait_ready(self.port, self.proc, "/health", "disk_cache_ttft", timeout=300)

    def complete(self, prompt: str) -> dict:
        return post(self.port, "/completion", {"prompt": prompt, "n_predict": 1, "temperature": 0,
                                               "cache_prompt": True, "id_slot": 0})

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tally", default=str(ROOT / "build/release/tally"))
    ap.add_argument("--model", default="qwen2.5-coder:1.5b")
    ap.add_argument("--tokens", type=int, default=8000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--cache-type", default="f16")
    ap.add_argument("--llama-bin", default=str(TALLY_HOME / "llama.cpp/bin"))
    ap.add_argument("--llama-fa", default="on,off",
                    help="llama-server's -fa settings, comma-separated from on, off, auto (default on,off: "
                         "both run every repetition, the better is reported)")
    a = ap.parse_args()
    fas = a.llama_fa.split(",")
    if not fas or any(f not in ("on", "off", "auto") for f in fas) or len(set(fas)) != len(fas):
        ap.error(f"--llama-fa takes distinct values from on, off, auto; got {a.llama_fa!r}")
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
    prompt.write_text(out.stdout.removesuffix("\n"))  # detokenize ends its output with a newline
    n_prompt = len(run([a.tally, "tokenize", "-m", a.model, "--json", "-f", str(prompt)])["ids"])
    if n_prompt != a.tokens:
        print(f"(the cut text reads back as {n_prompt} tokens, not {a.tokens})", file=sys.stderr)
    folder = work / "kv"
    slots = work / "slots"
    for fa in fas:
        (slots / fa).mkdir(parents=True)
    have_llama = (pathlib.Path(a.llama_bin) / "llama-server").exists()
    if not have_llama:
        print(f"(no {a.llama_bin}/llama-server: scripts/build_llama_cpp.sh builds it; llama-server is left out)",
              file=sys.stderr)
    gguf = model_path(a.model, "disk_cache_ttft")
    text = prompt.read_text()
    llama = {fa: {"cold": [], "restore": [], "rest_prefill": [], "restored": [], "wall": []} for fa in fas}
    llama_info: dict = {fa: {} for fa in fas}
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
            if have_llama:
                for fa in fas:
                    llama_rep(a, gguf, slots / fa, text, rep, llama[fa], llama_info[fa], fa)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(json.dumps({
        "model": a.model, "prompt_tokens": n_prompt, "threads": a.threads, "cache_type": a.cache_type,
        "reps": a.reps, "median_prefill_ms": med,
        "restored_over_cold": med["restored"] / med["cold"],
        "writing_over_cold": med["writing"] / med["cold"],
        "restored_tokens_from_disk": restored_tokens, "prefilled_after_restore": n_prompt - restored_tokens,
        "folder_bytes": folder_bytes,
        "page_cache_dropped": all(dropped),
        "llama_server": llama_summary(llama, llama_info) if have_llama else None,
    }, indent=1))
    return 0


def llama_summary(llama: dict, info: dict) -> dict:
    """Each -fa setting's medians, and the better one (the lower median restored time) named."""
    per = {fa: {**info[fa], "median_ms": {k: statistics.median(v) for k, v in t.items() if v},
                "restored_over_cold": statistics.median(t["restored"]) / t["cold"][0]} for fa, t in llama.items()}
    best = min(per, key=lambda fa: per[fa]["median_ms"]["restored"])
    return {"best_fa": best, **per[best], "by_fa": per}


def llama_rep(a, gguf, slots, text, rep, llama, info, fa) -> None:
    """The first repetition prefills the prompt cold and saves the slot; each restores it in a new process."""
    if rep == 0:
        s = LlamaServer(a, gguf, slots, fa)
        try:
            r = s.complete(text)
            saved = post(s.port, "/slots/0?action=save", {"filename": "ctx.bin"})
        finally:
            s.stop()
        llama["cold"].append(r["timings"]["prompt_ms"])
        info.update(prompt_tokens=r["timings"]["prompt_n"], token=r["content"], slot_bytes=saved["n_written"],
                    save_ms=saved["timings"]["save_ms"], fa=fa)
    drop_page_cache()
    s = LlamaServer(a, gguf, slots, fa)
    try:
        t0 = time.perf_counter()
        restored = post(s.port, "/slots/0?action=restore", {"filename": "ctx.bin"})
        r = s.complete(text)
        wall = (time.perf_counter() - t0) * 1000
    finally:
        s.stop()
    if r["content"] != info["token"]:
        sys.exit(f"disk_cache_ttft: llama-server chose {r['content']!r} after the restore, {info['token']!r} cold")
    llama["restore"].append(restored["timings"]["restore_ms"])
    llama["rest_prefill"].append(r["timings"]["prompt_ms"])
    llama["restored"].append(restored["timings"]["restore_ms"] + r["timings"]["prompt_ms"])
    llama["wall"].append(wall)
    info["reevaluated_tokens"] = r["timings"]["prompt_n"]
    print(f"rep {rep + 1}: llama-server -fa {fa} cold {llama['cold'][0]:.0f} ms, restore {llama['restore'][-1]:.0f} + "
          f"prefill {llama['rest_prefill'][-1]:.0f} ms ({r['timings']['prompt_n']} tokens), wall {wall:.0f} ms",
          file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
