#include "sizing/model_shape.h"

#include "core/error.h"
#include "model/hf_folder.h"
#include "io/gguf.h"
#include "sizing/hf_config.h"

namespace tally {

ModelShape shape_from_flags(int64_t layers, int64_t heads, int64_t kv_heads, int64_t head_dim) {
  const std::pair<const char*, int64_t> flags[] = {
      {"--layers", layers}, {"--heads", heads}, {"--kv-heads", kv_heads}, {"--head-dim", head_dim}};
  for (const auto& [flag, v] : flags) {
    if (v <= 0) fail("{} must be positive (got {})", flag, v);
    if (v > kMaxModelDim) fail("{} {} is too large", flag, v);
  }
  if (heads % kv_heads != 0)
    fail("--heads {} is not divisible by --kv-heads {} (each kv head serves a whole group of query heads)", heads,
         kv_heads);
  ModelShape s;
  s.source = "flags";
  s.n_layer = layers;
  s.n_head = heads;
  s.n_kv_head = kv_heads;
  s.head_dim = head_dim;
  return s;
}

ModelShape shape_from_gguf(const std::string& path) {
  return shape_from_gguf(*open_model_file(path));
}

ModelShape read_model_shape(const ShapeSource& src) {
  const bool any_flag = src.layers || src.heads || src.kv_heads || src.head_dim;
  if (!src.gguf.empty() && !src.config.empty()) fail("give either -m GGUF or --config config.json, not both");
  if (any_flag && (!src.gguf.empty() || !src.config.empty()))
    fail("give the shape either from a file (-m or --config) or with --layers/--heads/--kv-heads/--head-dim, not both");
  if (!src.gguf.empty()) return shape_from_gguf(src.gguf);
  if (!src.config.empty()) return shape_from_hf_config(src.config, src.want_weights, src.weights_bits);
  if (!any_flag)
    fail("no model shape given: use -m GGUF, --config config.json, or --layers L --heads H --kv-heads KV --head-dim D");
  const std::pair<const char*, std::optional<int64_t>> flags[] = {
      {"--layers", src.layers}, {"--heads", src.heads}, {"--kv-heads", src.kv_heads}, {"--head-dim", src.head_dim}};
  for (const auto& [flag, v] : flags)
    if (!v) fail("an explicit shape needs --layers, --heads, --kv-heads and --head-dim; {} is missing", flag);
  return shape_from_flags(*src.layers, *src.heads, *src.kv_heads, *src.head_dim);
}

}  // namespace tally
