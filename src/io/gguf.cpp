#include "io/gguf.h"

#include <algorithm>

#include "core/checked_math.h"
#include "core/error.h"
#include "core/printable.h"
#include "io/byte_reader.h"

namespace tally {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
constexpr int kMaxArrayDepth = 8;
constexpr uint64_t kMaxTensorName = 64;
constexpr uint32_t kMaxDims = 4;
constexpr uint64_t kMaxArrayElements = uint64_t{1} << 24;
// Counts are only bounded by the file size, and each parsed record takes far
// more memory than its encoding: reserve at most this many up front and let
// the vectors grow with what is actually parsed.
constexpr uint64_t kMaxReserve = 4096;

// Smallest encoded size of a value of type t: bounds the counts a file may claim.
uint64_t min_encoded_size(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::BOOL: return 1;
    case GgufType::U16: case GgufType::I16: return 2;
    case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
    case GgufType::U64: case GgufType::I64: case GgufType::F64: return 8;
    case GgufType::STRING: return 8;
    case GgufType::ARRAY: return 12;
  }
  return 1;
}

bool valid_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::F64); }

class Parser {
 public:
  Parser(ByteReader& r) : r_(r) {}

  GgufValue value(GgufType type, const std::string& key, int depth) {
    GgufValue v;
    v.type = type;
    const auto name = [&key] { return field(key); };
    switch (type) {
      case GgufType::U8: v.u = r_.read_lazy<uint8_t>(name); break;
      case GgufType::I8: v.i = r_.read_lazy<int8_t>(name); break;
      case GgufType::U16: v.u = r_.read_lazy<uint16_t>(name); break;
      case GgufType::I16: v.i = r_.read_lazy<int16_t>(name); break;
      case GgufType::U32: v.u = r_.read_lazy<uint32_t>(name); break;
      case GgufType::I32: v.i = r_.read_lazy<int32_t>(name); break;
      case GgufType::U64: v.u = r_.read_lazy<uint64_t>(name); break;
      case GgufType::I64: v.i = r_.read_lazy<int64_t>(name); break;
      case GgufType::F32: v.f = r_.read_lazy<float>(name); break;
      case GgufType::F64: v.f = r_.read_lazy<double>(name); break;
      case GgufType::BOOL: {
        const uint64_t at = r_.offset();
        const auto b = r_.read_lazy<uint8_t>(name);
        if (b > 1) fail("{}: metadata '{}' at byte {}: bool value {} is not 0 or 1", r_.source(), key, at, b);
        v.u = b;
        break;
      }
      case GgufType::STRING: v.s = r_.read_string_lazy(name); break;
      case GgufType::ARRAY: {
        if (depth >= kMaxArrayDepth)
          fail("{}: metadata '{}' at byte {}: arrays nested deeper than {}", r_.source(), key, r_.offset(),
               kMaxArrayDepth);
        const uint64_t at = r_.offset();
        const auto et = r_.read<uint32_t>(field(key, "array element type"));
        if (!valid_type(et))
          fail("{}: metadata '{}' at byte {}: unknown array element type {}", r_.source(), key, at, et);
        v.elem_type = static_cast<GgufType>(et);
        const uint64_t count_at = r_.offset();
        const auto n = r_.read<uint64_t>(field(key, "array length"));
        auto need = checked_mul(n, min_encoded_size(v.elem_type));
        if (!need || *need > r_.remaining())
          fail("{}: metadata '{}' at byte {}: array of {} {} does not fit in the {} bytes left", r_.source(), key,
               count_at, n, gguf_type_name(v.elem_type), r_.remaining());
        // Every element costs a GgufValue in memory: bound the total so that a
        // small file cannot claim gigabytes (real vocabularies hold < 1M entries).
        array_elements_ += n;
        if (array_elements_ > kMaxArrayElements)
          fail("{}: metadata '{}' at byte {}: more than {} array elements in the file", r_.source(), key, count_at,
               kMaxArrayElements);
        v.arr.reserve(std::min<uint64_t>(n, kMaxReserve));
        for (uint64_t k = 0; k < n; ++k) v.arr.push_back(value(v.elem_type, key, depth + 1));
        break;
      }
    }
    return v;
  }

 private:
  static std::string field(const std::string& key, std::string_view what = "value") {
    return fmt::format("{} of metadata '{}'", what, key);
  }
  ByteReader& r_;
  uint64_t array_elements_ = 0;
};

}  // namespace

std::string GgufTensorInfo::shape_string() const {
  std::string s = "{";
  for (size_t k = 0; k < dims.size(); ++k) s += fmt::format("{}{}", k ? ", " : "", dims[k]);
  return s + "}";
}

GgufFile::GgufFile(const std::string& path) : source_(path) {
  maps_.emplace_back(path);
  parse(maps_[0].data(), maps_[0].size());
}

