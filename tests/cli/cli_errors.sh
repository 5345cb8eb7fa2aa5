#!/usr/bin/env bash
# Black-box checks of the CLI contract: success exits 0; bad input exits
# non-zero with exactly one line on stderr naming what was wrong.
# Usage: cli_errors.sh path/to/tally
set -u
tally="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
passes=0
home="${TALLY_HOME:-$HOME/.cache/tally}"
model="$home/models/SmolLM2-135M-Instruct.Q4_1.gguf"
vocab="$(dirname "$0")/../../../shared/testdata/tokenizer/ggml-vocab-starcoder.gguf"

# expect_error NAME PATTERN CMD...: non-zero exit, one stderr line matching PATTERN, nothing on stdout.
expect_error() {
  local name="$1" pattern="$2"
  shift 2
  "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  local lines
  lines=$(wc -l <"$tmp/err")
  if [ "$rc" -eq 0 ] || [ "$lines" -ne 1 ] || ! grep -qE -- "$pattern" "$tmp/err" || [ -s "$tmp/out" ]; then
    echo "FAIL $name: rc=$rc, stderr ($lines lines): $(head -c 400 "$tmp/err"), stdout: $(head -c 200 "$tmp/out")"
    failures=$((failures + 1))
  else
    passes=$((passes + 1))
  fi
}

# expect_ok NAME PATTERN CMD...: exit 0 and stdout matching PATTERN.
expect_ok() {
  local name="$1" pattern="$2"
  shift 2
  "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ "$rc" -ne 0 ] || ! grep -qE -- "$pattern" "$tmp/out"; then
    echo "FAIL $name: rc=$rc, stdout: $(head -c 300 "$tmp/out"), stderr: $(head -c 300 "$tmp/err")"
    failures=$((failures + 1))
  else
    passes=$((passes + 1))
  fi
}

printf 'NOPE0000000000000000000000' >"$tmp/badmagic.gguf"
expect_error "missing file" "cannot open" "$tally" inspect -m "$tmp/none.gguf"
expect_error "wrong magic" "not a GGUF file" "$tally" inspect -m "$tmp/badmagic.gguf"
expect_error "unknown subcommand" "" "$tally" frobnicate
# The vocabulary-only GGUF comes from ../shared, beside the project.
if [ -f "$vocab" ]; then
  expect_error "tokenize without text" "give a TEXT" "$tally" tokenize -m "$vocab"
  expect_error "detokenize bad id" "outside the vocabulary" "$tally" detokenize -m "$vocab" 99999999
  expect_ok "tokenize vocab-only" "^[0-9]+( [0-9]+)*$" "$tally" tokenize -m "$vocab" "Hello world"
  expect_ok "tokenize json" '"pieces"' "$tally" tokenize -m "$vocab" --json "Hello world"
  expect_ok "detokenize vocab-only" "Hello" "$tally" detokenize -m "$vocab" 8302 5810
  [ -f "$model" ] && expect_error "vocab-only model cannot run" "not supported|missing tensor|cannot multiply" "$tally" run -m "$vocab" -p hi -n 1
else
  echo "note: shared test data not found at $vocab; its checks skipped"
  [ "${TALLY_REQUIRE_SHARED:-0}" = 1 ] && failures=$((failures + 1))
fi
expect_ok "kv-plan qwen3-vl-4b" "147456 B \\(144.00 KiB\\)" "$tally" kv-plan --layers 36 --heads 32 --kv-heads 8 --head-dim 128 --dtype bf16
expect_error "serve queue zero" "--queue must be at least 1, got 0" "$tally" serve --queue 0
expect_error "serve parallel zero" "--parallel must be at least 1, got 0" "$tally" serve --parallel 0
expect_error "serve port out of range" "--port must be in" "$tally" serve --port 70000
expect_error "kv-plan heads not divisible" "not divisible by --kv-heads 5" "$tally" kv-plan --layers 36 --heads 32 --kv-heads 5 --head-dim 128
expect_error "kv-plan budget below weights" "smaller than the weights" "$tally" kv-plan --layers 36 --heads 32 --kv-heads 8 --head-dim 128 --weights-bytes 8GiB --budget 4GiB

