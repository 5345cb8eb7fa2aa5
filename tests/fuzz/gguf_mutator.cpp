#include "gguf_mutator.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

namespace tally::fuzz {
namespace {

enum : uint32_t { kU8, kI8, kU16, kI16, kU32, kI32, kF32, kBool, kString, kArray, kU64, kI64, kF64 };

struct Kv {
  std::string key;
  uint32_t type = kU32;
  std::vector<uint8_t> value;  // encoded value, as in the file
};

struct Tensor {
  std::string name;
  std::vector<uint64_t> dims;
  uint32_t type = 0;
  uint64_t offset = 0;
};

struct Doc {
  uint32_t version = 3;
  std::optional<uint64_t> n_tensors, n_kv;  // header counts that lie
  std::vector<Kv> kvs;
  std::vector<Tensor> tensors;
  std::vector<uint8_t> data;  // the data section
};

class Reader {
 public:
  Reader(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  template <typename T>
  bool get(T& v) {
    if (n_ - pos_ < sizeof(T)) return false;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool str(std::string& s) {
    uint64_t len = 0;
    if (!get(len) || len > n_ - pos_) return false;
    s.assign(reinterpret_cast<const char*>(p_ + pos_), len);
    pos_ += len;
    return true;
  }
  // Skips one encoded value of type t; false when it does not fit.
  bool skip(uint32_t t, int depth) {
    static const size_t fixed[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    if (t > kF64) return false;
    if (t == kString) {
      std::string s;
      return str(s);
    }
    if (t == kArray) {
      uint32_t et = 0;
      uint64_t n = 0;
      if (depth > 3 || !get(et) || !get(n) || et > kF64) return false;
      if (et != kString && et != kArray) {
        if (n > (n_ - pos_) / fixed[et]) return false;
        pos_ += n * fixed[et];
        return true;
      }
      for (uint64_t k = 0; k < n; ++k)
        if (!skip(et, depth + 1)) return false;
      return true;
    }
    if (n_ - pos_ < fixed[t]) return false;
    pos_ += fixed[t];
    return true;
  }
  size_t pos() const { return pos_; }
  const uint8_t* at(size_t off) const { return p_ + off; }
  size_t size() const { return n_; }

 private:
  const uint8_t* p_;
  size_t n_;
  size_t pos_ = 0;
};

uint64_t alignment_of(const Doc& d) {
  for (const Kv& kv : d.kvs)
    if (kv.key == "general.alignment" && kv.type == kU32 && kv.value.size() == 4) {
      uint32_t a = 0;
      std::memcpy(&a, kv.value.data(), 4);
      if (a != 0 && (a & (a - 1)) == 0 && a <= (1u << 20)) return a;
    }
  return 32;
}

std::optional<Doc> read(const uint8_t* p, size_t n) {
  Reader r(p, n);
  Doc d;
  uint32_t magic = 0;
  uint64_t n_tensors = 0, n_kv = 0;
  if (!r.get(magic) || magic != 0x46554747 || !r.get(d.version) || !r.get(n_tensors) || !r.get(n_kv)) return std::nullopt;
  if (n_kv > 4096 || n_tensors > 4096) return std::nullopt;
  for (uint64_t k = 0; k < n_kv; ++k) {
    Kv kv;
    if (!r.str(kv.key) || !r.get(kv.type)) return std::nullopt;
    const size_t start = r.pos();
    if (!r.skip(kv.type, 0)) return std::nullopt;
    kv.value.assign(r.at(start), r.at(r.pos()));
    d.kvs.push_back(std::move(kv));
  }
  for (uint64_t k = 0; k < n_tensors; ++k) {
    Tensor t;
    uint32_t n_dims = 0;
    if (!r.str(t.name) || !r.get(n_dims) || n_dims > 8) return std::nullopt;
    t.dims.resize(n_dims);
    for (auto& dim : t.dims)
      if (!r.get(dim)) return std::nullopt;
    if (!r.get(t.type) || !r.get(t.offset)) return std::nullopt;
    d.tensors.push_back(std::move(t));
  }
  const uint64_t align = alignment_of(d);
  const size_t data_at = (r.pos() + align - 1) / align * align;
  if (data_at < n) d.data.assign(r.at(data_at), r.at(n));
  return d;
}

template <typename T>
void put(std::vector<uint8_t>& out, T v) {
  uint8_t b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.insert(out.end(), b, b + sizeof(T));
}

void put_str(std::vector<uint8_t>& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

std::vector<uint8_t> write(const Doc& d) {
  std::vector<uint8_t> out;
  put<uint32_t>(out, 0x46554747);
  put<uint32_t>(out, d.version);
  put<uint64_t>(out, d.n_tensors.value_or(d.tensors.size()));
  put<uint64_t>(out, d.n_kv.value_or(d.kvs.size()));
  for (const Kv& kv : d.kvs) {
    put_str(out, kv.key);
    put<uint32_t>(out, kv.type);
    out.insert(out.end(), kv.value.begin(), kv.value.end());
  }
  for (const Tensor& t : d.tensors) {
    put_str(out, t.name);
    put<uint32_t>(out, static_cast<uint32_t>(t.dims.size()));
    for (uint64_t dim : t.dims) put<uint64_t>(out, dim);
    put<uint32_t>(out, t.type);
    put<uint64_t>(out, t.offset);
  }
  const uint64_t align = alignment_of(d);
  out.resize((out.size() + align - 1) / align * align, 0);
  out.insert(out.end(), d.data.begin(), d.data.end());
  return out;
}

// Values that sit on the edges the reader and the loaders check.
const uint64_t kInteresting[] = {0,          1,          2,          3,          7,         8,
                                 16,         31,         32,         33,         64,        255,
                                 256,        1024,       4096,       65535,      65536,     1u << 24,
                                 0x7fffffff, 0x80000000, 0xffffffff, 1ull << 32, 1ull << 50, 1ull << 62,
                                 INT64_MAX,  1ull << 63, UINT64_MAX, UINT64_MAX - 1};

// Keys the loaders read (and their value types), to add or retype.
struct KnownKey {
  const char* key;
  uint32_t type;
};
const KnownKey kKeys[] = {
    {"general.architecture", kString},           {"general.alignment", kU32},
    {"llama.block_count", kU32},                 {"llama.context_length", kU32},
    {"llama.embedding_length", kU32},            {"llama.feed_forward_length", kU32},
    {"llama.attention.head_count", kU32},        {"llama.attention.head_count_kv", kU32},
    {"llama.attention.key_length", kU32},        {"llama.attention.value_length", kU32},
    {"llama.rope.dimension_count", kU32},        {"llama.rope.freq_base", kF32},
    {"llama.attention.layer_norm_rms_epsilon", kF32}, {"llama.vocab_size", kU32},
    {"tokenizer.ggml.model", kString},           {"tokenizer.ggml.pre", kString},
    {"tokenizer.ggml.bos_token_id", kU32},       {"tokenizer.ggml.eos_token_id", kU32},
    {"tokenizer.ggml.unknown_token_id", kU32},   {"tokenizer.ggml.add_bos_token", kBool},
    {"tokenizer.ggml.add_space_prefix", kBool},  {"tokenizer.chat_template", kString},
};
const char* kStrings[] = {"llama", "gpt2", "smollm", "default", "qwen2", "llama-bpe", "starcoder", "",
                          "\xff\xfe", "a b", "<|im_start|>", "<0x41>", "\xe2\x96\x81"};
const char* kTensorNames[] = {"token_embd.weight", "output.weight", "output_norm.weight",
                              "blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_v.weight",
                              "blk.0.attn_output.weight", "blk.0.attn_norm.weight", "blk.0.ffn_norm.weight",
                              "blk.0.ffn_gate.weight", "blk.0.ffn_up.weight", "blk.0.ffn_down.weight",
                              "blk.1.attn_q.weight", "blk.99999999999999999999.x"};

std::vector<uint8_t> scalar(uint32_t type, uint64_t v) {
  std::vector<uint8_t> out;
  static const size_t size[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
  if (type == kF32) {
    const float f = static_cast<float>(static_cast<int64_t>(v));
    put(out, f);
  } else if (type == kF64) {
    const double f = static_cast<double>(static_cast<int64_t>(v));
    put(out, f);
  } else if (type <= kF64 && size[type] > 0) {
    out.resize(size[type]);
    std::memcpy(out.data(), &v, size[type]);
  }
  return out;
}

size_t emit(const Doc& d, uint8_t* data, size_t max_size) {
  const std::vector<uint8_t> out = write(d);
  const size_t n = std::min(out.size(), max_size);
  std::memcpy(data, out.data(), n);
  return n;
}

}  // namespace

size_t mutate_gguf(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  std::minstd_rand rng(seed);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % std::max<size_t>(n, 1)); };
  auto interesting = [&] {
    const uint64_t v = kInteresting[pick(std::size(kInteresting))];
    return rng() % 4 == 0 ? v + pick(3) - 1 : v;
  };
  std::optional<Doc> parsed = pick(8) == 0 ? std::nullopt : read(data, size);
  if (!parsed) return LLVMFuzzerMutate(data, size, max_size);
  Doc& d = *parsed;

  switch (pick(14)) {
    case 0:  // a value's bytes, as bytes
      if (!d.kvs.empty()) {
        Kv& kv = d.kvs[pick(d.kvs.size())];
        const size_t old = kv.value.size();
        if (old == 0) break;
        kv.value.resize(old * 2 + 16);
        kv.value.resize(LLVMFuzzerMutate(kv.value.data(), old, kv.value.size()));
      }
      break;
    case 1:  // a record's type id (valid or not); the value bytes stay
      if (!d.kvs.empty()) d.kvs[pick(d.kvs.size())].type = static_cast<uint32_t>(pick(15));
      break;
    case 2:  // an integer value on an edge
      if (!d.kvs.empty()) {
        Kv& kv = d.kvs[pick(d.kvs.size())];
        if (kv.type != kString && kv.type != kArray) kv.value = scalar(kv.type, interesting());
      }
      break;
    case 3: {  // a known key, added or set, with a value of its type or another
      const KnownKey& k = kKeys[pick(std::size(kKeys))];
      Kv kv{k.key, pick(4) == 0 ? static_cast<uint32_t>(pick(13)) : k.type, {}};
      if (kv.type == kString) {
        const std::string s = kStrings[pick(std::size(kStrings))];
        put<uint64_t>(kv.value, s.size());
        kv.value.insert(kv.value.end(), s.begin(), s.end());
      } else if (kv.type == kArray) {
        put<uint32_t>(kv.value, kU32);
        put<uint64_t>(kv.value, 1);
        put<uint32_t>(kv.value, static_cast<uint32_t>(interesting()));
      } else {
        kv.value = scalar(kv.type, interesting());
      }
      auto it = std::find_if(d.kvs.begin(), d.kvs.end(), [&](const Kv& x) { return x.key == kv.key; });
      if (it != d.kvs.end())
        *it = std::move(kv);
      else
        d.kvs.push_back(std::move(kv));
      break;
    }
    case 4:  // a record dropped, duplicated or moved
      if (!d.kvs.empty()) {
        const size_t i = pick(d.kvs.size());
        if (pick(3) == 0)
          d.kvs.push_back(d.kvs[i]);
        else if (pick(2) == 0)
          d.kvs.erase(d.kvs.begin() + static_cast<std::ptrdiff_t>(i));
        else
          std::swap(d.kvs[i], d.kvs[pick(d.kvs.size())]);
      }
      break;
    case 5: {  // the length of a string or an array, or an array's element type
      std::vector<Kv*> lists;
      for (Kv& kv : d.kvs)
        if ((kv.type == kString && kv.value.size() >= 8) || (kv.type == kArray && kv.value.size() >= 12))
          lists.push_back(&kv);
      if (lists.empty()) break;
      Kv& kv = *lists[pick(lists.size())];
      const uint64_t v = pick(2) == 0 ? interesting() : 0;
      if (kv.type == kString) {
        uint64_t len = 0;
        std::memcpy(&len, kv.value.data(), 8);
        len = v ? v : len + pick(5) - 2;
        std::memcpy(kv.value.data(), &len, 8);
      } else if (pick(3) == 0) {
        const auto et = static_cast<uint32_t>(pick(14));
        std::memcpy(kv.value.data(), &et, 4);
      } else {
        uint64_t n = 0;
        std::memcpy(&n, kv.value.data() + 4, 8);
        n = v ? v : (pick(2) == 0 ? n / 2 : n + pick(5) - 2);
        std::memcpy(kv.value.data() + 4, &n, 8);
        if (pick(2) == 0 && kv.value.size() > 12) kv.value.resize(12 + pick(kv.value.size() - 12));  // elements cut too
      }
      break;
    }
    case 6:  // a tensor dimension
      if (!d.tensors.empty()) {
        Tensor& t = d.tensors[pick(d.tensors.size())];
        if (t.dims.empty() || pick(6) == 0)
          t.dims.push_back(interesting());
        else
          t.dims[pick(t.dims.size())] = pick(2) == 0 ? interesting() : t.dims[0] * (pick(3) + 1) / 2;
      }
      break;
    case 7:  // a tensor type (known or not)
      if (!d.tensors.empty()) d.tensors[pick(d.tensors.size())].type = static_cast<uint32_t>(pick(40));
      break;
    case 8:  // a tensor offset: another tensor's, aligned, misaligned, huge
      if (!d.tensors.empty()) {
        Tensor& t = d.tensors[pick(d.tensors.size())];
        const Tensor& o = d.tensors[pick(d.tensors.size())];
        switch (pick(4)) {
          case 0: t.offset = o.offset; break;
          case 1: t.offset = (t.offset + 32 * (pick(9) + 1)) & ~uint64_t{31}; break;
          case 2: t.offset += pick(31) + 1; break;
          default: t.offset = interesting();
        }
      }
      break;
    case 9:  // a tensor added, dropped, duplicated or renamed
      if (pick(4) == 0 || d.tensors.empty()) {
        d.tensors.push_back({kTensorNames[pick(std::size(kTensorNames))], {32, 2}, 0, 0});
      } else {
        const size_t i = pick(d.tensors.size());
        switch (pick(3)) {
          case 0: d.tensors.erase(d.tensors.begin() + static_cast<std::ptrdiff_t>(i)); break;
          case 1: d.tensors.push_back(d.tensors[i]); break;
          default: d.tensors[i].name = kTensorNames[pick(std::size(kTensorNames))];
        }
      }
      break;
    case 10:  // header: version, or counts that lie
      switch (pick(3)) {
        case 0: d.version = static_cast<uint32_t>(pick(5)); break;
        case 1: d.n_kv = pick(2) == 0 ? interesting() : d.kvs.size() + pick(3) - 1; break;
        default: d.n_tensors = pick(2) == 0 ? interesting() : d.tensors.size() + pick(3) - 1;
      }
      break;
    case 11: {  // the alignment
      Kv kv{"general.alignment", kU32, scalar(kU32, pick(2) == 0 ? interesting() : uint64_t{1} << pick(21))};
      auto it = std::find_if(d.kvs.begin(), d.kvs.end(), [](const Kv& x) { return x.key == "general.alignment"; });
      if (it != d.kvs.end())
        *it = std::move(kv);
      else
        d.kvs.push_back(std::move(kv));
      break;
    }
    case 12:  // the data section's bytes, as bytes
      if (!d.data.empty()) {
        const size_t old = d.data.size();
        d.data.resize(old + 64);
        d.data.resize(LLVMFuzzerMutate(d.data.data(), old, d.data.size()));
      }
      break;
    default:  // a key's bytes
      if (!d.kvs.empty()) {
        std::string& key = d.kvs[pick(d.kvs.size())].key;
        const size_t old = key.size();
        if (old == 0) break;
        key.resize(old + 8);
        key.resize(LLVMFuzzerMutate(reinterpret_cast<uint8_t*>(key.data()), old, key.size()));
      }
  }
  return emit(d, data, max_size);
}

}  // namespace tally::fuzz
