#!/usr/bin/env bash
# The folders of src/ are the architecture: a folder may include only folders
# below it in this order (and itself). Prints every include that points up or
# sideways, or names a folder that is not listed, and fails if there is one.
#   usage: tests/layering.sh [SRC_DIR]
set -euo pipefail
src=${1:-$(cd "$(dirname "$0")/../src" && pwd)}
# rank: folder (same rank = neither may include the other)
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
bad=0
while IFS= read -r -d '' file; do
  rel=${file#"$src"/}
  from=${rel%%/*}
  [[ -n ${rank[$from]+x} ]] || { echo "layering: $rel: folder '$from' has no rank in tests/layering.sh"; bad=1; continue; }
  while IFS= read -r line; do
    to=${line#*\"}; to=${to%%/*}
    [[ $to == "$from" ]] && continue
    if [[ -z ${rank[$to]+x} ]]; then
      echo "layering: $rel includes \"$to/...\", a folder with no rank"; bad=1
    elif (( rank[$to] >= rank[$from] )); then
      echo "layering: $rel ($from, rank ${rank[$from]}) includes $to (rank ${rank[$to]}): includes must point down"; bad=1
    fi
  done < <(grep -E '^#include "[a-z_]+/' "$file" || true)
done < <(find "$src" -type f \( -name '*.h' -o -name '*.cpp' \) -print0)
[[ $bad == 0 ]] && echo "layering: every include in $src points down"
exit $bad
