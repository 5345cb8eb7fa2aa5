// libFuzzer target for the safetensors reader (the weights of an HF folder,
// -m DIR): any bytes must give tensors or a tally::Error whose message is one
// bounded line; tensors it gives lie inside the input, in order, without
// overlapping, aligned to their elements and as large as their shapes say.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "fuzz_checks.h"
#include "io/safetensors.h"

namespace {

constexpr const char* kTarget = "fuzz_safetensors";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const tally::SafetensorsFile f(data, size, "fuzz.safetensors");
    const uint8_t* last_end = data;
    for (const auto& t : f.tensors()) {
      uint64_t count = 1;
      for (uint64_t d : t.shape) count *= d;
      const uint64_t elem = tally::traits(t.type).type_size;
      if (t.data < last_end || t.data + t.n_bytes > data + size) tally_fuzz::violated(kTarget, "inside, in order", t.name);
      if (count * elem != t.n_bytes) tally_fuzz::violated(kTarget, "size matches the shape", t.name);
      if (reinterpret_cast<uintptr_t>(t.data) % elem != 0) tally_fuzz::violated(kTarget, "aligned", t.name);
      last_end = t.data + t.n_bytes;
    }
  } catch (const tally::Error& e) {
    tally_fuzz::check_message(kTarget, e);
  }
  return 0;
}
