#include "io/hf_folder.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "core/error.h"
#include "core/printable.h"
#include "io/json_input.h"
#include "io/safetensors.h"
#include "io/text_file.h"

namespace tally {

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

constexpr uint64_t kMaxJsonBytes = uint64_t{256} << 20;  // tokenizer.json of a 256k vocabulary is ~35 MB

// ---- metadata values -------------------------------------------------------

GgufValue typed(GgufType t) {
  GgufValue x;
  x.type = t;
  return x;
}
GgufValue u64_value(uint64_t v) { auto x = typed(GgufType::U64); x.u = v; return x; }
GgufValue i32_value(int32_t v) { auto x = typed(GgufType::I32); x.i = v; return x; }
GgufValue f64_value(double v) { auto x = typed(GgufType::F64); x.f = v; return x; }
GgufValue bool_value(bool v) { auto x = typed(GgufType::BOOL); x.u = v ? 1 : 0; return x; }
GgufValue string_value(std::string v) { auto x = typed(GgufType::STRING); x.s = std::move(v); return x; }
GgufValue array_value(GgufType elem, std::vector<GgufValue> items) {
  auto x = typed(GgufType::ARRAY);
  x.elem_type = elem;
  x.arr = std::move(items);
  return x;
}

// A file of the folder as text; nullopt when `required` is false and it is absent.
std::optional<std::string> read_part(const fs::path& p, bool required) {
  std::error_code ec;
  if (!required && !fs::exists(p, ec)) return std::nullopt;
  return read_text_file(p.string(), "folder file", kMaxJsonBytes);
}

// A field the folder cannot do without.
uint64_t need_count(const JsonFields& f, const char* key) { return f.required(f.count(key), key, "the model"); }
std::string need_string(const JsonFields& f, const char* key) { return f.required(f.string(key), key, "the model"); }

// ---- config.json -> <arch>.* ----------------------------------------------

void add_hparams(const JsonFields& cfg, const std::string& arch, std::vector<std::pair<std::string, GgufValue>>& kv) {
  auto put = [&](const char* key, GgufValue v) { kv.emplace_back(arch + "." + key, std::move(v)); };
  const uint64_t heads = need_count(cfg, "num_attention_heads");
  put("block_count", u64_value(need_count(cfg, "num_hidden_layers")));
  put("context_length", u64_value(need_count(cfg, "max_position_embeddings")));
  put("embedding_length", u64_value(need_count(cfg, "hidden_size")));
  put("feed_forward_length", u64_value(need_count(cfg, "intermediate_size")));
  put("attention.head_count", u64_value(heads));
  put("attention.head_count_kv", u64_value(cfg.count("num_key_value_heads").value_or(heads)));
  if (const auto hd = cfg.count("head_dim")) put("attention.key_length", u64_value(*hd));
  put("vocab_size", u64_value(need_count(cfg, "vocab_size")));
  put("attention.layer_norm_rms_epsilon", f64_value(cfg.number("rms_norm_eps").value_or(1e-6)));
  // transformers 5 keeps the base and the scaling in rope_parameters, earlier
  // versions in rope_theta and rope_scaling. Scaled RoPE is not implemented.
  double base = cfg.number("rope_theta").value_or(10000.0);
  if (const json* rp = cfg.find("rope_parameters")) {
    const JsonFields p(*rp, cfg.source(), "rope_parameters.");
    base = p.number("rope_theta").value_or(base);
    if (const json* t = p.find("rope_type"); t && *t != "default")
      fail("{}: rope_parameters.rope_type is {}: only the default RoPE is supported", cfg.source(),
           describe_json(*t));
  }
  if (const json* rs = cfg.find("rope_scaling"))
    fail("{}: 'rope_scaling' is {}: only the default RoPE is supported", cfg.source(), describe_json(*rs));
  if (const json* act = cfg.find("hidden_act"); act && *act != "silu")
    fail("{}: 'hidden_act' is {}: {} folders are read with silu only", cfg.source(), describe_json(*act), arch);
  if (cfg.flag("use_sliding_window").value_or(false))
    fail("{}: 'use_sliding_window' is true; sliding-window {} folders are not supported", cfg.source(), arch);
  put("rope.freq_base", f64_value(base));
}

// ---- safetensors -> GGUF tensors ------------------------------------------

// HF parameter (after "model.") -> GGUF tensor, for the llama-style decoders.
const std::map<std::string, std::string, std::less<>>& layer_names() {
  static const std::map<std::string, std::string, std::less<>> m = {
      {"input_layernorm", "attn_norm"},      {"self_attn.q_proj", "attn_q"},     {"self_attn.k_proj", "attn_k"},
      {"self_attn.v_proj", "attn_v"},        {"self_attn.o_proj", "attn_output"}, {"self_attn.q_norm", "attn_q_norm"},
      {"self_attn.k_norm", "attn_k_norm"},   {"post_attention_layernorm", "ffn_norm"},
      {"mlp.gate_proj", "ffn_gate"},         {"mlp.up_proj", "ffn_up"},          {"mlp.down_proj", "ffn_down"},
  };
  return m;
}

// The GGUF name of an HF tensor; "" for one that carries no weight (inv_freq).
std::string gguf_name(const std::string& hf, const std::string& source) {
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
      const auto it = layer_names().find(n.substr(dot + 1, last - dot - 1));
      if (!block.empty() && block.size() < 10 &&
          std::all_of(block.begin(), block.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
          it != layer_names().end())
        return fmt::format("blk.{}.{}{}", block, it->second, n.substr(last));
    }
  }
  fail("{}: tensor '{}' is not one tally knows how to use (a different architecture, or an adapter?)", source,
       excerpt(hf, 80));
}

