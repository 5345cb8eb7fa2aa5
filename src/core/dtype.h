#pragma once
// Tensor element types of the GGUF/ggml family. Every id has a name; only the
// ones with `supported == true` can be dequantized and multiplied by tally.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tally {

enum class DType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
};

struct DTypeTraits {
  std::string_view name;
  uint32_t block_size;  // values per block (1 for plain types)
  uint32_t type_size;   // bytes per block
  bool supported;       // tally can dequantize it
};

// Traits of a known id, or nullopt for an id no ggml version defines.
std::optional<DTypeTraits> dtype_traits(uint32_t id);
// Traits of a known type (never fails).
const DTypeTraits& traits(DType t);
std::string_view dtype_name(DType t);
// Parses "f32", "q4_0", ... (case-insensitive); nullopt if unknown.
std::optional<DType> dtype_from_name(std::string_view name);

// Bytes of a row of n values; n must be a multiple of the block size.
inline uint64_t row_bytes(DType t, uint64_t n) {
  const auto& tr = traits(t);
  return n / tr.block_size * tr.type_size;
}

}  // namespace tally
