#pragma once
// What differs between decoder architectures that tally runs, as data: the
// forward pass reads these properties instead of branching on names.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "kernels/ops.h"

namespace tally {

enum class FfnActivation { Silu, GeluTanh };

struct Architecture {
  std::string_view name;     // general.architecture, also the metadata key prefix
  RopePairing rope_pairing;  // llama: adjacent (rows permuted by the converter)
  FfnActivation ffn = FfnActivation::Silu;  // act(gate(x)) * up(x)
  bool qk_norm = false;      // per-head RMSNorm of q and k before RoPE (attn_q_norm, attn_k_norm)
  bool post_norms = false;   // RMSNorm of the attention and MLP outputs before the residual add
  bool embed_scale = false;  // embeddings times sqrt(n_embd)
  bool qkv_bias = false;     // q, k and v projections add a bias (attn_q.bias, attn_k.bias, attn_v.bias)
  // Sliding-window layers (model_shape.h) read the window from
  // `NAME.attention.sliding_window` and their RoPE base from
  // `NAME.rope.freq_base_swa` (default below).
  float rope_base_swa = 0;
  // Which layers slide when the file does not list them: every period-th
  // layer global (io/hf_config_file.h's window_layers_of_period); none when unset.
  std::optional<int64_t> window_period = std::nullopt;
};

// Throws tally::Error naming the architecture and the supported ones.
const Architecture& architecture_for(std::string_view name);
// nullptr for an architecture tally does not run.
const Architecture* find_architecture(std::string_view name);

}  // namespace tally
