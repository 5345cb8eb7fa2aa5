#!/usr/bin/env bash
# Every command on every supported architecture and source: the random-weight
# qwen2 (GGUF, Q4_K_M), qwen3, llama and gemma3 (HF folders) of tests/fixtures/random_models,
# and Gemma 3 270M when it is installed (`tally pull gemma3:270m`).
# Each command must exit 0 and print something; what the numbers are is
# checked by the unit tests, not here (but for one: kv-plan's allocation on Gemma).
# Usage: every_arch.sh path/to/tally   (EVERY_ARCH_TIMES=1 prints each command's milliseconds)
set -u
tally="$1"
here="$(cd "$(dirname "$0")" && pwd)"
fixtures="$here/../fixtures"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
head -c 2500 "$fixtures/text/pride_and_prejudice_ch1.txt" >"$tmp/short.txt"  # a few windows: quick on Gemma too
text="$tmp/short.txt"
home="${TALLY_HOME:-$HOME/.cache/tally}"
models=("$fixtures/random_models/qwen2-q4_k_m.gguf" "$fixtures/random_models/qwen3-hf" "$fixtures/random_models/llama-hf"
        "$fixtures/random_models/gemma3-hf")
gemma="$home/models/gemma-3-270m-q4_k_m.gguf"
if [ -f "$gemma" ]; then models+=("$gemma"); else echo "every_arch: $gemma not installed, skipped"; fi
failures=0
passes=0

check() {  # check NAME CMD...: exit 0 and a non-empty stdout
  local name="$1"
  shift
  local t0=$(date +%s%N)
  if ! "$@" >"$tmp/out" 2>"$tmp/err" || [ ! -s "$tmp/out" ]; then
    echo "FAIL $name: $(head -c 400 "$tmp/err")"
    failures=$((failures + 1))
  else
    passes=$((passes + 1))
    [ -n "${EVERY_ARCH_TIMES:-}" ] && echo "$name $(( ($(date +%s%N) - t0) / 1000000 )) ms"
  fi
}

for m in "${models[@]}"; do
  n=$(basename "$m")
  check "$n inspect" "$tally" inspect -m "$m"
  check "$n tokenize" "$tally" tokenize -m "$m" "It is a truth universally acknowledged"
  check "$n kv-plan" "$tally" kv-plan -m "$m"
  check "$n run" "$tally" run -m "$m" -p "It is a truth" -n 8 --seed 1 -t 2
  check "$n run --stream" "$tally" run -m "$m" -p "It is a truth" -n 80 --stream --window 48 --sinks 4 --seed 1 -t 2
  check "$n chat" sh -c 'printf "Hello\n" | "$0" chat -m "$1" -n 8 -t 2' "$tally" "$m"
  check "$n logits" "$tally" logits -m "$m" -p "It is a truth" -t 2
  check "$n embed" "$tally" embed -m "$m" -p "It is a truth" -t 2
  check "$n perplexity" "$tally" perplexity -m "$m" -f "$text" -c 128 -t 2
  check "$n bench" "$tally" bench -m "$m" -p 32 -n 4 -t 2 --no-probe
  check "$n bench --parallel" "$tally" bench -m "$m" -p 16 -n 4 -t 2 --no-probe --parallel 1,2
  check "$n lab causal" "$tally" lab causal -m "$m" -p "It is a truth universally" -t 2
  check "$n lab scores" "$tally" lab scores -m "$m" -n 16 -t 2
  check "$n lab speedup" "$tally" lab speedup -m "$m" --prompt-tokens 8 --gen-tokens 16 -t 2
  check "$n lab depth" "$tally" lab depth -m "$m" --max-depth 64 --decode-tokens 4 -t 2
  check "$n lab continuity" "$tally" lab continuity -m "$m" -p "It is a truth universally acknowledged" -t 2
  check "$n lab beam" "$tally" lab beam -m "$m" --widths 1,2 --prompt-tokens 16 --gen-tokens 4 --none-steps 1 -t 2
  check "$n lab sinks" "$tally" lab sinks -m "$m" --text "$text" --tokens 300 --window 128 --sinks 4 --no-dense \
    --recompute-every 150 -t 2
  check "$n lab kv-quant" "$tally" lab kv-quant -m "$m" --text "$text" --contexts 64 --tokens 64 --greedy-tokens 4 \
    --prompt "It is a truth" -t 2
done
# The planner and the engine agree on the window pool: what kv-plan says
# `run -c N` allocates is what run reports it allocated.
if [ -f "$gemma" ]; then
  planned=$("$tally" kv-plan -m "$gemma" --tokens 32768 --json |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["layouts"][0]["totals"][0]["allocated_bytes"])')
  allocated=$("$tally" run -m "$gemma" -p "It is" -n 1 -c 32768 -t 2 --json |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["kv"]["cache_bytes"])')
  if [ -n "$planned" ] && [ "$planned" = "$allocated" ]; then
    passes=$((passes + 1))
  else
    echo "FAIL gemma: kv-plan says run -c 32768 allocates '$planned' bytes, run reports '$allocated'"
    failures=$((failures + 1))
  fi
fi
echo "every_arch: $passes passed, $failures failed"
[ "$failures" -eq 0 ]
