#include "io/hf_config_file.h"

#include "core/checked_math.h"
#include "core/error.h"

namespace tally {
namespace {

using nlohmann::json;

// The section a config describes the decoder in: its text_config when it has
// one (a multimodal model's), else the top level.
JsonFields text_section(const json& top, const std::string& source) {
  if (auto it = top.find("text_config"); it != top.end() && !it->is_null()) {
    if (!it->is_object()) fail("{}: 'text_config' must be an object", source);
    return JsonFields(*it, source, "text_config.");
  }
  return JsonFields(top, source);
}

}  // namespace

std::vector<bool> window_layers_of_period(int64_t n_layer, int64_t period) {
  std::vector<bool> out(static_cast<size_t>(n_layer));
  for (int64_t il = 0; il < n_layer; ++il) out[static_cast<size_t>(il)] = period == 0 || il % period < period - 1;
  return out;
}

HfConfig::HfConfig(const std::string& text, const std::string& source)
    : doc_(parse_json_input(text, source)),
      top_(doc_, source),  // first: refuses a config that is not an object
      sec_(text_section(doc_, source)) {}

std::optional<int64_t> HfConfig::get_int(const char* key) const {
  const auto v = sec_.count(key, static_cast<uint64_t>(kMaxModelDim));
  return v ? std::optional<int64_t>(static_cast<int64_t>(*v)) : std::nullopt;
}

int64_t HfConfig::require_int(const char* key, const char* needed_for) const {
  return sec_.required(get_int(key), key, needed_for);
}

std::optional<std::string> HfConfig::get_string_either(const char* key) const {
  return sec_.find(key) ? sec_.string(key) : top_.string(key);
}

std::optional<bool> HfConfig::get_bool_either(const char* key) const {
  return sec_.find(key) ? sec_.flag(key) : top_.flag(key);
}

std::optional<std::string> HfConfig::weights_dtype() const {
  for (const JsonFields* f : {&sec_, &top_})
    for (const char* key : {"torch_dtype", "dtype"})
      if (auto v = f->string(key)) return v;
  return std::nullopt;
}

std::optional<std::vector<bool>> HfConfig::window_layers(int64_t n_layer) const {
  if (const auto types = sec_.strings("layer_types")) {
    if (static_cast<int64_t>(types->size()) != n_layer)
      fail("{}: '{}layer_types' has {} entries for {} layers", source(), prefix(), types->size(), n_layer);
    std::vector<bool> out;
    for (size_t i = 0; i < types->size(); ++i) {
      const std::string& t = (*types)[i];
      if (t != "sliding_attention" && t != "full_attention")
        fail("{}: '{}layer_types[{}]' is {}: a layer is \"sliding_attention\" or \"full_attention\"", source(),
             prefix(), i, describe_json(json(t)));
      out.push_back(t == "sliding_attention");
    }
    return out;
  }
  for (const char* key : {"sliding_window_pattern", "_sliding_window_pattern"}) {
    if (const auto period = get_int(key)) return window_layers_of_period(n_layer, *period);
  }
  return std::nullopt;
}

}  // namespace tally
