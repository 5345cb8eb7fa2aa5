#!/usr/bin/env python3
"""Self-check of bench/compare_llama_cpp.py without running either engine:
its parsing of a recorded llama-bench JSON and tally bench JSON
(tests/fixtures/bench/), its GGUF header reader on tests/fixtures/gguf, the
table it builds, and its progress line (the same format as tally's). Run by
CTest when python3 is present:  python3 bench/compare_llama_cpp_test.py
"""
import contextlib
import io
import json
import os
import sys
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import compare_llama_cpp as cmp  # noqa: E402

FIXTURES = ROOT / "tests/fixtures"


class Parsing(unittest.TestCase):
    def test_llama_bench_json(self):
        text = (FIXTURES / "bench/llama_bench_sample.json").read_text()
        entries = json.loads(text)
        r = cmp.parse_llama_bench(text)
        pp = next(e for e in entries if e["n_prompt"] > 0 and e["n_gen"] == 0)
        tg = next(e for e in entries if e["n_gen"] > 0 and e["n_prompt"] == 0)
        self.assertEqual(r["pp"], pp["avg_ts"])
        self.assertEqual(r["tg"], tg["avg_ts"])
        self.assertGreater(r["pp"], 0)
        self.assertGreater(r["tg"], 0)
        for key in ("n_threads", "n_batch", "n_ubatch", "flash_attn", "type_k", "build_commit"):
            self.assertIn(key, r["settings"])

    def test_llama_bench_best_of_flash_attention(self):
        text = (FIXTURES / "bench/llama_bench_fa_sample.json").read_text()
        entries = json.loads(text)
        r = cmp.parse_llama_bench(text)
        pp = {e["flash_attn"]: e["avg_ts"] for e in entries if e["n_prompt"] > 0 and e["n_gen"] == 0}
        tg = {e["flash_attn"]: e["avg_ts"] for e in entries if e["n_gen"] > 0 and e["n_prompt"] == 0}
        self.assertEqual(r["pp"], max(pp.values()))
        self.assertEqual(r["tg"], max(tg.values()))
        self.assertEqual((r["pp_fa"], r["tg_fa"]), ("1", "0"))
        self.assertEqual(r["by_fa"], {"0": {"pp": pp[0], "tg": tg[0]}, "1": {"pp": pp[1], "tg": tg[1]}})
        # one setting only (the older recording: flash attention "auto")
        one = cmp.parse_llama_bench((FIXTURES / "bench/llama_bench_sample.json").read_text())
        self.assertEqual((one["pp_fa"], one["tg_fa"]), ("auto", "auto"))

    def test_tally_bench_json(self):
        text = (FIXTURES / "bench/tally_bench_sample.json").read_text()
        j = json.loads(text)
        r = cmp.parse_tally_bench(text)
        self.assertEqual(r["pp"], next(x["tps_mean"] for x in j["results"] if x["test"].startswith("pp")))
        self.assertEqual(r["tg"], next(x["tps_mean"] for x in j["results"] if x["test"].startswith("tg")))
        self.assertEqual(r["settings"]["simd"], j["simd"])

    def test_garbage_is_a_failure_not_a_crash(self):
        with self.assertRaises(cmp.Failure):
            cmp.parse_llama_bench("main: error: failed to load model")
        with self.assertRaises(cmp.Failure):
            cmp.parse_tally_bench("")

    def test_error_line(self):
        err = "loading...\ntally: error: tensor blk.0.attn_q.weight: type IQ4_XS is not supported\n"
        self.assertEqual(cmp.first_error_line(err), "tally: error: tensor blk.0.attn_q.weight: type IQ4_XS is not supported")
        self.assertEqual(cmp.first_error_line("a\nlast words\n\n"), "last words")
        self.assertEqual(cmp.first_error_line(""), "no message")


class Gguf(unittest.TestCase):
    def test_header_reader_matches_the_fixture_summary(self):
        summary = json.loads((FIXTURES / "gguf/tiny_summary.json").read_text())
        tensors = cmp.gguf_tensors(FIXTURES / "gguf/tiny.gguf")
        self.assertEqual(len(tensors), summary["tensor_count"])
        for (name, tname, dims, nbytes), want in zip(tensors, summary["tensors"]):
            self.assertEqual((name, tname, dims, nbytes), (want["name"], want["type"], want["dims"], want["n_bytes"]))

    def test_type_mix_counts_matrices_by_bytes(self):
        tensors = [("a", "Q5_0", [576, 576], 300), ("b", "Q8_0", [576, 100], 100), ("norm", "F32", [576], 9999)]
        self.assertEqual(cmp.type_mix(tensors), "Q5_0 75%, Q8_0 25%")

    def test_not_a_gguf(self):
        with tempfile.NamedTemporaryFile(suffix=".gguf") as f:
            f.write(b"GGML0000")
            f.flush()
            with self.assertRaises(ValueError):
                cmp.gguf_tensors(f.name)


