#pragma once
// A std::allocator that returns storage aligned to A bytes (a power of two).
// For buffers the SIMD kernels read with 64-byte loads: a load that crosses a
// cache line costs two, and malloc only promises 16-byte alignment.
#include <cstddef>
#include <new>
#include <vector>

namespace tally {

template <class T, std::size_t A>
struct AlignedAllocator {
  static_assert(A >= alignof(T) && (A & (A - 1)) == 0);
  using value_type = T;
  template <class U>
  struct rebind {
    using other = AlignedAllocator<U, A>;
  };
  AlignedAllocator() = default;
  template <class U>
  AlignedAllocator(const AlignedAllocator<U, A>&) {}
  T* allocate(std::size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(A))); }
  void deallocate(T* p, std::size_t) { ::operator delete(p, std::align_val_t(A)); }
  template <class U>
  bool operator==(const AlignedAllocator<U, A>&) const {
    return true;
  }
};

// A vector whose data() is aligned to a cache line.
template <class T>
using CacheAlignedVector = std::vector<T, AlignedAllocator<T, 64>>;

}  // namespace tally