// llama's converter permutes the rows of q and k so that RoPE's pairs are
// adjacent: in each head, row 2i + j comes from row j * head_dim/2 + i.
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

// The safetensors files of a folder: model.safetensors, or the files its index names.
std::vector<fs::path> weight_files(const fs::path& dir) {
  std::vector<fs::path> files;
  std::error_code ec;
  const fs::path index = dir / "model.safetensors.index.json";
  if (fs::exists(dir / "model.safetensors", ec)) {
    files.push_back(dir / "model.safetensors");
  } else if (fs::exists(index, ec)) {
    const json j = parse_json_input(*read_part(index, true), index.string());
    const JsonFields f(j, index.string());
    const json* map = f.find("weight_map");
    if (!map || !map->is_object()) fail("{}: 'weight_map' must be an object of tensor -> file", index.string());
    std::set<std::string> names;
    for (const auto& [tensor, file] : map->items()) {
      if (!file.is_string()) fail("{}: weight_map['{}'] must be a file name", index.string(), excerpt(tensor, 80));
      const std::string& s = file.get_ref<const std::string&>();
      if (s.empty() || s.find('/') != std::string::npos || s == "." || s == "..")
        fail("{}: weight_map['{}'] = \"{}\" is not a file of this folder", index.string(), excerpt(tensor, 80),
             excerpt(s, 80));
      names.insert(s);
    }
    for (const auto& s : names) files.push_back(dir / s);
  } else {
    fail("{}: no model.safetensors or model.safetensors.index.json", dir.string());
  }
  return files;
}

