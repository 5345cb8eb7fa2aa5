#pragma once
// What differs between decoder architectures that tally runs, as data: the
// forward pass, the HF folder reader (hf_folder.h) and the chat's template
// read these properties instead of branching on names. One entry per
// architecture, in architecture.cpp.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "kernels/ops.h"

namespace tally {

enum class FfnActivation { Silu, GeluTanh };

// Which config.json fields hold an HF folder's hyper-parameters beyond the
// common ones (hf_folder.cpp reads each form).
enum class HfConfigForm { Llama, Gemma3 };

// How a Hugging Face folder of the architecture reads as the GGUF llama.cpp's
// converter writes from it. The q and k rows of an architecture whose RoPE
// pairs adjacent values are permuted into those pairs (HF keeps each head's
// pairs split in halves), as the converter does.
struct HfLayout {
  std::string_view model_type = {};  // config.json's model_type
  HfConfigForm config = HfConfigForm::Llama;
  std::string_view activation = {};  // the hidden_act the forward pass computes
  // Per-layer norms (after "model.layers.N."): HF name -> GGUF name, beside
  // the attention and MLP tensors every architecture shares.
  std::span<const std::pair<std::string_view, std::string_view>> norms = {};
  bool norm_plus_one = false;   // norm weights w are stored as 1 + w, in float32 (Gemma's RMSNorm scales by 1 + w)
  bool tied_default = false;    // tie_word_embeddings when the config does not say (transformers' default)
};

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
  HfLayout hf = {};
  // The chat template for files of this architecture that carry none ("": none).
  std::string_view chat_template = {};
};

// Every architecture tally runs.
std::span<const Architecture> architectures();
// Throws tally::Error naming the architecture and the supported ones.
const Architecture& architecture_for(std::string_view name);
// nullptr for an architecture tally does not run.
const Architecture* find_architecture(std::string_view name);

}  // namespace tally
