// Cache sizing: the worked example of Qwen3-VL-4B (GQA, and its MHA and MQA
// variants), SmolLM2-135M from its config and from its GGUF, block formats,
// the crossover and budget arithmetic, parameter counts from HF configs, and
// every kind of bad input naming what was wrong.
#include <gtest/gtest.h>

#include "test_util.h"

#include <functional>
#include <initializer_list>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "core/byte_size.h"
#include "core/error.h"
#include "io/gguf.h"
#include "model/model_config.h"
#include "sizing/kv_plan.h"
#include "sizing/hf_config.h"
#include "sizing/model_shape.h"
#include "test_model_path.h"

namespace tally {
namespace {

using test::expect_error;

// A GGUF v3 image holding only metadata (u32, f32, string and bool-array
// values): enough for a shape, with neither tensors nor vocabulary.
using MetaValue = std::variant<uint32_t, std::string, float, std::vector<bool>>;
std::string gguf_image(const std::vector<std::pair<std::string, MetaValue>>& kvs) {
  std::string out;
  auto put = [&](auto v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); };  // little-endian host
  auto put_str = [&](const std::string& s) {
    put(uint64_t{s.size()});
    out += s;
  };
  put(uint32_t{0x46554747});  // "GGUF"
  put(uint32_t{3});
  put(uint64_t{0});  // tensors
  put(uint64_t{kvs.size()});
  for (const auto& [key, v] : kvs) {
    put_str(key);
    if (const auto* u = std::get_if<uint32_t>(&v)) {
      put(uint32_t{4});  // u32
      put(*u);
    } else if (const auto* f = std::get_if<float>(&v)) {
      put(uint32_t{6});  // f32
      put(*f);
    } else if (const auto* flags = std::get_if<std::vector<bool>>(&v)) {
      put(uint32_t{9});  // array
      put(uint32_t{7});  // of bool
      put(uint64_t{flags->size()});
      for (bool b : *flags) put(uint8_t{b});
    } else {
      put(uint32_t{8});  // string
      put_str(std::get<std::string>(v));
    }
  }
  out.resize((out.size() + 31) / 32 * 32, '\0');  // the (empty) data section starts aligned
  return out;
}

GgufFile open_image(const std::string& image, const std::string& name) {
  return GgufFile(reinterpret_cast<const uint8_t*>(image.data()), image.size(), name);
}

std::string config_path(const char* name) { return std::string(TALLY_FIXTURES_DIR) + "/configs/" + name; }

constexpr uint64_t kKiB = 1024, kMiB = kKiB * 1024, kGiB = kMiB * 1024;
// Qwen3-VL-4B's language model: 4,022,468,096 parameters in bf16.
constexpr uint64_t kQwenVlParams = 4022468096ull;
constexpr uint64_t kQwenVlWeights = kQwenVlParams * 2;

TEST(KvPlanWorkedExample, Qwen3VlFromExplicitShape) {
  const ModelShape s = shape_from_flags(36, 32, 8, 128);
  EXPECT_EQ(s.source, "flags");
  EXPECT_FALSE(s.weights_bytes.has_value());
  KvPlanRequest r;
  r.shape = s.kv();
  r.n_head = s.n_head;
  r.type = kv_plan_dtype("bf16");
  r.contexts = {512, 32768};
  const auto plans = plan_kv(r);
  ASSERT_EQ(plans.size(), 3u);
  EXPECT_EQ(plans[0].name, "model");
  EXPECT_EQ(plans[0].n_kv_head, 8);
  EXPECT_EQ(plans[0].bytes_per_token, 147456u);
  EXPECT_EQ(plans[0].bytes_per_token, 144 * kKiB);
  EXPECT_EQ(plans[0].context_bytes[0], 72 * kMiB);
  EXPECT_EQ(plans[0].context_bytes[1], 4 * kGiB + kGiB / 2);  // 4.5 GiB
  EXPECT_EQ(plans[1].name, "mha");
  EXPECT_EQ(plans[1].n_kv_head, 32);
  EXPECT_EQ(plans[1].bytes_per_token, 576 * kKiB);
  EXPECT_EQ(plans[1].context_bytes[1], 18 * kGiB);
  EXPECT_EQ(plans[2].name, "mqa");
  EXPECT_EQ(plans[2].n_kv_head, 1);
  EXPECT_EQ(plans[2].bytes_per_token, 18 * kKiB);
  EXPECT_EQ(plans[2].context_bytes[1], 576 * kMiB);  // 0.56 GiB
  EXPECT_EQ(format_bytes(plans[0].context_bytes[1]), "4831838208 B (4.50 GiB)");
  EXPECT_EQ(format_bytes(plans[2].context_bytes[1]), "603979776 B (576.00 MiB)");
  EXPECT_FALSE(plans[0].crossover_tokens.has_value());
  EXPECT_FALSE(plans[0].max_tokens.has_value());
  EXPECT_STREQ(attention_kind(32, 8), "GQA");
  EXPECT_STREQ(attention_kind(32, 32), "MHA");
  EXPECT_STREQ(attention_kind(32, 1), "MQA");
}

TEST(KvPlanWorkedExample, Qwen3VlFromNestedConfig) {
  const ModelShape s = shape_from_hf_config(config_path("qwen3-vl-4b-instruct.json"));
  EXPECT_TRUE(s.text_config);
  EXPECT_EQ(s.kind, "qwen3_vl_text");
  EXPECT_EQ(s.n_layer, 36);
  EXPECT_EQ(s.n_head, 32);
  EXPECT_EQ(s.n_kv_head, 8);
  EXPECT_EQ(s.head_dim, 128);
  EXPECT_EQ(kv_bytes_per_token(s.kv(), DType::BF16), 147456u);
  // 151936 x 2560 tied embeddings + 36 x (q/k/v/o, gate/up/down, 2 norms, q/k norms) + final norm.
  EXPECT_EQ(s.parameters.value_or(0), kQwenVlParams);
  EXPECT_EQ(s.weights_dtype, "bfloat16");
  EXPECT_EQ(s.weights_bytes.value_or(0), kQwenVlWeights);
  // MHA at 32k next to ~7.5 GiB of weights does not fit a 24 GiB GPU; GQA does.
  EXPECT_GT(18 * kGiB + kQwenVlWeights, 24 * kGiB);
}

TEST(KvPlanConfig, SmolLM2FromConfig) {
  const ModelShape s = shape_from_hf_config(config_path("smollm2-135m-instruct.json"));
  EXPECT_FALSE(s.text_config);
  EXPECT_EQ(s.kind, "llama");
  EXPECT_EQ(s.n_layer, 30);
  EXPECT_EQ(s.n_head, 9);
  EXPECT_EQ(s.n_kv_head, 3);
  EXPECT_EQ(s.head_dim, 64);  // no head_dim key: hidden_size / heads
  EXPECT_EQ(kv_bytes_per_token(s.kv(), DType::F16), 23040u);
  // 49152*576 tied embeddings + 30 x (576*576*2 + 576*192*2 + 3*576*1536 + 2*576) + 576.
  EXPECT_EQ(s.parameters.value_or(0), 134515008u);
  EXPECT_EQ(s.weights_bytes.value_or(0), 2u * 134515008u);
}

TEST(KvPlanConfig, SlidingWindowLayers) {
  // google/gemma-3-270m's config.json: layer_types names the attention of each layer.
  std::string types;
  for (int il = 0; il < 18; ++il)
    types += std::string(il ? ", " : "") + (il % 6 < 5 ? "\"sliding_attention\"" : "\"full_attention\"");
  const std::string shape = R"("model_type": "gemma3_text", "num_hidden_layers": 18, "num_attention_heads": 4,
      "num_key_value_heads": 1, "head_dim": 256, "hidden_size": 640, "sliding_window": 512)";
  const ModelShape g =
      shape_from_hf_config_text("{" + shape + ", \"layer_types\": [" + types + "]}", "gemma.json", false);
  EXPECT_EQ(g.window, 512);
  EXPECT_EQ(g.n_window_layers(), 15);
  // Older configs give the pattern instead: every sixth layer global.
  const ModelShape p = shape_from_hf_config_text("{" + shape + ", \"sliding_window_pattern\": 6}", "p.json", false);
  EXPECT_EQ(p.n_window_layers(), 15);
  // Qwen2/3 carry a window they do not use; a window without a layer pattern is not guessed.
  EXPECT_EQ(shape_from_hf_config_text("{" + shape + ", \"use_sliding_window\": false, \"sliding_window_pattern\": 6}",
                                      "q.json", false)
                .n_window_layers(),
            0);
  EXPECT_EQ(shape_from_hf_config_text("{" + shape + "}", "w.json", false).window, 0);
  expect_error([&] { shape_from_hf_config_text("{" + shape + R"(, "layer_types": ["full_attention"]})", "bad.json", false); },
               {"bad.json", "'layer_types' has 1 entries for 18 layers"});
  expect_error([&] { shape_from_hf_config_text("{" + shape + R"(, "layer_types": [1]})", "bad.json", false); },
               {"bad.json", "'layer_types' must be a list of strings"});
  // A kind of layer the planner cannot size (Qwen3-Next's linear attention holds no K/V): refused, not guessed.
  expect_error([&] { shape_from_hf_config_text("{" + shape + R"(, "layer_types": [)" + types.substr(0, types.rfind(',')) +
                                               R"(, "linear_attention"]})", "bad.json", false); },
               {"bad.json", "'layer_types[17]' is the string \"linear_attention\"", "\"sliding_attention\" or \"full_attention\""});
}