Weights translate_weights(std::vector<SafetensorsFile>& files, const std::string& arch, uint64_t n_head,
                          uint64_t n_kv_head) {
  Weights w;
  for (SafetensorsFile& st : files) {
    for (const SafetensorsTensor& t : st.tensors()) {
      GgufTensorInfo ti;
      ti.name = gguf_name(t.name, st.path());
      if (ti.name.empty()) continue;
      ti.dims.assign(t.shape.rbegin(), t.shape.rend());
      if (ti.dims.empty()) ti.dims.push_back(1);
      ti.type = t.type;
      ti.n_elements = t.n_bytes / traits(t.type).type_size;
      ti.n_bytes = t.n_bytes;
      ti.data = t.data;
      const bool q = ti.name.ends_with("attn_q.weight"), k = ti.name.ends_with("attn_k.weight");
      if (arch == "llama" && (q || k)) {
        w.owned.push_back(permute_rope_rows(t, q ? n_head : n_kv_head, st.path()));
        ti.data = w.owned.back().get();
      }
      w.tensors.push_back(std::move(ti));
    }
    if (auto m = st.take_mapping()) w.maps.push_back(std::move(*m));
  }
  return w;
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

void add_tokenizer(const HfFolderParts& parts, uint64_t n_vocab, const JsonFields& cfg,
                   std::vector<std::pair<std::string, GgufValue>>& kv) {
  const std::string source = (fs::path(parts.dir) / "tokenizer.json").string();
  const json tj = parse_json_input(parts.tokenizer, source);
  const JsonFields t(tj, source);
  const json* model = t.find("model");
  if (!model || !model->is_object()) fail("{}: no 'model' object", source);
  const JsonFields m(*model, source, "model.");
  if (const std::string type = need_string(m, "type"); type != "BPE")
    fail("{}: model type '{}' is not supported (byte-level BPE only)", source, excerpt(type, 40));
  const json* decoder = t.find("decoder");
  if (!decoder || !decoder->is_object() || string_field(*decoder, "type") != "ByteLevel")
    fail("{}: the decoder is not ByteLevel; only byte-level BPE tokenizers are supported", source);
  if (const json* norm = t.find("normalizer"); norm && !(norm->is_object() && string_field(*norm, "type") == "NFC"))
    fail("{}: normalizer {} is not supported", source, describe_json(*norm));  // NFC: text is taken as given, as llama.cpp does

  // Ids: the BPE vocabulary, then the added tokens (which may repeat vocabulary entries).
  std::map<uint64_t, std::pair<std::string, int64_t>> by_id;  // id -> (text, GGUF token type)
  const json* vocab = m.find("vocab");
  if (!vocab || !vocab->is_object()) fail("{}: 'model.vocab' must be an object of token -> id", source);
  for (const auto& [text, id] : vocab->items()) {
    if (!id.is_number_unsigned() || id.get<uint64_t>() >= n_vocab)
      fail("{}: model.vocab['{}'] = {} is not an id below the model's vocab_size {}", source, excerpt(text, 40),
           describe_json(id), n_vocab);
    if (!by_id.emplace(id.get<uint64_t>(), std::pair{text, int64_t{1}}).second)
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
  std::vector<GgufValue> merges;
  const json* mj = m.find("merges");
  if (!mj || !mj->is_array()) fail("{}: 'model.merges' must be a list", source);
  for (const json& x : *mj) {
    if (x.is_string()) {
      merges.push_back(string_value(x.get<std::string>()));
    } else if (x.is_array() && x.size() == 2 && x[0].is_string() && x[1].is_string()) {
      merges.push_back(string_value(x[0].get<std::string>() + " " + x[1].get<std::string>()));
    } else {
      fail("{}: model.merges holds {}, not a merge", source, describe_json(x));
    }
  }
  kv.emplace_back("tokenizer.ggml.model", string_value("gpt2"));
  kv.emplace_back("tokenizer.ggml.pre", string_value(pre_name(tj, source)));
  kv.emplace_back("tokenizer.ggml.tokens", array_value(GgufType::STRING, std::move(tokens)));
  kv.emplace_back("tokenizer.ggml.token_type", array_value(GgufType::I32, std::move(types)));
  kv.emplace_back("tokenizer.ggml.merges", array_value(GgufType::STRING, std::move(merges)));

  // Special tokens and the chat template: tokenizer_config.json, else config.json's ids.
  const std::string tc_source = (fs::path(parts.dir) / "tokenizer_config.json").string();
  const json tcj = parts.tokenizer_config ? parse_json_input(*parts.tokenizer_config, tc_source) : json::object();
  const JsonFields tc(tcj, tc_source);
  auto special = [&](const char* token_key, const char* id_key, const char* gguf_key) {
    if (const auto text = config_token(tc, token_key)) {
      const auto it = ids.find(*text);
      if (it == ids.end()) fail("{}: '{}' = \"{}\" is not a token of tokenizer.json", tc.source(), token_key, excerpt(*text, 40));
      kv.emplace_back(gguf_key, u64_value(it->second));
    } else if (const json* id = cfg.find(id_key)) {
      const json& first = id->is_array() && !id->empty() ? (*id)[0] : *id;
      if (!first.is_number_unsigned() || first.get<uint64_t>() >= n_vocab)
        fail("{}: '{}' = {} is not a token id", cfg.source(), id_key, describe_json(*id));
      kv.emplace_back(gguf_key, u64_value(first.get<uint64_t>()));
    }
  };
  special("bos_token", "bos_token_id", "tokenizer.ggml.bos_token_id");
  special("eos_token", "eos_token_id", "tokenizer.ggml.eos_token_id");
  special("pad_token", "pad_token_id", "tokenizer.ggml.padding_token_id");
  kv.emplace_back("tokenizer.ggml.add_bos_token", bool_value(tc.flag("add_bos_token").value_or(false)));
  kv.emplace_back("tokenizer.ggml.add_eos_token", bool_value(tc.flag("add_eos_token").value_or(false)));
  std::string chat;
  if (const json* ct = tc.find("chat_template")) {
    if (ct->is_string()) {
      chat = ct->get<std::string>();
    } else if (ct->is_array()) {  // named templates: the default one
      for (const json& e : *ct)
        if (e.is_object() && string_field(e, "name") == "default" && e.contains("template") && e["template"].is_string())
          chat = e["template"].get<std::string>();
    }
  } else if (parts.chat_template) {
    chat = *parts.chat_template;
  }
  if (!chat.empty()) kv.emplace_back("tokenizer.chat_template", string_value(std::move(chat)));
}

}  // namespace

bool is_model_folder(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec);
}

