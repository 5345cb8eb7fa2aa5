#pragma once
// A read-only open-addressing hash map from a pair of token ids to a merge
// (rank and result), built once. Faster than std::unordered_map for the BPE
// inner loop: one multiplicative hash, linear probing over a flat array.
// Invariant: capacity is a power of two and at least twice the entry count.
#include <cstdint>
#include <vector>

namespace tally {

class PairMap {
 public:
  struct Value {
    int32_t rank;
    int32_t result;
  };

  // Inserts unless the pair is already present (the first insertion wins).
  void insert(int32_t a, int32_t b, Value v) {
    if (2 * (size_ + 1) > slots_.size()) grow();
    if (place(key(a, b), v)) ++size_;
  }

  const Value* find(int32_t a, int32_t b) const {
    if (slots_.empty()) return nullptr;
    const uint64_t k = key(a, b);
    const size_t mask = slots_.size() - 1;
    for (size_t i = hash(k) & mask;; i = (i + 1) & mask) {
      const Slot& s = slots_[i];
      if (s.key == k) return &s.value;
      if (s.key == kEmpty) return nullptr;
    }
  }

  size_t size() const { return size_; }

 private:
  struct Slot {
    uint64_t key;
    Value value;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};  // ids are never both -1

  static uint64_t key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  static size_t hash(uint64_t k) {
    return static_cast<size_t>((k * 0x9E3779B97F4A7C15ull) >> 20);
  }
  bool place(uint64_t k, Value v) {
    const size_t mask = slots_.size() - 1;
    for (size_t i = hash(k) & mask;; i = (i + 1) & mask) {
      Slot& s = slots_[i];
      if (s.key == k) return false;
      if (s.key == kEmpty) {
        s = {k, v};
        return true;
      }
    }
  }
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(old.empty() ? 64 : old.size() * 2, Slot{kEmpty, {0, 0}});
    for (const Slot& s : old)
      if (s.key != kEmpty) place(s.key, s.value);
  }

  std::vector<Slot> slots_;
  size_t size_ = 0;
};

}  // namespace tally