TEST(KvPlanConfig, Qwen3SmallCountsQkNorms) {
  const ModelShape s = shape_from_hf_config(config_path("qwen3-0.6b.json"));
  EXPECT_EQ(s.n_layer, 28);
  EXPECT_EQ(s.n_head, 16);
  EXPECT_EQ(s.n_kv_head, 8);
  EXPECT_EQ(s.head_dim, 128);  // not hidden_size / heads (64)
  EXPECT_EQ(kv_bytes_per_token(s.kv(), DType::BF16), 2u * 28 * 8 * 128 * 2);
  // 0.44B without embeddings, as the model card says; 596,049,920 in all.
  EXPECT_EQ(s.parameters.value_or(0), 596049920u);
}

TEST(KvPlanConfig, DenseParameterFormula) {
  ModelShape d;  // SmolLM2-135M
  d.n_vocab = 49152;
  d.n_embd = 576;
  d.n_ff = 1536;
  d.n_layer = 30;
  d.n_head = 9;
  d.n_kv_head = 3;
  d.head_dim = 64;
  DenseDecoderKind k;
  const uint64_t per_layer = 576ull * 576 * 2 + 576ull * 192 * 2 + 3ull * 576 * 1536 + 2 * 576;
  EXPECT_EQ(per_layer, 3540096u);
  EXPECT_EQ(dense_decoder_parameters(d, k), 49152ull * 576 + 30 * per_layer + 576);
  EXPECT_EQ(dense_decoder_parameters(d, k), 134515008u);
  k.tied_embeddings = false;  // a separate output matrix
  EXPECT_EQ(dense_decoder_parameters(d, k), 134515008u + 49152ull * 576);
  k.tied_embeddings = true;
  k.qkv_bias = true;  // q 576 + k 192 + v 192 per layer
  EXPECT_EQ(dense_decoder_parameters(d, k), 134515008u + 30u * 960);
  k.qkv_bias = false;
  k.qk_norm = true;
  EXPECT_EQ(dense_decoder_parameters(d, k), 134515008u + 30u * 128);

  // Untied from the config when tie_word_embeddings is false.
  const std::string untied = R"({"num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
      "hidden_size": 576, "intermediate_size": 1536, "vocab_size": 49152, "tie_word_embeddings": false,
      "torch_dtype": "float32"})";
  const ModelShape s = shape_from_hf_config_text(untied, "untied.json");
  EXPECT_EQ(s.parameters.value_or(0), 134515008u + 49152ull * 576);
  EXPECT_EQ(s.weights_bytes.value_or(0), 4 * (134515008u + 49152ull * 576));
  EXPECT_EQ(hf_dtype_bytes("bfloat16"), 2u);
  EXPECT_EQ(hf_dtype_bytes("torch.float16"), 2u);
  EXPECT_EQ(hf_dtype_bytes("float32"), 4u);
  EXPECT_EQ(hf_dtype_bytes("complex64"), 0u);
}

