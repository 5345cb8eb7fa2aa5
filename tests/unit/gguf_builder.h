#pragma once
// An in-memory GGUF writer for tests. It writes exactly what it is told, so it
// can also produce invalid files: any version, counts that lie, unknown type
// ids, misaligned or overlapping tensor offsets. `build()` records where each
// field landed (Layout) so tests can check the byte offsets in error messages
// and patch single fields.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tally::test {

// GGUF metadata value type ids.
enum : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};

// An encoded metadata value: its type id and its bytes (without the type id;
// array bytes start with the element type and count).
struct Meta {
  uint32_t type = kU8;
  std::vector<uint8_t> bytes;
};

namespace detail {
template <typename T>
void put(std::vector<uint8_t>& out, T v) {
  // Byte by byte: g++ 12 -O2 warns falsely (-Wstringop-overflow,
  // -Warray-bounds) on insert() or memcpy of a small array into a fresh vector.
  uint8_t b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // the host is little-endian, like GGUF
  for (uint8_t byte : b) out.push_back(byte);
}
inline void put_str(std::vector<uint8_t>& out, std::string_view s) {
  put<uint64_t>(out, s.size());
  for (char c : s) out.push_back(static_cast<uint8_t>(c));  // see put(): no insert()
}
template <typename T>
Meta scalar(uint32_t type, T v) {
  Meta m{type, {}};
  put(m.bytes, v);
  return m;
}
}  // namespace detail

inline Meta m_u8(uint8_t v) { return detail::scalar(kU8, v); }
inline Meta m_i8(int8_t v) { return detail::scalar(kI8, v); }
inline Meta m_u16(uint16_t v) { return detail::scalar(kU16, v); }
inline Meta m_i16(int16_t v) { return detail::scalar(kI16, v); }
inline Meta m_u32(uint32_t v) { return detail::scalar(kU32, v); }
inline Meta m_i32(int32_t v) { return detail::scalar(kI32, v); }
inline Meta m_f32(float v) { return detail::scalar(kF32, v); }
inline Meta m_bool(bool v) { return detail::scalar(kBool, static_cast<uint8_t>(v)); }
inline Meta m_u64(uint64_t v) { return detail::scalar(kU64, v); }
inline Meta m_i64(int64_t v) { return detail::scalar(kI64, v); }
inline Meta m_f64(double v) { return detail::scalar(kF64, v); }
inline Meta m_str(std::string_view s) {
  Meta m{kString, {}};
  detail::put_str(m.bytes, s);
  return m;
}
// An array of `elems`, all of type elem_type (elements may be arrays).
inline Meta m_array(uint32_t elem_type, const std::vector<Meta>& elems) {
  Meta m{kArray, {}};
  detail::put<uint32_t>(m.bytes, elem_type);
  detail::put<uint64_t>(m.bytes, elems.size());
  for (const auto& e : elems) m.bytes.insert(m.bytes.end(), e.bytes.begin(), e.bytes.end());
  return m;
}
inline Meta m_strings(std::initializer_list<std::string_view> ss) {
  std::vector<Meta> e;
  for (auto s : ss) e.push_back(m_str(s));
  return m_array(kString, e);
}
// An array header claiming `count` elements followed by `payload` as is.
inline Meta m_array_raw(uint32_t elem_type, uint64_t count, std::vector<uint8_t> payload = {}) {
  Meta m{kArray, {}};
  detail::put<uint32_t>(m.bytes, elem_type);
  detail::put<uint64_t>(m.bytes, count);
  m.bytes.insert(m.bytes.end(), payload.begin(), payload.end());
  return m;
}

// Where build() put each field (absolute byte offsets in the file).
struct Layout {
  struct Kv {
    uint64_t start, type, value;  // key length, value type id, value
  };
  struct Tensor {
    uint64_t start, n_dims, type, offset;  // name length, n_dims, type id, data offset
    std::vector<uint64_t> dims;
  };
  static constexpr uint64_t kVersionAt = 4, kTensorCountAt = 8, kKvCountAt = 16;
  std::vector<Kv> kvs;
  std::vector<Tensor> tensors;
  uint64_t data_offset = 0;  // start of the data section
};

class GgufBuilder {
 public:
  explicit GgufBuilder(uint32_t version = 3) : version_(version) {}

