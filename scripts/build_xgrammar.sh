#!/usr/bin/env bash
# Builds xgrammar (mlc-ai, Apache-2.0), the grammar engine behind src/grammar
# (JSON schema and EBNF to token masks), as a C++-only static library, from
# its PyPI source package. Debian does not package it. The result is cached at
# $TALLY_HOME/deps/xgrammar-VERSION (TALLY_HOME defaults to ~/.cache/tally):
# lib/libxgrammar.a and include/{xgrammar,dlpack}; CMakeLists.txt imports it,
# so the release, ASan and fuzz builds link one build. Idempotent: a second run
# only checks the stamp. scripts/setup.sh calls it.
#   usage: scripts/build_xgrammar.sh
# XGRAMMAR_SDIST=PATH uses a copy of the source package already on disk (it
# must still match the pinned sha256).
set -euo pipefail
VERSION=0.2.9
SHA256=87b466bca2475e29bb0323abc62c6c33cbcbcff47e5fb800a3e2099ac9620b90
home="${TALLY_HOME:-$HOME/.cache/tally}"
prefix="$home/deps/xgrammar-$VERSION"
stamp="$prefix/.built"
# The stamp names the source and the fixes applied to it (below): a change to either rebuilds.
KEY="$SHA256 fix-bounded-string-controls"
if [[ -f $stamp && $(cat "$stamp") == "$KEY" && -f $prefix/lib/libxgrammar.a ]]; then
  exit 0
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/xgrammar-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
sdist="$work/xgrammar-$VERSION.tar.gz"
if [[ -n ${XGRAMMAR_SDIST:-} ]]; then
  cp "$XGRAMMAR_SDIST" "$sdist"
else
  # pip prepares the package's metadata even for a download, so its build
  # backend must be there (in a throwaway venv).
  echo "build_xgrammar: downloading xgrammar==$VERSION (source) from PyPI"
  python3 -m venv "$work/venv"
  "$work/venv/bin/pip" install -q --disable-pip-version-check scikit-build-core setuptools-scm
  "$work/venv/bin/pip" download -q --disable-pip-version-check "xgrammar==$VERSION" --no-deps \
    --no-binary :all: --no-build-isolation -d "$work/dl"
  mv "$work/dl/xgrammar-$VERSION.tar.gz" "$sdist"
fi
got=$(sha256sum "$sdist" | cut -d' ' -f1)
if [[ $got != "$SHA256" ]]; then
  echo "build_xgrammar: xgrammar-$VERSION.tar.gz has sha256 $got, expected $SHA256" >&2
  exit 1
fi
tar -xzf "$sdist" -C "$work"
src="$work/xgrammar-$VERSION"
# One fix, applied here until xgrammar has it: a JSON string with minLength or
# maxLength takes any character but '"', '\', CR and LF, so control
# characters (U+0000-U+001F: tab, U+0001, ...) could be written raw, which is
# not JSON; the class below refuses all of them, as its unbounded strings do.
python3 - "$src/cpp/json_schema_converter.cc" <<'PY'
import sys
path = sys.argv[1]
text = open(path).read()
old = """builder_.AddCharacterClass({{'"', '"'}, {'\\\\', '\\\\'}, {'\\r', '\\r'}, {'\\n', '\\n'}}, true);"""
new = """builder_.AddCharacterClass({{'"', '"'}, {'\\\\', '\\\\'}, {0x00, 0x1f}}, true);"""
if text.count(old) != 1:
    sys.exit("build_xgrammar: the bounded-string character class to fix is not in json_schema_converter.cc")
open(path, "w").write(text.replace(old, new))
PY
mkdir -p "$work/build"
# A config.cmake in the build folder takes precedence over the package's own,
# which turns the Python bindings on.
cat >"$work/build/config.cmake" <<'EOF'
set(XGRAMMAR_BUILD_PYTHON_BINDINGS OFF)
set(XGRAMMAR_BUILD_CXX_TESTS OFF)
set(XGRAMMAR_ENABLE_CPPTRACE OFF)
set(XGRAMMAR_ENABLE_COVERAGE OFF)
set(XGRAMMAR_ENABLE_INTERNAL_CHECK OFF)
EOF
echo "build_xgrammar: building xgrammar $VERSION into $prefix"
# -fno-lto: the package asks for LTO, whose objects only the same compiler
# could link; tally's fuzz build links with clang.
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS=-fno-lto \
  -DCMAKE_INSTALL_PREFIX="$prefix" >"$work/configure.log" || { cat "$work/configure.log" >&2; exit 1; }
cmake --build "$work/build" -j"$(nproc)"
rm -rf "$prefix"
cmake --install "$work/build" >/dev/null
cp "$src/LICENSE" "$prefix/LICENSE"
echo "$KEY" >"$stamp"
echo "build_xgrammar: $prefix ready"
