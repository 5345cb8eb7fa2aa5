#include "model/architecture.h"

#include "core/error.h"
#include "core/printable.h"

namespace tally {

namespace {

// Gemma 3's instruction template (google/gemma-3-270m-it, tokenizer_config.json),
// for Gemma 3 files that carry none: HF ships the same template for the base
// and the instruction-tuned model.
constexpr std::string_view kGemma3Template = R"({{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
)";

// The per-layer norms of HF folders: one before each sub-block (llama, qwen2,
// qwen3), or one before and one after each (gemma3).
constexpr std::pair<std::string_view, std::string_view> kPreNorms[] = {
    {"input_layernorm", "attn_norm"},
    {"post_attention_layernorm", "ffn_norm"},
};
constexpr std::pair<std::string_view, std::string_view> kSandwichNorms[] = {
    {"input_layernorm", "attn_norm"},
    {"post_attention_layernorm", "post_attention_norm"},
    {"pre_feedforward_layernorm", "ffn_norm"},
    {"post_feedforward_layernorm", "post_ffw_norm"},
};
constexpr HfLayout kLlamaLike(std::string_view model_type) {
  return {.model_type = model_type, .activation = "silu", .norms = kPreNorms};
}

// gemma3 (../shared/docs/facts.md): half-split RoPE, GELU (tanh) gate, q/k
// norms, norms after each sub-block, embeddings scaled by sqrt(n_embd), RoPE
// base 10,000 on its sliding layers (llama.cpp's and HF's default), five
// sliding layers then a global one (HF's sliding_window_pattern 6, llama.cpp's
// swa pattern).
// qwen2: half-split RoPE (its converter does not permute q and k) and biases
// on the q, k and v projections; qwen3: half-split RoPE and q/k norms, no biases.
// HF folders: gemma3 is model_type gemma3_text (the text-only model), reads
// its own config fields, computes gelu_pytorch_tanh, stores norm weights w for
// 1 + w and ties its output by default.
constexpr Architecture kArchitectures[] = {
    {.name = "llama", .rope_pairing = RopePairing::Adjacent, .hf = kLlamaLike("llama")},
    {.name = "gemma3", .rope_pairing = RopePairing::HalfSplit, .ffn = FfnActivation::GeluTanh, .qk_norm = true,
     .post_norms = true, .embed_scale = true, .rope_base_swa = 10000.0f, .window_period = 6,
     .hf = {.model_type = "gemma3_text", .config = HfConfigForm::Gemma3, .activation = "gelu_pytorch_tanh",
            .norms = kSandwichNorms, .norm_plus_one = true, .tied_default = true},
     .chat_template = kGemma3Template},
    {.name = "qwen2", .rope_pairing = RopePairing::HalfSplit, .qkv_bias = true, .hf = kLlamaLike("qwen2")},
    {.name = "qwen3", .rope_pairing = RopePairing::HalfSplit, .qk_norm = true, .hf = kLlamaLike("qwen3")},
};
}  // namespace

std::span<const Architecture> architectures() { return kArchitectures; }

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