TEST(KvPlanGguf, SmolLM2FromDefaultModel) {
  const std::string path = tally_test::test_model_path();
  if (path.empty()) {
    if (tally_test::model_required()) FAIL() << "default model not found and TALLY_REQUIRE_MODEL=1";
    GTEST_SKIP() << "default model not installed";
  }
  const ModelShape s = shape_from_gguf(path);
  EXPECT_EQ(s.kind, "llama");
  EXPECT_EQ(s.n_layer, 30);
  EXPECT_EQ(s.n_head, 9);
  EXPECT_EQ(s.n_kv_head, 3);
  EXPECT_EQ(s.head_dim, 64);
  EXPECT_EQ(kv_bytes_per_token(s.kv(), DType::F16), 23040u);
  // The file holds the same tensors the config describes (tied: no output.weight).
  EXPECT_EQ(s.parameters.value_or(0), 134515008u);
  const GgufFile f(path);
  EXPECT_EQ(s.weights_bytes.value_or(0), f.total_tensor_bytes());
  EXPECT_LT(*s.weights_bytes, 2u * 134515008u);  // quantized: under 16 bits per weight
}

TEST(KvPlanGguf, ShapeWithoutTensorsOrVocabulary) {
  const std::string shape_only = gguf_image({{"general.architecture", std::string("qwen3")},
                                             {"qwen3.block_count", 28u},
                                             {"qwen3.embedding_length", 1024u},
                                             {"qwen3.attention.head_count", 16u},
                                             {"qwen3.attention.head_count_kv", 8u},
                                             {"qwen3.attention.key_length", 128u}});
  const ModelShape s = shape_from_gguf(open_image(shape_only, "shape-only.gguf"));
  EXPECT_EQ(s.kind, "qwen3");
  EXPECT_EQ(s.n_layer, 28);
  EXPECT_EQ(s.head_dim, 128);  // key_length, not embedding / heads
  EXPECT_EQ(s.n_kv_head, 8);
  EXPECT_FALSE(s.weights_bytes.has_value());

  // Defaults: kv heads = heads, head_dim = embedding / heads.
  const std::string mha = gguf_image({{"general.architecture", std::string("llama")},
                                      {"llama.block_count", 2u},
                                      {"llama.embedding_length", 64u},
                                      {"llama.attention.head_count", 4u}});
  const ModelShape m = shape_from_gguf(open_image(mha, "mha.gguf"));
  EXPECT_EQ(m.n_kv_head, 4);
  EXPECT_EQ(m.head_dim, 16);

  const std::string partial = gguf_image({{"general.architecture", std::string("llama")}, {"llama.block_count", 2u}});
  expect_error([&] { shape_from_gguf(open_image(partial, "partial.gguf")); },
               {"partial.gguf", "llama.attention.head_count"});

  const std::string uneven = gguf_image({{"general.architecture", std::string("llama")},
                                         {"llama.block_count", 2u},
                                         {"llama.attention.head_count", 9u},
                                         {"llama.attention.head_count_kv", 2u},
                                         {"llama.attention.key_length", 64u}});
  expect_error([&] { shape_from_gguf(open_image(uneven, "uneven.gguf")); },
               {"uneven.gguf", "9 query heads", "2 kv heads"});

  const std::string zero = gguf_image({{"general.architecture", std::string("llama")}, {"llama.block_count", 0u}});
  expect_error([&] { shape_from_gguf(open_image(zero, "zero.gguf")); }, {"zero.gguf", "llama.block_count", "= 0"});

  const std::string mla = gguf_image({{"general.architecture", std::string("llama")},
                                      {"llama.block_count", 2u},
                                      {"llama.attention.head_count", 4u},
                                      {"llama.attention.key_length", 192u},
                                      {"llama.attention.value_length", 128u}});
  expect_error([&] { shape_from_gguf(open_image(mla, "mla.gguf")); }, {"mla.gguf", "value_length = 128", "192"});
}