class Table(unittest.TestCase):
    def runs(self):
        base = {"file": "f", "types": "Q4_0 100%", "depth": 0}
        out = []
        for rnd, (tp, lp) in enumerate([(100.0, 50.0), (120.0, 40.0), (110.0, 45.0)], 1):
            out.append(dict(base, format="q4_0", threads=1, engine="tally", round=rnd, pp=tp, tg=tp / 10))
            out.append(dict(base, format="q4_0", threads=1, engine="llama.cpp", round=rnd, pp=lp, tg=lp / 10))
        out.append(dict(base, format="q6_k", threads=1, engine="tally", round=1, error="tally: error: no Q6_K"))
        out.append(dict(base, format="q6_k", threads=1, engine="llama.cpp", round=1, pp=30.0, tg=3.0))
        return out

    def test_medians_ratios_and_failures(self):
        cells = cmp.summarize(self.runs())
        q4 = next(c for c in cells if c["format"] == "q4_0")
        self.assertEqual(q4["tally"]["pp_median"], 110.0)
        self.assertEqual(q4["llama.cpp"]["pp_median"], 45.0)
        self.assertAlmostEqual(q4["pp_ratio"], 110.0 / 45.0)
        self.assertAlmostEqual(q4["tg_ratio"], 11.0 / 4.5)
        q6 = next(c for c in cells if c["format"] == "q6_k")
        self.assertIsNone(q6["pp_ratio"])
        md = cmp.markdown(cells, 3)
        self.assertIn("| Q4_0 | Q4_0 100% | f16 | 1 | 0 | 110.0 | 45.0 | **2.44x** | 11.0 | 4.5 | **2.44x** |", md)
        self.assertIn("| Q6_K | Q4_0 100% | f16 | 1 | 0 | fails | 30.0 |  | fails | 3.0 |  |", md)
        self.assertIn("- Q6_K, tally: tally: error: no Q6_K", md)
        self.assertIn("tally fails: tally: error: no Q6_K", cmp.plain(cells))


