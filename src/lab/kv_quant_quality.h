#pragma once
// What a quantized KV cache costs in quality: the same text scored with a
// cache of each type (f32, f16, q8_0, q4_0), compared position by position.
//
// For each context C: windows of C tokens from the start of the text (as many
// as --tokens allows, at least one), each evaluated from an empty cache with
// every type in lockstep, chunk by chunk. Per type: perplexity over the
// window's C - 1 predictions, the mean KL divergence KL(P_ref || P_type) of
// the next-token distribution against the f16 and the f32 cache, and how
// often the most likely next token equals the f16 cache's. Greedy agreement:
// for each prompt, tokens generated greedily with each type before the first
// one that differs from the f16 run.
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace tally {

struct KvQuantOptions {
  std::vector<int64_t> contexts = {512, 2048, 8192};
  int64_t tokens = 8192;  // scored per context (whole windows; at least one window)
  std::vector<DType> types = {DType::F32, DType::F16, DType::Q8_0, DType::Q4_0};
  std::vector<std::string> prompts;  // greedy agreement
  int64_t greedy_tokens = 128;
  int n_threads = 0;
};

struct KvQuantRow {
  int64_t context = 0;
  DType type = DType::F16;
  int64_t windows = 0, predictions = 0;
  double ppl = 0;
  double kl_vs_f16 = 0, kl_vs_f32 = 0;  // mean over predictions, nats
  double max_kl_vs_f16 = 0;
  double top1_vs_f16 = 0;               // share of positions whose argmax equals f16's
  double seconds = 0;                   // this type's evaluation time
};

struct KvGreedyRow {
  std::string prompt;
  DType type = DType::F16;
  int64_t generated = 0;
  int64_t agree_prefix = 0;  // tokens equal to the f16 run before the first difference
};

struct KvQuantReport {
  std::vector<KvQuantRow> rows;
  std::vector<KvGreedyRow> greedy;
};

// PRECONDITION: types holds F16 and F32 (the references). progress(done, total): tokens evaluated.
KvQuantReport measure_kv_quant(const Model& model, const Tokenizer& tok, std::span<const int32_t> text,
                               const KvQuantOptions& o,
                               const std::function<void(int64_t done, int64_t total)>& progress = {});

}  // namespace tally
