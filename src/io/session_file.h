#pragma once
// The file a saved session lives in: a model's KV cache for the positions a
// conversation holds, with its tokens, so that the conversation can go on in
// another process without recomputing them.
//
//   "TALLYKV\0"  u32 version (1)  u32 flags (0)  u64 model fingerprint
//   u32 cache type (GGUF type id: F32 or F16)  u32 block size (informative)
//   u32 layers  u32 kv heads  u32 head dim  u64 tokens  u64 meta bytes
//   meta (UTF-8, e.g. a chat's messages as JSON)
//   tokens (i32 each)
//   per layer: K of every position, then V of every position
//     (kv heads x head dim numbers of the cache type per position)
//   u64 checksum: FNV-1a over every byte before it
//
// Little-endian. The reader checks every size against the file before it
// reads, and the checksum, so a truncated or altered file is refused with the
// field and the byte offset. write_session_file() writes through an
// AtomicFile (io/atomic_file.h): an interrupted save never leaves a broken
// file under the name, and only a regular file (or a new one) is replaced.
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace tally {

inline constexpr uint32_t kSessionFileVersion = 1;

struct SessionHeader {
  uint32_t version = kSessionFileVersion;
  uint64_t model_fingerprint = 0;
  DType cache_type = DType::F16;
  uint32_t block_size = 0;
  uint32_t n_layer = 0, n_kv_head = 0, head_dim = 0;
  uint64_t n_tokens = 0;
  std::string meta;

  uint64_t vector_bytes() const;  // one position's K (or V) in one layer
};

// What a reader hands out: the header, and views into the bytes it read.
struct SessionData {
  SessionHeader header;
  std::vector<int32_t> tokens;
  std::vector<uint8_t> kv;  // (layer, K then V, position, kv heads x head dim) in the cache type
  const uint8_t* k(uint32_t layer, uint64_t pos) const;
  const uint8_t* v(uint32_t layer, uint64_t pos) const;
};

// Writes atomically (io/atomic_file.h). kv_of(layer, k, v) fills
// one layer's K and V of every position (n_tokens x vector_bytes each).
// after_layer, if set, is called after each layer is written (tests use it to
// interrupt a save). Throws tally::Error naming the path and the OS error.
void write_session_file(const std::string& path, const SessionHeader& h, std::span<const int32_t> tokens,
                        const std::function<void(uint32_t layer, uint8_t* k, uint8_t* v)>& kv_of,
                        const std::function<void(uint32_t layer)>& after_layer = {});

// Parses and checks a whole file (its bytes, `source` naming it in errors).
SessionData parse_session_file(const uint8_t* data, uint64_t size, const std::string& source);
SessionData read_session_file(const std::string& path);

// FNV-1a, 64 bits: any single changed byte changes it.
uint64_t fnv1a64(const uint8_t* p, uint64_t n, uint64_t h = 0xcbf29ce484222325ull);

}  // namespace tally