class Commands(unittest.TestCase):
    def test_both_tools_get_the_same_settings(self):
        ll = cmp.llama_bench_cmd(Path("/b"), "m.gguf", 2, 2048)
        ta = cmp.tally_bench_cmd("tally", "m.gguf", 2, 2048)
        for flag, value in (("-m", "m.gguf"), ("-t", "2"), ("-p", "512"), ("-n", "128"), ("-d", "2048"), ("-r", "1")):
            self.assertEqual(ll[ll.index(flag) + 1], value)
            self.assertEqual(ta[ta.index(flag) + 1], value)
        self.assertEqual(ll[0], "/b/llama-bench")
        self.assertIn("--no-probe", ta)
        self.assertNotIn("-ctk", ll)  # f16: both tools' default cache
        self.assertNotIn("--cache-type", ta)

    def test_cache_types_reach_both_tools(self):
        ll = cmp.llama_bench_cmd(Path("/b"), "m.gguf", 1, 8000, "q8_0")
        ta = cmp.tally_bench_cmd("tally", "m.gguf", 1, 8000, "q8_0")
        self.assertEqual((ll[ll.index("-ctk") + 1], ll[ll.index("-ctv") + 1], ll[ll.index("-fa") + 1]),
                         ("q8_0", "q8_0", "1"))
        self.assertEqual(ta[ta.index("--cache-type") + 1], "q8_0")

    def test_flash_attention_both_ways_for_an_f16_cache(self):
        ll = cmp.llama_bench_cmd(Path("/b"), "m.gguf", 2, 0)
        self.assertEqual(ll[ll.index("-fa") + 1], "0,1")
        self.assertEqual(ll.count("-fa"), 1)

    def test_table_names_the_winning_setting(self):
        base = {"format": "as-is", "file": "f", "types": "Q4_K 68%", "threads": 2, "depth": 0, "cache": "f16"}
        runs = []
        for rnd, (pp_fa, tg_fa) in enumerate([("1", "0"), ("1", "0"), ("0", "0")], 1):
            runs.append(dict(base, engine="tally", round=rnd, pp=400.0, tg=60.0))
            runs.append(dict(base, engine="llama.cpp", round=rnd, pp=160.0, tg=40.0, pp_fa=pp_fa, tg_fa=tg_fa))
        cells = cmp.summarize(runs)
        self.assertIn("| AS-IS | Q4_K 68% | f16 | 2 | 0 | 400.0 | 160.0 (fa 1) | **2.50x** | 60.0 | 40.0 (fa 0) "
                      "| **1.50x** |", cmp.markdown(cells, 3))
        self.assertIn("best of `-fa 0` and `-fa 1`", cmp.markdown(cells, 3))

    def test_model_by_catalog_name(self):
        with tempfile.TemporaryDirectory() as d:
            home = Path(d)
            (home / "models").mkdir()
            err = io.StringIO()
            with contextlib.redirect_stderr(err), self.assertRaises(SystemExit):
                cmp.catalog_model("qwen2.5-coder:1.5b", home=home)
            self.assertIn("is not installed", err.getvalue())
            self.assertIn("run `tally pull qwen2.5-coder:1.5b`", err.getvalue())
            (home / "models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf").write_bytes(b"GGUF")
            path, entry = cmp.catalog_model("qwen2.5-coder", home=home)  # an alias
            self.assertEqual(path, home / "models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")
            self.assertEqual(entry["name"], "qwen2.5-coder:1.5b")
            self.assertIsNone(cmp.catalog_model("no-such-model", home=home))

    def test_cells_are_per_cache_type(self):
        base = {"format": "q4_1", "file": "f", "types": "Q4_1 100%", "threads": 1, "depth": 8000, "round": 1}
        runs = [dict(base, cache=c, engine=e, pp=p, tg=p / 10)
                for c, p in (("f16", 100.0), ("q8_0", 80.0)) for e in ("tally", "llama.cpp")]
        cells = cmp.summarize(runs)
        self.assertEqual(sorted(c["cache"] for c in cells), ["f16", "q8_0"])
        self.assertIn("| Q4_1 | Q4_1 100% | q8_0 | 1 | 8000 | 80.0 | 80.0 | **1.00x** |", cmp.markdown(cells, 1))

    def test_unknown_cache_type_is_refused(self):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), self.assertRaises(SystemExit):
            cmp.main(["--cache-types", "q8_0,q5_1"])
        self.assertIn("--cache-types: unknown q5_1", err.getvalue())

    def test_derived_names(self):
        p = cmp.derived_path(Path("/m/SmolLM2-135M-Instruct.Q4_1.gguf"), "q4_k_m")
        self.assertEqual(p, cmp.TALLY_HOME / "models/derived/SmolLM2-135M-Instruct.Q4_K_M.gguf")

    def test_missing_tools_say_how_to_build_them(self):
        with tempfile.TemporaryDirectory() as d:
            err = io.StringIO()
            with contextlib.redirect_stderr(err), self.assertRaises(SystemExit):
                cmp.find_llama_bin(d)
            self.assertIn("run scripts/build_llama_cpp.sh", err.getvalue())
            self.assertEqual(err.getvalue().count("\n"), 1)


class ProgressLine(unittest.TestCase):
    def test_same_arithmetic_and_format_as_tally(self):
        P = cmp.Progress
        self.assertEqual(P.seconds_left(1, 4, 10), 30)
        self.assertEqual(P.seconds_left(4, 4, 30), 0)
        self.assertIsNone(P.seconds_left(0, 4, 10))
        self.assertEqual(P.duration(65), "1m05s")
        self.assertEqual(P.duration(3720), "1h02m")
        self.assertEqual(P.line("tally bench", "pp512, 2 threads, depth 0: rep 1/3", 6, 24, 30),
                         "tally bench:  25%, 30s elapsed, ~1m30s left | pp512, 2 threads, depth 0: rep 1/3")
        self.assertEqual(P.line("t", "x", 0, 10, 2), "t:   0%, 2s elapsed | x")

    def test_quiet_when_not_a_terminal(self):
        s = io.StringIO()  # isatty() is False
        p = cmp.Progress("compare", 4, stream=s)
        p.update("work", 1)
        p.clear()
        self.assertEqual(s.getvalue(), "")


if __name__ == "__main__":
    unittest.main(verbosity=1)
