#!/usr/bin/env python3
"""Speculative decoding: tally with and without it (prompt lookup, and with
--draft a draft model), and llama.cpp's own `llama-lookup` and
`llama-speculative`, on held code-edit and chat tasks
(bench/speculative_tasks.json, the tasks of `tally lab speculative`),
greedy, interleaved, medians.

For each task and thread count, every round runs in turn:

  tally run -m F -p PROMPT -n N --temp 0 -t T --json                      (off)
  tally run ... --speculate lookup --draft-max K                          (lookup)
  llama-lookup -m F -f PROMPT_FILE -n N --temp 0 -t T --spec-draft-n-max K -c C -fa FA  (llama.cpp)
  and with --draft D:
  tally run ... --draft D --draft-max K                                   (draft)
  llama-speculative -m F -md D -f PROMPT_FILE -n N --temp 0 -t T --spec-draft-n-max K -c C -fa FA

llama.cpp's tools run once per round for each flash-attention setting of
--llama-fa (default: on and off); the table gives the better of their medians,
and which setting that was.

PROMPT is the user's message in the model's chat template, rendered by
Python's jinja2 from the template in the GGUF file (gguf-py), and given to
both engines as the same text (special tokens parsed by both). The figure is
decode tokens per second: tally's `decode_tps` (the tokens the decode steps
chose over their time), llama-lookup's "decoded N tokens in S seconds"
(its decode loop, the prompt excluded). llama-lookup has no end-of-turn stop
of its own for chat templates, so both stop at -n or at an end token as the
model emits it; the table gives the tokens each generated. The check column
says whether tally's tokens with speculation equal its tokens without (they
must: greedy speculation changes nothing but the speed).

    usage: bench/compare_speculative.py --model qwen2.5-coder:1.5b [--threads 1,2] [--reps 3]
    (run it with the fixture venv's Python: ~/.cache/tally/venv/bin/python)
"""
import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import ROOT, TALLY_HOME, model_path  # noqa: E402


def chat_prompt(gguf_file, user):
    import gguf
    import jinja2
    r = gguf.GGUFReader(str(gguf_file))
    f = r.fields["tokenizer.chat_template"]
    template = bytes(f.parts[f.data[0]]).decode()
    env = jinja2.Environment(loader=jinja2.BaseLoader())
    return env.from_string(template).render(messages=[{"role": "user", "content": user}], add_generation_prompt=True)