// kv-plan and the run path read the attention layout with one reader: on
// every file both give the same head_dim, or both refuse with the same reason.
TEST(KvPlanGguf, PlannerAndModelConfigAgree) {
  using Meta = std::vector<std::pair<std::string, MetaValue>>;
  const Meta full = {{"general.architecture", std::string("llama")}, {"llama.block_count", 2u},
                     {"llama.context_length", 128u},   {"llama.feed_forward_length", 96u},
                     {"llama.vocab_size", 50u},        {"llama.attention.head_count", 4u},
                     {"llama.attention.layer_norm_rms_epsilon", 1e-5f}};
  auto with = [&](Meta extra) {
    Meta m = full;
    m.insert(m.end(), extra.begin(), extra.end());
    return gguf_image(m);
  };
  const std::string cases[] = {
      with({{"llama.embedding_length", 64u}}),                                     // head_dim = 64 / 4
      with({{"llama.embedding_length", 64u}, {"llama.attention.key_length", 32u}}),  // key_length wins
      with({{"llama.embedding_length", 66u}}),  // 66 / 4 does not divide: both refuse, neither rounds down
      with({{"llama.embedding_length", 64u}, {"llama.attention.value_length", 8u}}),  // value != key: both refuse
  };
  for (const std::string& image : cases) {
    std::string plan_error, run_error;
    int64_t plan_dim = 0, run_dim = 0;
    try {
      plan_dim = shape_from_gguf(open_image(image, "m.gguf")).head_dim;
    } catch (const Error& e) {
      plan_error = e.what();
    }
    try {
      run_dim = ModelConfig::from_gguf(open_image(image, "m.gguf")).head_dim;
    } catch (const Error& e) {
      run_error = e.what();
    }
    EXPECT_EQ(plan_dim, run_dim);
    EXPECT_EQ(plan_error, run_error);
  }
  EXPECT_EQ(shape_from_gguf(open_image(cases[0], "m.gguf")).head_dim, 16);
  EXPECT_EQ(shape_from_gguf(open_image(cases[1], "m.gguf")).head_dim, 32);
  expect_error([&] { ModelConfig::from_gguf(open_image(cases[2], "m.gguf")); }, {"m.gguf", "66", "not a multiple"});
  expect_error([&] { ModelConfig::from_gguf(open_image(cases[3], "m.gguf")); }, {"m.gguf", "value_length = 8"});
}

// Gemma 3 270M's header (../shared/docs/facts.md): 18 layers, MQA, head_dim
// 256, a 512-position window on the layers with il % 6 < 5 (5, 11, 17 global).
TEST(KvPlanGguf, SlidingWindowLayersHoldOnlyTheWindow) {
  const std::string gemma = gguf_image({{"general.architecture", std::string("gemma3")},
                                        {"gemma3.block_count", 18u},
                                        {"gemma3.embedding_length", 640u},
                                        {"gemma3.attention.head_count", 4u},
                                        {"gemma3.attention.head_count_kv", 1u},
                                        {"gemma3.attention.key_length", 256u},
                                        {"gemma3.attention.value_length", 256u},
                                        {"gemma3.attention.sliding_window", 512u}});
  const ModelShape s = shape_from_gguf(open_image(gemma, "gemma3.gguf"));
  EXPECT_EQ(s.window, 512);
  EXPECT_EQ(s.n_window_layers(), 15);
  for (int64_t l = 0; l < 18; ++l) EXPECT_EQ(s.window_layer(l), l % 6 < 5) << "layer " << l;
  KvPlanRequest r;
  r.shape = s.kv();
  r.n_head = s.n_head;
  r.window = 512;
  r.n_window_layers = 15;
  r.contexts = {256, 512, 32768};
  r.weights_bytes = 246587904;
  r.budget_bytes = 1ull << 30;
  const KvLayoutPlan p = plan_kv(r)[0];
  EXPECT_EQ(p.bytes_per_token, 18u * 1024);  // 1,024 bytes per layer per position (f16)
  EXPECT_EQ(p.bytes_per_token_past_window, 3u * 1024);
  EXPECT_EQ(p.context_bytes[0], 256u * 18 * 1024);
  EXPECT_EQ(p.context_bytes[1], 512u * 18 * 1024);
  // At 32,768: the 3 global layers hold every position, the 15 others 512.
  EXPECT_EQ(p.context_bytes[2], (3u * 32768 + 15u * 512) * 1024);
  // The crossover and the budget's context are where the piecewise total meets them.
  const uint64_t at_window = 512u * 18 * 1024;
  EXPECT_EQ(*p.crossover_tokens, 512 + (246587904 - at_window + 3071) / 3072);
  EXPECT_EQ(*p.max_tokens, 512 + ((1ull << 30) - 246587904 - at_window) / 3072);
  // Below the window every layer grows: a budget that ends there gives the plain quotient.
  r.budget_bytes = 246587904 + 100u * 18 * 1024 + 5;
  EXPECT_EQ(*plan_kv(r)[0].max_tokens, 100u);
  // Every layer windowed: the cache stops growing; any context fits and it never outweighs more.
  r.n_window_layers = 18;
  r.budget_bytes = 1ull << 30;
  const KvLayoutPlan all = plan_kv(r)[0];
  EXPECT_EQ(all.context_bytes[2], 512u * 18 * 1024);
  EXPECT_EQ(all.max_tokens, kUnbounded);
  EXPECT_FALSE(all.crossover_tokens.has_value());
  r.n_window_layers = 19;
  expect_error([&] { plan_kv(r); }, {"19 of 18 layers"});
}

