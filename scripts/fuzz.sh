#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) in build/fuzz and runs
# each for SECONDS (default 30) from its seed corpus. Exits non-zero on any
# crash, leak, sanitizer report or timeout; the reproducer is left in
# build/fuzz/artifacts/.
#   usage: scripts/fuzz.sh [SECONDS]
set -euo pipefail
SECONDS_EACH=${1:-30}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$ROOT/build/fuzz
JOBS=${JOBS:-2}

CC=clang CXX=clang++ cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DTALLY_FUZZ=ON -DTALLY_TESTS=OFF >/dev/null
targets=(fuzz_gguf)
[[ -f $ROOT/tests/fuzz/fuzz_tokenizer.cpp ]] && targets+=(fuzz_tokenizer)
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
  echo "== $t: ${SECONDS_EACH}s"
  if ! "$BUILD/tests/fuzz/$t" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 \
      -max_len=65536 -print_final_stats=1 -artifact_prefix="$BUILD/artifacts/$t-" "${dirs[@]}" \
      2>"$BUILD/$t.log"; then
    echo "!! $t failed; log: $BUILD/$t.log"
    tail -n 40 "$BUILD/$t.log"
    status=1
  else
    grep -E "^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)|#[0-9]+.*DONE" \
      "$BUILD/$t.log" || true
  fi
done
exit $status
