#include "model/architecture.h"

#include "core/error.h"
#include "core/printable.h"

namespace tally {

namespace {
// gemma3 (../shared/docs/facts.md): half-split RoPE, GELU (tanh) gate, q/k
// norms, norms after each sub-block, embeddings scaled by sqrt(n_embd), RoPE
// base 10,000 on its sliding layers (llama.cpp's and HF's default).
constexpr Architecture kArchitectures[] = {
    {"llama", RopePairing::Adjacent},
    {"gemma3", RopePairing::HalfSplit, FfnActivation::GeluTanh, true, true, true, 10000.0f},
};
}

const Architecture& architecture_for(std::string_view name) {
  for (const auto& a : kArchitectures)
    if (a.name == name) return a;
  std::string supported;
  for (const auto& a : kArchitectures) supported += (supported.empty() ? "" : ", ") + std::string(a.name);
  fail("architecture '{}' is not supported (supported: {})", excerpt(name), supported);
}

}  // namespace tally
