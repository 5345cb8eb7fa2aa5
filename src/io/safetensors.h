#pragma once
// A safetensors file (Hugging Face): an 8-byte little-endian header length N,
// N bytes of JSON ({"name": {"dtype", "shape", "data_offsets": [begin, end]},
// optional "__metadata__"}), then the data section. Memory-mapped and fully
// validated on open: the header's length, JSON and nesting, each entry's
// fields, dtype (F32, F16 and BF16 are read; others are refused by name),
// shape (at most 4 dimensions, element count and byte size in 64 bits), byte
// range inside the data section and consistent with the shape, alignment to
// the element size, and no two tensors overlapping. After construction every
// accessor is safe; the object is immutable.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "io/mapped_file.h"

namespace tally {

struct SafetensorsTensor {
  std::string name;
  DType type = DType::F32;
  std::vector<uint64_t> shape;  // outermost first, as in PyTorch (GGUF's dims reversed)
  const uint8_t* data = nullptr;
  uint64_t n_bytes = 0;
};

class SafetensorsFile {
 public:
  // A header larger than this is refused (real ones are well under 1 MiB).
  static constexpr uint64_t kMaxHeaderBytes = uint64_t{64} << 20;

  // Throws tally::Error naming the file, the tensor and the field.
  explicit SafetensorsFile(const std::string& path);
  // Parses an in-memory image (fuzzing, tests); `bytes` must outlive this.
  SafetensorsFile(const uint8_t* bytes, uint64_t size, std::string source);

  const std::string& path() const { return source_; }
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }  // in data order
  // The mapping itself moves out with the file (to keep the data alive elsewhere).
  std::optional<MappedFile> take_mapping() { return std::move(map_); }

 private:
  void parse(const uint8_t* bytes, uint64_t size);

  std::optional<MappedFile> map_;
  std::string source_;
  std::vector<SafetensorsTensor> tensors_;
};

}  // namespace tally
