// libFuzzer target for the GGUF reader and everything that reads a GGUF
// after it: any input must either load or throw tally::Error. A parsed file
// must be safe to walk completely, and the first blocks of every supported
// tensor must dequantize without touching memory outside the input; then the
// hyper-parameter reader, the cache planner's shape, the tokenizer (with an
// encode/decode), the chat template and the model's weight binding run on it,
// and a model that binds evaluates two tokens in a small cache.
//
// A structure-aware mutator (gguf_mutator.h) keeps the file's framing intact
// while it changes counts, types, lengths, dimensions and offsets, so inputs
// get past the first checks; seeds in tests/fuzz/corpus/gguf.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "gguf_mutator.h"
#include "io/gguf.h"
#include "kernels/dequantize.h"
#include "model/model.h"
#include "model/model_config.h"
#include "runtime/session.h"
#include "sizing/model_shape.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace {

// Reads every byte of a value so that a dangling or short buffer would show up.
uint64_t touch(const tally::GgufValue& v) {
  uint64_t h = static_cast<uint64_t>(v.type) + v.u + static_cast<uint64_t>(v.i);
  h += static_cast<uint64_t>(v.f != v.f);  // NaN is allowed, just look at it
  for (char c : v.s) h = h * 31 + static_cast<uint8_t>(c);
  for (const auto& e : v.arr) h += touch(e);
  return h;
}

void walk(const tally::GgufFile& f, const uint8_t* data, size_t size) {
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
}

// The loaders that read a parsed file. Each may refuse it with tally::Error.
// The model takes the file last.
void load(std::unique_ptr<tally::GgufFile> file) {
  const tally::GgufFile& f = *file;
  try {
    (void)tally::shape_from_gguf(f);
  } catch (const tally::Error&) {
  }
  try {
    const tally::Tokenizer tok = tally::Tokenizer::from_gguf(f);
    const std::vector<int32_t> ids = tok.encode("Hi there \xff <|im_start|>x", true, true);
    (void)tok.decode(ids, true);
  } catch (const tally::Error&) {
  }
  try {
    const tally::ChatTemplate t = tally::ChatTemplate::from_gguf(f);
    const tally::ChatMessage m{"user", "hi"};
    (void)t.render(std::span<const tally::ChatMessage>(&m, 1), true);
  } catch (const tally::Error&) {
  }
  if (f.tensors().empty()) return;
  try {
    (void)tally::ModelConfig::from_gguf(f);
    tally::Model model(std::move(file));
    tally::SessionOptions o;
    o.n_ctx = 8;
    o.n_threads = 1;
    o.kv_budget = 1 << 20;
    tally::Session s(model, o);
    const int32_t ids[2] = {0, static_cast<int32_t>(model.config().n_vocab - 1)};
    (void)s.append(ids);
  } catch (const tally::Error&) {
  }
}

}  // namespace

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  return tally::fuzz::mutate_gguf(data, size, max_size, seed);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::unique_ptr<tally::GgufFile> f;
  try {
    f = std::make_unique<tally::GgufFile>(data, size, "fuzz");
  } catch (const tally::Error&) {
    return 0;  // bad input, reported properly
  }
  walk(*f, data, size);
  load(std::move(f));
  return 0;
}
