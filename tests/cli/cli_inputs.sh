#!/usr/bin/env bash
# Black-box checks of what the CLI reads (docs/reliability.md): text and
# config inputs that would block or grow without bound (a FIFO without a
# writer, /dev/zero, a directory), HF folders whose files are not regular
# files or whose vocab_size the weights do not back, weights that are not
# finite, a vocabulary that cannot spell a character, and metadata that
# would be ignored or defaulted. Every refusal is one line, at once.
# Usage: cli_inputs.sh path/to/tally
set -u
tally="$1"
here="$(dirname "$0")"
tmp=$(mktemp -d)
writer=""
trap '[ -n "$writer" ] && kill "$writer" 2>/dev/null; rm -rf "$tmp"' EXIT
failures=0
passes=0
home="${TALLY_HOME:-$HOME/.cache/tally}"
model="$home/models/SmolLM2-135M-Instruct.Q4_1.gguf"
shared="$here/../../../shared/testdata/tokenizer"
vocab="$shared/ggml-vocab-starcoder.gguf"
folder="$here/../fixtures/random_models/qwen3-hf"

source "$here/cli_lib.sh"

# ---- text and config inputs: FIFOs, devices, folders -----------------------
mkfifo "$tmp/fifo"
expect_error "kv-plan --config FIFO without a writer" "fifo: no process has the FIFO open for writing, so there is no config file to read" \
  timeout 10 "$tally" kv-plan --config "$tmp/fifo"
expect_error "kv-plan --config /dev/zero" "/dev/zero: the config file holds more than the limit of 16777216 B" \
  timeout 60 "$tally" kv-plan --config /dev/zero
if [ -f "$vocab" ]; then
  expect_error "tokenize -f FIFO without a writer" "fifo: no process has the FIFO open for writing, so there is no text file to read" \
    timeout 10 "$tally" tokenize -m "$vocab" -f "$tmp/fifo"
  # A FIFO with a writer is read to its end, as cat reads it; so are pipes.
  python3 -c 'import os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
os.write(fd, b"Hello world")
open(sys.argv[2], "w").close()
time.sleep(2)
os.close(fd)' "$tmp/fifo" "$tmp/ready" &
  writer=$!
  for _ in $(seq 100); do [ -e "$tmp/ready" ] && break; sleep 0.1; done
  expect_ok "tokenize -f FIFO with a writer" "^8302 5810$" timeout 10 "$tally" tokenize -m "$vocab" -f "$tmp/fifo"
  wait "$writer"
  writer=""
  expect_ok "tokenize -f a pipe" "^8302 5810$" timeout 10 "$tally" tokenize -m "$vocab" -f <(printf 'Hello world')
  expect_ok "tokenize -f /dev/stdin" "^8302 5810$" timeout 10 "$tally" tokenize -m "$vocab" -f /dev/stdin < <(printf 'Hello world')
else
  echo "note: shared test data not found at $shared; its checks skipped"
  [ "${TALLY_REQUIRE_SHARED:-0}" = 1 ] && failures=$((failures + 1))
fi

# ---- HF folders: regular files only, vocab_size backed by the weights -----
for f in config.json tokenizer.json tokenizer_config.json chat_template.jinja; do
  rm -rf "$tmp/hf" && cp -r "$folder" "$tmp/hf" && rm "$tmp/hf/$f" && mkfifo "$tmp/hf/$f"
  expect_error "HF folder with $f a FIFO (inspect)" "hf/$f: not a regular file \\(a FIFO\\): a file of a model folder must be a regular file" \
    timeout 10 "$tally" inspect -m "$tmp/hf"
done
expect_error "HF folder with a FIFO (run)" "hf/chat_template.jinja: not a regular file \\(a FIFO\\)" timeout 10 "$tally" run -m "$tmp/hf" -p hi
expect_error "HF folder with a FIFO (kv-plan)" "hf/chat_template.jinja: not a regular file \\(a FIFO\\)" timeout 10 "$tally" kv-plan -m "$tmp/hf"
set_config() {  # set_config KEY JSON: a copy of the folder whose config.json has KEY = JSON (null: removed)
  rm -rf "$tmp/hf" && cp -r "$folder" "$tmp/hf"
  python3 -c 'import json, sys
p = sys.argv[1] + "/config.json"
c = json.load(open(p))
v = json.loads(sys.argv[3])
c.pop(sys.argv[2]) if v is None else c.__setitem__(sys.argv[2], v)
json.dump(c, open(p, "w"))' "$tmp/hf" "$1" "$2"
}
for v in 2147483649 9223372036854775808 2147483648; do
  set_config vocab_size "$v"
  # Under 1 GiB of address space: the token list is never padded to that size.
  for cmd in inspect "kv-plan" "run -p hi -n 1"; do
    expect_error "vocab_size $v ($cmd)" "config.json: 'vocab_size' is $v, but model.embed_tokens.weight has 320 rows" \
      timeout 20 bash -c 'ulimit -v 1048576; exec "$@"' _ "$tally" $cmd -m "$tmp/hf"
  done
done
set_config rms_norm_eps null
expect_error "HF folder without rms_norm_eps" "config.json: missing 'rms_norm_eps' \\(needed for the model\\)" "$tally" inspect -m "$tmp/hf"
set_config tie_word_embeddings '"yes"'
expect_error "tie_word_embeddings as a string" "'tie_word_embeddings' must be true or false, not the string \"yes\"" "$tally" inspect -m "$tmp/hf"
set_config quantization_config '{"quant_method": "awq"}'
expect_error "HF folder with quantization_config" "'quantization_config' is an object .*: quantized checkpoints" "$tally" inspect -m "$tmp/hf"

