#pragma once
// Memory that starts on a 64-byte cache line. A 64-byte vector load from a
// line-aligned row never straddles two lines; one that does is a split load,
// which takes the load port twice. Large buffers from plain new / std::vector
// start 16 bytes into a page, so without this every 64-byte load of an f32
// row is split (the AVX-512 attention kernels ran at half speed on them).
// Invariant: every pointer these hand out is a multiple of kCacheLine.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <vector>

namespace tally {

inline constexpr std::size_t kCacheLine = 64;

// The allocator of LineVector.
template <typename T>
struct LineAllocator {
  using value_type = T;
  LineAllocator() = default;
  template <typename U>
  LineAllocator(const LineAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{kCacheLine})); }
  void deallocate(T* p, std::size_t) noexcept { ::operator delete(p, std::align_val_t{kCacheLine}); }
  friend bool operator==(const LineAllocator&, const LineAllocator&) { return true; }
};

// A std::vector whose data() is line-aligned.
template <typename T>
using LineVector = std::vector<T, LineAllocator<T>>;

struct LineDelete {
  void operator()(uint8_t* p) const noexcept { ::operator delete[](p, std::align_val_t{kCacheLine}); }
};
// Line-aligned bytes owned like unique_ptr<uint8_t[]>.
using LineBytes = std::unique_ptr<uint8_t[], LineDelete>;

// n line-aligned bytes, or null when they cannot be had.
inline LineBytes line_bytes(std::size_t n) {
  return LineBytes(static_cast<uint8_t*>(::operator new[](n, std::align_val_t{kCacheLine}, std::nothrow)));
}

}  // namespace tally
