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

source "$(dirname "$0")/cli_lib.sh"

printf 'NOPE0000000000000000000000' >"$tmp/badmagic.gguf"
expect_error "missing file" "cannot open" "$tally" inspect -m "$tmp/none.gguf"
expect_error "wrong magic" "not a GGUF file" "$tally" inspect -m "$tmp/badmagic.gguf"
expect_error "unknown subcommand" "unknown command 'frobnicate' \\(commands: inspect, " "$tally" frobnicate
expect_error "unknown lab subcommand" "unknown command 'frob' \\(lab commands: causal" "$tally" lab frob

# The command line as llama.cpp and Ollama users type it (issue: a CLI that feels at home).
"$tally" >"$tmp/out" 2>"$tmp/err"
check "tally alone prints the help, exit 0" test $? -eq 0 -a ! -s "$tmp/err"
check "tally alone lists the commands" grep -q "^  run  *Generate text from a prompt" "$tmp/out"
expect_usage "a mistyped command" "tally" "unknown command 'rn' \\(did you mean run\\?\\)" "$tally" rn
expect_usage "a mistyped lab command" "tally lab" "unknown command 'speedp' \\(did you mean lab speedup\\?\\)" "$tally" lab speedp
expect_usage "a mistyped flag, named before its value" "tally run" "^tally: unknown option '--ctx-sz' \\(did you mean --ctx-size\\?\\)" "$tally" run --ctx-sz 2048 -p hi
expect_usage "an unknown flag, no guess" "tally kv-plan" "^tally: unknown option '--frobnicate'$|unknown option '--frobnicate' \\(see" "$tally" kv-plan --frobnicate 3
expect_usage "-ctx reads as -c tx, named so" "tally run" "--ctx: 'tx' is not a number of tokens" "$tally" run -ctx 2048 -p hi
expect_usage "-sys without --chat" "tally run" "--system is the chat template's system message: it goes with --chat" "$tally" run -sys "Be brief." -p hi
expect_usage "out of range: negative temperature" "tally run" "--temp: -1 is out of range \\(0 to 100\\)" "$tally" run -p hi --temp -1
expect_usage "not a number: temperature" "tally run" "--temp: 'abc' is not a finite decimal number" "$tally" run -p hi --temp abc
expect_usage "top-p 0" "tally run" "--top-p must be greater than 0" "$tally" run -p hi --top-p 0
expect_usage "an int flag past 2^31 names its range" "tally run" "--top-k: 3000000000 is out of range \\(0 to 2147483647\\)" "$tally" run -p hi --top-k 3000000000
expect_usage "logits --top 2^63" "tally logits" "--top: 9223372036854775808 is out of range \\(1 to 1048576\\)" "$tally" logits -p hi --top 9223372036854775808
expect_usage "bench -r 2^31" "tally bench" "--repetitions: 2147483648 is out of range \\(1 to 1000\\)" "$tally" bench -r 2147483648
expect_usage "serve --drain-seconds 2^31" "tally serve" "--drain-seconds: 2147483648 is out of range \\(0 to 86400\\)" "$tally" serve --drain-seconds 2147483648
expect_usage "serve --speculate with --sinks" "tally serve" "--speculate lookup rolls back a reply's cache: not with a sliding window \\(--sinks\\)" "$tally" serve -m "$model" --speculate lookup --sinks 4
expect_usage "serve --draft-max 0" "tally serve" "--draft-max: 0 is out of range \\(1 to 64\\)" "$tally" serve --draft-max 0
expect_usage "serve --speculate draft without --draft" "tally serve" "--speculate draft needs the draft model: give --draft NAME\\|PATH" "$tally" serve -m "$model" --speculate draft
expect_usage "serve --draft with --sinks" "tally serve" "--speculate draft rolls back a reply's cache: not with a sliding window \\(--sinks\\)" "$tally" serve -m "$model" --draft "$model" --sinks 4
expect_usage "-p and -f together" "tally run" "-p and -f both give the prompt" "$tally" run -p hi -f /etc/hostname
expect_usage "--length-penalty without --beam" "tally run" "--length-penalty scores beams: it needs --beam W" "$tally" run -p hi --length-penalty 2
expect_usage "--no-prefix-cache with one sequence" "tally run" "--no-prefix-cache is for several sequences" "$tally" run -p hi --no-prefix-cache
expect_usage "--simd ''" "tally run" "--simd: '' is not one of scalar" "$tally" run -p hi --simd ''
expect_usage "--kv-budget ''" "tally run" "--kv-budget: --kv-budget '' is not a byte count" "$tally" run -p hi --kv-budget ''
expect_usage "--scalar with --simd" "tally run" "--scalar and --simd avx2 do not go together" "$tally" run -p hi --scalar --simd avx2 -m /nonexistent.gguf
expect_usage "bench --batch 0" "tally bench" "--batch: 0 is out of range \\(1 to 8192\\)" "$tally" bench --batch 0 --parallel 2
expect_usage "bench --batch -1" "tally bench" "--batch: -1 is out of range \\(1 to 8192\\)" "$tally" bench --batch -1 --parallel 2
expect_usage "bench --batch 8193" "tally bench" "--batch: 8193 is out of range \\(1 to 8192\\)" "$tally" bench --batch 8193 --parallel 2
expect_usage "bench --batch without --parallel" "tally bench" "--batch is the token budget of a step with --parallel" "$tally" bench --batch 64
expect_usage "bench --ttft -1" "tally bench" "--ttft: -1 is out of range \\(1 to 16777216\\)" "$tally" bench --ttft -1
expect_usage "bench --ttft at -p" "tally bench" "--ttft 512 must be below -p 512" "$tally" bench --ttft 512
expect_usage "bench --probe --no-probe" "tally bench" "--probe excludes --no-probe|--no-probe excludes --probe" "$tally" bench --probe --no-probe
expect_usage "lab scores --recompute-limit -1" "tally lab scores" "--recompute-limit: -1 is out of range \\(0 to 16777216\\)" "$tally" lab scores --recompute-limit -1
expect_usage "lab takes no -c" "tally lab speedup" "unknown option '-c'" "$tally" lab speedup -c 16
expect_usage "embed takes no --cache-type" "tally embed" "unknown option '--cache-type'" "$tally" embed -p hi --cache-type q8_0
expect_usage "kv-plan --weights-dtype without a config" "tally kv-plan" "--weights-dtype sizes a config's weights" "$tally" kv-plan --layers 2 --heads 2 --kv-heads 1 --head-dim 8 --weights-dtype q8_0
expect_usage "kv-plan --weights-dtype unknown" "tally kv-plan" "--weights-dtype: 'q3_k_s' is not one of f32, f16, bf16" "$tally" kv-plan --config /dev/null --weights-dtype q3_k_s
# Help and version are output like any other: a full device is an error.
if [ -w /dev/full ]; then
  expect_full "--help to a full device" "$tally" --help
  expect_full "run --help to a full device" "$tally" run --help
  expect_full "--version to a full device" "$tally" --version
