#include "model/architecture.h"

#include "core/error.h"
#include "core/printable.h"

namespace tally {

namespace {
// gemma3 (../shared/docs/facts.md): half-split RoPE, GELU (tanh) gate, q/k
// norms, norms after each sub-block, embeddings scaled by sqrt(n_embd), RoPE
// base 10,000 on its sliding layers (llama.cpp's and HF's default), five
// sliding layers then a global one (HF's sliding_window_pattern 6, llama.cpp's
// swa pattern).
// qwen2: half-split RoPE (its converter does not permute q and k) and biases
// on the q, k and v projections; qwen3: half-split RoPE and q/k norms, no biases.
constexpr Architecture kArchitectures[] = {
    {.name = "llama", .rope_pairing = RopePairing::Adjacent},
    {.name = "gemma3", .rope_pairing = RopePairing::HalfSplit, .ffn = FfnActivation::GeluTanh, .qk_norm = true,
     .post_norms = true, .embed_scale = true, .rope_base_swa = 10000.0f, .window_period = 6},
    {.name = "qwen2", .rope_pairing = RopePairing::HalfSplit, .qkv_bias = true},
    {.name = "qwen3", .rope_pairing = RopePairing::HalfSplit, .qk_norm = true},
};
}

const Architecture* find_architecture(std::string_view name) {
  for (const auto& a : kArchitectures)
    if (a.name == name) return &a;
  return nullptr;
}

const Architecture& architecture_for(std::string_view name) {
  if (const Architecture* a = find_architecture(name)) return *a;
  std::string supported;
  for (const auto& a : kArchitectures) supported += (supported.empty() ? "" : ", ") + std::string(a.name);
  fail("architecture '{}' is not supported (supported: {})", excerpt(name), supported);
}

}  // namespace tally
