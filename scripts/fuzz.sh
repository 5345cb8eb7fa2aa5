#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) in build/fuzz and runs
# each for SECONDS (default 30) from its seed corpus (tests/fuzz/corpus/NAME)
# with its dictionary (tests/fuzz/NAME.dict, or json.dict for the JSON readers) when
# there is one. Exits non-zero on any crash, leak, sanitizer report or
# timeout; the reproducer is left in build/fuzz/artifacts/. Prints, per
# target, the executions, the coverage (cov: edges, ft: features) and the
# corpus size; the full log is build/fuzz/fuzz_NAME.log.
#   usage: scripts/fuzz.sh [SECONDS] [NAME...]     NAME: gguf, tokenizer, hf_config, cli_numbers, session, safetensors, hf_folder, http, jinja, catalog, kv_plan_api, chat_input, kv_block, tool_calls, grammar
set -euo pipefail
SECONDS_EACH=${1:-30}
shift || true
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$ROOT/build/fuzz
JOBS=${JOBS:-2}

all=(gguf tokenizer hf_config cli_numbers session safetensors hf_folder http jinja catalog kv_plan_api chat_input kv_block tool_calls grammar)
names=("$@")
[[ ${#names[@]} -gt 0 ]] || names=("${all[@]}")
targets=()
for n in "${names[@]}"; do
  # The tokenizer target reads its vocabularies from ../shared (or $TALLY_FUZZ_VOCAB).
  if [[ $n == tokenizer && -z ${TALLY_FUZZ_VOCAB:-} &&
        ! -f $ROOT/../shared/testdata/tokenizer/ggml-vocab-starcoder.gguf ]]; then
    if [[ ${TALLY_REQUIRE_SHARED:-} == 1 ]]; then
      echo "fuzz.sh: fuzz_tokenizer needs ../shared/testdata/tokenizer (TALLY_REQUIRE_SHARED=1)" >&2
      exit 1
    fi
    echo "== fuzz_tokenizer: skipped (no ../shared/testdata/tokenizer; set TALLY_FUZZ_VOCAB)"
    continue
  fi
  targets+=("fuzz_$n")
done
[[ ${#targets[@]} -gt 0 ]] || exit 0

CC=clang CXX=clang++ cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DTALLY_FUZZ=ON -DTALLY_TESTS=OFF >/dev/null
cmake --build "$BUILD" -j"$JOBS" --target "${targets[@]}"

mkdir -p "$BUILD/artifacts"
status=0
for t in "${targets[@]}"; do
  name=${t#fuzz_}
  seeds=$ROOT/tests/fuzz/corpus/$name
  work=$BUILD/corpus/$name  # grows as the fuzzer finds new inputs; seeds stay untouched
  mkdir -p "$work"
  dirs=("$work")
  [[ -d $seeds ]] && dirs+=("$seeds")
  dict=$ROOT/tests/fuzz/$name.dict
  [[ $name == hf_config || $name == safetensors || $name == hf_folder || $name == catalog ]] && dict=$ROOT/tests/fuzz/json.dict
  dict_arg=()
  [[ -f $dict ]] && dict_arg=(-dict="$dict")
  echo "== $t: ${SECONDS_EACH}s"
  if ! "$BUILD/tests/fuzz/$t" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 \
      -max_len=65536 -print_final_stats=1 "${dict_arg[@]}" -artifact_prefix="$BUILD/artifacts/$t-" \
      ${TALLY_FUZZ_ARGS:-} "${dirs[@]}" 2>"$BUILD/$t.log"; then
    echo "!! $t failed; log: $BUILD/$t.log"
    tail -n 40 "$BUILD/$t.log"
    status=1
  else
    grep -E "^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)" "$BUILD/$t.log" || true
    grep -E "^#[0-9]+" "$BUILD/$t.log" | tail -n 1 || true
  fi
done
exit $status