// <arch>.attention.sliding_window_pattern as llama.cpp reads it: one flag per
// layer, or a period (every period-th layer global; 0: every layer sliding);
// it overrides the architecture's pattern, for an architecture tally does not
// run too (the planner sizes it).
TEST(KvPlanGguf, SlidingWindowPatternFromMetadata) {
  auto file = [](const std::string& arch, const MetaValue& pattern) {
    return gguf_image({{"general.architecture", arch},
                       {arch + ".block_count", 6u},
                       {arch + ".attention.head_count", 4u},
                       {arch + ".attention.key_length", 64u},
                       {arch + ".attention.sliding_window", 128u},
                       {arch + ".attention.sliding_window_pattern", pattern}});
  };
  const std::vector<bool> listed = {true, false, false, true, true, false};
  for (const char* arch : {"gemma3", "futurenet"}) {
    const ModelShape s = shape_from_gguf(open_image(file(arch, listed), "m.gguf"));
    EXPECT_EQ(s.window, 128) << arch;
    EXPECT_EQ(s.window_layers, listed) << arch;
  }
  const ModelShape period = shape_from_gguf(open_image(file("gemma3", 3u), "m.gguf"));
  EXPECT_EQ(period.window_layers, (std::vector<bool>{true, true, false, true, true, false}));
  EXPECT_EQ(shape_from_gguf(open_image(file("gemma3", 0u), "m.gguf")).n_window_layers(), 6);
  // A period of 1 (every layer global) or a list of none: no window at all.
  for (const MetaValue& none : {MetaValue(1u), MetaValue(std::vector<bool>(6, false))}) {
    const ModelShape s = shape_from_gguf(open_image(file("gemma3", none), "m.gguf"));
    EXPECT_EQ(s.window, 0);
    EXPECT_TRUE(s.window_layers.empty());
  }
  expect_error([&] { shape_from_gguf(open_image(file("gemma3", std::vector<bool>{true, false}), "m.gguf")); },
               {"m.gguf", "'gemma3.attention.sliding_window_pattern' has 2 entries for 6 layers"});
  expect_error([&] { shape_from_gguf(open_image(file("gemma3", std::string("5/6")), "m.gguf")); },
               {"gemma3.attention.sliding_window_pattern"});
  // An architecture without a known pattern and a file without one: every layer global.
  const std::string llama = gguf_image({{"general.architecture", std::string("llama")},
                                        {"llama.block_count", 6u},
                                        {"llama.attention.head_count", 4u},
                                        {"llama.attention.key_length", 64u},
                                        {"llama.attention.sliding_window", 128u}});
  EXPECT_EQ(shape_from_gguf(open_image(llama, "m.gguf")).window, 0);
}

TEST(KvPlanArithmetic, BlockFormatsCountTheirScales) {
  const KvShape qwen{36, 8, 128}, smol{30, 3, 64};
  EXPECT_EQ(kv_bytes_per_token(qwen, kv_plan_dtype("q8_0")), 2u * 36 * 8 * (128 / 32) * 34);  // 78,336
  EXPECT_EQ(kv_bytes_per_token(qwen, kv_plan_dtype("q4_0")), 2u * 36 * 8 * (128 / 32) * 18);  // 41,472
  EXPECT_EQ(kv_bytes_per_token(smol, kv_plan_dtype("Q8_0")), 12240u);
  EXPECT_EQ(kv_bytes_per_token(smol, kv_plan_dtype("q4_0")), 6480u);
  EXPECT_EQ(kv_bytes_per_token(qwen, kv_plan_dtype("f32")), 294912u);
  EXPECT_DOUBLE_EQ(kv_bytes_per_value(DType::Q4_0), 18.0 / 32);
  EXPECT_DOUBLE_EQ(kv_bytes_per_value(DType::Q8_0), 34.0 / 32);
}

TEST(KvPlanArithmetic, Crossover) {
  // Exact multiples reach the weights at that context; one byte more needs one more token.
  EXPECT_EQ(kv_crossover_tokens(147456ull * 10, 147456, 1), 10u);
  EXPECT_EQ(kv_crossover_tokens(147456ull * 10 + 1, 147456, 1), 11u);
  EXPECT_EQ(kv_crossover_tokens(147456ull * 10, 147456, 2), 5u);  // a batch reads its cache once per sequence
  EXPECT_EQ(kv_crossover_tokens(1, 147456, 1), 1u);
  // Qwen3-VL-4B in bf16: the cache outweighs the weights from ~54.6k tokens (GQA),
  // ~13.6k (MHA) or ~436k (MQA).
  EXPECT_EQ(kv_crossover_tokens(kQwenVlWeights, 147456, 1), (kQwenVlWeights + 147455) / 147456);
  EXPECT_EQ(kv_crossover_tokens(kQwenVlWeights, 147456, 1), 54559u);
  EXPECT_EQ(kv_crossover_tokens(kQwenVlWeights, 589824, 1), 13640u);
  EXPECT_EQ(kv_crossover_tokens(kQwenVlWeights, 18432, 1), 436466u);
  expect_error([] { kv_crossover_tokens(100, 0, 1); }, {"positive"});
}

