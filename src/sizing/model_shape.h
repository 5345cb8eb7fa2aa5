#pragma once
// Where the cache planner takes a model's shape (model/model_shape.h) from:
// a GGUF file, a Hugging Face config.json (hf_config.h), or explicit sizes.
#include <cstdint>
#include <optional>
#include <string>

#include "model/model_shape.h"

namespace tally {

// Checks positivity and divisibility; errors name the flag.
ModelShape shape_from_flags(int64_t layers, int64_t heads, int64_t kv_heads, int64_t head_dim);
// The GGUF (or HF folder) at `path`, by the model's own reader
// (shape_from_gguf): files without a vocabulary or tensors are accepted.
ModelShape shape_from_gguf(const std::string& path);
// Where to read a shape from: exactly one of a GGUF path, a config path, or
// the four explicit sizes (all of them).
struct ShapeSource {
  std::string gguf;
  std::string config;
  std::optional<int64_t> layers, heads, kv_heads, head_dim;
  bool want_weights = true;  // for a config: count its parameters
  // For a config: its weights stored in this format instead of its torch_dtype
  // (a GGUF made from it), bits per weight (sizing/kv_plan.h: weight_format).
  std::optional<double> weights_bits;
};
// Checks that exactly one source is given, then reads it.
ModelShape read_model_shape(const ShapeSource& src);

}  // namespace tally
