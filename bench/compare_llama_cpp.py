#!/usr/bin/env python3
"""tally against llama.cpp's own llama-bench, file by file, on the GGUF
formats people download.

For each file, thread count and depth the two benchmark tools run in turn,
A/B/A/B for --reps rounds (so a noisy machine's drift hits both), one timed
repetition per run; the table gives the medians and tally / llama.cpp:

  llama-bench -m F -t T -p 512 -n 128 -d D -r 1 -o json -fa 0,1 [-ctk C -ctv C]
  tally bench -m F -t T -p 512 -n 128 -d D -r 1 --json --no-probe [--cache-type C]

  pp512  prefill of 512 tokens on top of D tokens already in the cache
  tg128  128 decode steps on top of D tokens

Settings kept comparable (and stated here because they are llama-bench's
defaults, which the script does not change):
- the same file, thread count, prompt/decode sizes and depth for both;
- llama.cpp at its best of flash attention off and on (`-fa 0,1`: each
  figure is the faster of the two, and the table says which won): on the CPU
  neither setting wins everywhere (at depth 2048 its flash-attention path
  decoded SmolLM2 at under 1 token/s where `-fa 0` gave 72), and a ratio
  against the slower setting would flatter tally;
- llama-bench's default batch 2048 / ubatch 512 (tally prefills 512 tokens
  as one batch), an f16 K/V cache (tally's default too), load mode "auto" (the file mapped with
  mmap), weight repacking on (its CPU layouts, as tally regroups at load);
- both tools do one untimed warmup (a prefill of 512 / one decode step)
  before the timed run, and neither times the depth fill;
- `--cache-types f16,q8_0,q4_0` runs each cell once per K/V cache type, keys
  and values alike (`-ctk C -ctv C` and `--cache-type C`); llama.cpp needs
  flash attention for a quantized V cache, so those runs are `-fa 1` only.

The files: q4_1 is the default model itself; the others are made from it with
that llama.cpp tree's `llama-quantize --allow-requantize` into
$TALLY_HOME/models/derived/ (made once, remade when the source is newer).
They inherit Q4_1's rounding, which is harmless for speed. llama-quantize
falls back to other types for tensors whose rows do not fit a K-quant's
256-value blocks (SmolLM2's 576-wide rows), so the "types" column gives each
file's real mix of matrix types, by bytes. A cell tally cannot run (a tensor
type it does not support) reads "fails" with tally's reason. `--formats as-is`
benchmarks the --model file itself (another model, such as Gemma 3 270M).
`--model NAME` names a model of the catalog (models/catalog.json: a name or
alias, installed with `tally pull NAME`); its file is benchmarked as it is
(`--formats` defaults to as-is then).

  python3 bench/compare_llama_cpp.py [--markdown] [--json OUT]
      [--formats q4_1,q4_0,q8_0,q4_k_m,q5_0,q5_k_m,q6_k | as-is] [--threads 1,2]
      [--depths 0,2048] [--cache-types f16] [--reps 3] [--model NAME | PATH] [--tally PATH]
      [--llama-bin DIR]

Progress (what runs, how far, time left) goes to stderr when it is a
terminal; otherwise the script prints only its results. Needs only Python's
standard library, a built tally (build/release/tally) and llama.cpp's tools
(scripts/build_llama_cpp.sh).
"""
import argparse
import json
import math
import os
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TALLY_HOME = Path(os.environ.get("TALLY_HOME", Path.home() / ".cache/tally"))
DEFAULT_MODEL = TALLY_HOME / "models/SmolLM2-135M-Instruct.Q4_1.gguf"
CATALOG = ROOT / "models/catalog.json"
ALL_FORMATS = ["q4_1", "q4_0", "q8_0", "q4_k_m", "q5_0", "q5_k_m", "q6_k"]
AS_IS = "as-is"  # --formats as-is: the --model file itself, as downloaded (another model)
N_PROMPT, N_GEN = 512, 128
CACHE_TYPES = ["f16", "q8_0", "q4_0"]  # the K/V cache types both engines have