  GgufBuilder& version(uint32_t v) { version_ = v; return *this; }
  GgufBuilder& magic(uint32_t m) { magic_ = m; return *this; }
  // Header counts that differ from the number of records actually written.
  GgufBuilder& tensor_count(uint64_t n) { tensor_count_ = n; return *this; }
  GgufBuilder& kv_count(uint64_t n) { kv_count_ = n; return *this; }

  GgufBuilder& kv(std::string key, Meta v) {
    kvs_.emplace_back(std::move(key), std::move(v));
    return *this;
  }
  // Sets general.alignment (as a u32 record) and uses it for the data section.
  GgufBuilder& alignment(uint32_t a) {
    align_ = a;
    return kv("general.alignment", m_u32(a));
  }
  // Alignment used to lay out the data section without writing the key.
  GgufBuilder& layout_alignment(uint64_t a) { align_ = a; return *this; }

  // A tensor whose `data` goes at the first aligned offset after the data of
  // the tensors added before it.
  GgufBuilder& tensor(std::string name, std::vector<uint64_t> dims, uint32_t type,
                      std::vector<uint8_t> data) {
    uint64_t off = 0;
    for (const auto& t : tensors_) off = std::max<uint64_t>(off, round_up(t.offset + t.data.size()));
    return tensor_at(std::move(name), std::move(dims), type, off, std::move(data));
  }
  // A tensor at an explicit data offset (may be misaligned or overlapping).
  GgufBuilder& tensor_at(std::string name, std::vector<uint64_t> dims, uint32_t type,
                         uint64_t offset, std::vector<uint8_t> data) {
    tensors_.push_back({std::move(name), std::move(dims), type, offset, std::move(data)});
    return *this;
  }
  // Extra bytes after the data section (or instead of it).
  GgufBuilder& trailing(std::vector<uint8_t> bytes) { trailing_ = std::move(bytes); return *this; }

  std::vector<uint8_t> build(Layout* layout = nullptr) const {
    using detail::put;
    Layout lay;
    std::vector<uint8_t> out;
    put<uint32_t>(out, magic_);
    put<uint32_t>(out, version_);
    put<uint64_t>(out, tensor_count_.value_or(tensors_.size()));
    put<uint64_t>(out, kv_count_.value_or(kvs_.size()));
    for (const auto& [key, v] : kvs_) {
      Layout::Kv k{};
      k.start = out.size();
      detail::put_str(out, key);
      k.type = out.size();
      put<uint32_t>(out, v.type);
      k.value = out.size();
      out.insert(out.end(), v.bytes.begin(), v.bytes.end());
      lay.kvs.push_back(k);
    }
    for (const auto& t : tensors_) {
      Layout::Tensor lt{};
      lt.start = out.size();
      detail::put_str(out, t.name);
      lt.n_dims = out.size();
      put<uint32_t>(out, static_cast<uint32_t>(t.dims.size()));
      for (uint64_t d : t.dims) {
        lt.dims.push_back(out.size());
        put<uint64_t>(out, d);
      }
      lt.type = out.size();
      put<uint32_t>(out, t.type);
      lt.offset = out.size();
      put<uint64_t>(out, t.offset);
      lay.tensors.push_back(lt);
    }
    lay.data_offset = round_up(out.size());
    uint64_t data_end = 0;
    for (const auto& t : tensors_)
      if (!t.data.empty()) data_end = std::max<uint64_t>(data_end, t.offset + t.data.size());
    // Like the ggml and gguf-py writers, pad to the data section even when it is empty.
    out.resize(lay.data_offset + data_end, 0);
    for (const auto& t : tensors_)
      if (!t.data.empty()) std::memcpy(out.data() + lay.data_offset + t.offset, t.data.data(), t.data.size());
    out.insert(out.end(), trailing_.begin(), trailing_.end());
    if (layout) *layout = std::move(lay);
    return out;
  }

 private:
  struct TensorRec {
    std::string name;
    std::vector<uint64_t> dims;
    uint32_t type;
    uint64_t offset;
    std::vector<uint8_t> data;
  };
  uint64_t round_up(uint64_t x) const { return align_ == 0 ? x : (x + align_ - 1) / align_ * align_; }

  uint32_t magic_ = 0x46554747;  // "GGUF"
  uint32_t version_;
  std::optional<uint64_t> tensor_count_, kv_count_;
  uint64_t align_ = 32;
  std::vector<std::pair<std::string, Meta>> kvs_;
  std::vector<TensorRec> tensors_;
  std::vector<uint8_t> trailing_;
};

}  // namespace tally::test
