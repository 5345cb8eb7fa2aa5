#!/usr/bin/env bash
# Builds and runs every test: (1) the unit tests under ASan+UBSan, (2) every
# libFuzzer target (scripts/fuzz.sh lists them) for TALLY_FUZZ_SECONDS each (default 10: under three
# minutes in all; the long campaigns are docs/reliability.md's), (3) the full CTest suite of the warnings-as-errors release build, which
# needs the catalog models pulled here (smollm2:135m, the tests' model; gemma3:270m;
# qwen2.5-coder:0.5b, and the default qwen2.5-coder:1.5b that scripts/setup.sh pulled) and, for
# the server tests, the venv that scripts/setup_test_env.sh makes.
# Its first step installs the test tools (scripts/setup.sh --test: the build
# and the default model are already there when the README's test command ran
# scripts/setup.sh, so that part only checks them).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="$(nproc)"
export TALLY_REQUIRE_MODEL=1  # model-dependent tests fail instead of skipping

echo "== test tools (at ${SECONDS}s)"
scripts/setup.sh --test

echo "== models (at ${SECONDS}s)"
for m in smollm2:135m gemma3:270m qwen2.5-coder:0.5b qwen2.5-coder:1.5b; do
  build/release/tally pull "$m"
done

# Each stage says when it starts (seconds since this script began): CI's budget is 45 minutes.
echo "== ASan+UBSan unit tests (at ${SECONDS}s)"
# The AVX-512 and AVX-VNNI kernels run here emulated (SIMDe) where the CPU lacks
# them: the release suite below can only run the ones the CPU has.
cmake -S . -B build/asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTALLY_SANITIZE=ON -DTALLY_WERROR=ON \
  -DTALLY_EMULATE_SIMD=ON >/dev/null
cmake --build build/asan -j"$jobs" --target tally_tests
# The forward-pass suites run the whole model; under ASan they are slow, so
# the sanitizer pass covers the parsers, tokenizers, kernels and cache only.
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  build/asan/tests/tally_tests --gtest_brief=1 --gtest_filter="${TALLY_ASAN_FILTER:--*Model*:*Generation*:*Perplexity*}"

echo "== fuzzing (at ${SECONDS}s)"
scripts/fuzz.sh "${TALLY_FUZZ_SECONDS:-10}"

echo "== release build, full test suite (at ${SECONDS}s)"
scripts/setup_test_env.sh
# The build scripts/setup.sh made, with the tests added (its objects are
# reused when it was built with TALLY_WERROR=ON, as CI does).
cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release -DTALLY_TESTS=ON -DTALLY_WERROR=ON >/dev/null
cmake --build build/release -j"$jobs"
echo "== CTest (at ${SECONDS}s)"
ctest --test-dir build/release --output-on-failure -j"$jobs" --timeout 1200
echo "== done (${SECONDS}s)"