GgufFile::GgufFile(std::string source, std::vector<std::pair<std::string, GgufValue>> kv,
                   std::vector<GgufTensorInfo> tensors, std::vector<MappedFile> maps,
                   std::vector<std::unique_ptr<uint8_t[]>> owned)
    : maps_(std::move(maps)), owned_(std::move(owned)), source_(std::move(source)), kv_(std::move(kv)),
      tensors_(std::move(tensors)) {
  for (const auto& m : maps_) size_ += m.size();
  for (size_t i = 0; i < kv_.size(); ++i)
    if (!kv_index_.emplace(kv_[i].first, i).second) fail("{}: duplicate metadata key '{}'", source_, kv_[i].first);
  for (size_t i = 0; i < tensors_.size(); ++i)
    if (!tensor_index_.emplace(tensors_[i].name, i).second)
      fail("{}: duplicate tensor name '{}'", source_, tensors_[i].name);
}

GgufFile::GgufFile(const uint8_t* bytes, uint64_t size, std::string source) : source_(std::move(source)) {
  parse(bytes, size);
}

void GgufFile::parse(const uint8_t* bytes, uint64_t size) {
  size_ = size;
  ByteReader r(bytes, size, source_);

  const auto magic = r.read<uint32_t>("magic");
  if (magic != kMagic)
    fail("{}: not a GGUF file: magic at byte 0 is {:02x} {:02x} {:02x} {:02x}, expected 47 47 55 46 (\"GGUF\")",
         source_, magic & 0xff, (magic >> 8) & 0xff, (magic >> 16) & 0xff, magic >> 24);
  version_ = r.read<uint32_t>("version");
  if (version_ != 2 && version_ != 3)
    fail("{}: GGUF version {} at byte 4 is not supported (supported: 2, 3)", source_, version_);

  const uint64_t counts_at = r.offset();
  const auto n_tensors = r.read<uint64_t>("tensor_count");
  const auto n_kv = r.read<uint64_t>("metadata_kv_count");
  // Each record has a minimum encoded size; a count that cannot fit is corrupt.
  if (n_tensors > r.remaining() / 24)
    fail("{}: tensor_count {} at byte {} cannot fit in a file of {} bytes", source_, n_tensors, counts_at, size);
  if (n_kv > r.remaining() / 13)
    fail("{}: metadata_kv_count {} at byte {} cannot fit in a file of {} bytes", source_, n_kv, counts_at + 8,
         size);

  Parser p(r);
  kv_.reserve(std::min<uint64_t>(n_kv, kMaxReserve));
  for (uint64_t k = 0; k < n_kv; ++k) {
    const uint64_t at = r.offset();
    std::string key = r.read_string(fmt::format("key of metadata #{}", k), 1 << 16);
    const uint64_t type_at = r.offset();
    const auto t = r.read<uint32_t>(fmt::format("value type of metadata '{}'", key));
    if (!valid_type(t)) fail("{}: metadata '{}' at byte {}: unknown value type {}", source_, key, type_at, t);
    GgufValue v = p.value(static_cast<GgufType>(t), key, 0);
    if (kv_index_.count(key)) fail("{}: duplicate metadata key '{}' at byte {}", source_, key, at);
    kv_index_.emplace(key, kv_.size());
    kv_.emplace_back(std::move(key), std::move(v));
  }

  if (const GgufValue* a = find("general.alignment")) {
    const uint64_t al = a->as_u64("general.alignment");
    if (al == 0 || (al & (al - 1)) != 0 || al > (1u << 20))
      fail("{}: general.alignment = {} is not a power of two up to 1 MiB", source_, al);
    alignment_ = al;
  }

  tensors_.reserve(std::min<uint64_t>(n_tensors, kMaxReserve));
  for (uint64_t k = 0; k < n_tensors; ++k) {
    const uint64_t at = r.offset();
    GgufTensorInfo ti;
    ti.name = r.read_string(fmt::format("name of tensor #{}", k), kMaxTensorName);
    const auto n_dims = r.read<uint32_t>(fmt::format("n_dims of tensor '{}'", ti.name));
    if (n_dims == 0 || n_dims > kMaxDims)
      fail("{}: tensor '{}' at byte {} has {} dimensions (1 to {} allowed)", source_, ti.name, at, n_dims, kMaxDims);
    uint64_t n_el = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t dim_at = r.offset();
      const auto dim = r.read<uint64_t>(fmt::format("dims[{}] of tensor '{}'", d, ti.name));
      auto prod = checked_mul(n_el, dim);
      if (dim == 0 || !prod || *prod > (uint64_t{1} << 50))
        fail("{}: tensor '{}' at byte {}: dimension {} = {} is zero or makes the tensor too large", source_,
             ti.name, dim_at, d, dim);
      n_el = *prod;
      ti.dims.push_back(dim);
    }
    const uint64_t type_at = r.offset();
    const auto type_id = r.read<uint32_t>(fmt::format("type of tensor '{}'", ti.name));
    const auto tr = dtype_traits(type_id);
    if (!tr) fail("{}: tensor '{}' at byte {} has unknown type id {}", source_, ti.name, type_at, type_id);
    ti.type = static_cast<DType>(type_id);
    if (ti.dims[0] % tr->block_size != 0)
      fail("{}: tensor '{}': row length {} is not a multiple of the {} block size {}", source_, ti.name,
           ti.dims[0], tr->name, tr->block_size);
    ti.n_elements = n_el;
    ti.n_bytes = n_el / tr->block_size * tr->type_size;  // n_el < 2^50, type_size < 2^9: no overflow
    const uint64_t off_at = r.offset();
    ti.offset = r.read<uint64_t>(fmt::format("offset of tensor '{}'", ti.name));
    if (ti.offset % alignment_ != 0)
      fail("{}: tensor '{}' at byte {}: data offset {} is not a multiple of the alignment {}", source_, ti.name,
           off_at, ti.offset, alignment_);
    if (tensor_index_.count(ti.name)) fail("{}: duplicate tensor name '{}' at byte {}", source_, ti.name, at);
    tensor_index_.emplace(ti.name, tensors_.size());
    tensors_.push_back(std::move(ti));
  }

  // A file without tensors (a vocab-only GGUF) may end before the aligned data section.
  const auto data_off = align_up(r.offset(), alignment_);
  if (!data_off || (*data_off > size && !tensors_.empty()))
    fail("{}: data section would start at byte {} past the end of the file ({} bytes)", source_,
         data_off.value_or(UINT64_MAX), size);
  data_offset_ = *data_off;

  for (auto& ti : tensors_) {
    auto begin = checked_add(data_offset_, ti.offset);
    auto end = begin ? checked_add(*begin, ti.n_bytes) : std::nullopt;
    if (!end || *end > size)
      fail("{}: tensor '{}' ({} bytes at data offset {}) extends past the end of the file ({} bytes)", source_,
           ti.name, ti.n_bytes, ti.offset, size);
    ti.data = bytes + *begin;
  }
  std::vector<const GgufTensorInfo*> by_offset;
  for (const auto& ti : tensors_) by_offset.push_back(&ti);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
  for (size_t k = 1; k < by_offset.size(); ++k) {
    const auto* prev = by_offset[k - 1];
    if (prev->offset + prev->n_bytes > by_offset[k]->offset)
      fail("{}: tensors '{}' (data offset {}, {} bytes) and '{}' (data offset {}) overlap", source_, prev->name,
           prev->offset, prev->n_bytes, by_offset[k]->name, by_offset[k]->offset);
  }
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

