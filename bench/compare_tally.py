#!/usr/bin/env python3
"""One tally binary against another (before and after a change) on the
formats table and the batched table, the two binaries run in turn
(A/B/A/B) for --reps rounds so that a drifting machine hits both; medians.

  formats:  tally bench -m F -t T -p 512 -n 128 -d D -r 1 --json --no-probe
            for each file of compare_llama_cpp.py's formats (made once by
            llama-quantize from the default model), thread count and depth
  batched:  tally bench -m F -t T -p P -n G --parallel N -r 1 --no-probe --json
            for each sequence count N (compare_batched.py's tally side)

Each row gives both medians and after / before; a cell more than --slower
percent below the old binary is marked "SLOWER", and the exit status is 1
when any cell is.

  python3 bench/compare_tally.py --before OLD_TALLY [--after build/release/tally]
      [--formats q4_1,...] [--threads 1,2] [--depths 0,2048] [--npl 1,2,4,8,16,32]
      [--npp 128] [--ntg 64] [--reps 3] [--slower 3] [--skip formats|batched]
      [--cells q4_1:1:2048,...]   (only these file:threads:depth cells of the formats table)

Needs only Python's standard library and llama.cpp's llama-quantize for the
derived formats (scripts/build_llama_cpp.sh).
"""
import argparse
import sys
from pathlib import Path

import compare_llama_cpp as cl
from compare_batched import ints, tally_parallel


def row(name, before, after, slower):
    b, a = cl.median_or_none(before), cl.median_or_none(after)
    ratio = a / b if a and b else None
    flag = "SLOWER" if ratio is not None and ratio < 1 - slower / 100 else ""
    r = f"{ratio:.3f}" if ratio is not None else "n/a"
    print(f"| {name} | {b:.1f} | {a:.1f} | {r} | {flag} |", flush=True)
    return flag == ""


def formats_table(a, llama_bin):
    print(f"\n### Formats: tok/s, medians of {a.reps} (tally bench -p {cl.N_PROMPT} -n {cl.N_GEN})\n")
    print("| file, threads, depth, test | before | after | after / before | |")
    print("|---|---:|---:|---:|---|")
    ok = True
    progress = cl.Progress("formats", 0, enabled=False)
    cells = {tuple(c.split(":")) for c in a.cells.split(",")} if a.cells else None
    for fmt in a.formats.split(","):
        model = cl.make_file(llama_bin, Path(a.model), fmt, progress)
        for t in ints(a.threads):
            for d in ints(a.depths):
                if cells is not None and (fmt, str(t), str(d)) not in cells:
                    continue
                runs = {"before": {"pp": [], "tg": []}, "after": {"pp": [], "tg": []}}
                for _ in range(a.reps):
                    for side, binary in (("before", a.before), ("after", a.after)):
                        r = cl.run_tool(cl.tally_bench_cmd(binary, model, t, d), cl.parse_tally_bench)
                        runs[side]["pp"].append(r["pp"])
                        runs[side]["tg"].append(r["tg"])
                for test in ("pp", "tg"):
                    name = f"{fmt}, {t}t, d{d}, {test}{cl.N_PROMPT if test == 'pp' else cl.N_GEN}"
                    ok &= row(name, runs["before"][test], runs["after"][test], a.slower)
    return ok


def batched_table(a):
    print(f"\n### Batched: aggregate tok/s, medians of {a.reps} (tally bench --parallel N -p {a.npp} -n {a.ntg}, "
          f"{a.threads_batched} threads)\n")
    print("| N, test | before | after | after / before | |")
    print("|---|---:|---:|---:|---|")
    ok = True
    for n in ints(a.npl):
        runs = {"before": {"pp": [], "tg": []}, "after": {"pp": [], "tg": []}}
        for _ in range(a.reps):
            for side, binary in (("before", a.before), ("after", a.after)):
                pp, tg = tally_parallel(binary, a.model, a.threads_batched, a.npp, a.ntg, n)
                runs[side]["pp"].append(pp)
                runs[side]["tg"].append(tg)
        for test in ("pp", "tg"):
            ok &= row(f"N={n}, {test}", runs["before"][test], runs["after"][test], a.slower)
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", required=True, help="the old tally binary")
    ap.add_argument("--after", default=str(cl.ROOT / "build/release/tally"))
    ap.add_argument("--model", default=str(cl.DEFAULT_MODEL), help="the source of the derived formats")
    ap.add_argument("--llama-bin", default=None)
    ap.add_argument("--formats", default=",".join(cl.ALL_FORMATS))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--depths", default="0,2048")
    ap.add_argument("--threads-batched", type=int, default=2)
    ap.add_argument("--npl", default="1,2,4,8,16,32")
    ap.add_argument("--npp", type=int, default=128)
    ap.add_argument("--ntg", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--slower", type=float, default=3.0, help="percent below the old binary that marks a cell")
    ap.add_argument("--skip", choices=["formats", "batched"])
    ap.add_argument("--cells", help="only these FILE:THREADS:DEPTH cells of the formats table (e.g. q4_1:1:2048)")
    a = ap.parse_args()
    for b in (a.before, a.after):
        if not Path(b).is_file():
            sys.exit(f"compare_tally: error: no tally binary at {b}")
    ok = True
    try:
        if a.skip != "formats":
            ok &= formats_table(a, cl.find_llama_bin(a.llama_bin))
        if a.skip != "batched":
            ok &= batched_table(a)
    except cl.Failure as e:
        sys.exit(f"compare_tally: error: {e}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
