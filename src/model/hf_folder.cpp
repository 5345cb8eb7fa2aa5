#include "model/hf_folder.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <set>

#include "core/error.h"
#include "core/half.h"
#include "core/printable.h"
#include "io/hf_config_file.h"
#include "io/json_input.h"
#include "io/safetensors.h"
#include "io/text_file.h"
#include "model/architecture.h"

namespace tally {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

constexpr uint64_t kMaxTokenizerBytes = uint64_t{256} << 20;  // tokenizer.json of a 256k vocabulary is ~35 MB

// ---- metadata values -------------------------------------------------------

GgufValue typed(GgufType t) {
  GgufValue x;
  x.type = t;
  return x;
}
GgufValue u64_value(uint64_t v) { auto x = typed(GgufType::U64); x.u = v; return x; }
GgufValue i32_value(int32_t v) { auto x = typed(GgufType::I32); x.i = v; return x; }
GgufValue f64_value(double v) { auto x = typed(GgufType::F64); x.f = v; return x; }
GgufValue f32_value(float v) { auto x = typed(GgufType::F32); x.f = v; return x; }
GgufValue bool_value(bool v) { auto x = typed(GgufType::BOOL); x.u = v ? 1 : 0; return x; }
GgufValue string_value(std::string v) { auto x = typed(GgufType::STRING); x.s = std::move(v); return x; }
GgufValue array_value(GgufType elem, std::vector<GgufValue> items) {
  auto x = typed(GgufType::ARRAY);
  x.elem_type = elem;
  x.arr = std::move(items);
  return x;
}

// A file of the folder as text, at most `max_bytes`; nullopt when `required`
// is false and there is no such name (a link to nothing is an error). Only
// regular files: a FIFO among them would otherwise hold the load forever.
std::optional<std::string> read_part(const fs::path& p, bool required, uint64_t max_bytes = kMaxConfigBytes) {
  std::error_code ec;
  if (!required && !fs::exists(fs::symlink_status(p, ec))) return std::nullopt;
  return read_text_file(p.string(), "file of a model folder", max_bytes, InputKind::File);
}

// A field the folder cannot do without.
uint64_t need_count(const JsonFields& f, const char* key) { return f.required(f.count(key), key, "the model"); }
std::string need_string(const JsonFields& f, const char* key) { return f.required(f.string(key), key, "the model"); }

// ---- config.json -> <arch>.* ----------------------------------------------

// The architecture of an HF model_type (Architecture::hf).
const Architecture& arch_of(const std::string& model_type, const std::string& source) {
  std::string known;
  for (const Architecture& a : architectures()) {
    if (a.hf.model_type == model_type) return a;
    known += fmt::format("{}{}", known.empty() ? "" : ", ", a.hf.model_type);
  }
  if (model_type == "gemma3")
    fail("{}: model_type 'gemma3' is Gemma 3 with its vision tower; tally reads the text-only folders "
         "(model_type gemma3_text, as google/gemma-3-270m and -1b ship)", source);
  fail("{}: model_type '{}' is not read from HF folders ({} are; convert others to GGUF)", source,
       excerpt(model_type, 40), known);
}

// A RoPE base from a section holding rope_theta and rope_type (transformers 5's
// rope_parameters); only the default RoPE is implemented.
double rope_base(const JsonFields& p, double base) {
  if (const json* t = p.find("rope_type"); t && *t != "default")
    fail("{}: {}rope_type is {}: only the default RoPE is supported", p.source(), p.prefix(), describe_json(*t));
  return p.number("rope_theta").value_or(base);
}

// A field that must hold `want` (or be absent) for tally's forward pass to be this model's.
void expect_field(const JsonFields& cfg, const char* key, const json& want, const char* why) {
  if (const json* v = cfg.find(key); v && *v != want)
    fail("{}: '{}' is {}: {}", cfg.source(), key, describe_json(*v), why);
}

// Gemma 3 (transformers' Gemma3TextConfig defaults where a field is absent):
// head_dim, the sliding window and its layer pattern, and a RoPE base for
// each kind of layer.
void add_gemma3_hparams(const HfConfig& hf, uint64_t n_layer, const Architecture& arch,
                        const std::function<void(const char*, GgufValue)>& put) {
  const JsonFields& cfg = hf.section();
  const uint64_t head_dim = cfg.count("head_dim").value_or(256);
  put("attention.key_length", u64_value(head_dim));
  put("attention.value_length", u64_value(head_dim));
  if (const json* s = cfg.find("query_pre_attn_scalar"); s && !(s->is_number() && s->get<double>() == double(head_dim)))
    fail("{}: 'query_pre_attn_scalar' is {}: tally scales attention by 1/sqrt(head_dim) (head_dim {})", cfg.source(),
         describe_json(*s), head_dim);
  for (const char* key : {"attn_logit_softcapping", "final_logit_softcapping"})
    if (const json* v = cfg.find(key)) fail("{}: '{}' is {}: soft-capping is not implemented", cfg.source(), key, describe_json(*v));
  expect_field(cfg, "attention_bias", false, "Gemma 3 with attention biases is not supported");
  expect_field(cfg, "use_bidirectional_attention", false, "tally runs causal attention only");
  const json* act = cfg.find("hidden_activation");
  if (!act) act = cfg.find("hidden_act");
  if (act && *act != arch.hf.activation)
    fail("{}: the activation is {}: {} folders are read with {} only", cfg.source(), describe_json(*act), arch.name,
         arch.hf.activation);

  put("attention.sliding_window", u64_value(need_count(cfg, "sliding_window")));
  // Which layers slide: the config's list, written as llama.cpp reads it
  // (absent: the architecture's own pattern, model/architecture.h).
  if (const auto layers = hf.window_layers(static_cast<int64_t>(n_layer))) {
    std::vector<GgufValue> flags;
    for (bool sliding : *layers) flags.push_back(bool_value(sliding));
    put("attention.sliding_window_pattern", array_value(GgufType::BOOL, std::move(flags)));
  }

  // transformers 5: rope_parameters per layer type; earlier: rope_theta and rope_local_base_freq.
  double global = cfg.number("rope_theta").value_or(1000000.0);
  double local = cfg.number("rope_local_base_freq").value_or(10000.0);
  if (const json* rp = cfg.find("rope_parameters")) {
    const JsonFields p(*rp, cfg.source(), "rope_parameters.");
    if (const json* g = p.find("full_attention")) global = rope_base(JsonFields(*g, cfg.source(), "rope_parameters.full_attention."), global);
    if (const json* l = p.find("sliding_attention")) local = rope_base(JsonFields(*l, cfg.source(), "rope_parameters.sliding_attention."), local);
  }
  put("rope.freq_base", f64_value(global));
  put("rope.freq_base_swa", f64_value(local));
}

// llama, qwen2, qwen3: the architecture's activation, one RoPE base; biases
// where the architecture has them (qwen2's q, k and v), nowhere else.
void add_llama_hparams(const HfConfig& hf, uint64_t n_layer, const Architecture& arch,
                       const std::function<void(const char*, GgufValue)>& put) {
  const JsonFields& cfg = hf.section();
  if (!arch.qkv_bias) expect_field(cfg, "attention_bias", false, "attention biases are not supported in this architecture");
  if (const auto hd = cfg.count("head_dim")) put("attention.key_length", u64_value(*hd));
  // transformers 5 keeps the base in rope_parameters, earlier versions in rope_theta.
  double base = cfg.number("rope_theta").value_or(10000.0);
  if (const json* rp = cfg.find("rope_parameters")) base = rope_base(JsonFields(*rp, cfg.source(), "rope_parameters."), base);
  if (const json* act = cfg.find("hidden_act"); act && *act != arch.hf.activation)
    fail("{}: 'hidden_act' is {}: {} folders are read with {} only", cfg.source(), describe_json(*act), arch.name,
         arch.hf.activation);
  if (cfg.flag("use_sliding_window").value_or(false))
    fail("{}: 'use_sliding_window' is true; sliding-window {} folders are not supported", cfg.source(), arch.name);
  if (const auto layers = hf.window_layers(static_cast<int64_t>(n_layer)))
    for (size_t i = 0; i < layers->size(); ++i)
      if ((*layers)[i])
        fail("{}: 'layer_types[{}]' is \"sliding_attention\"; sliding-window {} folders are not supported",
             cfg.source(), i, arch.name);
  put("rope.freq_base", f64_value(base));
}

void add_hparams(const HfConfig& hf, const Architecture& arch, std::vector<std::pair<std::string, GgufValue>>& kv) {
  const JsonFields& cfg = hf.section();
  const std::function<void(const char*, GgufValue)> put = [&](const char* key, GgufValue v) {
    kv.emplace_back(fmt::format("{}.{}", arch.name, key), std::move(v));
  };
  expect_field(cfg, "mlp_bias", false, "MLP biases are not supported");
  const uint64_t heads = need_count(cfg, "num_attention_heads");
  const uint64_t n_layer = need_count(cfg, "num_hidden_layers");
  put("block_count", u64_value(n_layer));
  put("context_length", u64_value(need_count(cfg, "max_position_embeddings")));
  put("embedding_length", u64_value(need_count(cfg, "hidden_size")));
  put("feed_forward_length", u64_value(need_count(cfg, "intermediate_size")));
  put("attention.head_count", u64_value(heads));
  put("attention.head_count_kv", u64_value(cfg.count("num_key_value_heads").value_or(heads)));
  put("vocab_size", u64_value(need_count(cfg, "vocab_size")));
  // No default: a missing epsilon is a config the converter would not take either.
  put("attention.layer_norm_rms_epsilon", f64_value(cfg.required(cfg.number("rms_norm_eps"), "rms_norm_eps", "the model")));
  if (const json* q = cfg.find("quantization_config"))
    fail("{}: 'quantization_config' is {}: quantized checkpoints (GPTQ, AWQ, bitsandbytes, FP8) are not read; "
         "convert the model to GGUF",
         cfg.source(), describe_json(*q));
  // transformers 4 kept RoPE scaling in rope_scaling (5: rope_parameters' rope_type); it is not implemented.
  if (const json* rs = cfg.find("rope_scaling"))
    fail("{}: 'rope_scaling' is {}: only the default RoPE is supported", cfg.source(), describe_json(*rs));
  switch (arch.hf.config) {
    case HfConfigForm::Gemma3: add_gemma3_hparams(hf, n_layer, arch, put); break;
    case HfConfigForm::Llama: add_llama_hparams(hf, n_layer, arch, put); break;
  }
}

// ---- safetensors -> GGUF tensors ------------------------------------------

// HF parameter (after "model.layers.N.") -> GGUF tensor: the attention and
// MLP tensors every architecture has, then the architecture's norms.
std::optional<std::string_view> layer_name(std::string_view hf, const Architecture& arch) {
  static constexpr std::pair<std::string_view, std::string_view> kCommon[] = {
      {"self_attn.q_proj", "attn_q"},      {"self_attn.k_proj", "attn_k"},      {"self_attn.v_proj", "attn_v"},
      {"self_attn.o_proj", "attn_output"}, {"self_attn.q_norm", "attn_q_norm"}, {"self_attn.k_norm", "attn_k_norm"},
      {"mlp.gate_proj", "ffn_gate"},       {"mlp.up_proj", "ffn_up"},           {"mlp.down_proj", "ffn_down"},
  };
  using Names = std::span<const std::pair<std::string_view, std::string_view>>;
  for (const Names names : {Names(kCommon), arch.hf.norms})
    for (const auto& [from, to] : names)
      if (from == hf) return to;
  return std::nullopt;
}

// The GGUF name of an HF tensor; "" for one that carries no weight (inv_freq).
std::string gguf_name(const std::string& hf, const Architecture& arch, const std::string& source) {
  std::string_view n = hf;
  if (n.ends_with("rotary_emb.inv_freq")) return "";
  if (n == "lm_head.weight") return "output.weight";
  if (n.starts_with("model.")) n.remove_prefix(6);
  if (n == "embed_tokens.weight") return "token_embd.weight";
  if (n == "norm.weight") return "output_norm.weight";
  if (n.starts_with("layers.")) {
    n.remove_prefix(7);
    const size_t dot = n.find('.');
    const size_t last = n.rfind('.');
    if (dot != std::string_view::npos && last > dot) {
      const std::string_view block = n.substr(0, dot);
      const auto name = layer_name(n.substr(dot + 1, last - dot - 1), arch);
      if (!block.empty() && block.size() < 10 &&
          std::all_of(block.begin(), block.end(), [](char c) { return c >= '0' && c <= '9'; }) && name)
        return fmt::format("blk.{}.{}{}", block, *name, n.substr(last));
    }
  }
  fail("{}: tensor '{}' is not one tally knows how to use (a different architecture, or an adapter?)", source,
       excerpt(hf, 80));
}

// Gemma's RMSNorm scales by 1 + w (HF keeps w); GGUF files hold 1 + w, as
// the converter writes it: a float32 copy (Architecture::hf.norm_plus_one).
std::unique_ptr<uint8_t[]> shifted_norm(const SafetensorsTensor& t) {
  const uint64_t n = t.n_bytes / traits(t.type).type_size;
  auto out = std::make_unique<uint8_t[]>(n * sizeof(float));
  for (uint64_t i = 0; i < n; ++i) {
    float w;
    if (t.type == DType::F32) {
      std::memcpy(&w, t.data + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, t.data + 2 * i, 2);
      w = t.type == DType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
    }
    w += 1.0f;
    std::memcpy(out.get() + 4 * i, &w, 4);
  }
  return out;
}

// For an architecture whose RoPE pairs adjacent values (llama), the converter
// permutes the rows of q and k so that RoPE's pairs are adjacent: in each
// head, row 2i + j comes from row j * head_dim/2 + i.
std::unique_ptr<uint8_t[]> permute_rope_rows(const SafetensorsTensor& t, uint64_t n_head, const std::string& source) {
  const uint64_t rows = t.shape.size() == 2 ? t.shape[0] : 0;
  if (rows == 0 || rows % n_head != 0 || (rows / n_head) % 2 != 0)
    fail("{}: tensor '{}' has {} rows, not a whole number of heads of even size ({} heads)", source,
         excerpt(t.name, 80), rows, n_head);
  const uint64_t row_bytes = t.n_bytes / rows, hd = rows / n_head;
  auto out = std::make_unique<uint8_t[]>(t.n_bytes);
  for (uint64_t h = 0; h < n_head; ++h)
    for (uint64_t i = 0; i < hd / 2; ++i)
      for (uint64_t j = 0; j < 2; ++j)
        std::memcpy(out.get() + (h * hd + 2 * i + j) * row_bytes, t.data + (h * hd + j * hd / 2 + i) * row_bytes,
                    row_bytes);
  return out;
}

struct Weights {
  std::vector<GgufTensorInfo> tensors;
  std::vector<MappedFile> maps;
  std::vector<std::unique_ptr<uint8_t[]>> owned;
};

// The safetensors files of a folder: model.safetensors, or the files its
// index names, each with the tensors the index puts in it (none to check for
// model.safetensors alone).
std::map<fs::path, std::set<std::string>> weight_files(const fs::path& dir) {
  std::map<fs::path, std::set<std::string>> files;
  std::error_code ec;
  const fs::path index = dir / "model.safetensors.index.json";
  if (fs::exists(dir / "model.safetensors", ec)) {
    files[dir / "model.safetensors"];
  } else if (fs::exists(index, ec)) {
    const json j = parse_json_input(*read_part(index, true), index.string());
    const JsonFields f(j, index.string());
    const json* map = f.find("weight_map");
    if (!map || !map->is_object()) fail("{}: 'weight_map' must be an object of tensor -> file", index.string());
    for (const auto& [tensor, file] : map->items()) {
      if (!file.is_string()) fail("{}: weight_map['{}'] must be a file name", index.string(), excerpt(tensor, 80));
      const std::string& s = file.get_ref<const std::string&>();
      if (s.empty() || s.find('/') != std::string::npos || s == "." || s == "..")
        fail("{}: weight_map['{}'] = \"{}\" is not a file of this folder", index.string(), excerpt(tensor, 80),
             excerpt(s, 80));
      files[dir / s].insert(tensor);
    }
  } else {
    fail("{}: no model.safetensors or model.safetensors.index.json", dir.string());
  }
  return files;
}

// Every tensor the index places in a file must be in it: a shard that lost
// one would otherwise leave the model short of a weight the index promised.
void check_index(const SafetensorsFile& st, const std::set<std::string>& listed) {
  std::set<std::string_view> held;
  for (const SafetensorsTensor& t : st.tensors()) held.insert(t.name);
  for (const std::string& name : listed)
    if (!held.count(name))
      fail("{}: model.safetensors.index.json places tensor '{}' in this file, which does not hold it", st.path(),
           excerpt(name, 80));
}

Weights translate_weights(std::vector<SafetensorsFile>& files, const Architecture& arch, uint64_t n_head,
                          uint64_t n_kv_head) {
  Weights w;
  for (SafetensorsFile& st : files) {
    for (const SafetensorsTensor& t : st.tensors()) {
      GgufTensorInfo ti;
      ti.name = gguf_name(t.name, arch, st.path());
      if (ti.name.empty()) continue;
      ti.dims.assign(t.shape.rbegin(), t.shape.rend());
      if (ti.dims.empty()) ti.dims.push_back(1);
      ti.type = t.type;
      ti.n_elements = t.n_bytes / traits(t.type).type_size;
      ti.n_bytes = t.n_bytes;
      ti.data = t.data;
      const bool q = ti.name.ends_with("attn_q.weight"), k = ti.name.ends_with("attn_k.weight");
      if (arch.rope_pairing == RopePairing::Adjacent && (q || k)) {
        w.owned.push_back(permute_rope_rows(t, q ? n_head : n_kv_head, st.path()));
        ti.data = w.owned.back().get();
      } else if (arch.hf.norm_plus_one && ti.name.ends_with("norm.weight")) {
        w.owned.push_back(shifted_norm(t));
        ti.data = w.owned.back().get();
        ti.type = DType::F32;
        ti.n_bytes = ti.n_elements * sizeof(float);
      }
      w.tensors.push_back(std::move(ti));
    }
    if (auto m = st.take_mapping()) w.maps.push_back(std::move(*m));
  }
  return w;
}

const GgufTensorInfo* find_tensor(const Weights& w, std::string_view name) {
  for (const GgufTensorInfo& t : w.tensors)
    if (t.name == name) return &t;
  return nullptr;
}

// vocab_size must be the embedding's rows: the token list is sized by it, so
// it is bounded by what the folder holds (vocab_size 2^63 would otherwise
// pad a list that long before anything looked at the weights).
uint64_t vocab_rows(const JsonFields& cfg, const Weights& w) {
  const uint64_t vocab = need_count(cfg, "vocab_size");
  const GgufTensorInfo* e = find_tensor(w, "token_embd.weight");
  if (!e) fail("{}: the folder has no tensor model.embed_tokens.weight (the token embeddings)", cfg.source());
  if (e->dims.size() != 2)
    fail("{}: model.embed_tokens.weight has shape {}, not (vocab_size, hidden_size)", cfg.source(), e->shape_string());
  if (e->dims[1] != vocab)
    fail("{}: 'vocab_size' is {}, but model.embed_tokens.weight has {} rows", cfg.source(), vocab, e->dims[1]);
  return vocab;
}

// tie_word_embeddings says whether the output layer is the embedding
// (transformers' default: Architecture::hf.tied_default); a folder
// must agree with it, since transformers would ignore a stored lm_head when
// tied, and make up a random one when untied and none is stored.
void check_output(const JsonFields& cfg, const Architecture& arch, const Weights& w) {
  const bool tied = cfg.flag("tie_word_embeddings").value_or(arch.hf.tied_default);
  const bool stored = find_tensor(w, "output.weight") != nullptr;
  if (tied && stored)
    fail("{}: 'tie_word_embeddings' is true, but the folder has an lm_head.weight that transformers would ignore",
         cfg.source());
  if (!tied && !stored)
    fail("{}: 'tie_word_embeddings' is false, but the folder has no lm_head.weight", cfg.source());
}

// ---- tokenizer.json -> tokenizer.ggml.* -----------------------------------

// A string field compared against known values: "" when absent or not a string.
std::string string_field(const json& o, const char* key) {
  const auto it = o.find(key);
  return it != o.end() && it->is_string() ? it->get<std::string>() : "";
}

// The pre-tokenizer as steps, e.g. "Split(regex)" "ByteLevel(regex)".
void pre_steps(const json& p, const std::string& source, std::vector<std::string>& out) {
  if (p.is_null()) return;
  if (!p.is_object() || !p.contains("type") || !p["type"].is_string())
    fail("{}: 'pre_tokenizer' entry {} has no type", source, describe_json(p));
  const std::string type = p["type"].get<std::string>();
  if (type == "Sequence") {
    if (!p.contains("pretokenizers") || !p["pretokenizers"].is_array())
      fail("{}: pre_tokenizer Sequence without a 'pretokenizers' list", source);
    for (const json& q : p["pretokenizers"]) pre_steps(q, source, out);
  } else if (type == "Split" && p.contains("pattern") && p["pattern"].is_object() &&
             p["pattern"].contains("Regex") && p["pattern"]["Regex"].is_string()) {
    out.push_back("Split(" + p["pattern"]["Regex"].get<std::string>() + ")");
  } else if (type == "ByteLevel") {
    out.push_back(JsonFields(p, source).flag("use_regex").value_or(true) ? "ByteLevel(regex)" : "ByteLevel");
  } else if (type == "Digits") {
    out.push_back(JsonFields(p, source).flag("individual_digits").value_or(false) ? "Digits(individual)" : "Digits");
  } else {
    out.push_back(type);
  }
}

std::string pre_name(const json& tokenizer, const std::string& source) {
  static const char* kQwen2 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  static const char* kQwen2Cased =
      R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  static const char* kLlama3 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  const std::vector<std::pair<std::vector<std::string>, const char*>> known = {
      {{"ByteLevel(regex)"}, "gpt-2"},
      {{"Digits(individual)", "ByteLevel(regex)"}, "smollm"},
      {{std::string("Split(") + kQwen2 + ")", "ByteLevel"}, "qwen2"},
      {{std::string("Split(") + kQwen2Cased + ")", "ByteLevel"}, "qwen2"},
      {{std::string("Split(") + kLlama3 + ")", "ByteLevel"}, "llama-bpe"},
  };
  std::vector<std::string> steps;
  pre_steps(tokenizer.contains("pre_tokenizer") ? tokenizer["pre_tokenizer"] : json(), source, steps);
  for (const auto& [k, name] : known)
    if (k == steps) return name;
  std::string shown;
  for (const auto& s : steps) shown += (shown.empty() ? "" : ", ") + s;
  fail("{}: pre_tokenizer [{}] is not one tally implements (gpt-2, smollm, qwen2, llama-bpe)", source,
       excerpt(shown, 200));
}

// A token named in tokenizer_config.json: a string, or {"content": string}.
std::optional<std::string> config_token(const JsonFields& tc, const char* key) {
  const json* v = tc.find(key);
  if (!v) return std::nullopt;
  if (v->is_string()) return v->get<std::string>();
  if (v->is_object() && v->contains("content") && (*v)["content"].is_string()) return (*v)["content"].get<std::string>();
  fail("{}: '{}' must be a token (a string or {{\"content\": ...}}), not {}", tc.source(), key, describe_json(*v));
}

// The two tokenizer.json families tally reads: byte-level BPE (GPT-2's bytes
// as characters; merges) and SentencePiece BPE as Gemma's folders hold it
// (spaces as "▁", no prefix space, bytes without a token as <0xNN> tokens).
// The second becomes a SentencePiece vocabulary whose scores rank tokens as
// the merges do: the earlier a token's first merge, the higher its score.
enum class TokenizerFamily { ByteLevel, SentencePiece };

bool is_string_replace(const json& j, std::string_view from, std::string_view to) {
  return j.is_object() && string_field(j, "type") == "Replace" && j.contains("pattern") && j["pattern"].is_object() &&
         string_field(j["pattern"], "String") == from && string_field(j, "content") == to;
}

TokenizerFamily tokenizer_family(const JsonFields& t, const JsonFields& m) {
  const std::string& source = t.source();
  if (const std::string type = need_string(m, "type"); type != "BPE")
    fail("{}: model type '{}' is not supported (BPE only)", source, excerpt(type, 40));
  const json* decoder = t.find("decoder");
  if (decoder && decoder->is_object() && string_field(*decoder, "type") == "ByteLevel") {
    if (const json* norm = t.find("normalizer"); norm && !(norm->is_object() && string_field(*norm, "type") == "NFC"))
      fail("{}: normalizer {} is not supported", source, describe_json(*norm));  // NFC: text is taken as given, as llama.cpp does
    return TokenizerFamily::ByteLevel;
  }
  // Gemma: Replace("▁", " "), ByteFallback, Fuse.
  const bool spm_decoder = decoder && decoder->is_object() && string_field(*decoder, "type") == "Sequence" &&
                           decoder->contains("decoders") && (*decoder)["decoders"].is_array() &&
                           (*decoder)["decoders"].size() == 3 &&
                           is_string_replace((*decoder)["decoders"][0], "\xe2\x96\x81", " ") &&
                           string_field((*decoder)["decoders"][1], "type") == "ByteFallback" &&
                           string_field((*decoder)["decoders"][2], "type") == "Fuse";
  if (!spm_decoder)
    fail("{}: the decoder is neither ByteLevel nor SentencePiece's (Replace \"\xe2\x96\x81\", ByteFallback, Fuse)", source);
  const json* norm = t.find("normalizer");
  if (!norm || !is_string_replace(*norm, " ", "\xe2\x96\x81"))
    fail("{}: normalizer {} is not supported (SentencePiece BPE is read with Replace \" \" -> \"\xe2\x96\x81\" only)",
         source, norm ? describe_json(*norm) : std::string("null"));
  // After that normalizer no space is left, so a split on " " changes nothing.
  if (const json* pre = t.find("pre_tokenizer");
      pre && !(pre->is_object() && string_field(*pre, "type") == "Split" && pre->contains("pattern") &&
               (*pre)["pattern"].is_object() && string_field((*pre)["pattern"], "String") == " "))
    fail("{}: pre_tokenizer {} is not supported with a SentencePiece BPE model", source, describe_json(*pre));
  if (!m.flag("byte_fallback").value_or(false))
    fail("{}: a SentencePiece BPE model without 'model.byte_fallback' is not supported", source);
  return TokenizerFamily::SentencePiece;
}

// "<0x0A>": a byte token of SentencePiece's byte fallback.
bool is_byte_token(std::string_view s) {
  auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F'); };
  return s.size() == 6 && s.starts_with("<0x") && hex(s[3]) && hex(s[4]) && s[5] == '>';
}

// Whether the post-processor puts `token` first (`at_end`: last) in a single
// sequence: how tokenizer.json says to add BOS (EOS) when the config does not.
bool post_processor_adds(const json& tokenizer, const std::string& token, bool at_end) {
  const auto pp = tokenizer.find("post_processor");
  if (pp == tokenizer.end() || !pp->is_object()) return false;
  std::vector<const json*> steps = {&*pp};
  if (string_field(*pp, "type") == "Sequence" && pp->contains("processors") && (*pp)["processors"].is_array()) {
    steps.clear();
    for (const json& q : (*pp)["processors"]) steps.push_back(&q);
  }
  for (const json* q : steps) {
    if (!q->is_object() || string_field(*q, "type") != "TemplateProcessing" || !q->contains("single") ||
        !(*q)["single"].is_array() || (*q)["single"].empty())
      continue;
    const json& e = at_end ? (*q)["single"].back() : (*q)["single"].front();
    if (e.is_object() && e.contains("SpecialToken") && e["SpecialToken"].is_object() &&
        string_field(e["SpecialToken"], "id") == token)
      return true;
  }
  return false;
}

// The ids a TemplateProcessing post-processor adds (its special_tokens) must
// be the ids its tokens have in the vocabulary: HF tokenizers adds those ids
// as written, so an id the vocabulary gives another token (or none) would
// make tally's and transformers' prompts differ.
void check_post_processor(const json& tokenizer, const std::map<std::string, uint64_t, std::less<>>& ids,
                          const std::string& source) {
  const auto pp = tokenizer.find("post_processor");
  if (pp == tokenizer.end() || !pp->is_object()) return;
  std::vector<const json*> steps = {&*pp};
  if (string_field(*pp, "type") == "Sequence" && pp->contains("processors") && (*pp)["processors"].is_array()) {
    steps.clear();
    for (const json& q : (*pp)["processors"]) steps.push_back(&q);
  }
  for (const json* q : steps) {
    if (!q->is_object() || string_field(*q, "type") != "TemplateProcessing") continue;
    const auto st = q->find("special_tokens");
    if (st == q->end() || st->is_null()) continue;
    if (!st->is_object()) fail("{}: post_processor.special_tokens must be an object, not {}", source, describe_json(*st));
    for (const auto& [name, entry] : st->items()) {
      const json* tokens = entry.is_object() && entry.contains("tokens") ? &entry["tokens"] : nullptr;
      const json* list = entry.is_object() && entry.contains("ids") ? &entry["ids"] : nullptr;
      if (!tokens || !list || !tokens->is_array() || !list->is_array() || tokens->size() != list->size())
        fail("{}: post_processor.special_tokens['{}'] needs lists 'ids' and 'tokens' of one length", source,
             excerpt(name, 40));
      for (size_t i = 0; i < list->size(); ++i) {
        const json& t = (*tokens)[i];
        const auto it = t.is_string() ? ids.find(t.get_ref<const std::string&>()) : ids.end();
        if (it == ids.end())
          fail("{}: post_processor.special_tokens['{}'] adds {}, which is not a token of the vocabulary", source,
               excerpt(name, 40), describe_json(t));
        if (!(*list)[i].is_number_unsigned() || (*list)[i].get<uint64_t>() != it->second)
          fail("{}: post_processor.special_tokens['{}'] gives '{}' the id {}, but the vocabulary gives it {}", source,
               excerpt(name, 40), excerpt(t.get_ref<const std::string&>(), 40), describe_json((*list)[i]), it->second);
      }
    }
  }
}

void add_tokenizer(const HfFolderParts& parts, uint64_t n_vocab, const JsonFields& cfg,
                   std::vector<std::pair<std::string, GgufValue>>& kv) {
  const std::string source = (fs::path(parts.dir) / "tokenizer.json").string();
  const json tj = parse_json_input(parts.tokenizer, source);
  const JsonFields t(tj, source);
  const json* model = t.find("model");
  if (!model || !model->is_object()) fail("{}: no 'model' object", source);
  const JsonFields m(*model, source, "model.");
  const TokenizerFamily family = tokenizer_family(t, m);
  const bool spm = family == TokenizerFamily::SentencePiece;
  const std::string unk = m.string("unk_token").value_or("");

  // Ids: the BPE vocabulary, then the added tokens (which may repeat vocabulary entries).
  std::map<uint64_t, std::pair<std::string, int64_t>> by_id;  // id -> (text, GGUF token type)
  const json* vocab = m.find("vocab");
  if (!vocab || !vocab->is_object()) fail("{}: 'model.vocab' must be an object of token -> id", source);
  for (const auto& [text, id] : vocab->items()) {
    if (!id.is_number_unsigned() || id.get<uint64_t>() >= n_vocab)
      fail("{}: model.vocab['{}'] = {} is not an id below the model's vocab_size {}", source, excerpt(text, 40),
           describe_json(id), n_vocab);
    const int64_t type = spm && is_byte_token(text) ? 6 : !unk.empty() && text == unk ? 2 : 1;  // BYTE, UNKNOWN, NORMAL
    if (!by_id.emplace(id.get<uint64_t>(), std::pair{text, type}).second)
      fail("{}: model.vocab gives id {} to two tokens", source, id.get<uint64_t>());
  }
  if (const json* added = t.find("added_tokens")) {
    if (!added->is_array()) fail("{}: 'added_tokens' must be a list", source);
    for (const json& a : *added) {
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_unsigned() || !a.contains("content") ||
          !a["content"].is_string())
        fail("{}: added_tokens entry {} needs an 'id' and a 'content'", source, describe_json(a));
      const uint64_t id = a["id"].get<uint64_t>();
      if (id >= n_vocab) fail("{}: added token id {} is not below the model's vocab_size {}", source, id, n_vocab);
      by_id[id] = {a["content"].get<std::string>(), JsonFields(a, source).flag("special").value_or(false) ? 3 : 4};  // CONTROL, USER_DEFINED
    }
  }
  std::vector<GgufValue> tokens, types;
  std::map<std::string, uint64_t, std::less<>> ids;
  for (uint64_t id = 0; id < n_vocab; ++id) {
    const auto it = by_id.find(id);
    // Rows of the embedding without a token, as the converter pads them: unused.
    std::string text = it != by_id.end() ? it->second.first : fmt::format("[PAD{}]", id);
    types.push_back(i32_value(it != by_id.end() ? static_cast<int32_t>(it->second.second) : 5));
    ids.emplace(text, id);
    tokens.push_back(string_value(std::move(text)));
  }
  std::vector<std::pair<std::string, std::string>> merges;
  const json* mj = m.find("merges");
  if (!mj || !mj->is_array()) fail("{}: 'model.merges' must be a list", source);
  for (const json& x : *mj) {
    if (x.is_string() && x.get_ref<const std::string&>().find(' ') != std::string::npos) {
      const std::string& s = x.get_ref<const std::string&>();
      merges.emplace_back(s.substr(0, s.find(' ')), s.substr(s.find(' ') + 1));
    } else if (x.is_array() && x.size() == 2 && x[0].is_string() && x[1].is_string()) {
      merges.emplace_back(x[0].get<std::string>(), x[1].get<std::string>());
    } else {
      fail("{}: model.merges holds {}, not a merge", source, describe_json(x));
    }
    // GGUF writes a merge as "A B": a part holding a space ("a b c") has no such form.
    if (merges.back().first.find(' ') != std::string::npos || merges.back().second.find(' ') != std::string::npos)
      fail("{}: model.merges[{}] is {}: a merge is two tokens without spaces", source, merges.size() - 1,
           describe_json(x));
  }
  if (spm) {
    // Below every merge for the tokens no merge makes (bytes, characters, specials).
    std::vector<GgufValue> scores(n_vocab, f32_value(-static_cast<float>(merges.size())));
    for (size_t rank = merges.size(); rank-- > 0;) {
      const auto it = ids.find(merges[rank].first + merges[rank].second);
      if (it == ids.end())
        fail("{}: model.merges[{}] makes '{}', which is not in the vocabulary", source, rank,
             excerpt(merges[rank].first + merges[rank].second, 40));
      scores[it->second].f = -static_cast<float>(rank);
    }
    kv.emplace_back("tokenizer.ggml.model", string_value("llama"));
    kv.emplace_back("tokenizer.ggml.scores", array_value(GgufType::F32, std::move(scores)));
    kv.emplace_back("tokenizer.ggml.add_space_prefix", bool_value(false));
  } else {
    std::vector<GgufValue> merge_strings;
    for (const auto& [a, b] : merges) merge_strings.push_back(string_value(a + " " + b));
    kv.emplace_back("tokenizer.ggml.model", string_value("gpt2"));
    kv.emplace_back("tokenizer.ggml.pre", string_value(pre_name(tj, source)));
    kv.emplace_back("tokenizer.ggml.merges", array_value(GgufType::STRING, std::move(merge_strings)));
  }
  // Special tokens and the chat template: tokenizer_config.json, else config.json's ids.
  const std::string tc_source = (fs::path(parts.dir) / "tokenizer_config.json").string();
  const json tcj = parts.tokenizer_config ? parse_json_input(*parts.tokenizer_config, tc_source) : json::object();
  const JsonFields tc(tcj, tc_source);
  auto special = [&](const char* token_key, const char* id_key, const char* gguf_key) -> std::optional<std::string> {
    if (const auto text = config_token(tc, token_key)) {
      const auto it = ids.find(*text);
      if (it == ids.end()) fail("{}: '{}' = \"{}\" is not a token of tokenizer.json", tc.source(), token_key, excerpt(*text, 40));
      kv.emplace_back(gguf_key, u64_value(it->second));
      return text;
    }
    if (const json* id = cfg.find(id_key)) {
      const json& first = id->is_array() && !id->empty() ? (*id)[0] : *id;
      if (!first.is_number_unsigned() || first.get<uint64_t>() >= n_vocab)
        fail("{}: '{}' = {} is not a token id", cfg.source(), id_key, describe_json(*id));
      kv.emplace_back(gguf_key, u64_value(first.get<uint64_t>()));
      return tokens[first.get<uint64_t>()].s;
    }
    return std::nullopt;
  };
  const auto bos = special("bos_token", "bos_token_id", "tokenizer.ggml.bos_token_id");
  const auto eos = special("eos_token", "eos_token_id", "tokenizer.ggml.eos_token_id");
  special("pad_token", "pad_token_id", "tokenizer.ggml.padding_token_id");
  if (!unk.empty()) {
    const auto it = ids.find(unk);
    if (it == ids.end()) fail("{}: model.unk_token \"{}\" is not a token of the vocabulary", source, excerpt(unk, 40));
    kv.emplace_back("tokenizer.ggml.unknown_token_id", u64_value(it->second));
  }
  check_post_processor(tj, ids, source);
  // add_bos_token in tokenizer_config.json, else what the post-processor adds.
  const bool add_bos = tc.flag("add_bos_token").value_or(bos && post_processor_adds(tj, *bos, false));
  const bool add_eos = tc.flag("add_eos_token").value_or(eos && post_processor_adds(tj, *eos, true));
  kv.emplace_back("tokenizer.ggml.add_bos_token", bool_value(add_bos));
  kv.emplace_back("tokenizer.ggml.add_eos_token", bool_value(add_eos));
  // chat_template.jinja first: transformers prefers the file to tokenizer_config.json's entry.
  std::string chat;
  if (parts.chat_template) {
    chat = *parts.chat_template;
  } else if (const json* ct = tc.find("chat_template")) {
    if (ct->is_string()) {
      chat = ct->get<std::string>();
    } else if (ct->is_array()) {  // named templates: the default one
      for (const json& e : *ct)
        if (e.is_object() && string_field(e, "name") == "default" && e.contains("template") && e["template"].is_string())
          chat = e["template"].get<std::string>();
    }
  }
  if (!chat.empty()) kv.emplace_back("tokenizer.chat_template", string_value(std::move(chat)));
  kv.emplace_back("tokenizer.ggml.tokens", array_value(GgufType::STRING, std::move(tokens)));
  kv.emplace_back("tokenizer.ggml.token_type", array_value(GgufType::I32, std::move(types)));
}

}  // namespace

