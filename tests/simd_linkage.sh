#!/usr/bin/env bash
# The files built for one instruction set (src/*/*_avx2.cpp, *_vnni.cpp,
# *_avx512.cpp) must not define weak symbols: the linker keeps one copy of
# an inline function for the whole program, and if it kept the one compiled
# with AVX-512 flags, code that runs on any CPU would call it. Their helpers
# have internal linkage instead. Lists the weak definitions and fails if any.
#   usage: tests/simd_linkage.sh path/to/libtally_lib.a
set -u
lib="$1"
# The instruction-set objects' symbols, one "lib:member: value type name" line each.
symbols=$(nm -A "$lib" 2>/dev/null | grep -E '_(avx2|avx512|vnni)\.cpp\.o:')
if [ -z "$symbols" ]; then
  echo "simd_linkage: no *_avx2 / *_avx512 / *_vnni objects in $lib" >&2
  exit 1
fi
# W/V: weak; u: unique global. DW.ref.__gxx_personality_v0 is the compiler's own.
weak=$(awk '$(NF-1) ~ /^[WVu]$/ && $NF !~ /^DW\.ref\./' <<<"$symbols" | c++filt)
if [ -n "$weak" ]; then
  echo "simd_linkage: weak definitions in instruction-set files (give them internal linkage):"
  echo "$weak"
  exit 1
fi
echo "simd_linkage: no weak definitions in the instruction-set files"
