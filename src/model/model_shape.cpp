#include "model/model_shape.h"

#include <algorithm>

#include "core/checked_math.h"
#include "core/error.h"
#include "io/gguf.h"
#include "io/hf_config_file.h"
#include "model/architecture.h"
#include "model/hparams.h"

namespace tally {
namespace {

// Which layers attend through the window: the file's
// <arch>.attention.sliding_window_pattern (a flag per layer, nonzero meaning
// sliding, or a period), else the architecture's pattern; empty when neither
// says (an architecture tally does not know: every layer planned as global).
std::vector<bool> read_window_layers(const HParams& h, const std::string& arch, int64_t n_layer) {
  const std::string key = h.key("attention.sliding_window_pattern");
  const GgufValue* v = h.file().find(key);
  if (!v) {
    const Architecture* a = find_architecture(arch);
    if (!a || !a->window_period) return {};
    return window_layers_of_period(n_layer, *a->window_period);
  }
  try {
    // A period past the last layer leaves every layer sliding, as any larger one does.
    if (v->type != GgufType::ARRAY)
      return window_layers_of_period(n_layer, static_cast<int64_t>(std::min(v->as_u64(key), uint64_t(n_layer) + 1)));
    const auto& flags = v->as_array(key);
    if (static_cast<int64_t>(flags.size()) != n_layer)
      fail("metadata '{}' has {} entries for {} layers", key, flags.size(), n_layer);
    std::vector<bool> out(static_cast<size_t>(n_layer));
    for (size_t i = 0; i < flags.size(); ++i) out[i] = flags[i].as_bool(key);  // bool, or an integer: nonzero
    return out;
  } catch (const Error& e) {
    fail("{}: {}", h.file().path(), e.what());
  }
}

}  // namespace

int64_t ModelShape::n_window_layers() const {
  return static_cast<int64_t>(std::count(window_layers.begin(), window_layers.end(), true));
}

ModelShape shape_from_gguf(const GgufFile& f) {
  ModelShape s;
  s.source = f.path();
  s.kind = f.get_string("general.architecture");
  const HParams h(f, s.kind);
  s.n_layer = h.size("block_count");
  s.n_head = h.size("attention.head_count");
  s.n_kv_head = h.size("attention.head_count_kv", s.n_head);
  if (s.n_head % s.n_kv_head != 0)
    fail("{}: {} = {} query heads are not divisible into {} = {} kv heads", f.path(), h.key("attention.head_count"),
         s.n_head, h.key("attention.head_count_kv"), s.n_kv_head);
  if (h.has("attention.key_length")) {
    s.head_dim = h.size("attention.key_length");
  } else {
    const int64_t embd = h.size("embedding_length");
    if (embd % s.n_head != 0)
      fail("{}: cannot derive the head size: {} = {} is not a multiple of {} = {}", f.path(),
           h.key("embedding_length"), embd, h.key("attention.head_count"), s.n_head);
    s.head_dim = embd / s.n_head;
  }
  if (h.has("attention.value_length") && h.size("attention.value_length") != s.head_dim)
    fail("{}: {} = {} differs from the key length {}; caches with other value sizes are not supported", f.path(),
         h.key("attention.value_length"), h.size("attention.value_length"), s.head_dim);
  if (h.has("attention.sliding_window")) {
    s.window = h.size("attention.sliding_window");
    s.window_layers = read_window_layers(h, s.kind, s.n_layer);
    if (s.n_window_layers() == 0) {  // no sliding layer: every layer is global
      s.window = 0;
      s.window_layers.clear();
    }
  }
  if (const uint64_t ctx = f.get_u64(s.kind + ".context_length", 0); ctx > 0 && ctx <= uint64_t{1} << 40)
    s.trained_context = static_cast<int64_t>(ctx);
  if (!f.tensors().empty()) {
    uint64_t elements = 0;
    for (const auto& t : f.tensors()) {
      const auto sum = checked_add(elements, t.n_elements);
      if (!sum) fail("{}: the tensors' element count overflows 64 bits", f.path());
      elements = *sum;
    }
    s.parameters = elements;
    s.weights_bytes = f.total_tensor_bytes();
  }
  return s;
}

}  // namespace tally