bool is_model_folder(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec);
}

std::unique_ptr<GgufFile> assemble_hf_model(HfFolderParts parts) {
  const std::string cpath = (fs::path(parts.dir) / "config.json").string();
  const HfConfig hf(parts.config, cpath);
  // The type at the top level: a vision-language model's text_config is not read.
  const Architecture& type = arch_of(need_string(hf.top(), "model_type"), cpath);
  const JsonFields& cfg = hf.section();
  std::vector<std::pair<std::string, GgufValue>> kv;
  kv.emplace_back("general.architecture", string_value(std::string(type.name)));
  std::error_code ec;
  kv.emplace_back("general.name", string_value(fs::absolute(parts.dir, ec).lexically_normal().filename().string()));
  add_hparams(hf, type, kv);
  const uint64_t heads = need_count(cfg, "num_attention_heads");
  Weights w = translate_weights(parts.weights, type, heads, cfg.count("num_key_value_heads").value_or(heads));
  check_output(cfg, type, w);
  add_tokenizer(parts, vocab_rows(cfg, w), cfg, kv);
  return std::make_unique<GgufFile>(parts.dir, std::move(kv), std::move(w.tensors), std::move(w.maps),
                                    std::move(w.owned));
}

std::unique_ptr<GgufFile> open_hf_folder(const std::string& dir_name) {
  const fs::path dir(dir_name);
  std::error_code ec;
  if (!fs::exists(dir / "config.json", ec))
    fail("{}: a directory without config.json (a model is a GGUF file or an HF folder)", dir_name);
  HfFolderParts parts;
  parts.dir = dir_name;
  parts.config = *read_part(dir / "config.json", true);
  for (const auto& [file, listed] : weight_files(dir)) {
    parts.weights.emplace_back(file.string());
    check_index(parts.weights.back(), listed);
  }
  parts.tokenizer = *read_part(dir / "tokenizer.json", true, kMaxTokenizerBytes);
  parts.tokenizer_config = read_part(dir / "tokenizer_config.json", false);
  parts.chat_template = read_part(dir / "chat_template.jinja", false);
  return assemble_hf_model(std::move(parts));
}

std::unique_ptr<GgufFile> open_model_file(const std::string& path) {
  return is_model_folder(path) ? open_hf_folder(path) : std::make_unique<GgufFile>(path);
}

}  // namespace tally