fi
# Sizes and token counts with units.
expect_ok "kv-plan --budget 24GB, --tokens 8k, --weights-bytes 4.9GiB" "budget: +24000000000 B .*" "$tally" kv-plan --layers 36 --heads 32 --kv-heads 8 --head-dim 128 --budget 24GB --weights-bytes 4.9GiB --tokens 8k,128K
expect_ok "--tokens 8k is 8192" "^8192 tokens " "$tally" kv-plan --layers 36 --heads 32 --kv-heads 8 --head-dim 128 --tokens 8k
expect_ok "--weights-bytes 4.9GiB" "weights: +5261334938 B" "$tally" kv-plan --layers 36 --heads 32 --kv-heads 8 --head-dim 128 --weights-bytes 4.9GiB
smol_config="$(dirname "$0")/../fixtures/configs/smollm2-135m-instruct.json"
if [ -f "$smol_config" ]; then
  expect_ok "kv-plan counts a config's weights as bf16" "parameters x 2 bytes \\(bfloat16, counted from the config\\)" "$tally" kv-plan --config "$smol_config"
  expect_ok "kv-plan --weights-dtype q8_0" "parameters x 8.5 bits \\(q8_0, counted from the config\\)" "$tally" kv-plan --config "$smol_config" --weights-dtype q8_0
  expect_ok "kv-plan --weights-dtype q4_k_m says it estimates" "x 5 bits \\(q4_k_m: a mix of formats, so an estimate" "$tally" kv-plan --config "$smol_config" --weights-dtype q4_k_m
  expect_ok "kv-plan notes the trained context" "note: the budget holds [0-9]+ tokens, but the model was trained for 8192" "$tally" kv-plan --config "$smol_config" --budget 24GB
else
  echo "FAIL the config fixture $smol_config is missing"; failures=$((failures + 1))
fi

