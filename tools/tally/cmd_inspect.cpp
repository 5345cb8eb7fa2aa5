// tally inspect: header, metadata, tensor table and totals of a GGUF file.
#include <fmt/format.h>

#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "core/printable.h"
#include "core/utf8.h"
#include "model_options.h"
#include "option_checks.h"
#include "output.h"
#include "io/gguf.h"
#include "model/hf_folder.h"
#include "io/model_locator.h"

namespace tally::cli {
namespace {

constexpr size_t kMaxArrayItems = 16;  // longer arrays print as "[N x type]"

// Names and paths from the file or the command line, with control characters
// (ESC, BEL, ...) and bytes that are not UTF-8 escaped: never sent raw to a terminal.
std::string shown(std::string_view s) {
  PrintableOptions o;
  o.max_bytes = SIZE_MAX;
  o.escape_quotes = false;
  return printable(s, o);
}

nlohmann::json value_json(const GgufValue& v) {
  switch (v.type) {
    case GgufType::STRING: return v.s;
    case GgufType::BOOL: return v.u != 0;
    case GgufType::F32: case GgufType::F64: return v.f;
    case GgufType::ARRAY: {
      if (v.arr.size() > kMaxArrayItems)
        return {{"array_of", gguf_type_name(v.elem_type)}, {"count", v.arr.size()}};
      auto a = nlohmann::json::array();
      for (const auto& e : v.arr) a.push_back(value_json(e));
      return a;
    }
    default:
      return v.type == GgufType::I8 || v.type == GgufType::I16 || v.type == GgufType::I32 || v.type == GgufType::I64
                 ? nlohmann::json(v.i)
                 : nlohmann::json(v.u);
  }
}

struct Totals {
  uint64_t elements = 0, bytes = 0;
  std::map<std::string, std::pair<uint64_t, uint64_t>> by_type;  // name -> (tensors, bytes)
};

Totals totals(const GgufFile& f) {
  Totals t;
  for (const auto& ti : f.tensors()) {
    t.elements += ti.n_elements;
    t.bytes += ti.n_bytes;
    auto& e = t.by_type[std::string(dtype_name(ti.type))];
    e.first++;
    e.second += ti.n_bytes;
  }
  return t;
}

void print_json(const GgufFile& f) {
  nlohmann::json j;
  j["path"] = f.path();
  j["version"] = f.version();  // 0: an HF folder
  j["alignment"] = f.alignment();
  j["data_offset"] = f.data_offset();
  j["file_size"] = f.file_size();
  nlohmann::json md = nlohmann::json::object();
  for (const auto& [k, v] : f.metadata()) md[k] = value_json(v);
  j["metadata"] = md;
  auto ts = nlohmann::json::array();
  for (const auto& ti : f.tensors())
    ts.push_back({{"name", ti.name}, {"type", dtype_name(ti.type)}, {"shape", ti.dims}, {"offset", ti.offset},
                  {"bytes", ti.n_bytes}});
  j["tensors"] = ts;
  const Totals t = totals(f);
  nlohmann::json by = nlohmann::json::object();
  for (const auto& [name, e] : t.by_type) by[name] = {{"tensors", e.first}, {"bytes", e.second}};
  j["totals"] = {{"tensors", f.tensors().size()}, {"elements", t.elements}, {"bytes", t.bytes}, {"by_type", by}};
  cli::print_json(j, 2);
}

void print_text(const GgufFile& f) {
  fmt::print("file:        {}\n", shown(f.path()));
  if (f.version() == 0)  // assembled from an HF folder (model/hf_folder.h): shown as the GGUF it reads as
    fmt::print("format:      HF folder, read as GGUF metadata and tensors\nweights:     {} bytes mapped\n",
               f.file_size());
  else
    fmt::print("version:     {}\nalignment:   {}\ndata offset: {}\nfile size:   {}\n", f.version(), f.alignment(),
               f.data_offset(), f.file_size());
  fmt::print("\nmetadata ({} keys):\n", f.metadata().size());
  for (const auto& [k, v] : f.metadata()) {
    std::string s = v.to_string(kMaxArrayItems);
    if (s.size() > 200) s = s.substr(0, utf8::complete_prefix(s.substr(0, 197))) + "...";
    fmt::print("  {:<44} {:<7} {}\n", shown(k), gguf_type_name(v.type), s);
  }
  fmt::print("\ntensors ({}):\n", f.tensors().size());
  fmt::print("  {:<34} {:<6} {:<18} {:>12} {:>12}\n", "name", "type", "shape", "offset", "bytes");
  for (const auto& ti : f.tensors())
    fmt::print("  {:<34} {:<6} {:<18} {:>12} {:>12}\n", shown(ti.name), dtype_name(ti.type), ti.shape_string(),
               ti.offset, ti.n_bytes);
  const Totals t = totals(f);
  fmt::print("\ntotals: {} tensors, {} elements, {} bytes ({:.2f} MiB)\n", f.tensors().size(), t.elements,
             t.bytes, t.bytes / 1048576.0);
  for (const auto& [name, e] : t.by_type)
    fmt::print("  {:<6} {:>4} tensors {:>12} bytes\n", name, e.first, e.second);
}

}  // namespace

void add_inspect(CLI::App& app) {
  struct Opts {
    std::string model;
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand("inspect", "Print a GGUF file's header, metadata and tensor table");
  cmd->add_option("-m,--model", o->model, model_help())->check(nonempty_path());
  cmd->add_flag("--json", o->json, "Print one JSON object");
  cmd->callback([o] {
    const auto file = open_model_file(model_path(o->model));
    const GgufFile& f = *file;
    o->json ? print_json(f) : print_text(f);
  });
}

}  // namespace tally::cli
