#include "io/safetensors.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "core/checked_math.h"
#include "core/error.h"
#include "core/printable.h"
#include "io/json_input.h"

namespace tally {

using nlohmann::json;

namespace {

struct Element {
  const char* name;
  DType type;
};
constexpr Element kReadable[] = {{"F32", DType::F32}, {"F16", DType::F16}, {"BF16", DType::BF16}};
// The rest of the format's dtypes: named in the refusal rather than called unknown.
constexpr const char* kOther[] = {"F64", "I64", "I32", "I16", "I8", "U64", "U32", "U16", "U8",
                                  "BOOL", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F4", "F6_E2M3", "F6_E3M2"};

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : map_(std::in_place, path), source_(path) {
  parse(map_->data(), map_->size());
}

SafetensorsFile::SafetensorsFile(const uint8_t* bytes, uint64_t size, std::string source) : source_(std::move(source)) {
  parse(bytes, size);
}

void SafetensorsFile::parse(const uint8_t* bytes, uint64_t size) {
  if (size < 8) fail("{}: not a safetensors file: {} bytes, shorter than the 8-byte header length", source_, size);
  const uint64_t n = read_u64_le(bytes);
  if (n > kMaxHeaderBytes || n > size - 8)
    fail("{}: not a safetensors file: the header length at byte 0 is {}, {}", source_, n,
         n > size - 8 ? fmt::format("past the end of the file ({} bytes)", size)
                      : fmt::format("over the limit of {} bytes", kMaxHeaderBytes));
  const std::string text(reinterpret_cast<const char*>(bytes) + 8, n);
  const json header = parse_json_input(text, source_ + " (safetensors header)");
  if (!header.is_object()) fail("{}: the safetensors header must be a JSON object, not {}", source_, describe_json(header));
  const uint8_t* data = bytes + 8 + n;
  const uint64_t data_size = size - 8 - n;

  for (const auto& item : header.items()) {
    const std::string& name = item.key();
    const json& e = item.value();  // not a structured binding: the lambda below captures it
    if (name == "__metadata__") continue;
    const std::string where = fmt::format("{}: tensor '{}'", source_, excerpt(name, 80));
    if (!e.is_object()) fail("{}: must be an object, not {}", where, describe_json(e));
    auto field = [&](const char* key) -> const json& {
      const auto it = e.find(key);
      if (it == e.end()) fail("{}: no '{}'", where, key);
      return *it;
    };
    const json& dtype = field("dtype");
    if (!dtype.is_string()) fail("{}: 'dtype' must be a string, not {}", where, describe_json(dtype));
    const std::string& dname = dtype.get_ref<const std::string&>();
    SafetensorsTensor t;
    t.name = name;
    const auto* readable = std::find_if(std::begin(kReadable), std::end(kReadable),
                                        [&](const Element& x) { return dname == x.name; });
    if (readable == std::end(kReadable)) {
      const bool known = std::any_of(std::begin(kOther), std::end(kOther), [&](const char* x) { return dname == x; });
      fail("{}: dtype {} {} (tally reads F32, F16 and BF16)", where, describe_json(dtype),
           known ? "is not supported" : "is not a safetensors dtype");
    }
    t.type = readable->type;
    const json& shape = field("shape");
    if (!shape.is_array() || shape.size() > 4)
      fail("{}: 'shape' must be a list of at most 4 sizes, not {}", where, describe_json(shape));
    uint64_t count = 1;
    for (const json& d : shape) {
      if (!d.is_number_unsigned()) fail("{}: 'shape' holds {}, not a size", where, describe_json(d));
      const auto c = checked_mul(count, d.get<uint64_t>());
      if (!c) fail("{}: 'shape' has more than 2^64 elements", where);
      count = *c;
      t.shape.push_back(d.get<uint64_t>());
    }
    const uint64_t elem = traits(t.type).type_size;
    const auto bytes_needed = checked_mul(count, elem);
    if (!bytes_needed) fail("{}: 'shape' needs more than 2^64 bytes", where);
    const json& offs = field("data_offsets");
    if (!offs.is_array() || offs.size() != 2 || !offs[0].is_number_unsigned() || !offs[1].is_number_unsigned())
      fail("{}: 'data_offsets' must be two byte offsets [begin, end], not {}", where, describe_json(offs));
    const uint64_t begin = offs[0].get<uint64_t>(), end = offs[1].get<uint64_t>();
    if (begin > end || end > data_size)
      fail("{}: data_offsets [{}, {}] do not lie inside the {}-byte data section", where, begin, end, data_size);
    if (end - begin != *bytes_needed)
      fail("{}: data_offsets [{}, {}] hold {} bytes, but its shape of {} {} values needs {}", where, begin, end,
           end - begin, count, dname, *bytes_needed);
    t.data = data + begin;
    t.n_bytes = end - begin;
    if (reinterpret_cast<uintptr_t>(t.data) % elem != 0)
      fail("{}: data at byte {} of the file is not aligned to its {}-byte elements", where, 8 + n + begin, elem);
    tensors_.push_back(std::move(t));
  }
  std::sort(tensors_.begin(), tensors_.end(), [](const auto& a, const auto& b) { return a.data < b.data; });
  for (size_t k = 1; k < tensors_.size(); ++k) {
    const auto& prev = tensors_[k - 1];
    if (prev.data + prev.n_bytes > tensors_[k].data)
      fail("{}: tensors '{}' and '{}' overlap in the data section", source_, excerpt(prev.name, 80),
           excerpt(tensors_[k].name, 80));
  }
}

}  // namespace tally
