#include "io/session_file.h"

#include <cstring>
#include <filesystem>

#include "core/checked_math.h"
#include "core/error.h"
#include "io/atomic_file.h"
#include "io/byte_reader.h"
#include "io/mapped_file.h"

namespace tally {

namespace {

constexpr char kMagic[8] = {'T', 'A', 'L', 'L', 'Y', 'K', 'V', '\0'};
constexpr uint32_t kMaxDim = 1u << 20;         // per field: far beyond any model
constexpr uint64_t kMaxMeta = 64ull << 20;     // a chat transcript, not a payload

uint64_t mul_or_fail(uint64_t a, uint64_t b, const std::string& source) {
  const auto r = checked_mul(a, b);
  if (!r) fail("{}: the sizes in the header overflow 64 bits", source);
  return *r;
}

// Appends to an atomic file, keeping the running checksum.
class Writer {
 public:
  explicit Writer(AtomicFile& f) : f_(f) {}
  void put(const void* p, size_t n) {
    sum_ = fnv1a64(static_cast<const uint8_t*>(p), n, sum_);
    f_.write(p, n);
  }
  template <typename T>
  void put(T v) {
    put(&v, sizeof v);
  }
  uint64_t sum() const { return sum_; }

 private:
  AtomicFile& f_;
  uint64_t sum_ = 0xcbf29ce484222325ull;
};

}  // namespace

uint64_t fnv1a64(const uint8_t* p, uint64_t n, uint64_t h) {
  for (uint64_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

uint64_t SessionHeader::vector_bytes() const {
  return static_cast<uint64_t>(n_kv_head) * row_bytes(cache_type, head_dim);
}

const uint8_t* SessionData::k(uint32_t layer, uint64_t pos) const {
  const uint64_t vb = header.vector_bytes(), n = header.n_tokens;
  return kv.data() + (2ull * layer * n + pos) * vb;
}
const uint8_t* SessionData::v(uint32_t layer, uint64_t pos) const {
  const uint64_t vb = header.vector_bytes(), n = header.n_tokens;
  return kv.data() + ((2ull * layer + 1) * n + pos) * vb;
}

void write_session_file(const std::string& path, const SessionHeader& h, std::span<const int32_t> tokens,
                        const std::function<void(uint32_t, uint8_t*, uint8_t*)>& kv_of,
                        const std::function<void(uint32_t)>& after_layer) {
  if (tokens.size() != h.n_tokens) fail("session header says {} tokens, {} given", h.n_tokens, tokens.size());
  AtomicFile file(path, "session file");
  Writer w(file);
  w.put(kMagic, sizeof kMagic);
  w.put(h.version);
  w.put(uint32_t{0});
  w.put(h.model_fingerprint);
  w.put(static_cast<uint32_t>(h.cache_type));
  w.put(h.block_size);
  w.put(h.n_layer);
  w.put(h.n_kv_head);
  w.put(h.head_dim);
  w.put(h.n_tokens);
  w.put(static_cast<uint64_t>(h.meta.size()));
  w.put(h.meta.data(), h.meta.size());
  w.put(tokens.data(), tokens.size() * sizeof(int32_t));
  const uint64_t layer_bytes = h.n_tokens * h.vector_bytes();
  std::vector<uint8_t> k(layer_bytes), v(layer_bytes);
  for (uint32_t l = 0; l < h.n_layer; ++l) {
    kv_of(l, k.data(), v.data());
    w.put(k.data(), k.size());
    w.put(v.data(), v.size());
    if (after_layer) after_layer(l);
  }
  w.put(w.sum());
  file.commit();
}

SessionData parse_session_file(const uint8_t* data, uint64_t size, const std::string& source) {
  ByteReader r(data, size, source);
  if (size < sizeof kMagic || std::memcmp(data, kMagic, sizeof kMagic) != 0)
    fail("{}: not a tally session file (its first bytes are not the session magic)", source);
  r.skip(sizeof kMagic, "magic");
  SessionData d;
  SessionHeader& h = d.header;
  h.version = r.read<uint32_t>("version");
  if (h.version > kSessionFileVersion)
    fail("{}: session file format {} is newer than this tally reads (format {})", source, h.version,
         kSessionFileVersion);
  if (h.version < 1) fail("{}: session file format {} is not a valid version", source, h.version);
  if (const uint32_t flags = r.read<uint32_t>("flags"); flags != 0)
    fail("{}: session file flags {:#x} are unknown to this tally", source, flags);
  h.model_fingerprint = r.read<uint64_t>("model fingerprint");
  const uint32_t type = r.read<uint32_t>("cache type");
  if (type != static_cast<uint32_t>(DType::F32) && type != static_cast<uint32_t>(DType::F16) &&
      type != static_cast<uint32_t>(DType::Q8_0) && type != static_cast<uint32_t>(DType::Q4_0))
    fail("{}: cache type id {} at byte 24 is not f32, f16, q8_0 or q4_0", source, type);
  h.cache_type = static_cast<DType>(type);
  h.block_size = r.read<uint32_t>("block size");
  h.n_layer = r.read<uint32_t>("layers");
  h.n_kv_head = r.read<uint32_t>("kv heads");
  h.head_dim = r.read<uint32_t>("head dim");
  for (const auto& [name, v] : {std::pair{"layers", h.n_layer}, {"kv heads", h.n_kv_head}, {"head dim", h.head_dim}})
    if (v == 0 || v > kMaxDim) fail("{}: {} = {} is out of range (1 to {})", source, name, v, kMaxDim);
  if (h.head_dim % traits(h.cache_type).block_size != 0)
    fail("{}: a {} cache needs a head dim that is a multiple of {}, the header says {}", source,
         dtype_name(h.cache_type), traits(h.cache_type).block_size, h.head_dim);
  h.n_tokens = r.read<uint64_t>("token count");
  const uint64_t meta = r.read<uint64_t>("meta length");
  if (meta > kMaxMeta) fail("{}: meta length {} is over the limit of {}", source, meta, kMaxMeta);
  // Every size the rest needs, checked against the file before anything is read.
  const uint64_t token_bytes = mul_or_fail(h.n_tokens, sizeof(int32_t), source);
  const uint64_t kv_bytes = mul_or_fail(mul_or_fail(2ull * h.n_layer, h.n_tokens, source), h.vector_bytes(), source);
  uint64_t need = r.offset();
  for (const uint64_t part : {meta, token_bytes, kv_bytes, uint64_t{8}})
    if (__builtin_add_overflow(need, part, &need))
      fail("{}: the header's sizes ({} tokens, {} layers) overflow 64 bits", source, h.n_tokens, h.n_layer);
  if (need != size)
    fail("{}: the header describes {} bytes ({} tokens, {} layers) but the file has {}: truncated or altered", source,
         need, h.n_tokens, h.n_layer, size);
  const uint64_t sum = fnv1a64(data, size - 8);
  uint64_t stored;
  std::memcpy(&stored, data + size - 8, 8);
  if (sum != stored) fail("{}: checksum mismatch: the file is corrupted", source);
  h.meta.assign(reinterpret_cast<const char*>(data + r.offset()), meta);
  r.skip(meta, "meta");
  d.tokens.resize(h.n_tokens);
  if (token_bytes) std::memcpy(d.tokens.data(), data + r.offset(), token_bytes);
  r.skip(token_bytes, "tokens");
  d.kv.assign(data + r.offset(), data + r.offset() + kv_bytes);
  return d;
}

SessionData read_session_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) fail("{}: not a session file (missing, or not a regular file)", path);
  const MappedFile f(path);
  return parse_session_file(f.data(), f.size(), path);
}

}  // namespace tally