TEST(KvPlanArithmetic, Budget) {
  EXPECT_EQ(kv_max_tokens(24 * kGiB, kQwenVlWeights, 147456, 1), (24 * kGiB - kQwenVlWeights) / 147456);
  EXPECT_EQ(kv_max_tokens(24 * kGiB, kQwenVlWeights, 147456, 1), 120204u);
  EXPECT_EQ(kv_max_tokens(24 * kGiB, kQwenVlWeights, 147456, 4), 120204u / 4);
  EXPECT_EQ(kv_max_tokens(1000, 1000, 10, 1), 0u);  // exactly the weights: no room for a cache
  EXPECT_EQ(kv_max_tokens(1009, 1000, 10, 1), 0u);
  EXPECT_EQ(kv_max_tokens(1010, 1000, 10, 1), 1u);
  expect_error([] { kv_max_tokens(7 * kGiB, kQwenVlWeights, 147456, 1); },
               {"--budget", "smaller than the weights", "7516192768 B (7.00 GiB)", "8044936192 B (7.49 GiB)"});

  // In a plan, every layout gets its longest context; MHA at 32k does not fit 24 GiB.
  KvPlanRequest r;
  r.shape = {36, 8, 128};
  r.n_head = 32;
  r.type = DType::BF16;
  r.weights_bytes = kQwenVlWeights;
  r.budget_bytes = 24 * kGiB;
  const auto plans = plan_kv(r);
  EXPECT_EQ(plans[0].max_tokens.value_or(0), 120204u);
  EXPECT_LT(plans[1].max_tokens.value_or(0), 32768u);
  EXPECT_EQ(plans[1].max_tokens.value_or(0), (24 * kGiB - kQwenVlWeights) / 589824);
  EXPECT_EQ(plans[2].max_tokens.value_or(0), (24 * kGiB - kQwenVlWeights) / 18432);
  EXPECT_EQ(plans[0].crossover_tokens.value_or(0), 54559u);
  EXPECT_EQ(plans[1].crossover_tokens.value_or(0), 13640u);
  EXPECT_EQ(plans[2].crossover_tokens.value_or(0), 436466u);
  // The batch multiplies the totals.
  r.batch = 3;
  r.contexts = {512};
  EXPECT_EQ(plan_kv(r)[0].context_bytes[0], 3 * 72 * kMiB);
  // Unknown weights: the whole budget goes to the cache.
  r.weights_bytes.reset();
  r.batch = 1;
  EXPECT_EQ(plan_kv(r)[0].max_tokens.value_or(0), 24 * kGiB / 147456);
  EXPECT_FALSE(plan_kv(r)[0].crossover_tokens.has_value());
}

TEST(KvPlanArithmetic, ParsesTokenListsAndByteCounts) {
  EXPECT_EQ(parse_token_list("512,4096,32768"), (std::vector<uint64_t>{512, 4096, 32768}));
  EXPECT_EQ(parse_token_list(" 7 , 8"), (std::vector<uint64_t>{7, 8}));
  EXPECT_EQ(parse_byte_count("25769803776", "--budget"), 24 * kGiB);
  EXPECT_EQ(parse_byte_count("24GiB", "--budget"), 24 * kGiB);
  EXPECT_EQ(parse_byte_count("512 MiB", "--budget"), 512 * kMiB);
  EXPECT_EQ(parse_byte_count("1KiB", "--budget"), kKiB);
}