std::unique_ptr<GgufFile> assemble_hf_model(HfFolderParts parts) {
  const std::string cpath = (fs::path(parts.dir) / "config.json").string();
  const json cj = parse_json_input(parts.config, cpath);
  const JsonFields cfg(cj, cpath);
  const std::string type = need_string(cfg, "model_type");
  if (type != "llama" && type != "qwen2" && type != "qwen3")
    fail("{}: model_type '{}' is not read from HF folders (llama, qwen2, qwen3 are; convert others to GGUF)", cpath,
         excerpt(type, 40));
  std::vector<std::pair<std::string, GgufValue>> kv;
  kv.emplace_back("general.architecture", string_value(type));
  std::error_code ec;
  kv.emplace_back("general.name", string_value(fs::absolute(parts.dir, ec).lexically_normal().filename().string()));
  add_hparams(cfg, type, kv);
  const uint64_t heads = need_count(cfg, "num_attention_heads");
  Weights w = translate_weights(parts.weights, type, heads, cfg.count("num_key_value_heads").value_or(heads));
  add_tokenizer(parts, need_count(cfg, "vocab_size"), cfg, kv);
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
  for (const fs::path& f : weight_files(dir)) parts.weights.emplace_back(f.string());
  parts.tokenizer = *read_part(dir / "tokenizer.json", true);
  parts.tokenizer_config = read_part(dir / "tokenizer_config.json", false);
  parts.chat_template = read_part(dir / "chat_template.jinja", false);
  return assemble_hf_model(std::move(parts));
}

std::unique_ptr<GgufFile> open_model_file(const std::string& path) {
  return is_model_folder(path) ? open_hf_folder(path) : std::make_unique<GgufFile>(path);
}

}  // namespace tally