# ---- models: weights that are not finite, metadata taken as written -------
if [ -f "$model" ]; then
  # The text source of lab kv-quant goes through the same reader, read before the model.
  expect_error "lab kv-quant --text FIFO" "fifo: no process has the FIFO open for writing" timeout 10 "$tally" lab kv-quant -m "$model" --text "$tmp/fifo"
  expect_error "lab kv-quant --text DIR" "is a directory, not a text file" "$tally" lab kv-quant -m "$model" --text "$tmp"
  expect_error "lab kv-quant --text /dev/zero" "/dev/zero: the text file holds more than the limit of 536870912 B" \
    timeout 120 "$tally" lab kv-quant -m "$model" --text /dev/zero
  expect_error "lab sinks --text FIFO" "fifo: no process has the FIFO open for writing" timeout 10 "$tally" lab sinks -m "$model" --text "$tmp/fifo"
  expect_error "perplexity -f FIFO" "fifo: no process has the FIFO open for writing" timeout 10 "$tally" perplexity -m "$model" -f "$tmp/fifo"
  edit() { python3 "$here/gguf_edit.py" "$model" "$tmp/$1" "${@:2}"; }
  # SmolLM2: token_embd is Q8_0 (34-byte blocks, d first), attn_q Q4_1 (20-byte blocks: d, m; 360 bytes a row), norms F32.
  edit nan_embd.gguf poke token_embd.weight 0 007e
  expect_error "NaN token embeddings" "tensor 'token_embd.weight' holds a value that is not finite \\(NaN or infinite\\) in row 0, column 0 \\(a block scale\\)" \
    "$tally" run -m "$tmp/nan_embd.gguf" -p hi -n 4
  edit inf_q.gguf poke blk.5.attn_q.weight 1122 007c
  expect_error "infinite Q4_1 min in one attention matrix" "tensor 'blk.5.attn_q.weight' holds a value that is not finite \\(NaN or infinite\\) in row 3, column 64 \\(a block scale\\)" \
    "$tally" run -m "$tmp/inf_q.gguf" -p hi -n 4
  edit nan_norm.gguf poke blk.0.attn_norm.weight 28 0000c07f
  expect_error "NaN norm weight" "tensor 'blk.0.attn_norm.weight' holds a value that is not finite \\(NaN or infinite\\) at index 7" \
    "$tally" perplexity -m "$tmp/nan_norm.gguf" -f "$here/../fixtures/text/pride_and_prejudice_ch1.txt" -c 16
  edit boolblocks.gguf set llama.block_count bool 1
  expect_error "block_count as a bool" "metadata 'llama.block_count' is a bool, expected an integer" "$tally" run -m "$tmp/boolblocks.gguf" -p hi
  edit vocab0.gguf set llama.vocab_size u32 0
  expect_error "vocab_size 0" "metadata 'llama.vocab_size' = 0 is out of range" "$tally" run -m "$tmp/vocab0.gguf" -p hi
  edit noeps.gguf delete llama.attention.layer_norm_rms_epsilon
  expect_error "no RMS epsilon" "missing metadata 'llama.attention.layer_norm_rms_epsilon'" "$tally" run -m "$tmp/noeps.gguf" -p hi
  edit merge3.gguf fill tokenizer.ggml.merges 0 1 "b'a b c'"
  expect_error "a merge of three parts" "tokenizer.ggml.merges\\[0\\] = 'a b c' is not of the form 'A B'" "$tally" run -m "$tmp/merge3.gguf" -p hi
  rm -f "$tmp"/*.gguf
else
  echo "note: smollm2:135m not installed (tally pull smollm2:135m); model checks skipped"
  [ "${TALLY_REQUIRE_MODEL:-0}" = 1 ] && failures=$((failures + 1))
fi

# ---- a SentencePiece vocabulary without byte tokens ------------------------
spm="$shared/ggml-vocab-llama-spm.gguf"
if [ -f "$spm" ]; then
  # Its <0xNN> tokens (ids 3 to 258) made plain text: no byte fallback left.
  python3 "$here/gguf_edit.py" "$spm" "$tmp/nobytes.gguf" fill tokenizer.ggml.token_type 3 256 1
  expect_warned "a character without a piece becomes <unk>, with a warning" \
    "tally: warning: the text has 1 character this vocabulary cannot spell \\(it has no byte tokens; the first at byte 2\\); it became the unknown token <unk>" \
    "$tally" tokenize -m "$tmp/nobytes.gguf" "ab$(printf '\xf0\x9f\x98\x80')cd"
  expect_ok "the <unk> is in the ids" "(^| )0( |$)" "$tally" tokenize -m "$tmp/nobytes.gguf" "ab$(printf '\xf0\x9f\x98\x80')cd"
  "$tally" tokenize -m "$spm" "ab$(printf '\xf0\x9f\x98\x80')cd" >"$tmp/out" 2>"$tmp/err"
  if [ $? -ne 0 ] || [ -s "$tmp/err" ]; then echo "FAIL byte fallback warned: $(cat "$tmp/err")"; failures=$((failures + 1)); else passes=$((passes + 1)); fi
fi

echo "cli inputs: $passes passed, $failures failed"
[ "$failures" -eq 0 ]