TEST(KvPlanErrors, BadFlags) {
  expect_error([] { kv_plan_dtype("q5_k"); }, {"--dtype", "q5_k", "f32, f16, bf16, q8_0 or q4_0"});
  expect_error([] { kv_plan_dtype("int4"); }, {"--dtype", "int4"});
  expect_error([] { parse_token_list(""); }, {"--tokens", "empty"});
  expect_error([] { parse_token_list("512,,4096"); }, {"--tokens", "entry 2 is empty"});
  expect_error([] { parse_token_list("512,"); }, {"--tokens", "entry 2 is empty"});
  EXPECT_EQ(parse_token_list("512,4k, 32K"), (std::vector<uint64_t>{512, 4096, 32768}));  // k: 1024 tokens
  expect_error([] { parse_token_list("512,4x"); }, {"--tokens", "entry 2", "'4x'", "not a number of tokens"});
  expect_error([] { parse_token_list("1.1k"); }, {"--tokens", "'1.1k'", "not a whole number of tokens"});
  expect_error([] { parse_token_list("-5"); }, {"--tokens", "'-5'"});
  expect_error([] { parse_token_list("0,8"); }, {"--tokens", "entry 1 is zero"});
  expect_error([] { parse_token_list("99999999999999999999999"); }, {"--tokens", "overflows 64 bits"});
  // A long flag value is shown as a bounded excerpt, not echoed whole (found by fuzz_cli_numbers).
  try {
    parse_token_list(std::string(5000, 'm') + ".m");
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_LT(std::string(e.what()).size(), 400u) << e.what();
    EXPECT_NE(std::string(e.what()).find("bytes)"), std::string::npos) << e.what();
  }
  try {  // and control characters in it are escaped, so the message stays one line
    parse_byte_count("1\nGiB", "--budget");
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("1\\nGiB"), std::string::npos) << e.what();
  }
  expect_error([] { parse_byte_count("lots", "--budget"); }, {"--budget", "'lots'", "not a byte count"});
  expect_error([] { parse_byte_count("-1", "--budget"); }, {"--budget", "'-1'"});
  expect_error([] { parse_byte_count("0", "--weights-bytes"); }, {"--weights-bytes", "zero"});
  EXPECT_EQ(parse_byte_count("24GB", "--budget"), 24'000'000'000u);  // powers of 1000, as disks and RAM are sold
  EXPECT_EQ(parse_byte_count("24gib", "--budget"), 24 * kGiB);        // any case
  EXPECT_EQ(parse_byte_count("4.9GiB", "--budget"), 5'261'334'938u);  // 4.9 x 2^30 = 5,261,334,937.6, rounded
  EXPECT_EQ(parse_byte_count("0.5 KB", "--budget"), 500u);
  expect_error([] { parse_byte_count("2.5", "--budget"); }, {"--budget", "'2.5'", "a number of bytes is whole"});
  expect_error([] { parse_byte_count("24G", "--budget"); }, {"--budget", "'24G'", "KB, MB, GB, TB", "KiB, MiB"});
  expect_error([] { parse_byte_count("1.2.3GB", "--budget"); }, {"--budget", "not a byte count"});
  expect_error([] { parse_byte_count("0.0000000000001GiB", "--budget"); }, {"--budget", "not a byte count"});
  expect_error([] { parse_byte_count("0.0001KB", "--budget"); }, {"--budget", "zero bytes"});
  expect_error([] { parse_byte_count("20000000000EB", "--budget"); }, {"--budget", "not a byte count"});
  expect_error([] { parse_byte_count("19000000000GB", "--budget"); }, {"--budget", "overflows"});
  expect_error([] { parse_byte_count("99999999999TiB", "--budget"); }, {"--budget", "overflows"});
  // Sizes that overflow 64 bits are refused, not wrapped.
  expect_error([] { kv_cache_bytes(1ull << 40, 1ull << 30, 1); }, {"1073741824 tokens", "overflows"});
  KvPlanRequest r;
  r.shape = {36, 8, 128};
  r.n_head = 32;
  r.batch = 0;
  expect_error([&] { plan_kv(r); }, {"--batch"});
}

TEST(KvPlanErrors, BadShapes) {
  expect_error([] { shape_from_flags(0, 32, 8, 128); }, {"--layers", "positive", "got 0"});
  expect_error([] { shape_from_flags(36, -32, 8, 128); }, {"--heads", "got -32"});
  expect_error([] { shape_from_flags(36, 32, 0, 128); }, {"--kv-heads"});
  expect_error([] { shape_from_flags(36, 32, 8, -1); }, {"--head-dim", "got -1"});
  expect_error([] { shape_from_flags(36, 32, 5, 128); }, {"--heads 32", "not divisible", "--kv-heads 5"});
  expect_error([] { shape_from_flags(int64_t{1} << 40, 32, 8, 128); }, {"--layers", "too large"});
  KvPlanRequest r;
  r.shape = {36, 5, 128};
  r.n_head = 32;
  expect_error([&] { plan_kv(r); }, {"32 query heads", "5 kv heads"});
}

TEST(KvPlanErrors, BadSources) {
  ShapeSource both;
  both.gguf = "a.gguf";
  both.config = "config.json";
  expect_error([&] { read_model_shape(both); }, {"-m", "--config", "not both"});
  ShapeSource mixed;
  mixed.config = "config.json";
  mixed.layers = 36;
  expect_error([&] { read_model_shape(mixed); }, {"--layers", "not both"});
  expect_error([] { read_model_shape(ShapeSource{}); }, {"no model shape", "-m", "--config", "--layers"});
  ShapeSource partial;
  partial.layers = 36;
  partial.heads = 32;
  partial.head_dim = 128;
  expect_error([&] { read_model_shape(partial); }, {"--kv-heads is missing"});
  ShapeSource flags = partial;
  flags.kv_heads = 8;
  EXPECT_EQ(read_model_shape(flags).n_kv_head, 8);
  ShapeSource cfg;
  cfg.config = config_path("smollm2-135m-instruct.json");
  EXPECT_EQ(read_model_shape(cfg).n_layer, 30);
  ShapeSource absent;
  absent.config = config_path("no-such-config.json");
  expect_error([&] { read_model_shape(absent); }, {"no-such-config.json", "cannot open"});
  ShapeSource absent_gguf;
  absent_gguf.gguf = config_path("no-such-model.gguf");
  expect_error([&] { read_model_shape(absent_gguf); }, {"no-such-model.gguf"});
}

TEST(KvPlanErrors, BadConfigs) {
  const std::string full = R"("num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
      "hidden_size": 576, "intermediate_size": 1536, "vocab_size": 49152, "torch_dtype": "bfloat16")";
  ASSERT_EQ(shape_from_hf_config_text("{" + full + "}", "ok.json").n_layer, 30);
  auto cfg = [](const std::string& body) { return [body] { shape_from_hf_config_text(body, "cfg.json"); }; };

  expect_error(cfg(R"({"num_attention_heads": 9, "hidden_size": 576})"), {"cfg.json", "missing", "'num_hidden_layers'"});
  expect_error(cfg(R"({"text_config": {"num_hidden_layers": 36, "head_dim": 128}})"),
               {"cfg.json", "'text_config.num_attention_heads'"});
  expect_error(cfg(R"({"num_hidden_layers": 30, "num_attention_heads": 9})"),
               {"cfg.json", "head_dim", "hidden_size"});
  expect_error(cfg(R"({"num_hidden_layers": 30, "num_attention_heads": 9, "hidden_size": 576})"),
               {"cfg.json", "missing 'intermediate_size'", "--weights-bytes"});
  // Without weights wanted, the shape alone is enough.
  EXPECT_EQ(shape_from_hf_config_text(R"({"num_hidden_layers": 30, "num_attention_heads": 9, "hidden_size": 576})",
                                      "cfg.json", false)
                .head_dim,
            64);
  expect_error(cfg(R"({"num_hidden_layers": 0, "num_attention_heads": 9, "hidden_size": 576})"),
               {"cfg.json", "'num_hidden_layers' must be a positive whole number, not 0"});
  expect_error(cfg(R"({"num_hidden_layers": 30, "num_attention_heads": -9, "hidden_size": 576})"),
               {"cfg.json", "'num_attention_heads' must be a positive whole number, not -9"});
  expect_error(cfg(R"({"num_hidden_layers": 30.5, "num_attention_heads": 9, "hidden_size": 576})"),
               {"cfg.json", "'num_hidden_layers'", "whole number"});
  expect_error(cfg(R"({"num_hidden_layers": "30", "num_attention_heads": 9, "hidden_size": 576})"),
               {"cfg.json", "'num_hidden_layers'", "whole number"});
  expect_error(cfg(R"({"num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 2,
                       "hidden_size": 576})"),
               {"cfg.json", "num_attention_heads' 9", "num_key_value_heads' 2"});
  expect_error(cfg(R"({"num_hidden_layers": 30, "num_attention_heads": 7, "hidden_size": 576})"),
               {"cfg.json", "hidden_size' 576", "not divisible by 7"});
  expect_error(cfg(R"({"num_hidden_layers": 30, "num_attention_heads": 9, "hidden_size": 99999999999})"),
               {"cfg.json", "'hidden_size'", "too large"});
  expect_error(cfg("{" + full + R"(, "torch_dtype": null})"), {"cfg.json", "torch_dtype", "dtype"});
  expect_error(cfg(R"({"num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
      "hidden_size": 576, "intermediate_size": 1536, "vocab_size": 49152, "torch_dtype": "int3"})"),
               {"cfg.json", "'int3'", "--weights-bytes"});
  expect_error(cfg(R"({"num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
      "hidden_size": 576, "intermediate_size": 1536, "vocab_size": 49152, "num_experts": 8})"),
               {"cfg.json", "num_experts", "mixture-of-experts", "--weights-bytes"});
  expect_error(cfg(R"({"num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
      "hidden_size": 576, "intermediate_size": 1536, "vocab_size": 49152, "tie_word_embeddings": "yes",
      "torch_dtype": "bfloat16"})"),
               {"cfg.json", "tie_word_embeddings", "true or false"});
  expect_error(cfg(R"({"text_config": [1, 2]})"), {"cfg.json", "text_config", "object"});
  expect_error(cfg("[30, 9]"), {"cfg.json", "JSON object"});
  expect_error(cfg("{\"num_hidden_layers\": 30,"), {"cfg.json", "not valid JSON"});
  expect_error(cfg(""), {"cfg.json", "not valid JSON"});
}

