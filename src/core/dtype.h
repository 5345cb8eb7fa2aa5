#pragma once
// Tensor element types of the GGUF/ggml family. Every id has a name; only the
// ones with `supported == true` can be dequantized and multiplied by tally.
#include <array>
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

namespace dtype_detail {
struct Entry {
  uint32_t id;
  DTypeTraits t;
};
// Namespace-scope constexpr (not inline): internal linkage, so that the
// instruction-set files define no weak symbol (tests/simd_linkage.sh);
// traits() returns a copy, never a reference to one of them.
// Every id ggml defines (the gaps are ids it has retired).
constexpr Entry kTable[] = {
    {0, {"F32", 1, 4, true}},          {1, {"F16", 1, 2, true}},
    {2, {"Q4_0", 32, 18, true}},       {3, {"Q4_1", 32, 20, true}},
    {6, {"Q5_0", 32, 22, true}},       {7, {"Q5_1", 32, 24, true}},
    {8, {"Q8_0", 32, 34, true}},       {9, {"Q8_1", 32, 36, false}},
    {10, {"Q2_K", 256, 84, false}},    {11, {"Q3_K", 256, 110, false}},
    {12, {"Q4_K", 256, 144, true}},    {13, {"Q5_K", 256, 176, true}},
    {14, {"Q6_K", 256, 210, true}},    {15, {"Q8_K", 256, 292, false}},
    {16, {"IQ2_XXS", 256, 66, false}}, {17, {"IQ2_XS", 256, 74, false}},
    {18, {"IQ3_XXS", 256, 98, false}}, {19, {"IQ1_S", 256, 50, false}},
    {20, {"IQ4_NL", 32, 18, false}},   {21, {"IQ3_S", 256, 110, false}},
    {22, {"IQ2_S", 256, 82, false}},   {23, {"IQ4_XS", 256, 136, false}},
    {24, {"I8", 1, 1, false}},         {25, {"I16", 1, 2, false}},
    {26, {"I32", 1, 4, false}},        {27, {"I64", 1, 8, false}},
    {28, {"F64", 1, 8, false}},        {29, {"IQ1_M", 256, 56, false}},
    {30, {"BF16", 1, 2, true}},        {34, {"TQ1_0", 256, 54, false}},
    {35, {"TQ2_0", 256, 66, false}},
};
constexpr DTypeTraits kUnknown{"?", 1, 1, false};
inline constexpr uint32_t kIds = 36;  // every id is below this
// kTable by id, kUnknown in the gaps: traits() is one index, usable in constant expressions.
constexpr std::array<DTypeTraits, kIds> by_id() {
  std::array<DTypeTraits, kIds> a{};
  for (auto& t : a) t = kUnknown;
  for (const Entry& e : kTable) a[e.id] = e.t;
  return a;
}
constexpr std::array<DTypeTraits, kIds> kById = by_id();
}  // namespace dtype_detail

// Traits of a known id, or nullopt for an id no ggml version defines.
std::optional<DTypeTraits> dtype_traits(uint32_t id);
// Traits of a known type (never fails: an unknown one reads as one-byte values named "?").
constexpr DTypeTraits traits(DType t) {
  const auto i = static_cast<uint32_t>(t);
  return i < dtype_detail::kIds ? dtype_detail::kById[i] : dtype_detail::kUnknown;
}
std::string_view dtype_name(DType t);
// Parses "f32", "q4_0", ... (case-insensitive); nullopt if unknown.
std::optional<DType> dtype_from_name(std::string_view name);

// Bytes of a row of n values; n must be a multiple of the block size.
inline uint64_t row_bytes(DType t, uint64_t n) {
  const auto& tr = traits(t);
  return n / tr.block_size * tr.type_size;
}

}  // namespace tally
