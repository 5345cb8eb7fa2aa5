#pragma once
// The text-encoder use of a decoder (seeds §6): one pass over the prompt,
// hidden states read out, nothing appended, so no KV cache is allocated.
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "core/thread_pool.h"
#include "model/model.h"

namespace tally {

enum class Pooling { None, Mean, Last };
Pooling pooling_from_name(std::string_view name);  // "none" | "mean" | "last"

struct Embedding {
  int64_t rows = 0;  // tokens (None) or 1
  int64_t dim = 0;
  std::vector<float> values;  // (rows, dim)
};

// layer: 0 = token embeddings, l = output of block l, n_layer (the default,
// -1) = output of the last block after the final norm (what an encoder reads).
Embedding embed(const Model& model, std::span<const int32_t> tokens, int64_t layer, Pooling pool, int n_threads);
// The same on a pool of the caller's (the server's engine thread runs it on the engine's).
Embedding embed(const Model& model, std::span<const int32_t> tokens, int64_t layer, Pooling pool, ThreadPool& threads);

}  // namespace tally