if [ -f "$model" ]; then
  head -c 100000 "$model" >"$tmp/truncated.gguf"
  expect_error "truncated model" "past the end|truncated" "$tally" inspect -m "$tmp/truncated.gguf"
  expect_error "negative temperature" "--temp" "$tally" run -p hi --temp -1
  expect_error "top-p out of range" "--top-p" "$tally" run -p hi --top-p 1.5
  expect_error "bad cache type" "--cache-type must be f16, f32, q8_0 or q4_0, got 'q9'" "$tally" run -p hi --cache-type q9
  expect_error "bench bad cache type" "--cache-type must be f16, f32, q8_0 or q4_0" "$tally" bench --cache-type q4_k --no-probe
  expect_ok "kv-plan q8_0: 34 bytes per 32 numbers" "per token +12240 B" "$tally" kv-plan -m "$model" --dtype q8_0
  expect_ok "kv-plan q4_0: 18 bytes per 32 numbers" "per token +6480 B" "$tally" kv-plan -m "$model" --dtype q4_0
  expect_ok "greedy run, q8_0 cache" "Paris" "$tally" run -p "The capital of France is" -n 8 --temp 0 --cache-type q8_0
  expect_ok "greedy run, q4_0 cache, scalar" "Paris" "$tally" run -p "The capital of France is" -n 4 --temp 0 --cache-type q4_0 --simd scalar
  expect_error "unknown kernel level" "--simd must be" "$tally" run -p hi --simd sse9
  expect_ok "scalar kernels" "Paris" "$tally" run -p "The capital of France is" -n 4 --temp 0 --simd scalar
  expect_error "negative -n" "-n must be" "$tally" run -p hi -n -1
  expect_error "zero threads is fine but negative is not" "-t must be" "$tally" run -p hi -t -2
  expect_error "prompt longer than context" "more than the .* left in the context" "$tally" run -c 8 -p "one two three four five six seven eight nine ten eleven twelve"
  expect_error "context over the memory budget" "needs .* more than the memory budget" "$tally" run -c 4096 --kv-budget 1000000 -p hi
  expect_ok "inspect" "blk.0.attn_q.weight" "$tally" inspect
  expect_ok "inspect json" '"tensors"' "$tally" inspect --json
  expect_ok "greedy run" "Paris" "$tally" run -p "The capital of France is" -n 8 --temp 0
  expect_ok "run json" '"decode_tps"' "$tally" run -p "Hello" -n 4 --json
  expect_ok "logits" "pos" "$tally" logits -p "Hello there" --top 3
  expect_error "parallel zero" "--parallel must be at least 1, got 0" "$tally" run -p hi --parallel 0
  expect_error "beam zero" "--beam must be at least 1, got 0" "$tally" run -p hi --beam 0
  expect_error "beam with parallel" "--beam and --parallel" "$tally" run -p hi --beam 2 --parallel 2
  expect_error "beam-copy without beam" "--beam-copy needs --beam" "$tally" run -p hi --beam-copy
  expect_error "parallel without a cache" "--no-cache" "$tally" run -p hi --parallel 2 --no-cache
  expect_error "bench parallel zero" "--parallel values must be at least 1, got 0" "$tally" bench --parallel 0 --no-probe
  expect_error "lab beam width zero" "--widths values must be at least 1, got 0" "$tally" lab beam --widths 0
  expect_ok "beam json" '"beams"' "$tally" run -p "The capital of France is" -n 4 --beam 2 --json
  expect_ok "parallel json" '"continuations"' "$tally" run -p "Hello" -n 4 --parallel 2 --json
  expect_error "chat -n checked before the first line" "-n must be at least 1" "$tally" chat -n -1
  # A chat whose context fills up drops the oldest turns, says so, and goes on to the end.
  printf 'Name a fruit.\nName a colour.\nName a city.\nName a river.\n' |
    "$tally" chat -c 96 -n 24 --temp 0 >"$tmp/out" 2>"$tmp/err"
  if [ $? -ne 0 ] || ! grep -q "turn(s) were dropped" "$tmp/err" || [ "$(grep -c "new prompt tokens" "$tmp/err")" -ne 4 ]; then
    echo "FAIL chat at a full context: $(head -c 600 "$tmp/err")"; failures=$((failures + 1))
  else passes=$((passes + 1)); fi
  # -c beyond the trained context warns but runs.
  "$tally" run -c 9000 -p "Hi" -n 1 >"$tmp/out" 2>"$tmp/err"
  if [ $? -ne 0 ] || ! grep -q "warning" "$tmp/err"; then echo "FAIL -c beyond training: $(cat "$tmp/err")"; failures=$((failures + 1)); else passes=$((passes + 1)); fi
else
  echo "note: default model not installed; model checks skipped"
  [ "${TALLY_REQUIRE_MODEL:-0}" = 1 ] && failures=$((failures + 1))
fi

echo "cli: $passes passed, $failures failed"
[ "$failures" -eq 0 ]