const GgufValue& GgufFile::get(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) fail("{}: required metadata '{}' is missing", source_, excerpt(key, 100));
  return *v;
}

// The value's own errors name the key; these add the file.
template <typename F>
auto GgufFile::typed(F&& read) const {
  try {
    return read();
  } catch (const Error& e) {
    fail("{}: {}", source_, e.what());
  }
}

std::string GgufFile::get_string(std::string_view key) const {
  const GgufValue& v = get(key);
  return typed([&] { return v.as_string(key); });
}
std::string GgufFile::get_string(std::string_view key, std::string_view fallback) const {
  const GgufValue* v = find(key);
  return v ? typed([&] { return v->as_string(key); }) : std::string(fallback);
}
uint64_t GgufFile::get_u64(std::string_view key) const {
  const GgufValue& v = get(key);
  return typed([&] { return v.as_u64(key); });
}
uint64_t GgufFile::get_u64(std::string_view key, uint64_t fallback) const {
  const GgufValue* v = find(key);
  return v ? typed([&] { return v->as_u64(key); }) : fallback;
}
double GgufFile::get_f64(std::string_view key, double fallback) const {
  const GgufValue* v = find(key);
  return v ? typed([&] { return v->as_f64(key); }) : fallback;
}
bool GgufFile::get_bool(std::string_view key, bool fallback) const {
  const GgufValue* v = find(key);
  return v ? typed([&] { return v->as_bool(key); }) : fallback;
}
const std::vector<GgufValue>& GgufFile::get_array(std::string_view key) const {
  const GgufValue& v = get(key);
  if (v.type != GgufType::ARRAY)
    fail("{}: metadata '{}' is a {}, expected an array", source_, excerpt(key, 100), gguf_type_name(v.type));
  return v.arr;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

uint64_t GgufFile::total_tensor_bytes() const {
  uint64_t total = 0;
  for (const auto& t : tensors_) total += t.n_bytes;
  return total;
}

}  // namespace tally