# ggml type id: (name, values per block, bytes per block)
GGML_TYPES = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 36), 10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74), 18: ("IQ3_XXS", 256, 98), 19: ("IQ1_S", 256, 50),
    20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110), 22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136),
    24: ("I8", 1, 1), 25: ("I16", 1, 2), 26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8),
    29: ("IQ1_M", 256, 56), 30: ("BF16", 1, 2), 34: ("TQ1_0", 256, 54), 35: ("TQ2_0", 256, 66),
}


class Failure(Exception):
    """A run that did not give figures; str() is the one-line reason."""


def die(msg):
    print(f"compare_llama_cpp: error: {msg}", file=sys.stderr)
    sys.exit(1)


# ---------------------------------------------------------------- GGUF types

def gguf_tensors(path):
    """[(name, type name, dims, bytes)] of a GGUF file, from its header only."""
    with open(path, "rb") as f:
        def read(fmt):
            size = struct.calcsize("<" + fmt)
            data = f.read(size)
            if len(data) != size:
                raise ValueError(f"{path}: truncated GGUF header")
            return struct.unpack("<" + fmt, data)

        def string():
            (n,) = read("Q")
            return f.read(n).decode("utf-8", "replace")

        scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

        def skip_value(vtype):
            if vtype in scalar:
                read(scalar[vtype])
            elif vtype == 8:
                string()
            elif vtype == 9:
                etype, n = read("IQ")
                for _ in range(n):
                    skip_value(etype)
            else:
                raise ValueError(f"{path}: unknown GGUF value type {vtype}")

        if f.read(4) != b"GGUF":
            raise ValueError(f"{path}: not a GGUF file")
        (version,) = read("I")
        if version < 2:
            raise ValueError(f"{path}: GGUF version {version} is too old")
        n_tensors, n_kv = read("QQ")
        for _ in range(n_kv):
            string()
            (vtype,) = read("I")
            skip_value(vtype)
        out = []
        for _ in range(n_tensors):
            name = string()
            (n_dims,) = read("I")
            dims = list(read("Q" * n_dims)) if n_dims else []
            type_id, _offset = read("IQ")
            tname, block, size = GGML_TYPES.get(type_id, (f"type{type_id}", 1, 0))
            out.append((name, tname, dims, math.prod(dims) // block * size))
        return out


def type_mix(tensors):
    """The matrices' types by share of their bytes, largest first: "Q5_0 61%, Q8_0 39%"."""
    by_type = {}
    for _name, tname, dims, nbytes in tensors:
        if len(dims) >= 2:
            by_type[tname] = by_type.get(tname, 0) + nbytes
    total = sum(by_type.values()) or 1
    parts = sorted(by_type.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{t} {100 * b / total:.0f}%" for t, b in parts if 100 * b / total >= 0.5)


# ---------------------------------------------------------------- parsing

def parse_llama_bench(text):
    """llama-bench -o json output -> {"pp": tok/s, "tg": tok/s, "pp_fa": s, "tg_fa": s, "by_fa": {...},
    "settings": {...}}: with entries for several flash-attention settings (-fa 0,1), each test's figure
    is the best of them, and pp_fa / tg_fa name the setting that gave it ("0", "1", or "auto" for -1)."""
    try:
        entries = json.loads(text)
    except json.JSONDecodeError as e:
        raise Failure(f"llama-bench printed no JSON ({e})")
    if not isinstance(entries, list):
        raise Failure("llama-bench printed JSON that is not a list of tests")
    out = {"pp": None, "tg": None, "pp_fa": None, "tg_fa": None, "by_fa": {}, "settings": {}}
    for e in entries:
        test = ("pp" if e.get("n_prompt", 0) > 0 and e.get("n_gen", 0) == 0
                else "tg" if e.get("n_gen", 0) > 0 and e.get("n_prompt", 0) == 0 else None)
        if test:
            fa = e.get("flash_attn", -1)
            fa = "auto" if fa in (-1, None) else str(int(fa))
            out["by_fa"].setdefault(fa, {})[test] = e["avg_ts"]
            if out[test] is None or e["avg_ts"] > out[test]:
                out[test], out[test + "_fa"] = e["avg_ts"], fa
        for k in ("build_commit", "build_number", "cpu_info", "backends", "n_threads", "n_batch", "n_ubatch",
                  "type_k", "type_v", "flash_attn", "load_mode", "use_mmap", "n_depth"):
            if k in e:
                out["settings"][k] = e[k]
    return out


def parse_tally_bench(text):
    """tally bench --json output -> {"pp": tok/s, "tg": tok/s, "settings": {...}}."""
    try:
        j = json.loads(text)
    except json.JSONDecodeError as e:
        raise Failure(f"tally bench printed no JSON ({e})")
    out = {"pp": None, "tg": None, "settings": {"simd": j.get("simd"), "load_ms": j.get("load_ms")}}
    for r in j.get("results", []):
        key = "pp" if r["test"].startswith("pp") else "tg" if r["test"].startswith("tg") else None
        if key:
            out[key] = r["tps_mean"]
    return out


def first_error_line(stderr):
    lines = [l.strip() for l in stderr.splitlines() if l.strip()]
    for l in lines:
        if "error" in l.lower():
            return l
    return lines[-1] if lines else "no message"


# ---------------------------------------------------------------- running

def run_tool(cmd, parse):
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise Failure(first_error_line(proc.stderr))
    return parse(proc.stdout)


def llama_bench_cmd(bin_dir, model, threads, depth, cache="f16"):
    """Both flash-attention settings in one run (-fa 0,1), except for a quantized V cache, which needs -fa 1."""
    cmd = [str(bin_dir / "llama-bench"), "-m", str(model), "-t", str(threads), "-p", str(N_PROMPT), "-n",
           str(N_GEN), "-d", str(depth), "-r", "1", "-o", "json"]
    return cmd + ["-fa", "0,1"] if cache == "f16" else cmd + ["-fa", "1", "-ctk", cache, "-ctv", cache]


def tally_bench_cmd(tally, model, threads, depth, cache="f16"):
    cmd = [str(tally), "bench", "-m", str(model), "-t", str(threads), "-p", str(N_PROMPT), "-n", str(N_GEN), "-d",
           str(depth), "-r", "1", "--json", "--no-probe"]
    return cmd if cache == "f16" else cmd + ["--cache-type", cache]


def find_llama_bin(arg):
    d = Path(arg) if arg else TALLY_HOME / "llama.cpp/bin"
    missing = [t for t in ("llama-bench", "llama-quantize") if not os.access(d / t, os.X_OK)]
    if missing:
        die(f"llama.cpp's {' and '.join(missing)} not found in {d}: run scripts/build_llama_cpp.sh"
            + ("" if arg else " (or give --llama-bin DIR)"))
    help_text = subprocess.run([str(d / "llama-bench"), "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True).stdout
    if "--n-depth" not in help_text:
        die(f"{d / 'llama-bench'} has no -d/--n-depth (too old): run scripts/build_llama_cpp.sh")
    return d


def derived_path(source, fmt):
    stem = source.name
    for suffix in (".gguf", ".Q4_1", ".q4_1"):
        if stem.endswith(suffix):
            stem = stem[: -len(suffix)]
    return TALLY_HOME / "models/derived" / f"{stem}.{fmt.upper()}.gguf"


def make_file(bin_dir, source, fmt, progress):
    """The file of format fmt: the source itself for q4_1, else made by llama-quantize (cached)."""
    if fmt in ("q4_1", AS_IS):
        return source
    out = derived_path(source, fmt)
    if out.exists() and out.stat().st_mtime >= source.stat().st_mtime:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    progress.note(f"making {out.name} with llama-quantize")
    tmp = out.with_suffix(".tmp")
    proc = subprocess.run([str(bin_dir / "llama-quantize"), "--allow-requantize", str(source), str(tmp), fmt.upper()],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise Failure(f"llama-quantize {fmt.upper()}: {first_error_line(proc.stderr)}")
    tmp.replace(out)
    return out


class Progress:
    """One line on stderr, redrawn in place, only when stderr is a terminal
    (the same rule and format as tally's bench/progress.h)."""

    def __init__(self, title, total, stream=sys.stderr, enabled=None):
        self.title, self.total, self.stream = title, total, stream
        self.enabled = stream.isatty() if enabled is None else enabled
        self.done, self.start, self.what = 0, time.monotonic(), ""

    @staticmethod
    def seconds_left(done, total, elapsed):
        if done >= total:
            return 0.0
        if done <= 0 or elapsed <= 0:
            return None
        return elapsed * (total - done) / done

    @staticmethod
    def duration(seconds):
        s = int(round(max(0.0, seconds)))
        if s < 60:
            return f"{s}s"
        if s < 3600:
            return f"{s // 60}m{s % 60:02d}s"
        return f"{s // 3600}h{s % 3600 // 60:02d}m"

    @classmethod
    def line(cls, title, what, done, total, elapsed):
        share = min(max(done / total, 0.0), 1.0) if total > 0 else 0.0
        text = f"{title}: {100 * share:3.0f}%, {cls.duration(elapsed)} elapsed"
        left = cls.seconds_left(done, total, elapsed)
        return (text if left is None else text + f", ~{cls.duration(left)} left") + f" | {what}"

    def update(self, what, done=None):
        self.what = what
        if done is not None:
            self.done = done
        if not self.enabled:
            return
        text = self.line(self.title, what, self.done, self.total, time.monotonic() - self.start)
        try:
            columns = os.get_terminal_size(self.stream.fileno()).columns
        except OSError:
            columns = 0
        width = (columns if columns > 0 else 80) - 1  # a terminal that reports no size: 80
        self.stream.write("\r\033[K" + text[:width])
        self.stream.flush()

    def note(self, what):
        self.update(what)

    def clear(self):
        if self.enabled:
            self.stream.write("\r\033[K")
            self.stream.flush()


# ---------------------------------------------------------------- the table

def median_or_none(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def summarize(runs):
    """Raw runs -> one cell per (format, cache type, threads, depth) with medians, ratios and failures."""
    cells = {}
    for r in runs:
        cache = r.get("cache", "f16")
        key = (r["format"], cache, r["threads"], r["depth"])
        c = cells.setdefault(key, {"format": r["format"], "file": r["file"], "types": r["types"], "cache": cache,
                                   "threads": r["threads"], "depth": r["depth"],
                                   "tally": {"pp": [], "tg": [], "error": None},
                                   "llama.cpp": {"pp": [], "tg": [], "pp_fa": [], "tg_fa": [], "error": None}})
        e = c[r["engine"]]
        if r.get("error"):
            e["error"] = r["error"]
        else:
            e["pp"].append(r["pp"])
            e["tg"].append(r["tg"])
            for t in ("pp", "tg"):
                if r.get(t + "_fa") is not None:
                    e[t + "_fa"].append(r[t + "_fa"])
    out = []
    for c in cells.values():
        for eng in ("tally", "llama.cpp"):
            e = c[eng]
            e["pp_median"], e["tg_median"] = median_or_none(e["pp"]), median_or_none(e["tg"])
        for t in ("pp", "tg"):  # the flash-attention setting that won most rounds
            won = c["llama.cpp"][t + "_fa"]
            c["llama.cpp"][t + "_best_fa"] = max(sorted(set(won)), key=won.count) if won else None
        for t in ("pp", "tg"):
            a, b = c["tally"][t + "_median"], c["llama.cpp"][t + "_median"]
            c[t + "_ratio"] = a / b if a and b else None
        out.append(c)
    return out


def fmt_tps(e, test):
    if e["error"] and e[test + "_median"] is None:
        return "fails"
    v = e[test + "_median"]
    if v is None:
        return ""
    fa = e.get(test + "_best_fa")
    return f"{v:.1f}" + (f" (fa {fa})" if fa in ("0", "1") else "")


def markdown(cells, reps):
    lines = [f"Medians of {reps} interleaved runs per cell (A/B/A/B), tokens/s; "
             f"pp{N_PROMPT} = prefill of {N_PROMPT} tokens, tg{N_GEN} = {N_GEN} decode steps, "
             "both on top of `depth` tokens already in the cache; llama.cpp at its best of `-fa 0` and `-fa 1` "
             "(the setting that won in brackets).", "",
             f"| file | types | K/V cache | threads | depth | pp{N_PROMPT} tally | pp{N_PROMPT} llama.cpp | pp ratio "
             f"| tg{N_GEN} tally | tg{N_GEN} llama.cpp | tg ratio |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    failures = []
    for c in cells:
        ratio = {t: (f"**{c[t + '_ratio']:.2f}x**" if c[t + "_ratio"] else "") for t in ("pp", "tg")}
        lines.append(f"| {c['format'].upper()} | {c['types']} | {c['cache']} | {c['threads']} | {c['depth']} "
                     f"| {fmt_tps(c['tally'], 'pp')} | {fmt_tps(c['llama.cpp'], 'pp')} | {ratio['pp']} "
                     f"| {fmt_tps(c['tally'], 'tg')} | {fmt_tps(c['llama.cpp'], 'tg')} | {ratio['tg']} |")
        for eng in ("tally", "llama.cpp"):
            if c[eng]["error"]:
                failures.append(f"- {c['format'].upper()}, {eng}: {c[eng]['error']}")
    if failures:
        lines += ["", "Fails:"] + sorted(set(failures))
    return "\n".join(lines)


def plain(cells):
    out = []
    for c in cells:
        parts = []
        for t in ("pp", "tg"):
            r = c[t + "_ratio"]
            parts.append(f"{t} tally {fmt_tps(c['tally'], t)} / llama.cpp {fmt_tps(c['llama.cpp'], t)}"
                         + (f" = {r:.2f}x" if r else ""))
        out.append(f"{c['format'].upper():7} {c['cache']:4} t={c['threads']} d={c['depth']:<5} " + "; ".join(parts))
        for eng in ("tally", "llama.cpp"):
            if c[eng]["error"]:
                out.append(f"        {eng} fails: {c[eng]['error']}")
    return "\n".join(out)


# ---------------------------------------------------------------- main

def int_list(text):
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")
    if not values:
        raise argparse.ArgumentTypeError("expected at least one value")
    return values


def catalog_model(name, catalog=CATALOG, home=TALLY_HOME):
    """(path, entry) of a catalog model by name or alias, or None when `name` is not one; dies when it is
    one that is not installed."""
    doc = json.loads(Path(catalog).read_text())
    for m in doc["models"]:
        if name == m["name"] or name in m.get("aliases", []):
            path = Path(home) / "models" / m["file"]
            if not path.is_file():
                die(f"--model {name}: {m['name']} is not installed at {path}: run `tally pull {m['name']}`")
            return path, m
    return None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="a catalog name or alias (models/catalog.json), or the source GGUF "
                    "(default: smollm2:135m's file, the source of the derived formats)")
    ap.add_argument("--tally", default=str(ROOT / "build/release/tally"))
    ap.add_argument("--llama-bin", help="llama.cpp's tools (default: $TALLY_HOME/llama.cpp/bin)")
    ap.add_argument("--formats", help="comma-separated llama-quantize types, or as-is (default: all of them; "
                    "as-is for a catalog model)")
    ap.add_argument("--threads", type=int_list, default=[1, 2])
    ap.add_argument("--depths", type=int_list, default=[0, 2048])
    ap.add_argument("--cache-types", default="f16", help=f"comma-separated K/V cache types ({', '.join(CACHE_TYPES)})")
    ap.add_argument("--reps", type=int, default=3, help="interleaved rounds per cell")
    ap.add_argument("--markdown", action="store_true", help="print a markdown table")
    ap.add_argument("--json", metavar="OUT", help="write the raw runs and the medians here")
    a = ap.parse_args(argv)

    source = Path(a.model or DEFAULT_MODEL)
    named = None if source.is_file() or a.model is None else catalog_model(a.model)
    if named:
        source = named[0]
    if a.formats is None:
        a.formats = AS_IS if named else ",".join(ALL_FORMATS)
    formats = [f.strip().lower() for f in a.formats.split(",") if f.strip()]
    unknown = [f for f in formats if f not in ALL_FORMATS + [AS_IS]]
    if unknown:
        die(f"--formats: unknown {', '.join(unknown)} (known: {', '.join(ALL_FORMATS + [AS_IS])})")
    caches = [c.strip().lower() for c in a.cache_types.split(",") if c.strip()]
    bad = [c for c in caches if c not in CACHE_TYPES]
    if bad or not caches:
        what = f"unknown {', '.join(bad)}" if bad else "none given"
        die(f"--cache-types: {what} (known: {', '.join(CACHE_TYPES)})")
    if a.reps < 1:
        die("--reps must be at least 1")
    if any(t < 1 for t in a.threads) or any(d < 0 for d in a.depths):
        die("--threads must be positive and --depths >= 0")
    if not source.is_file():
        die(f"{source} not found: run `tally pull smollm2:135m` (or give --model NAME or PATH)")
    tally = Path(a.tally)
    if not os.access(tally, os.X_OK):
        die(f"{tally} not found: build it (cmake --build build/release --target tally) or give --tally")
    bin_dir = find_llama_bin(a.llama_bin)

    cells_of_file = [(c, t, d) for c in caches for t in a.threads for d in a.depths]
    total = len(formats) * len(cells_of_file) * a.reps * 2
    progress = Progress("compare_llama_cpp", total)
    runs, files = [], {}
    try:
        for fmt in formats:
            try:
                path = make_file(bin_dir, source, fmt, progress)
                types = type_mix(gguf_tensors(path))
            except Failure as e:
                for cache, t, d in cells_of_file:
                    for eng in ("tally", "llama.cpp"):
                        runs.append({"format": fmt, "file": None, "types": "", "cache": cache, "threads": t,
                                     "depth": d, "engine": eng, "round": 0, "error": str(e)})
                progress.done += len(cells_of_file) * a.reps * 2
                continue
            files[fmt] = {"path": str(path), "types": types, "bytes": path.stat().st_size}
            for cache, t, d in cells_of_file:
                tally_failed = None
                for rnd in range(1, a.reps + 1):
                    for eng in ("tally", "llama.cpp"):
                        progress.update(f"{fmt.upper()}, {cache} cache, {t} thread{'s' if t > 1 else ''}, depth {d}, "
                                        f"round {rnd}/{a.reps}: {eng}")
                        run = {"format": fmt, "file": str(path), "types": types, "cache": cache, "threads": t,
                               "depth": d, "engine": eng, "round": rnd}
                        try:
                            if eng == "tally" and tally_failed:
                                raise Failure(tally_failed)  # a file tally cannot load fails every time
                            if eng == "tally":
                                res = run_tool(tally_bench_cmd(tally, path, t, d, cache), parse_tally_bench)
                            else:
                                res = run_tool(llama_bench_cmd(bin_dir, path, t, d, cache), parse_llama_bench)
                            run.update(res)
                        except Failure as e:
                            run["error"] = str(e)
                            if eng == "tally":
                                tally_failed = str(e)
                        runs.append(run)
                        progress.done += 1
    finally:
        progress.clear()

    cells = summarize(runs)
    if a.json:
        settings = next((r["settings"] for r in runs if r["engine"] == "llama.cpp" and "settings" in r), {})
        with open(a.json, "w") as f:
            json.dump({"source": str(source), "model": named[1]["name"] if named else None, "n_prompt": N_PROMPT, "n_gen": N_GEN, "reps": a.reps,
                       "llama_bench_settings": settings, "files": files, "runs": runs, "cells": cells}, f, indent=1)
    print(markdown(cells, a.reps) if a.markdown else plain(cells))


if __name__ == "__main__":
    main()
