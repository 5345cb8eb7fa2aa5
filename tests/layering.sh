#!/usr/bin/env bash
# The folders of src/ are the architecture: a folder may include only folders
# below it in this order (and itself). tools/ (the command line) and bench/
# (the benchmark programs) stand above every folder of src/: they may
# include any of them, nothing includes them, and neither includes the
# other. A file's own headers (an include without a folder) must sit beside
# it. Prints every include that points up or sideways, or names a folder that
# is not listed, and fails if there is one.
#   usage: tests/layering.sh [REPO_ROOT]
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
# rank: folder of src/ (same rank = neither may include the other)
declare -A rank=(
  [core]=0
  [io]=1 [sampler]=1 [jinja]=1 [grammar]=1
  [kernels]=2 [tokenizer]=2
  [kv]=3
  [model]=4
  [sizing]=5
  [runtime]=6
  [lab]=7 [bench]=7 [store]=7
  [server]=8
)
top=9  # tools/ and bench/
bad=0
check() {  # check FILE NAME RANK: the includes of one file, named NAME, of rank RANK
  local file=$1 name=$2 from=$3 line to
  while IFS= read -r line; do
    to=${line#*\"}; to=${to%\"*}
    if [[ $to != */* ]]; then
      [[ -f $(dirname "$file")/$to ]] ||
        { echo "layering: $name includes \"$to\", which is not beside it"; bad=1; }
      continue
    fi
    to=${to%%/*}
    [[ $name == src/$to/* ]] && continue
    if [[ -z ${rank[$to]+x} ]]; then
      echo "layering: $name includes \"$to/...\", a folder of src/ with no rank"; bad=1
    elif (( rank[$to] >= from )); then
      echo "layering: $name (rank $from) includes $to (rank ${rank[$to]}): includes must point down"; bad=1
    fi
  done < <(grep -E '^#include "' "$file" || true)
}
while IFS= read -r -d '' file; do
  rel=${file#"$root"/src/}
  folder=${rel%%/*}
  [[ -n ${rank[$folder]+x} ]] || { echo "layering: src/$rel: folder '$folder' has no rank in tests/layering.sh"; bad=1; continue; }
  check "$file" "src/$rel" "${rank[$folder]}"
done < <(find "$root/src" -type f \( -name '*.h' -o -name '*.cpp' \) -print0)
for dir in tools bench; do
  [[ -d $root/$dir ]] || continue
  while IFS= read -r -d '' file; do
    check "$file" "${file#"$root"/}" "$top"
  done < <(find "$root/$dir" -type f \( -name '*.h' -o -name '*.cpp' \) -print0)
done
[[ $bad == 0 ]] && echo "layering: every include in src/, tools/ and bench/ points down"
exit $bad
