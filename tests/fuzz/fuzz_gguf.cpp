// libFuzzer target for the GGUF reader: any input must either parse or throw
// tally::Error; a parsed file must be safe to walk completely, and the first
// blocks of every supported tensor must dequantize without touching memory
// outside the input.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "io/gguf.h"
#include "kernels/dequantize.h"

namespace {

// Reads every byte of a value so that a dangling or short buffer would show up.
uint64_t touch(const tally::GgufValue& v) {
  uint64_t h = static_cast<uint64_t>(v.type) + v.u + static_cast<uint64_t>(v.i);
  h += static_cast<uint64_t>(v.f != v.f);  // NaN is allowed, just look at it
  for (char c : v.s) h = h * 31 + static_cast<uint8_t>(c);
  for (const auto& e : v.arr) h += touch(e);
  return h;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    tally::GgufFile f(data, size, "fuzz");
    volatile uint64_t sink = 0;
    for (const auto& [key, value] : f.metadata()) {
      sink = sink + key.size() + touch(value);
      (void)f.find(key);
      (void)value.to_string();
    }
    // The typed getters must throw tally::Error, never misbehave.
    try { sink = sink + f.get_u64("general.alignment", 0); } catch (const tally::Error&) {}
    try { sink = sink + f.get_string("general.architecture", "").size(); } catch (const tally::Error&) {}

    std::vector<float> out;
    for (const auto& t : f.tensors()) {
      if (f.find_tensor(t.name) != &t) __builtin_trap();
      if (t.data + t.n_bytes > data + size || t.data < data) __builtin_trap();
      if (t.n_bytes > 0) sink = sink + t.data[0] + t.data[t.n_bytes - 1];
      (void)t.shape_string();
      const auto& tr = tally::traits(t.type);
      if (!tr.supported) continue;
      // Up to 4 blocks (at least one value per block is guaranteed by the reader).
      const uint64_t n = std::min<uint64_t>(t.n_elements, 4ull * tr.block_size);
      const uint64_t whole = n / tr.block_size * tr.block_size;
      out.resize(whole);
      tally::dequantize_row(t.type, t.data, out.data(), whole);
      for (float x : out) sink = sink + static_cast<uint64_t>(x == x);
    }
    (void)f.total_tensor_bytes();
    (void)sink;
  } catch (const tally::Error&) {
    // Bad input, reported properly.
  }
  return 0;
}
