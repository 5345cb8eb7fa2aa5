#!/usr/bin/env bash
# Builds llama.cpp's own C++ tools, the peers tally is measured against
# (llama-bench, llama-batched-bench, llama-server, llama-quantize,
# llama-perplexity, llama-cli, llama-lookup, llama-speculative), from the llama.cpp tree vendored in the
# llama-cpp-python sdist on PyPI. Outside the repo:
#   $TALLY_HOME/llama.cpp/src    the tree (with convert_hf_to_gguf.py)
#   $TALLY_HOME/llama.cpp/bin    the tools
# Native flags, no network code. A second run only rebuilds what changed.
#   usage: [TALLY_LLAMA_AMX=off] scripts/build_llama_cpp.sh   (about 15 minutes on 2 cores)
set -euo pipefail
VERSION=0.3.36
home="${TALLY_HOME:-$HOME/.cache/tally}"
base="$home/llama.cpp"
src="$base/src"
TOOLS=(llama-bench llama-batched-bench llama-server llama-quantize llama-perplexity llama-cli llama-lookup llama-speculative)

if [ ! -f "$src/CMakeLists.txt" ]; then
  mkdir -p "$base"
  tmp=$(mktemp -d "$base/.fetch.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  echo "build_llama_cpp: downloading the llama-cpp-python $VERSION sdist from PyPI"
  python3 -m pip download --no-deps --no-binary :all: --no-cache-dir -d "$tmp" "llama-cpp-python==$VERSION" >/dev/null \
    || { echo "build_llama_cpp: error: could not download llama-cpp-python==$VERSION from PyPI" >&2; exit 1; }
  tar -xzf "$tmp"/llama_cpp_python-*.tar.gz -C "$tmp"
  rm -rf "$src"
  mv "$tmp"/llama_cpp_python-"$VERSION"/vendor/llama.cpp "$src"
fi

# TALLY_LLAMA_AMX=off: native flags less AMX. On one 2-core Xeon VM (AMX in
# its flags, the kernel's AMX permission granted) this version's AMX product
# (ggml_backend_amx_mul_mat) dies with SIGSEGV on qwen2.5-coder Q4_K_M's
# first batch; without AMX ggml takes its AVX-512 VNNI path and keeps its
# weight repacking, which the run-time way round (`-nr`) turns off too.
flags=""
case "${TALLY_LLAMA_AMX:-on}" in
  on) ;;
  off) flags="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" ;;
  *) echo "build_llama_cpp: error: TALLY_LLAMA_AMX must be on or off, got '$TALLY_LLAMA_AMX'" >&2; exit 2 ;;
esac
cmake -S "$src" -B "$base/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
  -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_SERVER=ON >/dev/null
cmake --build "$base/build" -j"$(nproc)" --target "${TOOLS[@]}"
mkdir -p "$base/bin"
for t in "${TOOLS[@]}"; do
  install -m 755 "$base/build/bin/$t" "$base/bin/$t"
done
# the tools link ggml/llama as shared libraries when the tree builds them so
find "$base/build/bin" -maxdepth 1 -name '*.so*' -exec cp -a {} "$base/bin/" \;
echo "build_llama_cpp: tools in $base/bin (${TOOLS[*]})"