TEST(TokenCounts, KIsAThousandAndTwentyFour) {
  EXPECT_EQ(parse_token_count("8192", "-c"), 8192u);
  EXPECT_EQ(parse_token_count("8k", "-c"), 8192u);
  EXPECT_EQ(parse_token_count(" 128K ", "-c"), 131072u);
  EXPECT_EQ(parse_token_count("1.5k", "-c"), 1536u);
  EXPECT_EQ(parse_token_count("1M", "-c"), 1048576u);
  EXPECT_EQ(parse_token_count("0", "-c"), 0u);  // the callers bound it
  expect_error([] { parse_token_count("1.1k", "-c"); }, {"-c '1.1k' is not a whole number of tokens"});
  expect_error([] { parse_token_count("8kb", "-c"); }, {"-c '8kb' is not a number of tokens", "8k or 128K"});
  expect_error([] { parse_token_count("-8k", "-c"); }, {"-c '-8k' is not a number of tokens"});
  expect_error([] { parse_token_count("2.5", "-c"); }, {"-c '2.5' is not a whole number of tokens"});
  expect_error([] { parse_token_count("99999999999999999999", "-c"); }, {"overflows 64 bits"});
  expect_error([] { parse_token_count("", "-c"); }, {"-c '' is not a number of tokens"});
}

TEST(WeightFormats, BitsPerWeightOfTheBlockFormatsAndTheMeasuredMix) {
  EXPECT_EQ(weight_format("q8_0")->bits_per_weight, 8.5);   // 34 bytes per 32 weights
  EXPECT_EQ(weight_format("Q4_0")->bits_per_weight, 4.5);   // 18 bytes per 32
  EXPECT_EQ(weight_format("q4_k")->bits_per_weight, 4.5);   // 144 bytes per 256
  EXPECT_EQ(weight_format("q6_k")->bits_per_weight, 6.5625);  // 210 bytes per 256
  EXPECT_EQ(weight_format("bf16")->bits_per_weight, 16);
  EXPECT_FALSE(weight_format("q8_0")->estimate);
  EXPECT_TRUE(weight_format("q4_k_m")->estimate);
  EXPECT_FALSE(weight_format("q3_k_s").has_value());
  // A config counted as a Q8_0 GGUF: its parameters x 8.5 bits.
  const ModelShape s = shape_from_hf_config(config_path("smollm2-135m-instruct.json"), true, 8.5);
  ASSERT_TRUE(s.parameters && s.weights_bytes);
  EXPECT_EQ(*s.weights_bytes, (*s.parameters * 17 + 8) / 16);
  EXPECT_EQ(s.trained_context, 8192);  // max_position_embeddings
}

}  // namespace
}  // namespace tally