def run_tally(a, model, prompt, threads, k, draft=None):
    cmd = [a.tally, "run", "-m", str(model), "-p", prompt, "-n", str(a.n), "--temp", "0", "-t", str(threads),
           "-c", str(a.ctx), "--json"]
    if k and draft:
        cmd += ["--draft", str(draft), "--draft-max", str(k)]
    elif k:
        cmd += ["--speculate", "lookup", "--draft-max", str(k)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    if p.returncode != 0:
        sys.exit(f"compare_speculative: {' '.join(cmd[:3])} failed: {p.stderr.strip()}")
    j = json.loads(p.stdout)
    s = j.get("speculation", {})
    return {"tps": j["timings"]["decode_tps"], "tokens": j["token_ids"], "drafted": s.get("drafted", 0),
            "accepted": s.get("accepted", 0)}


def run_llama_lookup(a, model, prompt_file, threads, k, fa, draft=None):
    exe = Path(a.llama_bin) / ("llama-speculative" if draft else "llama-lookup")
    cmd = [str(exe), "-m", str(model), "-f", str(prompt_file), "-n", str(a.n), "--temp", "0", "-t", str(threads),
           "--spec-draft-n-max", str(k), "-c", str(a.ctx), "-fa", fa]
    if draft:
        cmd += ["-md", str(draft)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    out = p.stdout + p.stderr
    m = re.search(r"decoded\s+(\d+)\s+tokens in\s+([\d.]+)\s+seconds", out)
    if p.returncode != 0 or not m:
        sys.exit(f"compare_speculative: {exe.name} failed ({p.returncode}): {out[-600:]}")
    acc = re.search(r"n_accept\s*=\s*(\d+)", out)
    drafted = re.search(r"n_drafted\s*=\s*(\d+)", out)
    return {"tps": int(m.group(1)) / float(m.group(2)), "tokens_n": int(m.group(1)),
            "drafted": int(drafted.group(1)) if drafted else 0, "accepted": int(acc.group(1)) if acc else 0}


def print_table(rows, mode, kept, peer, peer_name, have_llama, with_checks):
    """One markdown table: tally off against tally `mode`, and beside the peer's tool when it ran."""
    head = f"| task | threads | tokens | tally off tok/s | tally {mode} tok/s | speedup | guesses kept |"
    sep = "|---|---|---|---|---|---|---|"
    if with_checks:
        head += " same tokens |"
        sep += "---|"
    if have_llama:
        head += f" {peer_name} tok/s | -fa | tally {mode} / {peer_name} |"
        sep += "---|---|---|"
    print(head)
    print(sep)
    for r in rows:
        line = (f"| {r['kind']}: {r['task']} | {r['threads']} | {r['tokens']} | {r['off']:.1f} | {r[mode]:.1f} | "
                f"{r[mode] / r['off']:.2f}x | {100 * r[kept]:.0f}% |")
        if with_checks:
            line += f" {'yes' if r['same'] else 'NO'} |"
        if have_llama:
            tokens = f" ({r['llama_tokens']})" if peer == "llama" else ""
            line += f" {r[peer]:.1f}{tokens} | {r[peer + '_fa']} | {r[mode] / r[peer]:.2f}x |"
        print(line)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder:1.5b")
    ap.add_argument("--tally", default=str(ROOT / "build/release/tally"))
    ap.add_argument("--llama-bin", default=str(TALLY_HOME / "llama.cpp/bin"))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("-n", type=int, default=256)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--draft-max", type=int, default=8)
    ap.add_argument("--tasks", default=str(ROOT / "bench/speculative_tasks.json"))
    ap.add_argument("--draft", help="also a draft model (tally --draft, llama-speculative -md), e.g. qwen2.5-coder:0.5b")
    ap.add_argument("--llama-fa", default="on,off",
                    help="llama.cpp's flash-attention settings, each run every round; the better median is reported")
    ap.add_argument("--json", help="write every run's figures to this file")
    a = ap.parse_args()
    model = model_path(a.model, "compare_speculative")
    draft = model_path(a.draft, "compare_speculative") if a.draft else None
    tasks = json.loads(Path(a.tasks).read_text())
    have_llama = (Path(a.llama_bin) / "llama-lookup").exists()
    if not have_llama:
        print(f"(no {a.llama_bin}/llama-lookup: scripts/build_llama_cpp.sh builds it; its column is left out)",
              file=sys.stderr)
    rows, raw = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for kind in ("code-edit", "chat"):
            for t in tasks[kind]:
                prompt = chat_prompt(model, t["prompt"])
                pf = Path(tmp) / f"{t['name']}.txt"
                pf.write_text(prompt)
                for threads in [int(x) for x in a.threads.split(",")]:
                    fas = a.llama_fa.split(",")
                    runs = {"off": [], "lookup": [], "draft": []}
                    for fa in fas:
                        runs["llama fa " + fa], runs["llama_draft fa " + fa] = [], []
                    for _ in range(a.reps):
                        runs["off"].append(run_tally(a, model, prompt, threads, 0))
                        runs["lookup"].append(run_tally(a, model, prompt, threads, a.draft_max))
                        for fa in fas if have_llama else []:
                            runs["llama fa " + fa].append(run_llama_lookup(a, model, pf, threads, a.draft_max, fa))
                        if draft:
                            runs["draft"].append(run_tally(a, model, prompt, threads, a.draft_max, draft))
                            for fa in fas if have_llama else []:
                                runs["llama_draft fa " + fa].append(
                                    run_llama_lookup(a, model, pf, threads, a.draft_max, fa, draft))
                    med = {m: statistics.median(r["tps"] for r in v) for m, v in runs.items() if v}
                    # llama.cpp at its better flash-attention setting.
                    for tool in ("llama", "llama_draft"):
                        tried = [(med[f"{tool} fa {fa}"], fa) for fa in fas if f"{tool} fa {fa}" in med]
                        if tried:
                            med[tool], best = max(tried)
                            runs[tool] = runs[f"{tool} fa {best}"]
                            med[tool + "_fa"] = best
                    same = all(r["tokens"] == runs["off"][0]["tokens"] for r in runs["lookup"] + runs["draft"])
                    lk = runs["lookup"][0]
                    row = {"kind": kind, "task": t["name"], "threads": threads, "tokens": len(runs["off"][0]["tokens"]),
                           "off": med["off"], "lookup": med["lookup"], "same": same,
                           "kept": lk["accepted"] / lk["drafted"] if lk["drafted"] else 0.0}
                    if "llama" in med:
                        row["llama"] = med["llama"]
                        row["llama_fa"] = med["llama_fa"]
                        row["llama_tokens"] = runs["llama"][0]["tokens_n"]
                    if "draft" in med:
                        d = runs["draft"][0]
                        row["draft"] = med["draft"]
                        row["draft_kept"] = d["accepted"] / d["drafted"] if d["drafted"] else 0.0
                    if "llama_draft" in med:
                        row["llama_draft"] = med["llama_draft"]
                        row["llama_draft_fa"] = med["llama_draft_fa"]
                    rows.append(row)
                    raw.append({**row, "runs": {m: [r["tps"] for r in v] for m, v in runs.items() if " fa " in m or
                                                m in ("off", "lookup", "draft")}})
                    print(json.dumps(row), file=sys.stderr, flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(raw, indent=1))
    print_table(rows, "lookup", "kept", "llama", "llama-lookup", have_llama, True)
    if draft:
        print()
        print_table(rows, "draft", "draft_kept", "llama_draft", "llama-speculative", have_llama, False)
    for kind in ("code-edit", "chat"):
        for threads in sorted({r["threads"] for r in rows}):
            sel = [r for r in rows if r["kind"] == kind and r["threads"] == threads]
            if sel:
                g = statistics.geometric_mean([r["lookup"] / r["off"] for r in sel])
                extra = ""
                if have_llama:
                    extra = f", against llama-lookup {statistics.geometric_mean([r['lookup'] / r['llama'] for r in sel]):.2f}x"
                if draft:
                    extra += f"; draft / off {statistics.geometric_mean([r['draft'] / r['off'] for r in sel]):.2f}x"
                    if have_llama:
                        extra += f", against llama-speculative {statistics.geometric_mean([r['draft'] / r['llama_draft'] for r in sel]):.2f}x"
                print(f"\n{kind}, {threads} thread(s): lookup / off {g:.2f}x (geometric mean){extra}")


if __name__ == "__main__":
    main()