# Files: a FIFO as a model is refused at once; a directory is never read as empty text.
mkfifo "$tmp/fifo.gguf"
expect_error "FIFO as a model" "fifo.gguf: not a regular file \\(a FIFO\\)" timeout 10 "$tally" inspect -m "$tmp/fifo.gguf"
expect_error "FIFO as a model (kv-plan)" "not a regular file \\(a FIFO\\)" timeout 10 "$tally" kv-plan -m "$tmp/fifo.gguf"
expect_error "directory as config" "is a directory, not a config file" "$tally" kv-plan --config "$tmp"
# A directory as a model is an HF folder: one without config.json, or with broken weights, says so.
folder="$(dirname "$0")/../fixtures/random_models/qwen3-hf"
expect_error "directory as a model" "a directory without config.json" "$tally" run -m "$tmp" -p hi
mkdir "$tmp/hf" && cp "$folder"/*.json "$tmp/hf/" && printf 'xx' >"$tmp/hf/model.safetensors"
expect_error "truncated safetensors" "model.safetensors: not a safetensors file: 2 bytes" "$tally" inspect -m "$tmp/hf"
expect_ok "HF folder runs" "^[^ ]" "$tally" run -m "$folder" -p "It is a truth" -n 4 --seed 1
expect_ok "HF folder in kv-plan" "qwen3-hf \\(qwen3\\)" "$tally" kv-plan -m "$folder"
# Numbers: no wrap, no saturation, no octal, hex, inf or nan; byte sizes through one parser.
expect_error "-n above int64" "--n-predict: 99999999999999999999 is out of range" "$tally" run -p hi -n 99999999999999999999
expect_error "seed below -1" "--seed: -2 is out of range \\(-1 to 9223372036854775807\\)" "$tally" run -p hi --seed -2
expect_error "hex count" "--n-predict: '0x10' is not a whole decimal number" "$tally" run -p hi -n 0x10
expect_error "infinite temperature" "--temp: 'inf' is not a finite decimal number" "$tally" run -p hi --temp inf
expect_error "negative kv budget" "--kv-budget '-1' is not a byte count" "$tally" run -p hi --kv-budget -1
expect_error "-c above the limit" "--ctx: 36028797018963968 is out of range \\(0 to 16777216\\)" "$tally" run -p hi -c 36028797018963968
expect_error "-c at int64 max" "--ctx: 9223372036854775807 is out of range" "$tally" run -p hi -c 9223372036854775807
expect_error "thread count far above the cores" "--threads: 100000 is out of range \\(0 to 1024\\)" "$tally" run -p hi -t 100000
expect_error "batch above the limit" "--batch: 1000000 is out of range \\(1 to 8192\\)" "$tally" run -p hi --batch 1000000
expect_error "empty model path" "--model: the path is empty" "$tally" run -m '' -p hi
expect_error "empty model path (tokenize)" "--model: the path is empty" "$tally" tokenize -m '' hi
expect_error "empty config path" "--config: the path is empty" "$tally" kv-plan --config ''
expect_error "serve --parallel times 2048 would overflow" "--parallel: 9000000000000000 is out of range \\(1 to 8192\\)" "$tally" serve --parallel 9000000000000000
# Output that cannot be written is an error, never lost with exit 0.
if [ -w /dev/full ]; then
  expect_full "kv-plan to a full device" "$tally" kv-plan --layers 2 --heads 2 --kv-heads 1 --head-dim 8 --json
fi
# The vocabulary-only GGUF comes from ../shared, beside the project.
if [ -f "$vocab" ]; then
  expect_error "tokenize without text" "give a TEXT" "$tally" tokenize -m "$vocab"
  expect_error "detokenize bad id" "outside the vocabulary" "$tally" detokenize -m "$vocab" 99999999
  expect_ok "tokenize vocab-only" "^[0-9]+( [0-9]+)*$" "$tally" tokenize -m "$vocab" "Hello world"
  expect_ok "tokenize json" '"pieces"' "$tally" tokenize -m "$vocab" --json "Hello world"
  expect_ok "detokenize vocab-only" "Hello" "$tally" detokenize -m "$vocab" 8302 5810
  # Bytes the vocabulary has no token for become U+FFFD with a warning, never dropped.
  printf 'a\xffb' >"$tmp/ff.txt"
  expect_ok "0xFF is not dropped" "^[0-9]+ [0-9]+ [0-9]+$" "$tally" tokenize -m "$vocab" -f "$tmp/ff.txt"
  expect_warned "0xFF is replaced with a warning" "the text file has 1 character with bytes this vocabulary has no token for \\(the first at byte 1\\); it was replaced by U\\+FFFD" "$tally" tokenize -m "$vocab" -f "$tmp/ff.txt"
  expect_error "directory as text" "is a directory, not a text file" "$tally" tokenize -m "$vocab" -f "$tmp"
  expect_error "endless text" "/dev/zero: the text file holds more than the limit" "$tally" tokenize -m "$vocab" -f /dev/zero
  [ -w /dev/full ] && expect_full "tokenize to a full device" "$tally" tokenize -m "$vocab" "Hello world" --json
  [ -f "$model" ] && expect_error "vocab-only model cannot run" "not supported|missing tensor|cannot multiply" "$tally" run -m "$vocab" -p hi -n 1
else
  echo "note: shared test data not found at $vocab; its checks skipped"
  [ "${TALLY_REQUIRE_SHARED:-0}" = 1 ] && failures=$((failures + 1))
fi
expect_ok "kv-plan qwen3-vl-4b" "147456 B \\(144.00 KiB\\)" "$tally" kv-plan --layers 36 --heads 32 --kv-heads 8 --head-dim 128 --dtype bf16
expect_error "serve queue zero" "--queue: 0 is out of range" "$tally" serve --queue 0
expect_error "serve parallel zero" "--parallel: 0 is out of range \\(1 to 8192\\)" "$tally" serve --parallel 0
expect_error "serve port out of range" "--port: 70000 is out of range" "$tally" serve --port 70000
expect_error "kv-plan heads not divisible" "not divisible by --kv-heads 5" "$tally" kv-plan --layers 36 --heads 32 --kv-heads 5 --head-dim 128
# One case per class of hostile input (docs/reliability.md).
python3 -c 'n = 100000; print("{\"num_hidden_layers\": " + "[" * n + "]" * n + "}")' >"$tmp/deep.json"
expect_error "config nested 100000 deep" "deep.json: JSON nested deeper than 64 levels" "$tally" kv-plan --config "$tmp/deep.json"
python3 -c 'print("{\"num_hidden_layers\": \"" + "x" * 3000000 + "\"}")' >"$tmp/huge.json"
expect_error "config value of 3 MB" "not the string \"x+\.\.\. \(3000000 bytes\)\"$" "$tally" kv-plan --config "$tmp/huge.json"
expect_error "kv-plan budget below weights" "smaller than the weights" "$tally" kv-plan --layers 36 --heads 32 --kv-heads 8 --head-dim 128 --weights-bytes 8GiB --budget 4GiB

if [ -f "$model" ]; then
  # -m by catalog name and alias (models/catalog.json), and by file name under $TALLY_HOME/models
  expect_ok "run by catalog name" "Paris" "$tally" run -m smollm2:135m -p "The capital of France is" -n 4 --temp 0
  expect_ok "inspect by alias" "\"path\": \"$model\"" "$tally" inspect --json -m smollm2
  expect_ok "inspect by file name" "\"path\": \"$model\"" "$tally" inspect --json -m SmolLM2-135M-Instruct.Q4_1
  expect_error "unknown model name" "-m no-such-model: no such file, catalog model or file in .* \\(installed: .*smollm2:135m.*; catalog: qwen2.5-coder:1.5b, .*\\)" "$tally" run -m no-such-model -p hi
  head -c 100000 "$model" >"$tmp/truncated.gguf"
  expect_error "truncated model" "past the end|truncated" "$tally" inspect -m "$tmp/truncated.gguf"
  expect_error "negative temperature" "--temp" "$tally" run -m "$model" -p hi --temp -1
  expect_error "top-p out of range" "--top-p" "$tally" run -m "$model" -p hi --top-p 1.5
  expect_error "bad cache type" "--cache-type: 'q9' is not one of f16, f32, q8_0, q4_0 \\(see tally run --help\\)" "$tally" run -m "$model" -p hi --cache-type q9
  expect_error "bench bad cache type" "--cache-type: 'q4_k' is not one of f16, f32, q8_0, q4_0" "$tally" bench -m "$model" --cache-type q4_k --no-probe
  expect_ok "kv-plan q8_0: 34 bytes per 32 numbers" "per token +12240 B" "$tally" kv-plan -m "$model" --dtype q8_0
  expect_ok "kv-plan q4_0: 18 bytes per 32 numbers" "per token +6480 B" "$tally" kv-plan -m "$model" --dtype q4_0
  expect_ok "greedy run, q8_0 cache" "Paris" "$tally" run -m "$model" -p "The capital of France is" -n 8 --temp 0 --cache-type q8_0
  expect_ok "greedy run, q4_0 cache, scalar" "Paris" "$tally" run -m "$model" -p "The capital of France is" -n 4 --temp 0 --cache-type q4_0 --simd scalar
  expect_error "unknown kernel level" "--simd: 'sse9' is not one of scalar, avx2" "$tally" run -m "$model" -p hi --simd sse9
  expect_ok "attention kernels alone" "attention at depth 300 \(30 layers x 3 kv heads\)" "$tally" bench -m "$model" --attention --no-probe -d 300 -r 1 --cache-type q4_0
  expect_ok "prefill-path attention" "prefill path: 64 causal queries after 2048 keys, [0-9]+ at a time, one layer \| [0-9.]+ \|" "$tally" bench -m "$model" --attention --no-probe -d 300 -r 1
  expect_error "attention benchmark at depth 0" "-d values must be at least 1 with --attention" "$tally" bench -m "$model" --attention --no-probe -d 0
  # A stream's window is checked before it starts, not at its first slide.
  expect_error "sinks larger than the window" "--window 16 with --sinks 40: a window of 16 positions is too small for 40 sink tokens" "$tally" run -m "$model" --sinks 40 --window 16 -p hi -n 1
  expect_error "window smaller than a block" "--window 8 with --sinks 0: .* a slide drops a block" "$tally" run -m "$model" --sinks 0 --window 8 -p hi -n 1
  expect_ok "save a session" "\"prompt_tokens\": ?5" "$tally" run -m "$model" -p "The capital of France is" -n 0 --json --save-session "$tmp/good.session"
  expect_ok "a loaded session reports its tokens and load time" "\"session_tokens\": ?5.*session_load_ms|session_load_ms.*\"session_tokens\": ?5" "$tally" run -m "$model" --load-session "$tmp/good.session" -n 1 --json
  printf 'not a session' >"$tmp/bad.session"
  expect_error "not a session file" "bad.session: not a tally session file" "$tally" run -m "$model" --load-session "$tmp/bad.session" -n 1
  cp "$tmp/bad.session" "$tmp/keep.session"
  expect_error "a refused load overwrites nothing" "not a tally session file" "$tally" run -m "$model" --load-session "$tmp/bad.session" --save-session "$tmp/bad.session" -n 1
  if cmp -s "$tmp/bad.session" "$tmp/keep.session"; then passes=$((passes + 1)); else
    echo "FAIL a refused load changed the file it named"; failures=$((failures + 1)); fi
  # A save writes a regular file (a symlink's target) or refuses, before generating.
  expect_error "save to an empty path" "--save-session: the session file path is empty" "$tally" run -m "$model" -p hi -n 1 --save-session ''
  expect_error "save to /dev/null" "/dev/null: cannot write the session file there: it is a character device, not a regular file" "$tally" run -m "$model" -p hi -n 1 --save-session /dev/null
  if [ -c /dev/null ]; then passes=$((passes + 1)); else echo "FAIL /dev/null is no longer a device"; failures=$((failures + 1)); fi
  expect_error "save to /dev/full" "/dev/full: cannot write the session file there: it is a character device" "$tally" run -m "$model" -p hi -n 1 --save-session /dev/full
  mkfifo "$tmp/fifo"
  expect_error "save to a FIFO" "fifo: cannot write the session file there: it is a FIFO" timeout 20 "$tally" run -m "$model" -p hi -n 1 --save-session "$tmp/fifo"
  if [ -p "$tmp/fifo" ]; then passes=$((passes + 1)); else echo "FAIL the FIFO was replaced"; failures=$((failures + 1)); fi
  expect_error "save into a directory" "is a directory" "$tally" run -m "$model" -p hi -n 1 --save-session "$tmp"
  ln -s good.session "$tmp/link.session"
  expect_ok "save through a symlink" "\"prompt_tokens\": ?5" "$tally" run -m "$model" -p "The capital of France is" -n 0 --json --save-session "$tmp/link.session"
  if [ -L "$tmp/link.session" ] && cmp -s "$tmp/good.session" "$tmp/link.session"; then passes=$((passes + 1)); else
    echo "FAIL a save through a symlink replaced the link"; failures=$((failures + 1)); fi
  expect_error "load from an empty path" "--load-session: the path is empty" "$tally" run -m "$model" -p hi -n 1 --load-session ''
  # chat's /save: the same rules; /save and /load without a file are refused, not sent to the model.
  printf '/save /dev/null\n/save\n/load\n/exit\n' | "$tally" chat -m "$model" >"$tmp/out" 2>"$tmp/err"
  if grep -q "/dev/null: cannot write the session file there: it is a character device" "$tmp/err" && grep -q "/save needs a file" "$tmp/err" &&
      grep -q "/load needs a file" "$tmp/err" && [ -c /dev/null ] && ! grep -q "tok/s" "$tmp/err"; then
    passes=$((passes + 1))
  else
    echo "FAIL chat /save to a device or without a file: $(head -c 400 "$tmp/err")"; failures=$((failures + 1))
  fi
  # The one generation step: stop strings cut the text and end it, logprobs in --json, penalties accepted.
  # The stop string is taken from the greedy text itself: which continuation
  # wins a near tie depends on the kernel level, the cut must not.
  "$tally" run -m "$model" -p "The capital of France is" -n 12 --temp 0 --json >"$tmp/nostop.json" 2>/dev/null
  stop=$(python3 -c 'import json, sys; t = json.load(open(sys.argv[1]))["text"]; print(next(t[k:k + 4] for k in range(len(t) // 2, len(t) - 3) if "\n" not in t[k:k + 4]))' "$tmp/nostop.json")
  "$tally" run -m "$model" -p "The capital of France is" -n 12 --temp 0 --json --stop "$stop" >"$tmp/stop.json" 2>/dev/null
  if python3 -c '
import json, sys
whole, cut, stop = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3]
assert whole["finish"] == "length" and len(stop) == 4, (whole, stop)
assert cut["finish"] == "stop" and cut["text"] == whole["text"][:whole["text"].find(stop)], (cut, whole, stop)
' "$tmp/nostop.json" "$tmp/stop.json" "$stop"; then passes=$((passes + 1)); else
    echo "FAIL run --stop cuts at the stop string: $(head -c 300 "$tmp/stop.json")"; failures=$((failures + 1)); fi
  "$tally" run -m "$model" -p "The capital of France is" -n 6 --temp 0 --json --logprobs 3 >"$tmp/lp.json" 2>/dev/null
  if python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
lp = j["logprobs"]
assert len(lp) == j["generated_tokens"] == 6, lp
for t, e in zip(j["token_ids"], lp):
    assert e["id"] == t and len(e["top"]) == 3 and e["top"][0]["id"] == t and e["top"][0]["logprob"] == e["logprob"] <= 0, e
    assert e["top"][0]["logprob"] >= e["top"][1]["logprob"] >= e["top"][2]["logprob"], e
' "$tmp/lp.json"; then passes=$((passes + 1)); else echo "FAIL run --logprobs: $(head -c 300 "$tmp/lp.json")"; failures=$((failures + 1)); fi
  expect_error "--logprobs without --json" "--logprobs goes with --json" "$tally" run -m "$model" -p hi --logprobs 2
  expect_error "--stop with --beam" "--beam scores its own hypotheses" "$tally" run -m "$model" -p hi --beam 2 --stop x
  expect_error "an empty --stop" "--stop must not be empty" "$tally" run -m "$model" -p hi --stop ''
  # Speculative decoding (prompt lookup): greedy gives exactly the tokens it gives without, for every draft length;
  # guesses were made, some kept and some rolled back (a prompt that repeats itself, a chat reply that quotes it).
  spec_prompt="The cat sat on the mat. The dog sat on the log. The bird sat on the"
  "$tally" run -m "$model" -p "$spec_prompt" -n 48 --temp 0 --ignore-eos --json >"$tmp/spec_off.json" 2>/dev/null
  for k in 1 3 8; do
    "$tally" run -m "$model" -p "$spec_prompt" -n 48 --temp 0 --ignore-eos --json --speculate lookup --draft-max $k >"$tmp/spec_$k.json" 2>/dev/null
  done
  if python3 -c '
import json, sys
off = json.load(open(sys.argv[1]))
assert off["generated_tokens"] == 48 and "speculation" not in off, off
drafted = accepted = 0
for f in sys.argv[2:]:
    j = json.load(open(f))
    assert j["token_ids"] == off["token_ids"], (f, j["token_ids"], off["token_ids"])
    s = j["speculation"]
    assert s["accepted"] <= s["drafted"] and s["decode_steps"] < 47, (f, s)
    drafted += s["drafted"]; accepted += s["accepted"]
assert 0 < accepted < drafted, (accepted, drafted)
' "$tmp/spec_off.json" "$tmp/spec_1.json" "$tmp/spec_3.json" "$tmp/spec_8.json"; then passes=$((passes + 1)); else echo "FAIL run --speculate lookup: greedy tokens differ or no guess kept"; failures=$((failures + 1)); fi
  expect_usage "--draft-max without --speculate" "tally run" "--draft-max sets the guesses of --speculate lookup\\|draft" "$tally" run -m "$model" -p hi --draft-max 4
  expect_usage "--speculate with --beam" "tally run" "--speculate rolls back one sequence's cache: not with --beam" "$tally" run -m "$model" -p hi --speculate lookup --beam 2
  expect_usage "--draft-max 0" "tally run" "--draft-max: 0 is out of range \\(1 to 64\\)" "$tally" run -m "$model" -p hi --speculate lookup --draft-max 0
  expect_usage "--speculate with an unknown source" "tally run" "--speculate: .*not in \\{" "$tally" run -m "$model" -p hi --speculate guess
  expect_usage "--draft-max above the context" "tally run" "--draft-max 32: a step verifies 33 tokens, more than the context of 16" "$tally" run -m "$model" -p hi -c 16 --speculate lookup --draft-max 32
  expect_usage "--speculate draft without --draft" "tally run" "--speculate draft needs the draft model: give --draft" "$tally" run -m "$model" -p hi --speculate draft
  expect_usage "--draft with --speculate lookup" "tally run" "--draft x is a draft model for --speculate draft, not --speculate lookup" "$tally" run -m "$model" -p hi --speculate lookup --draft x
  expect_usage "--draft with --beam" "tally run" "--speculate rolls back one sequence's cache: not with --beam" "$tally" run -m "$model" -p hi --draft "$model" --beam 2
  expect_usage "--draft-vocab without --draft" "tally run" "--draft-vocab limits a draft model's guesses: give --draft too" "$tally" run -m "$model" -p hi --speculate lookup --draft-vocab 100
  expect_usage "--draft-vocab below 0" "tally run" "--draft-vocab: -1 is out of range \\(0 to 2147483647\\)" "$tally" run -m "$model" -p hi --draft "$model" --draft-vocab -1
  expect_usage "serve --draft-vocab without --draft" "tally serve" "--draft-vocab limits a draft model's guesses: give --draft too" "$tally" serve -m "$model" --draft-vocab 100
  expect_usage "lab speculative --draft-vocab without --draft" "tally lab speculative" "--draft-vocab limits a draft model's guesses: give --draft too" "$tally" lab speculative -m "$model" --draft-vocab 100
  expect_error "--draft that names no model" "^tally: error: --draft no-such-draft: .*no such file, catalog model" "$tally" run -m "$model" -p hi --draft no-such-draft
  # lab speculative: every setting writes greedy's tokens; guesses kept <= made; the plot lands; the held tasks list.
  if "$tally" lab speculative -m "$model" --tasks code-edit --k 2 -n 16 --json --plot "$tmp/spec.png" >"$tmp/lab_spec.json" 2>/dev/null &&
      python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
assert j["source"] == "lookup" and [p["k"] for p in j["points"]] == ["off", "2", "auto"], j
for p in j["points"]:
    assert p["kind"] == "code-edit" and p["same_tokens"] and 0 <= p["accepted"] <= p["drafted"], p
    assert p["tokens"] > 0 and p["target_steps"] <= p["tokens"] and p["speedup"] > 0, p
assert j["points"][1]["drafted"] > 0 and j["points"][1]["accepted"] > 0, j
' "$tmp/lab_spec.json" && [ "$(head -c 4 "$tmp/spec.png" | od -An -c | tr -d ' ')" = "211PNG" ]; then
    passes=$((passes + 1))
  else
    echo "FAIL lab speculative: $(head -c 300 "$tmp/lab_spec.json")"; failures=$((failures + 1))
  fi
  expect_ok "lab speculative --list" "fix-bug \\(code-edit\\)" "$tally" lab speculative --list
  expect_usage "lab speculative --tasks unknown" "tally lab speculative" "--tasks: .*not in" "$tally" lab speculative -m "$model" --tasks poems
  expect_error "lab speculative --draft of another vocabulary" "--draft .*: the draft model has .* rows of logits" "$tally" lab speculative -m "$model" --draft "$home/models/gemma-3-270m-q4_k_m.gguf" -n 4
  # chat: two turns, greedy, with prompt lookup and (below) with a draft model give the replies they give
  # without; the per-turn line says how many guesses were kept.
  printf 'Repeat this list: apples, pears, plums, figs.\nNow repeat it again, in reverse order.\n' >"$tmp/chat_in"
  expect_same_chat() {  # NAME MODEL FLAGS...: replies equal to the chat without FLAGS, guesses reported
    local name="$1" m="$2"
    shift 2
    "$tally" chat -m "$m" --temp 0 -n 40 -t 2 <"$tmp/chat_in" >"$tmp/chat_off" 2>/dev/null
    "$tally" chat -m "$m" --temp 0 -n 40 -t 2 "$@" <"$tmp/chat_in" >"$tmp/chat_spec" 2>"$tmp/chat_spec_err"
    if [ -s "$tmp/chat_off" ] && cmp -s "$tmp/chat_off" "$tmp/chat_spec" &&
        [ "$(grep -cE 'generated, [0-9.]+ tok/s; [0-9]+ of [0-9]+ guesses kept\]' "$tmp/chat_spec_err")" -ge 1 ]; then
      passes=$((passes + 1))
    else
      echo "FAIL chat $name: replies differ from greedy without, or no guesses reported: $(head -c 300 "$tmp/chat_spec_err")"
      failures=$((failures + 1))
    fi
  }
  expect_same_chat "--speculate lookup" "$model" --speculate lookup
  qwen05="$home/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf" qwen15="$home/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
  if [ -f "$qwen05" ] && [ -f "$qwen15" ]; then
    expect_error "a draft of another vocabulary" "--draft .*: the draft model has 151936 rows of logits, the target 49152: a draft must share the target's vocabulary" "$tally" run -m "$model" -p hi --draft "$qwen05"
    expect_error "a draft cache over --kv-budget" "--draft .*: the target's KV cache takes .* of --kv-budget .*, leaving nothing for the draft model's|--draft .*: its KV cache for the context of 4096 tokens" "$tally" run -m "$qwen15" -p hi --draft "$qwen05" --kv-budget 120MiB
    expect_error "serve: a draft of another vocabulary" "--draft .*: the draft model has 151936 rows of logits, the target 49152: a draft must share the target's vocabulary" "$tally" serve -m "$model" --port 0 --draft "$qwen05"
    expect_error "serve: a draft cache over --kv-budget" "the draft model's KV cache of 2048 positions: .*raise --kv-budget or lower -c" "$tally" serve -m "$qwen15" --port 0 -c 2048 --draft "$qwen05" --kv-budget 70MiB
    expect_same_chat "--draft" "$qwen15" --draft "$qwen05"
    # A draft model (qwen2.5-coder 0.5B for the 1.5B): greedy gives exactly the tokens it gives without,
    # with a fixed short draft and the adaptive one; guesses made, kept and rejected over the runs.
    edit='Add a docstring to this function and change nothing else.

def area(w, h):
    if w < 0 or h < 0:
        raise ValueError("negative size")
    return w * h'
    "$tally" run -m "$qwen15" -p "$edit" --chat -n 40 --temp 0 --json -t 2 >"$tmp/draft_off.json" 2>/dev/null
    "$tally" run -m "$qwen15" -p "$edit" --chat -n 40 --temp 0 --json -t 2 --draft "$qwen05" --draft-max 2 >"$tmp/draft_2.json" 2>/dev/null
    "$tally" run -m "$qwen15" -p "$edit" --chat -n 40 --temp 0 --json -t 2 --speculate draft --draft "$qwen05" >"$tmp/draft_a.json" 2>/dev/null
    # ... and with the draft guessing from the whole vocabulary, or from its first 256 ids and the text's.
    "$tally" run -m "$qwen15" -p "$edit" --chat -n 40 --temp 0 --json -t 2 --draft "$qwen05" --draft-vocab 0 >"$tmp/draft_v0.json" 2>/dev/null
    "$tally" run -m "$qwen15" -p "$edit" --chat -n 40 --temp 0 --json -t 2 --draft "$qwen05" --draft-vocab 256 >"$tmp/draft_v256.json" 2>/dev/null
    if python3 -c '
import json, sys
off = json.load(open(sys.argv[1]))
assert off["generated_tokens"] >= 20, off
drafted = accepted = 0
for f in sys.argv[2:]:
    j = json.load(open(f))
    assert j["token_ids"] == off["token_ids"], (f, j["token_ids"], off["token_ids"])
    s = j["speculation"]
    assert s["source"] == "draft" and s["accepted"] <= s["drafted"] and s["decode_steps"] < off["generated_tokens"] - 1, (f, s)
    drafted += s["drafted"]; accepted += s["accepted"]
assert 0 < accepted <= drafted, (accepted, drafted)
' "$tmp/draft_off.json" "$tmp/draft_2.json" "$tmp/draft_a.json" "$tmp/draft_v0.json" "$tmp/draft_v256.json"; then passes=$((passes + 1)); else echo "FAIL run --draft: greedy tokens differ or no guess kept"; failures=$((failures + 1)); fi
  fi
  expect_ok "penalties in run" "Paris" "$tally" run -m "$model" -p "The capital of France is" -n 4 --temp 0 --presence-penalty 0.5 --frequency-penalty 0.5
  expect_error "presence penalty out of range" "--presence-penalty: 3 is out of range" "$tally" run -m "$model" -p hi --presence-penalty 3
  # Forks that the pool could never hold at once are refused before they start (they would preempt each other forever).
  expect_error "beams outnumbering the pool" "beam search: 520 sequences .* the pool holds 128" timeout 20 "$tally" run -m "$model" -p "The capital of France is" -n 4 --beam 260
  expect_error "parallel outnumbering the pool" "parallel sampling: 1000 sequences .* the pool holds 16" timeout 20 "$tally" run -m "$model" -p x -n 64 --parallel 1000 -c 512
  expect_error "parallel past its bound" "--parallel: 100000 is out of range" "$tally" run -m "$model" -p x --parallel 100000
  expect_ok "scalar kernels" "Paris" "$tally" run -m "$model" -p "The capital of France is" -n 4 --temp 0 --simd scalar
  expect_error "-n -1 without a window" "-n -1 \\(no limit\\) needs a sliding window \\(--sinks N\\)" "$tally" run -m "$model" -p hi -n -1
  expect_error "-n below -1" "--n-predict: -2 is out of range \\(-1 to 16777216\\)" "$tally" run -m "$model" -p hi -n -2
  expect_error "zero threads is fine but negative is not" "--threads: -2 is out of range" "$tally" run -m "$model" -p hi -t -2
  expect_error "prompt longer than context" "more than the .* left in the context" "$tally" run -m "$model" -c 8 -p "one two three four five six seven eight nine ten eleven twelve"
  expect_error "context over the memory budget" "needs .* more than the memory budget" "$tally" run -m "$model" -c 4096 --kv-budget 1000000 -p hi
  # The prefix cache's disk tier: bad folders and flags, and a prefix that outlives the process.
  expect_usage "--cache-disk-budget alone" "tally run" "--cache-disk-budget needs --cache-dir" "$tally" run -m "$model" -p hi --cache-disk-budget 1GiB
  expect_usage "an empty --cache-dir" "tally run" "--cache-dir" "$tally" run -m "$model" -p hi --cache-dir ''
  expect_usage "--cache-dir without the prefix cache" "tally run" "--cache-dir needs the prefix cache" "$tally" run -m "$model" -p hi --parallel 2 --no-prefix-cache --cache-dir "$tmp/kv"
  expect_error "--cache-dir naming a file" "KV cache folder $tmp/badmagic.gguf: exists and is not a folder" "$tally" run -m "$model" -p hi --cache-dir "$tmp/badmagic.gguf"
  expect_error "tally cache on a missing folder" "cache: $tmp/none: not a folder" "$tally" cache "$tmp/none"
  long="$(printf 'The quick brown fox jumps over the lazy dog. %.0s' $(seq 1 20))"
  expect_warned "a run writes its prefix to --cache-dir" ", 0 reused from the cache;" "$tally" run -m "$model" -p "$long" -n 2 --temp 0 -v --cache-dir "$tmp/kv"
  expect_warned "the next run loads it" "192 reused from the cache \\(192 from disk\\)" "$tally" run -m "$model" -p "$long" -n 2 --temp 0 -v --cache-dir "$tmp/kv"
  expect_ok "tally cache sizes the folder" '"block_files":6' "$tally" cache "$tmp/kv" --json
  expect_ok "tally cache --clear empties it" "removed 6 KV block files" "$tally" cache "$tmp/kv" --clear
  expect_ok "inspect" "blk.0.attn_q.weight" "$tally" inspect -m "$model"
  expect_ok "inspect json" '"tensors"' "$tally" inspect -m "$model" --json
  expect_ok "greedy run" "Paris" "$tally" run -m "$model" -p "The capital of France is" -n 8 --temp 0
  expect_ok "run json" '"decode_tps"' "$tally" run -m "$model" -p "Hello" -n 4 --json
  expect_ok "logits" "pos" "$tally" logits -m "$model" -p "Hello there" --top 3
  if [ -w /dev/full ]; then
    expect_full "run to a full device" "$tally" run -m "$model" -p hi -n 4
    expect_full "inspect to a full device" "$tally" inspect -m "$model"
  fi
  expect_error "directory as perplexity text" "is a directory, not a text file" "$tally" perplexity -m "$model" -f "$tmp"
  expect_error "FIFO as a model (run)" "not a regular file \\(a FIFO\\)" timeout 10 "$tally" run -m "$tmp/fifo.gguf" -p hi
  rep=$(printf '\xef\xbf\xbd')  # U+FFFD
  # Metadata the file cannot back, or that would be ignored, or printed raw (tests/cli/gguf_edit.py edits a copy).
  edit() { python3 "$(dirname "$0")/gguf_edit.py" "$model" "$tmp/$1" "${@:2}"; }
  edit blocks.gguf set llama.block_count u32 2147483648
  expect_error "block_count 2^31" "llama.block_count = 2147483648, but the file has tensors for 30 blocks" "$tally" run -m "$tmp/blocks.gguf" -p hi
  edit fewblocks.gguf set llama.block_count u32 20
  expect_error "block_count below the blocks present" "llama.block_count = 20, but the file has tensors of block 29" "$tally" run -m "$tmp/fewblocks.gguf" -p hi
  edit rope.gguf set llama.rope.freq_base f32 inf
  expect_error "infinite rope.freq_base" "'llama.rope.freq_base' = inf must be a positive finite number" "$tally" run -m "$tmp/rope.gguf" -p hi
  edit eps.gguf set llama.attention.layer_norm_rms_epsilon f64 1e300
  expect_error "rms_eps beyond float" "layer_norm_rms_epsilon' = 1e\\+300 must be a positive finite number" "$tally" run -m "$tmp/eps.gguf" -p hi
  edit heads.gguf set llama.attention.head_count u32 1002
  expect_error "1002 heads" "heads.gguf: cannot derive the head size: llama.embedding_length = 576 is not a multiple of llama.attention.head_count = 1002$" "$tally" run -m "$tmp/heads.gguf" -p hi
  edit typed.gguf set llama.context_length str "'8k'"
  expect_error "type error names the file" "typed.gguf: metadata 'llama.context_length' is a string, expected an integer" "$tally" run -m "$tmp/typed.gguf" -p hi
  edit vocab.gguf set llama.vocab_size u32 49152 truncate tokenizer.ggml.tokens 49000 truncate tokenizer.ggml.token_type 49000
  expect_error "tokenizer smaller than the model" "the tokenizer has 49000 tokens but the model has 49152 rows of logits" "$tally" run -m "$tmp/vocab.gguf" -p hi
  edit escapes.gguf set general.name str "b'\x1b[2J\x07'" rename general.license "b'general.lic\xffnse'"
  expect_ok "inspect escapes ESC and BEL" '"\\x1b\[2J\\x07"' "$tally" inspect -m "$tmp/escapes.gguf"
  "$tally" inspect -m "$tmp/escapes.gguf" >"$tmp/out" 2>&1
  if grep -q "$(printf '\x1b')" "$tmp/out"; then echo "FAIL inspect printed a raw ESC"; failures=$((failures + 1)); else passes=$((passes + 1)); fi
  expect_ok "inspect json of a non-UTF-8 key" "\"general.lic${rep}nse\"" "$tally" inspect --json -m "$tmp/escapes.gguf"
  rm -f "$tmp"/{blocks,fewblocks,rope,eps,heads,typed,vocab,escapes}.gguf
  expect_warned "a prompt of only 0xFF runs" "the prompt has 2 characters .* each was replaced by U\\+FFFD" "$tally" run -m "$model" -p "$(printf '\xff\xfe')" -n 2
  printf 'The cat sat on the mat.\xc0 The dog sat on the log.\n' >"$tmp/ppl.txt"
  expect_warned "perplexity says what it replaced" "the text file has 1 character" "$tally" perplexity -m "$model" -f "$tmp/ppl.txt" -c 8
  # --plot paths reach no shell and no gnuplot command: '|cmd' and a newline are plain (bad) file names.
  if command -v gnuplot >/dev/null; then
    expect_error "plot path starting with |" "cannot write the plot there: folder" "$tally" lab speedup -m "$model" --prompt-tokens 4 --gen-tokens 2 --plot "|touch $tmp/pwned" --json
    expect_error "plot path with a newline" "cannot write the plot there" "$tally" lab speedup -m "$model" --prompt-tokens 4 --gen-tokens 2 --json \
      --plot "$(printf 'x.png"\nsystem "touch %s/pwned2"\nset output "y' "$tmp")"
    if [ -e "$tmp/pwned" ] || [ -e "$tmp/pwned2" ]; then echo "FAIL --plot ran a command"; failures=$((failures + 1)); else passes=$((passes + 1)); fi
    expect_error "plot to /dev/full" "/dev/full: cannot write the plot there: it is a character device" "$tally" lab speedup -m "$model" --prompt-tokens 4 --gen-tokens 2 --plot /dev/full
    expect_error "plot into a directory" "cannot write the plot there: it is a directory" "$tally" lab speedup -m "$model" --prompt-tokens 4 --gen-tokens 2 --plot "$tmp"
    expect_ok "plot to a plain path" '"points"' "$tally" lab speedup -m "$model" --prompt-tokens 4 --gen-tokens 2 --json --plot "$tmp/plot.png"
  fi
  expect_ok "kv budget with a unit" "Paris" "$tally" run -m "$model" -p "The capital of France is" -n 4 --temp 0 --kv-budget 1GiB
  # Paths and file text that are not UTF-8 come out of every JSON writer as U+FFFD.
  ln -s "$model" "$tmp/m$(printf '\xff').gguf"
  expect_ok "inspect json of a non-UTF-8 path" "\"path\": \".*/m$rep\\.gguf\"" "$tally" inspect --json -m "$tmp/m$(printf '\xff').gguf"
  expect_ok "kv-plan json of a non-UTF-8 path" "\"source\": \".*/m$rep\\.gguf\"" "$tally" kv-plan --json -m "$tmp/m$(printf '\xff').gguf"
  # More threads than cores: a warning, and the run goes on.
  "$tally" run -m "$model" -p hi -n 1 -t 64 >"$tmp/out" 2>"$tmp/err"
  if [ $? -ne 0 ] || { [ "$(nproc)" -lt 64 ] && ! grep -q "more threads than the .* cores" "$tmp/err"; }; then echo "FAIL -t above the cores: $(cat "$tmp/err")"; failures=$((failures + 1)); else passes=$((passes + 1)); fi
  expect_error "parallel zero" "--parallel: 0 is out of range \\(1 to 1024\\)" "$tally" run -m "$model" -p hi --parallel 0
  expect_error "beam zero" "--beam: 0 is out of range \\(1 to 1024\\)" "$tally" run -m "$model" -p hi --beam 0
  expect_error "beam with parallel" "--beam and --parallel" "$tally" run -m "$model" -p hi --beam 2 --parallel 2
  expect_error "beam-copy without beam" "--beam-copy needs --beam" "$tally" run -m "$model" -p hi --beam-copy
  expect_error "parallel without a cache" "--no-cache" "$tally" run -m "$model" -p hi --parallel 2 --no-cache
  expect_error "bench parallel zero" "--parallel: 0 is out of range \\(1 to 1024\\)" "$tally" bench -m "$model" --parallel 0 --no-probe
  expect_error "lab beam width zero" "--widths: 0 is out of range \\(1 to 1024\\)" "$tally" lab beam -m "$model" --widths 0
  expect_ok "beam json" '"beams"' "$tally" run -m "$model" -p "The capital of France is" -n 4 --beam 2 --json
  expect_ok "parallel json" '"continuations"' "$tally" run -m "$model" -p "Hello" -n 4 --parallel 2 --json
  expect_error "chat -n checked before the first line" "--n-predict: -1 is out of range \\(1 to 16777216\\)" "$tally" chat -m "$model" -n -1
  # A chat whose context fills up drops the oldest turns, says so, and goes on to the end.
  printf 'Name a fruit.\nName a colour.\nName a city.\nName a river.\n' |
    "$tally" chat -m "$model" -c 96 -n 24 --temp 0 >"$tmp/out" 2>"$tmp/err"
  if [ $? -ne 0 ] || ! grep -q "turn(s) were dropped" "$tmp/err" || [ "$(grep -c "new prompt tokens" "$tmp/err")" -ne 4 ]; then
    echo "FAIL chat at a full context: $(head -c 600 "$tmp/err")"; failures=$((failures + 1))
  else passes=$((passes + 1)); fi
  # -c beyond the trained context warns but runs.
  "$tally" run -m "$model" -c 9000 -p "Hi" -n 1 >"$tmp/out" 2>"$tmp/err"
  if [ $? -ne 0 ] || ! grep -q "warning" "$tmp/err"; then echo "FAIL -c beyond training: $(cat "$tmp/err")"; failures=$((failures + 1)); else passes=$((passes + 1)); fi
  # The seed: random unless given (two runs draw two), in --json, printed with -v.
  seed_of() { python3 -c 'import json, sys; print(json.load(sys.stdin)["seed"])'; }
  s1=$("$tally" run -m "$model" -p "Once upon a time" -n 2 --json | seed_of)
  s2=$("$tally" run -m "$model" -p "Once upon a time" -n 2 --json | seed_of)
  check "two runs draw two seeds ($s1, $s2)" test -n "$s1" -a "$s1" != "$s2"
  expect_ok "--seed in --json" '"seed": ?7[,}]' "$tally" run -m "$model" -p "Once upon a time" -n 2 --json --seed 7
  expect_ok "--seed -1 is a random seed" '"seed": ?[0-9]+' "$tally" run -m "$model" -p "Once upon a time" -n 2 --json --seed -1
  a=$("$tally" run -m "$model" -p "Once upon a time" -n 16 --temp 0.8 -s 7 2>/dev/null)
  b=$("$tally" run -m "$model" -p "Once upon a time" -n 16 --temp 0.8 --seed 7 2>/dev/null)
  check "one seed, one text" test -n "$a" -a "$a" = "$b"
  expect_warned "-v: the seed first" "^tally: seed 7$" "$tally" run -m "$model" -p "The capital of France is" -n 4 --temp 0 -s 7 -v
  expect_warned "-v: the speed line" "^\\[load [0-9]+ ms; 5 prompt tokens prefilled at [0-9.]+ tok/s, 0 reused from the cache; 4 generated at [0-9.]+ tok/s; finish: length; seed 7\\]$" "$tally" run -m "$model" -p "The capital of France is" -n 4 --temp 0 -s 7 -v
  "$tally" run -m "$model" -p "The capital of France is" -n 4 >"$tmp/out" 2>"$tmp/err"
  check "no speed line when stderr is no terminal and no -v" test ! -s "$tmp/err"
  # The prompt from standard input or -f FILE (llama-cli's spelling).
  printf 'The capital of France is' | "$tally" run -m "$model" -n 4 --temp 0 >"$tmp/out" 2>"$tmp/err"
  check "the prompt from standard input" grep -q Paris "$tmp/out"
  printf 'The capital of France is' >"$tmp/prompt.txt"
  expect_ok "the prompt from -f FILE" "Paris" "$tally" run -m "$model" -f "$tmp/prompt.txt" -n 4 --temp 0
  : | "$tally" run -m "$model" -n 4 >"$tmp/out" 2>"$tmp/err"
  check "an empty standard input is an empty prompt (exit 1)" test $? -eq 1 -a "$(cat "$tmp/err")" = "tally: error: the prompt is empty: nothing to generate from"
  # llama.cpp's flags; -ngl with a note.
  expect_ok "llama.cpp's spellings" "Paris" "$tally" run -m "$model" -ngl 99 --ctx-size 256 -b 64 -s 3 -n 4 --temp 0 -p "The capital of France is"
  expect_warned "-ngl's note" "^tally: note: tally runs on the CPU; --n-gpu-layers 99 has nothing to offload$" "$tally" run -m "$model" -ngl 99 -n 1 -p hi
  expect_ok "run --chat -sys" '"generated_tokens": ?[0-9]' "$tally" run -m "$model" --chat -sys "Answer in one word." -p "What colour is the sky?" -n 4 --json
  # StreamingLLM is --sinks/--window; --stream is its old spelling, warned.
  expect_warned "--stream warns" "--stream is now spelled --sinks N" "$tally" run -m "$model" --stream -n 2 -p hi
  expect_warned "--json --stream says what --json does" "--stream is now spelled .*--json prints one object at the end" "$tally" run -m "$model" --stream --json -n 2 -p hi
  expect_ok "--sinks and --window slide past the window" '"finish": ?"length",.*"generated_tokens": ?120,' "$tally" run -m "$model" --sinks 4 --window 64 -n 120 --ignore-eos -p "Once upon a time" --json
  # A message of chat is at most 1 MiB; a stream without newlines ends the chat with exit 1.
  head -c 3000000 /dev/zero | timeout 60 "$tally" chat -m "$model" >"$tmp/out" 2>"$tmp/err"
  check "chat: a 3 MB line is refused with exit 1" test $? -eq 1
  check "chat: the refusal says why" grep -q "standard input: a line is longer than 1.00 MiB, the most one message may hold; the chat stops" "$tmp/err"
  timeout 60 "$tally" chat -m "$model" </dev/zero >"$tmp/out" 2>"$tmp/err"
  check "chat < /dev/zero ends (exit 1, not a timeout)" test $? -eq 1
  printf 'a%.0s' $(seq 1 100) >/dev/null
  python3 -c 'print("/set temp 0"); print("x" * 1100000); print("/stats")' | "$tally" chat -m "$model" >"$tmp/out" 2>"$tmp/err"
  check "chat: a 1.1 MB line from a pipe ends the chat" grep -q "a line is longer than 1.00 MiB" "$tmp/err"
  # embed refuses what its context cannot take, as serve does.
  expect_error "embed over -c" "the prompt has [0-9]+ tokens, more than the context of 8 \\(-c\\)" "$tally" embed -m "$model" -c 8 -p "one two three four five six seven eight nine ten"
  expect_error "embed over the trained context" "more than the context of 8192 \\(the model's trained context; -c raises it\\)" "$tally" embed -m "$model" -p "$(python3 -c 'print("word " * 9000)')"
  # bench: a missing model fails before the probe; columns as llama-bench prints them; no stddev for one repetition.
  start=$SECONDS
  expect_error "bench: a missing model fails at once" "nonexistent.gguf" "$tally" bench -m "$tmp/nonexistent.gguf"
  check "bench: ... before the probe's seconds" test $((SECONDS - start)) -lt 5
  "$tally" bench -m "$model" -p 16 -n 4 -r 1 --no-probe >"$tmp/out" 2>"$tmp/err"
  check "bench: model, size and params columns" grep -qE "^\\| model \\| size \\| params \\| test \\| threads \\| depth \\| tokens/s \\| bytes/token" "$tmp/out"
  check "bench: a row names the model" grep -qE "^\\| SmolLM2-135M-Instruct.Q4_1 \\| 92.[0-9] MiB \\| 134.5M \\| pp16 \\|" "$tmp/out"
  check "bench: no stddev column for one repetition" test "$(grep -c "| stddev" "$tmp/out")" -eq 0
  expect_ok "bench --json: stddev null for one repetition" '"tps_stddev": null' "$tally" bench -m "$model" -p 16 -n 0 -r 1 --no-probe --json
  expect_ok "bench --json: stddev with two" '"tps_stddev": [0-9]' "$tally" bench -m "$model" -p 16 -n 0 -r 2 --no-probe --json
  # lab speedup within the trained context.
  expect_error "lab speedup past the trained context" "--prompt-tokens 9000 \\+ --gen-tokens 2 exceed the model's trained context of 8192" "$tally" lab speedup -m "$model" --prompt-tokens 9000 --gen-tokens 2
  # perplexity off a terminal: a line per window, with the total.
  python3 -c 'print("The cat sat on the mat. " * 40)' >"$tmp/ppl2.txt"
  expect_warned "perplexity: window i of N" "^\\[window 1 of [0-9]+, perplexity so far [0-9.]+\\]$" "$tally" perplexity -m "$model" -f "$tmp/ppl2.txt" -c 32
  # A 10 KB architecture name: a message of bounded length.
  edit arch.gguf set general.architecture str "'$(python3 -c 'print("x" * 10000)')'"
  "$tally" run -m "$tmp/arch.gguf" -p hi >"$tmp/out" 2>"$tmp/err"
  check "a 10 KB architecture name: exit 1" test $? -eq 1
  check "a 10 KB architecture name: under 400 bytes of message ($(wc -c <"$tmp/err"))" test "$(wc -c <"$tmp/err")" -lt 400
  rm -f "$tmp/arch.gguf"
  # Gemma 3's budget row says what its trained context is.
  gemma="$home/models/gemma-3-270m-q4_k_m.gguf"
  if [ -f "$gemma" ]; then
    expect_ok "kv-plan: gemma3's trained context" "note: the budget holds [0-9]+ tokens, but the model was trained for 32768" "$tally" kv-plan -m "$gemma" --budget 2GB
  fi
  # Constrained decoding: a schema or grammar file that cannot be enforced is one line naming the file and where.
  printf '{"type":"object","properties":{"x":{"type":"object","patternProperties":{}}}}' >"$tmp/pp.json"
  expect_error "--json-schema: an unsupported keyword" "pp.json: JSON schema: at /properties/x/patternProperties: 'patternProperties' is not supported" "$tally" run -m "$model" -p hi --json-schema "$tmp/pp.json"
  printf '{"enum": []}' >"$tmp/empty_enum.json"
  expect_error "--json-schema: an empty enum" "empty_enum.json: JSON schema: an empty enum at /enum" "$tally" run -m "$model" -p hi --json-schema "$tmp/empty_enum.json"
  printf '{"type": "array", "minItems": 2, "maxItems": 1}' >"$tmp/empty_lang.json"
  expect_error "--json-schema: no value satisfies it" "empty_lang.json: JSON schema: maxItems below minItems at /maxItems" "$tally" run -m "$model" -p hi --json-schema "$tmp/empty_lang.json"
  printf '{"type": "object",' >"$tmp/notjson.json"
  expect_error "--json-schema: not JSON" "notjson.json: not JSON" "$tally" run -m "$model" -p hi --json-schema "$tmp/notjson.json"
  printf '[1, 2]' >"$tmp/notschema.json"
  expect_error "--json-schema: not a schema" "notschema.json: JSON schema: not a schema at the root" "$tally" run -m "$model" -p hi --json-schema "$tmp/notschema.json"
  printf 'root ::= "a"\nb ::= ("x"\n' >"$tmp/bad.gbnf"
  expect_error "--grammar: a syntax error" "bad.gbnf: grammar: EBNF (lexer|parser) error at line 3, column 1: Expect \\)" "$tally" run -m "$model" -p hi --grammar "$tmp/bad.gbnf"
  expect_error "--grammar: a missing file" "cannot open|No such file" "$tally" run -m "$model" -p hi --grammar "$tmp/none.gbnf"
  expect_usage "--json-schema with --grammar" "tally run" "--json-schema and --grammar both constrain the output" "$tally" run -p hi --json-schema "$tmp/pp.json" --grammar "$tmp/bad.gbnf"
  expect_usage "--json-schema with --beam" "tally run" "--beam scores its own hypotheses: --json-schema and --grammar" "$tally" run -p hi --json-schema "$tmp/pp.json" --beam 2
  # Constrained output: run's output and every one of chat's replies are JSON valid against the schema.
  printf '%s' '{"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}, "mood": {"enum": ["happy", "sad"]}}, "required": ["name", "mood"], "additionalProperties": false}' >"$tmp/mood.json"
  json_values() {  # N: stdin is exactly N JSON values of mood.json's schema, each on its own line(s)
    python3 -c '
import json, sys
text, n, dec, at, got = sys.stdin.read(), int(sys.argv[1]), json.JSONDecoder(), 0, 0
while text[at:].strip():
    at += len(text[at:]) - len(text[at:].lstrip())
    v, at = dec.raw_decode(text, at)
    assert isinstance(v, dict) and set(v) == {"name", "mood"} and isinstance(v["name"], str), v
    assert len(v["name"]) <= 12 and v["mood"] in ("happy", "sad"), v
    got += 1
assert got == n, (got, text)' "$1"
  }
  "$tally" run -m "$model" -p "A cat, as JSON:" --temp 0 -n 64 --json-schema "$tmp/mood.json" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  check "run --json-schema: exit 0 ($(head -c 200 "$tmp/err"))" test $rc -eq 0
  check "run --json-schema: the output is one JSON value of the schema ($(head -c 200 "$tmp/out"))" json_values 1 <"$tmp/out"
  printf 'Describe a cat.\nNow a dog.\n' | "$tally" chat -m "$model" --temp 0 -n 64 --json-schema "$tmp/mood.json" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  check "chat --json-schema: exit 0 ($(head -c 200 "$tmp/err"))" test $rc -eq 0
  check "chat --json-schema: each of two replies is JSON of the schema ($(head -c 300 "$tmp/out"))" json_values 2 <"$tmp/out"
  expect_usage "chat: --json-schema with --grammar" "tally chat" "--json-schema and --grammar both constrain the output" "$tally" chat --json-schema "$tmp/mood.json" --grammar "$tmp/bad.gbnf"
  # -n past the context: generation stops there, with a warning (exit 0).
  expect_warned "-n past the context" "stopped: the context of 64 tokens is full" "$tally" run -m "$model" -c 64 -n 200 --ignore-eos -p hi
else
  echo "note: smollm2:135m not installed (tally pull smollm2:135m); model checks skipped"
  [ "${TALLY_REQUIRE_MODEL:-0}" = 1 ] && failures=$((failures + 1))
fi

echo "cli: $passes passed, $failures failed"
[ "$failures" -eq 0 ]
