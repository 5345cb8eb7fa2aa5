#pragma once
// A GGUF file (versions 2 and 3), memory-mapped and fully validated on open:
// every count, length, shape and offset is bounds- and overflow-checked, tensor
// data ranges lie inside the data section, are aligned and do not overlap.
// The same view can be assembled from another format (model/hf_folder.h), whose
// reader has validated its bytes: metadata and tensors as a GGUF file would
// hold them, the tensor data in the files it keeps mapped.
// After construction every accessor is safe; the object is immutable.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "io/gguf_value.h"
#include "io/mapped_file.h"

namespace tally {

struct GgufTensorInfo {
  std::string name;
  std::vector<uint64_t> dims;  // dims[0] is the contiguous axis (ggml "ne")
  DType type = DType::F32;
  uint64_t offset = 0;  // relative to the data section
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;
  const uint8_t* data = nullptr;  // into the mapping

  uint64_t dim(size_t i) const { return i < dims.size() ? dims[i] : 1; }
  std::string shape_string() const;  // "{576, 49152}"
};

class GgufFile {
 public:
  // Opens and validates; throws tally::Error naming the file, field and byte offset.
  explicit GgufFile(const std::string& path);
  // Parses an in-memory image (used by fuzzing and tests); `bytes` must outlive this.
  GgufFile(const uint8_t* bytes, uint64_t size, std::string source);
  // An assembled view (version 0, no data section): `tensors` point into
  // `maps` or `owned`, which it keeps. Throws on a duplicate key or tensor name.
  GgufFile(std::string source, std::vector<std::pair<std::string, GgufValue>> kv, std::vector<GgufTensorInfo> tensors,
           std::vector<MappedFile> maps, std::vector<std::unique_ptr<uint8_t[]>> owned);

  const std::string& path() const { return source_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return size_; }

  // Metadata in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  const GgufValue* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }
  // Typed getters: throw naming the file and the key if missing or of the wrong type.
  const GgufValue& get(std::string_view key) const;
  std::string get_string(std::string_view key) const;
  std::string get_string(std::string_view key, std::string_view fallback) const;
  uint64_t get_u64(std::string_view key) const;
  uint64_t get_u64(std::string_view key, uint64_t fallback) const;
  double get_f64(std::string_view key, double fallback) const;
  bool get_bool(std::string_view key, bool fallback) const;
  const std::vector<GgufValue>& get_array(std::string_view key) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(std::string_view name) const;
  uint64_t total_tensor_bytes() const;
  // Drops a tensor's pages from memory once it has been copied elsewhere (no-op for in-memory images).
  void release(const GgufTensorInfo& t) const {
    for (const MappedFile& m : maps_)
      if (t.data >= m.data() && t.data < m.data() + m.size()) m.release(t.data, t.n_bytes);
  }

 private:
  void parse(const uint8_t* bytes, uint64_t size);
  template <typename F>
  auto typed(F&& read) const;

  std::vector<MappedFile> maps_;
  std::vector<std::unique_ptr<uint8_t[]>> owned_;
  std::string source_;
  uint64_t size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::map<std::string, size_t, std::less<>> kv_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace tally
